#include "server/mesh_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/names.h"
#include "core/shape.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

constexpr absl::Duration kDefaultCollectiveTimeout = absl::Seconds(30);
// A mesh's collective timeout at most (CreateMeshRequest.timeout_ms): an hour.
constexpr int64_t kMaxCollectiveTimeoutMs = 3600 * 1000;

}  // namespace

v1::MeshInfo MeshService::Describe(const Mesh& mesh) const {
  v1::MeshInfo info;
  info.set_name(mesh.name);
  *info.mutable_mesh() = ToProto(mesh.mesh);
  const absl::Status health = meshes_->Health(mesh);
  info.set_ready(health.ok());
  info.set_broken_reason(std::string(health.message()));
  info.set_timeout_ms(absl::ToInt64Milliseconds(mesh.timeout));
  for (std::string& name : mesh.locals.Names()) info.add_tensors(std::move(name));
  return info;
}

grpc::Status MeshService::ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                                      v1::ListWorkersReply* reply) {
  for (v1::WorkerInfo& w : dispatcher_->registry().List()) *reply->add_workers() = std::move(w);
  return grpc::Status::OK;
}

absl::Status MeshService::ChooseWorkers(const v1::CreateMeshRequest& request, int64_t needed,
                                        std::vector<int64_t>* ids,
                                        std::vector<int64_t>* incarnations,
                                        std::vector<int64_t>* budgets) const {
  const WorkerRegistry& registry = dispatcher_->registry();
  const std::string shape = ShapeToString(Shape(request.shape().begin(), request.shape().end()));
  ids->assign(request.worker_ids().begin(), request.worker_ids().end());
  if (ids->empty()) {
    std::vector<int64_t> live = registry.LiveWorkers(request.device_type());
    if (static_cast<int64_t>(live.size()) < needed) {
      return absl::InvalidArgumentError(absl::StrCat("mesh shape ", shape, " needs ", needed, " ",
                                                     request.device_type(), " workers but ",
                                                     live.size(), " are live"));
    }
    // Ranks go node-major (by host, then id), whichever were chosen, so that a mesh's last dims
    // stay within a node.
    *ids = registry.NodeMajor(std::vector<int64_t>(live.begin(), live.begin() + needed));
  } else if (static_cast<int64_t>(ids->size()) != needed) {
    return absl::InvalidArgumentError(absl::StrCat("mesh shape ", shape, " needs ", needed,
                                                   " workers but worker_ids names ", ids->size()));
  }
  for (int64_t id : *ids) {
    ASSIGN_OR_RETURN(WorkerHandle w, registry.Get(id));
    if (w.device.rfind(request.device_type(), 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("worker ", id, " serves device '", w.device,
                                                     "', not ", request.device_type()));
    }
    incarnations->push_back(w.incarnation);
    budgets->push_back(w.memory_budget_bytes);
  }
  return absl::OkStatus();
}

grpc::Status MeshService::CreateMesh(grpc::ServerContext* context,
                                     const v1::CreateMeshRequest* request, v1::MeshInfo* reply) {
  return ToGrpcStatus(CreateMeshImpl(*context, *request, *reply));
}

absl::Status MeshService::CreateMeshImpl(const grpc::ServerContext& context,
                                         const v1::CreateMeshRequest& request,
                                         v1::MeshInfo& reply) {
  RETURN_IF_ERROR(CheckName(NameKind::kMesh, request.name()));
  if (request.timeout_ms() < 0 || request.timeout_ms() > kMaxCollectiveTimeoutMs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh timeout_ms ", request.timeout_ms(), " is outside 0..", kMaxCollectiveTimeoutMs,
        " (0: the default, ", absl::FormatDuration(kDefaultCollectiveTimeout), ")"));
  }
  const Shape shape(request.shape().begin(), request.shape().end());
  const std::vector<std::string> names(request.dim_names().begin(), request.dim_names().end());
  // Validate device type, shape and names, then count the workers, before allocating anything in
  // proportion to the shape.
  ASSIGN_OR_RETURN(const int64_t size,
                   DeviceMesh::CheckLayout(request.device_type(), shape, names));
  std::vector<int64_t> ids;
  std::vector<int64_t> incarnations;
  std::vector<int64_t> budgets;
  RETURN_IF_ERROR(ChooseWorkers(request, size, &ids, &incarnations, &budgets));
  ASSIGN_OR_RETURN(DeviceMesh dm, DeviceMesh::Create(request.device_type(), shape, names, ids));
  auto mesh =
      std::make_shared<Mesh>(request.name(), std::move(dm), std::move(incarnations),
                             request.timeout_ms() > 0 ? absl::Milliseconds(request.timeout_ms())
                                                      : kDefaultCollectiveTimeout,
                             std::move(budgets), ledger_);
  // Entered first, so the name is reserved while the workers set it up; removed if that fails.
  RETURN_IF_ERROR(meshes_->Add(mesh));
  absl::Status s = reformer_->SetUp(*mesh, absl::FromChrono(context.deadline()));
  if (s.ok() && state_ != nullptr) {
    v1::CreateMeshRequest record = request;
    record.clear_worker_ids();
    for (int64_t id : mesh->mesh.ranks()) record.add_worker_ids(id);
    record.set_timeout_ms(absl::ToInt64Milliseconds(mesh->timeout));
    s = state_->Put("mesh", mesh->name, record.SerializeAsString());
  }
  if (!s.ok()) {
    meshes_->Remove(mesh->name).IgnoreError();
    store_->ErasePrefix(MeshReformer::StorePrefix(*mesh));
    return s;
  }
  reply = Describe(*mesh);
  return absl::OkStatus();
}

grpc::Status MeshService::GetMesh(grpc::ServerContext*, const v1::GetMeshRequest* request,
                                  v1::MeshInfo* reply) {
  return ToGrpcStatus(GetMeshImpl(*request, *reply));
}

absl::Status MeshService::GetMeshImpl(const v1::GetMeshRequest& request, v1::MeshInfo& reply) {
  ASSIGN_OR_RETURN(const std::shared_ptr<Mesh> mesh, meshes_->Find(request.name()));
  reply = Describe(*mesh);
  return absl::OkStatus();
}

grpc::Status MeshService::ListMeshes(grpc::ServerContext*, const v1::ListMeshesRequest*,
                                     v1::ListMeshesReply* reply) {
  for (const auto& mesh : meshes_->List()) *reply->add_meshes() = Describe(*mesh);
  return grpc::Status::OK;
}

grpc::Status MeshService::DeleteMesh(grpc::ServerContext*, const v1::DeleteMeshRequest* request,
                                     v1::DeleteMeshReply*) {
  return ToGrpcStatus(DeleteMeshImpl(*request));
}

absl::Status MeshService::DeleteMeshImpl(const v1::DeleteMeshRequest& request) {
  // Removed under its change lock, so that a rejoin of it in progress (ReplicaRepair) finishes
  // first and none starts after: if a rejoin put a new mesh in its place meanwhile, that one is
  // deleted.
  std::shared_ptr<Mesh> removed;
  while (removed == nullptr) {
    ASSIGN_OR_RETURN(std::shared_ptr<Mesh> found, meshes_->Find(request.name()));
    absl::MutexLock changing(&found->change_mu);
    if (meshes_->Remove(*found).ok()) removed = std::move(found);
  }
  Mesh& mesh = *removed;
  if (state_ != nullptr) {
    if (absl::Status s = state_->Erase("mesh", mesh.name); !s.ok()) {
      spdlog::error("mesh '{}' was deleted but its record stays: {}", mesh.name, s.ToString());
    }
  }
  std::vector<std::string> dropped;  // what the mesh's users kept on its workers
  for (MeshUser* user : users_) {
    for (std::string& name : user->ForgetMesh(mesh)) dropped.push_back(std::move(name));
  }
  mesh.locals.Forget();  // their bytes leave the ledger; the workers free them below
  // Tear down on the workers still serving this mesh's incarnation; the others lost it already.
  const std::vector<int64_t> live = meshes_->LiveWorkerIds(mesh);
  if (!dropped.empty()) {
    v1::Command free;
    for (const std::string& name : dropped) free.mutable_delete_tensors()->add_names(name);
    // The teardown below reports failures.
    dispatcher_->Run(live, free, Mesh::kRpcSlack).IgnoreError();
  }
  v1::Command command;
  command.mutable_teardown_mesh()->set_mesh_id(mesh.id);
  absl::StatusOr<std::vector<v1::CommandReply>> replies =
      dispatcher_->Run(live, command, Mesh::kRpcSlack);
  store_->ErasePrefix(MeshReformer::StorePrefix(mesh));
  return replies.status();
}

}  // namespace tessera
