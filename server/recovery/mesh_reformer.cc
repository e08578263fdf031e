#include "server/recovery/mesh_reformer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_context.h"
#include "proto/convert.h"

namespace tessera {

std::string MeshReformer::StorePrefix(const Mesh& mesh) {
  return absl::StrCat("mesh/", mesh.id, "/");
}

std::string MeshReformer::GenerationPrefix(const Mesh& mesh, int64_t generation) {
  return absl::StrCat(StorePrefix(mesh), "g", generation, "/");
}

v1::Command MeshReformer::SetupCommand(const Mesh& mesh, int64_t generation,
                                       absl::Duration connect) {
  v1::Command command;
  v1::SetupMesh* setup = command.mutable_setup_mesh();
  setup->set_mesh_id(mesh.id);
  *setup->mutable_mesh() = ToProto(mesh.mesh);
  setup->set_store_prefix(GenerationPrefix(mesh, generation));
  setup->set_timeout_ms(absl::ToInt64Milliseconds(mesh.timeout));
  setup->set_connect_timeout_ms(absl::ToInt64Milliseconds(connect));
  setup->set_generation(generation);
  return command;
}

absl::Status MeshReformer::SetUp(const Mesh& mesh, absl::Time deadline) {
  // The rendezvous ends with the call: the workers' answers need some of the time left.
  const absl::Duration left = deadline - absl::Now() - kReplySlack;
  if (left <= absl::ZeroDuration()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "setting up mesh '", mesh.name, "': the call's deadline leaves no time for it"));
  }
  const absl::Duration connect = std::min(mesh.timeout, left);
  absl::StatusOr<std::vector<v1::CommandReply>> replies =
      dispatcher_->Run(mesh.mesh.ranks(), SetupCommand(mesh, 0, connect),
                       std::min(mesh.command_timeout(), connect + kReplySlack));
  if (replies.ok()) return absl::OkStatus();
  return WithContext(absl::StrCat("setting up mesh '", mesh.name, "' failed"), replies.status());
}

void MeshReformer::OnBroken(const WorkerHandle& worker, const v1::BrokenCommunicator& broken) {
  absl::StatusOr<std::shared_ptr<Mesh>> mesh = meshes_->FindById(broken.mesh_id());
  if (!mesh.ok()) return;  // deleted meanwhile
  const std::optional<int64_t> next = (*mesh)->comms.Broke(
      broken.generation(), absl::StrCat("worker ", worker.id, ": ", broken.reason()));
  if (next.has_value()) Reform(*mesh, *next);
}

void MeshReformer::FormAgain(const std::shared_ptr<Mesh>& mesh, const absl::Status& why) {
  const std::optional<int64_t> next =
      mesh->comms.Broke(mesh->comms.generation(), std::string(why.message()));
  if (next.has_value()) Reform(mesh, *next);
}

absl::Status MeshReformer::FormAgainNow(Mesh& mesh, const absl::Status& why) {
  std::optional<int64_t> next =
      mesh.comms.Broke(mesh.comms.generation(), std::string(why.message()));
  while (next.has_value()) {
    const absl::Duration connect = std::max(mesh.timeout, kReformConnectTimeout);
    const absl::Status formed =
        dispatcher_
            ->Run(mesh.mesh.ranks(), SetupCommand(mesh, *next, connect), connect + Mesh::kRpcSlack)
            .status();
    // The generation it replaces is of no use to anyone now.
    if (formed.ok()) store_->ErasePrefix(GenerationPrefix(mesh, *next - 1));
    next = mesh.comms.Formed(*next, formed);
  }
  return mesh.comms.Health();
}

void MeshReformer::Reform(const std::shared_ptr<Mesh>& mesh, int64_t generation) {
  absl::StatusOr<std::vector<WorkerHandle>> workers = meshes_->Workers(*mesh);
  if (!workers.ok() || !meshes_->FindById(mesh->id).ok()) {
    // A lost worker breaks the mesh for good (Health says so first); a deleted mesh is gone.
    const std::optional<int64_t> next = mesh->comms.Formed(
        generation, workers.ok() ? absl::NotFoundError("the mesh was deleted") : workers.status());
    if (next.has_value()) Reform(mesh, *next);  // fails the same way, up to the attempts' limit
    return;
  }
  const absl::Duration connect = std::max(mesh->timeout, kReformConnectTimeout);
  dispatcher_->Post(*workers, SetupCommand(*mesh, generation, connect), connect + Mesh::kRpcSlack,
                    [this, mesh, generation](absl::Status status, std::vector<v1::CommandReply>) {
                      const std::optional<int64_t> next = mesh->comms.Formed(generation, status);
                      // The generation it replaces is of no use to anyone now.
                      if (status.ok()) store_->ErasePrefix(GenerationPrefix(*mesh, generation - 1));
                      if (next.has_value()) Reform(mesh, *next);
                    });
}

}  // namespace tessera
