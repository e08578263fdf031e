#include "server/tables/mesh_table.h"

#include "absl/strings/str_cat.h"
#include "core/names.h"

namespace tessera {

Mesh::Mesh(std::string name, DeviceMesh mesh, std::vector<int64_t> incarnations,
           absl::Duration timeout, std::vector<int64_t> budgets, WorkerBytes* ledger)
    : name(std::move(name)),
      mesh(std::move(mesh)),
      incarnations(std::move(incarnations)),
      timeout(timeout),
      budgets(std::move(budgets)),
      locals(this->name, static_cast<size_t>(this->mesh.size()),
             {ledger, this->mesh.ranks(), this->budgets}) {}

void MeshTable::SetRecovering(std::set<std::string> names) {
  absl::MutexLock lock(&mu_);
  recovering_ = std::move(names);
}

void MeshTable::DoneRecovering(const std::string& name) {
  absl::MutexLock lock(&mu_);
  recovering_.erase(name);
}

absl::Status MeshTable::Missing(const std::string& name) const {
  if (recovering_.contains(name)) {
    return absl::UnavailableError(absl::StrCat(
        "mesh '", name, "' is being recovered after a coordinator restart; try again shortly"));
  }
  return absl::NotFoundError(absl::StrCat("no mesh named ", QuotedName(name)));
}

absl::Status MeshTable::Add(const std::shared_ptr<Mesh>& mesh) {
  absl::MutexLock lock(&mu_);
  if (meshes_.contains(mesh->name)) {
    return absl::AlreadyExistsError(absl::StrCat("a mesh named '", mesh->name, "' exists"));
  }
  mesh->id = next_id_++;
  meshes_[mesh->name] = mesh;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Mesh>> MeshTable::Remove(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = meshes_.find(name);
  if (it == meshes_.end()) return Missing(name);
  std::shared_ptr<Mesh> mesh = std::move(it->second);
  meshes_.erase(it);
  return mesh;
}

absl::Status MeshTable::Remove(const Mesh& mesh) {
  absl::MutexLock lock(&mu_);
  auto it = meshes_.find(mesh.name);
  if (it == meshes_.end() || it->second.get() != &mesh) {
    return absl::NotFoundError(absl::StrCat("mesh '", mesh.name, "' was deleted or replaced"));
  }
  meshes_.erase(it);
  return absl::OkStatus();
}

absl::Status MeshTable::Replace(const Mesh& old, const std::shared_ptr<Mesh>& mesh) {
  absl::MutexLock lock(&mu_);
  auto it = meshes_.find(old.name);
  if (it == meshes_.end() || it->second.get() != &old || mesh->name != old.name) {
    return absl::NotFoundError(absl::StrCat("mesh '", old.name, "' was deleted meanwhile"));
  }
  mesh->id = next_id_++;
  it->second = mesh;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Mesh>> MeshTable::Find(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = meshes_.find(name);
  if (it == meshes_.end()) return Missing(name);
  return it->second;
}

absl::StatusOr<std::shared_ptr<Mesh>> MeshTable::FindById(int64_t id) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [name, mesh] : meshes_) {
    if (mesh->id == id) return mesh;
  }
  return absl::NotFoundError(absl::StrCat("no mesh with id ", id));
}

absl::StatusOr<std::shared_ptr<Mesh>> MeshTable::Ready(const std::string& name) const {
  absl::StatusOr<std::shared_ptr<Mesh>> mesh = Find(name);
  if (!mesh.ok()) return mesh;
  if (absl::Status s = Health(**mesh); !s.ok()) return s;
  return mesh;
}

absl::StatusOr<std::shared_ptr<Mesh>> MeshTable::Reachable(const std::string& name) const {
  absl::StatusOr<std::shared_ptr<Mesh>> mesh = Find(name);
  if (!mesh.ok()) return mesh;
  if (absl::Status s = Workers(**mesh).status(); !s.ok()) return s;
  return mesh;
}

absl::Status MeshTable::Health(const Mesh& mesh) const { return ReadyWorkers(mesh).status(); }

absl::StatusOr<std::vector<WorkerHandle>> MeshTable::ReadyWorkers(const Mesh& mesh) const {
  absl::StatusOr<std::vector<WorkerHandle>> workers = Workers(mesh);
  if (!workers.ok()) return workers;
  if (absl::Status comms = mesh.comms.Health(); !comms.ok()) {
    return absl::UnavailableError(
        absl::StrCat("mesh '", mesh.name, "' is broken: ", comms.message()));
  }
  return workers;
}

std::vector<std::shared_ptr<Mesh>> MeshTable::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Mesh>> meshes;
  meshes.reserve(meshes_.size());
  for (const auto& [name, mesh] : meshes_) meshes.push_back(mesh);
  return meshes;
}

absl::StatusOr<std::vector<WorkerHandle>> MeshTable::Workers(const Mesh& mesh) const {
  std::vector<WorkerHandle> workers;
  workers.reserve(mesh.mesh.ranks().size());
  for (size_t i = 0; i < mesh.mesh.ranks().size(); ++i) {
    const int64_t id = mesh.mesh.ranks()[i];
    absl::StatusOr<WorkerHandle> w = registry_->Get(id);
    if (!w.ok()) {
      return absl::UnavailableError(
          absl::StrCat("mesh '", mesh.name, "' is broken: ", w.status().message()));
    }
    if (w->incarnation != mesh.incarnations[i]) {
      return absl::UnavailableError(
          absl::StrCat("mesh '", mesh.name, "' is broken: worker ", id, " at ", w->address,
                       " restarted since the mesh was set up; the mesh takes it back once every "
                       "one of its workers runs (a mesh holding local tensors of the collectives "
                       "API cannot, and must be deleted and created again)"));
    }
    workers.push_back(*std::move(w));
  }
  return workers;
}

std::vector<WorkerHandle> MeshTable::LiveWorkers(const Mesh& mesh) const {
  std::vector<WorkerHandle> live;
  for (size_t i = 0; i < mesh.mesh.ranks().size(); ++i) {
    absl::StatusOr<WorkerHandle> w = registry_->Get(mesh.mesh.ranks()[i]);
    if (w.ok() && w->incarnation == mesh.incarnations[i]) live.push_back(*std::move(w));
  }
  return live;
}

std::vector<int64_t> MeshTable::LiveWorkerIds(const Mesh& mesh) const {
  std::vector<int64_t> live;
  for (const WorkerHandle& w : LiveWorkers(mesh)) live.push_back(w.id);
  return live;
}

}  // namespace tessera
