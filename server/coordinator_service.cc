#include "server/coordinator_service.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"

namespace tessera {
namespace {

constexpr absl::Duration kDefaultCollectiveTimeout = absl::Seconds(30);
// Set-up and transfers get this much beyond the mesh's collective timeout.
constexpr absl::Duration kRpcSlack = absl::Seconds(10);

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

bool IsReducing(v1::CollectiveOp op) {
  return op == v1::ALL_REDUCE_OP || op == v1::REDUCE || op == v1::REDUCE_SCATTER_OP;
}

}  // namespace

CoordinatorService::CoordinatorService(Dispatcher* dispatcher, RendezvousStore* store,
                                       absl::Duration client_grace)
    : dispatcher_(dispatcher), store_(store), leases_(client_grace) {
  reaper_ = std::thread([this] {
    const absl::Duration period =
        std::clamp(leases_.grace() / 4, absl::Milliseconds(50), absl::Seconds(5));
    while (!stopping_.WaitForNotificationWithTimeout(period)) ReclaimExpired();
  });
}

CoordinatorService::~CoordinatorService() {
  stopping_.Notify();
  reaper_.join();
}

std::string CoordinatorService::WorkerTensorName(const Mesh& mesh, const std::string& tensor) {
  return absl::StrCat(mesh.id, "/", tensor);
}

absl::Status CoordinatorService::MeshHealth(const Mesh& mesh) const {
  for (size_t i = 0; i < mesh.mesh.ranks().size(); ++i) {
    const int64_t id = mesh.mesh.ranks()[i];
    absl::StatusOr<WorkerHandle> w = dispatcher_->registry().Get(id);
    if (!w.ok()) {
      return absl::UnavailableError(
          absl::StrCat("mesh '", mesh.name, "' is broken: ", w.status().message()));
    }
    if (w->incarnation != mesh.incarnations[i]) {
      return absl::UnavailableError(absl::StrCat(
          "mesh '", mesh.name, "' is broken: worker ", id, " at ", w->address,
          " restarted since the mesh was created; delete and create the mesh again"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<CoordinatorService::Mesh>> CoordinatorService::FindMesh(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = meshes_.find(name);
  if (it == meshes_.end()) {
    return absl::NotFoundError(absl::StrCat("no mesh named '", name, "'"));
  }
  return it->second;
}

absl::StatusOr<std::shared_ptr<CoordinatorService::Mesh>> CoordinatorService::ReadyMesh(
    const std::string& name) const {
  absl::StatusOr<std::shared_ptr<Mesh>> mesh = FindMesh(name);
  if (!mesh.ok()) return mesh.status();
  if (absl::Status s = MeshHealth(**mesh); !s.ok()) return s;
  return mesh;
}

v1::MeshInfo CoordinatorService::Describe(Mesh& mesh) const {
  v1::MeshInfo info;
  info.set_name(mesh.name);
  *info.mutable_mesh() = ToProto(mesh.mesh);
  const absl::Status health = MeshHealth(mesh);
  info.set_ready(health.ok());
  info.set_broken_reason(std::string(health.message()));
  info.set_timeout_ms(absl::ToInt64Milliseconds(mesh.timeout));
  absl::MutexLock lock(&mesh.mu);
  for (const auto& entry : mesh.tensors) info.add_tensors(entry.first);
  return info;
}

grpc::Status CoordinatorService::ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                                             v1::ListWorkersReply* reply) {
  for (v1::WorkerInfo& w : dispatcher_->registry().List()) *reply->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CreateMesh(grpc::ServerContext*,
                                            const v1::CreateMeshRequest* request,
                                            v1::MeshInfo* reply) {
  if (request->name().empty()) return Invalid("a mesh needs a name");
  Shape shape(request->shape().begin(), request->shape().end());
  std::vector<std::string> names(request->dim_names().begin(), request->dim_names().end());
  // Validate device type, shape and names before looking for workers.
  absl::StatusOr<DeviceMesh> probe = DeviceMesh::Create(request->device_type(), shape, names);
  if (!probe.ok()) return ToGrpcStatus(probe.status());
  const int64_t needed = probe->size();

  WorkerRegistry& registry = dispatcher_->registry();
  std::vector<int64_t> ids(request->worker_ids().begin(), request->worker_ids().end());
  if (ids.empty()) {
    std::vector<int64_t> live = registry.LiveWorkers(request->device_type());
    if (static_cast<int64_t>(live.size()) < needed) {
      return Invalid(absl::StrCat("mesh shape ", ShapeToString(shape), " needs ", needed, " ",
                                  request->device_type(), " workers but ", live.size(),
                                  " are live"));
    }
    ids.assign(live.begin(), live.begin() + needed);
  } else if (static_cast<int64_t>(ids.size()) != needed) {
    return Invalid(absl::StrCat("mesh shape ", ShapeToString(shape), " needs ", needed,
                                " workers but worker_ids names ", ids.size()));
  }
  std::vector<int64_t> incarnations;
  for (int64_t id : ids) {
    absl::StatusOr<WorkerHandle> w = registry.Get(id);
    if (!w.ok()) return ToGrpcStatus(w.status());
    if (w->device.rfind(request->device_type(), 0) != 0) {
      return Invalid(absl::StrCat("worker ", id, " serves device '", w->device, "', not ",
                                  request->device_type()));
    }
    incarnations.push_back(w->incarnation);
  }
  absl::StatusOr<DeviceMesh> dm = DeviceMesh::Create(request->device_type(), shape, names, ids);
  if (!dm.ok()) return ToGrpcStatus(dm.status());

  auto mesh = std::make_shared<Mesh>(*std::move(dm));
  mesh->name = request->name();
  mesh->incarnations = std::move(incarnations);
  mesh->timeout =
      request->timeout_ms() > 0 ? absl::Milliseconds(request->timeout_ms()) : kDefaultCollectiveTimeout;
  {
    absl::MutexLock lock(&mu_);
    if (meshes_.contains(request->name())) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                          absl::StrCat("a mesh named '", request->name(), "' exists"));
    }
    mesh->id = next_mesh_id_++;
    meshes_[mesh->name] = mesh;  // reserved; removed again if set-up fails
  }

  v1::Command command;
  v1::SetupMesh* setup = command.mutable_setup_mesh();
  setup->set_mesh_id(mesh->id);
  *setup->mutable_mesh() = ToProto(mesh->mesh);
  setup->set_store_prefix(absl::StrCat("mesh/", mesh->id, "/"));
  setup->set_timeout_ms(absl::ToInt64Milliseconds(mesh->timeout));
  absl::StatusOr<std::vector<v1::CommandReply>> replies =
      dispatcher_->Run(mesh->mesh.ranks(), command, mesh->timeout + kRpcSlack);
  if (!replies.ok()) {
    absl::MutexLock lock(&mu_);
    meshes_.erase(mesh->name);
    store_->ErasePrefix(setup->store_prefix());
    return ToGrpcStatus(absl::Status(
        replies.status().code(),
        absl::StrCat("setting up mesh '", mesh->name, "' failed: ", replies.status().message())));
  }
  *reply = Describe(*mesh);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetMesh(grpc::ServerContext*, const v1::GetMeshRequest* request,
                                         v1::MeshInfo* reply) {
  absl::StatusOr<std::shared_ptr<Mesh>> mesh = FindMesh(request->name());
  if (!mesh.ok()) return ToGrpcStatus(mesh.status());
  *reply = Describe(**mesh);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListMeshes(grpc::ServerContext*, const v1::ListMeshesRequest*,
                                            v1::ListMeshesReply* reply) {
  std::vector<std::shared_ptr<Mesh>> meshes;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, m] : meshes_) meshes.push_back(m);
  }
  for (const auto& m : meshes) *reply->add_meshes() = Describe(*m);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::DeleteMesh(grpc::ServerContext*,
                                            const v1::DeleteMeshRequest* request,
                                            v1::DeleteMeshReply*) {
  std::shared_ptr<Mesh> mesh;
  std::vector<std::string> dropped;  // its DTensors' worker-side names
  {
    absl::MutexLock lock(&mu_);
    auto it = meshes_.find(request->name());
    if (it == meshes_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("no mesh named '", request->name(), "'"));
    }
    mesh = it->second;
    meshes_.erase(it);
    for (auto t = tensors_.begin(); t != tensors_.end();) {
      if (t->second->mesh != mesh) {
        ++t;
        continue;
      }
      for (int64_t p = 0; p < mesh->mesh.size(); ++p) {
        held_bytes_[mesh->mesh.ranks()[p]] -= ShardBytes(t->second->spec, p);
      }
      dropped.push_back(WorkerName(t->first));
      t = tensors_.erase(t);
    }
  }
  // Tear down on the workers still serving this mesh's incarnation; the others lost it already.
  std::vector<int64_t> live;
  for (size_t i = 0; i < mesh->mesh.ranks().size(); ++i) {
    absl::StatusOr<WorkerHandle> w = dispatcher_->registry().Get(mesh->mesh.ranks()[i]);
    if (w.ok() && w->incarnation == mesh->incarnations[i]) live.push_back(w->id);
  }
  if (!dropped.empty()) {
    v1::Command free;
    for (const std::string& name : dropped) free.mutable_delete_tensors()->add_names(name);
    dispatcher_->Run(live, free, kRpcSlack).IgnoreError();  // the teardown below reports failures
  }
  v1::Command command;
  command.mutable_teardown_mesh()->set_mesh_id(mesh->id);
  absl::StatusOr<std::vector<v1::CommandReply>> replies =
      dispatcher_->Run(live, command, kRpcSlack);
  store_->ErasePrefix(absl::StrCat("mesh/", mesh->id, "/"));
  if (!replies.ok()) return ToGrpcStatus(replies.status());
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::RunCollective(grpc::ServerContext*,
                                               const v1::CollectiveRequest* request,
                                               v1::CollectiveReply* reply) {
  absl::StatusOr<std::shared_ptr<Mesh>> found = ReadyMesh(request->mesh());
  if (!found.ok()) return ToGrpcStatus(found.status());
  Mesh& mesh = **found;
  int mesh_dim = -1;
  if (!request->mesh_dim().empty()) {
    if (absl::SimpleAtoi(request->mesh_dim(), &mesh_dim)) {
      if (mesh_dim < 0 || mesh_dim >= mesh.mesh.ndim()) {
        return Invalid(absl::StrCat("mesh dim ", mesh_dim, " is out of range for mesh '",
                                    mesh.name, "' of ", mesh.mesh.ndim(), " dims"));
      }
    } else {
      absl::StatusOr<int> d = mesh.mesh.DimIndex(request->mesh_dim());
      if (!d.ok()) return Invalid(std::string(d.status().message()));
      mesh_dim = *d;
    }
  }
  const int64_t group_size = mesh_dim < 0 ? mesh.mesh.size() : mesh.mesh.size(mesh_dim);
  if (request->op() == v1::COLLECTIVE_OP_UNSPECIFIED || !v1::CollectiveOp_IsValid(request->op())) {
    return Invalid(absl::StrCat("collective op ", request->op(), " is not a collective"));
  }
  if (IsReducing(request->op()) && request->reduce_op() != v1::REDUCE_OP_UNSPECIFIED) {
    if (absl::StatusOr<ReduceOp> op = FromProto(request->reduce_op()); !op.ok()) {
      return ToGrpcStatus(op.status());
    }
  }
  if (request->root() < 0 || request->root() >= group_size) {
    return Invalid(absl::StrCat("root ", request->root(), " is not a rank of a group of ",
                                group_size));
  }
  if (request->op() == v1::SEND_RECV &&
      (request->peer() < 0 || request->peer() >= group_size || request->peer() == request->root())) {
    return Invalid(absl::StrCat("peer ", request->peer(), " must be a rank of a group of ",
                                group_size, " other than the sender ", request->root()));
  }
  const std::string output = request->output().empty() ? request->input() : request->output();
  if (request->op() != v1::BARRIER) {
    absl::MutexLock lock(&mesh.mu);
    auto it = mesh.tensors.find(request->input());
    if (it == mesh.tensors.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("mesh '", mesh.name, "' has no tensor '", request->input(),
                                       "'"));
    }
    // Every rank takes part: one without the input would leave its peers in the collective until
    // the timeout, which breaks the mesh's communicators for good.
    std::vector<int64_t> missing;
    for (size_t r = 0; r < it->second.size(); ++r) {
      if (!it->second[r]) missing.push_back(static_cast<int64_t>(r));
    }
    if (!missing.empty()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("tensor '", request->input(), "' of mesh '", mesh.name,
                                       "' is not on ranks ", absl::StrJoin(missing, ", "),
                                       "; a collective needs it on every rank"));
    }
    if (output.empty()) return Invalid("a collective needs an output tensor name");
  }

  v1::Command command;
  v1::RunCollective* c = command.mutable_collective();
  c->set_mesh_id(mesh.id);
  c->set_mesh_dim(mesh_dim);
  c->set_op(request->op());
  c->set_input(WorkerTensorName(mesh, request->input()));
  c->set_output(WorkerTensorName(mesh, output));
  c->set_reduce_op(request->reduce_op() == v1::REDUCE_OP_UNSPECIFIED ? v1::SUM
                                                                      : request->reduce_op());
  c->set_root(request->root());
  c->set_peer(request->peer());
  absl::StatusOr<std::vector<v1::CommandReply>> replies =
      dispatcher_->Run(mesh.mesh.ranks(), command, mesh.timeout + kRpcSlack);
  if (!replies.ok()) return ToGrpcStatus(replies.status());
  if (request->op() != v1::BARRIER) {
    absl::MutexLock lock(&mesh.mu);
    std::vector<bool>& holders =
        mesh.tensors.try_emplace(output, static_cast<size_t>(mesh.mesh.size()), false)
            .first->second;
    for (size_t r = 0; r < replies->size(); ++r) {
      if ((*replies)[r].tensors_size() > 0) holders[r] = true;
    }
  }
  // Ranks that all write an output of one shape must agree on it; a disagreement means the
  // ranks held inputs of different shapes, which the collective cannot have combined correctly.
  if (request->op() == v1::BROADCAST || request->op() == v1::ALL_REDUCE_OP ||
      request->op() == v1::ALL_GATHER_OP) {
    for (size_t i = 1; i < replies->size(); ++i) {
      const auto& a = (*replies)[0].tensors();
      const auto& b = (*replies)[i].tensors();
      if (a.size() != b.size() || (a.size() == 1 && (a[0].dtype() != b[0].dtype() ||
                                                     !std::equal(a[0].shape().dims().begin(), a[0].shape().dims().end(),
                                                                b[0].shape().dims().begin(),
                                                                b[0].shape().dims().end())))) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            absl::StrCat("ranks 0 and ", i, " of mesh '", mesh.name,
                                         "' disagree on the shape of '", output,
                                         "': every rank must hold '", request->input(),
                                         "' with the same shape and dtype"));
      }
    }
  }
  const std::string prefix = WorkerTensorName(mesh, "");
  for (v1::CommandReply& r : *replies) {
    for (v1::LocalTensorInfo& t : *r.mutable_tensors()) {
      t.set_name(t.name().substr(std::min(prefix.size(), t.name().size())));
      *reply->add_outputs() = std::move(t);
    }
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::DeleteTensor(grpc::ServerContext*,
                                              const v1::DeleteTensorRequest* request,
                                              v1::DeleteTensorReply*) {
  absl::StatusOr<std::shared_ptr<Mesh>> found = ReadyMesh(request->mesh());
  if (!found.ok()) return ToGrpcStatus(found.status());
  Mesh& mesh = **found;
  {
    absl::MutexLock lock(&mesh.mu);
    if (!mesh.tensors.contains(request->tensor())) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("mesh '", mesh.name, "' has no tensor '",
                                       request->tensor(), "'"));
    }
  }
  v1::Command command;
  command.mutable_delete_tensors()->add_names(WorkerTensorName(mesh, request->tensor()));
  absl::StatusOr<std::vector<v1::CommandReply>> replies =
      dispatcher_->Run(mesh.mesh.ranks(), command, kRpcSlack);
  if (!replies.ok()) return ToGrpcStatus(replies.status());
  absl::MutexLock lock(&mesh.mu);
  mesh.tensors.erase(request->tensor());
  return grpc::Status::OK;
}

}  // namespace tessera
