// CoordinatorService's DTensor table and its unary RPCs: factories, metadata, free, redistribute,
// ops with sharding propagation, synchronize and client leases. Calls that run work validate it,
// compute the output spec (no data needed), post the command to the workers and return.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/redistribute_planner.h"
#include "core/sharding_propagation.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "server/coordinator_service.h"

namespace tessera {
namespace {

constexpr absl::Duration kRpcSlack = absl::Seconds(10);
constexpr size_t kMaxNameLength = 200;

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

absl::StatusOr<PlannerKind> PlannerOf(v1::Planner p) {
  switch (p) {
    case v1::PLANNER_UNSPECIFIED:
    case v1::MIN_COST:
      return PlannerKind::kMinCost;
    case v1::GREEDY:
      return PlannerKind::kGreedy;
    default:
      return absl::InvalidArgumentError(absl::StrCat("planner ", p, " is not a planner"));
  }
}

}  // namespace

std::string CoordinatorService::ClientId(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("tessera-client");
  return it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
}

absl::StatusOr<std::shared_ptr<CoordinatorService::Tensor>> CoordinatorService::FindTensor(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    return absl::NotFoundError(absl::StrCat("no tensor named '", name, "'"));
  return it->second;
}

absl::StatusOr<std::shared_ptr<CoordinatorService::Tensor>> CoordinatorService::UsableTensor(
    const std::string& name) const {
  absl::StatusOr<std::shared_ptr<Tensor>> t = FindTensor(name);
  if (!t.ok()) return t;
  if (absl::Status s = MeshHealth(*(*t)->mesh); !s.ok()) return s;
  if ((*t)->write->done.HasBeenNotified() && !(*t)->write->status.ok()) {
    const absl::Status& s = (*t)->write->status;
    return absl::Status(s.code(), absl::StrCat("tensor '", name, "' failed: ", s.message()));
  }
  return t;
}

absl::StatusOr<std::shared_ptr<CoordinatorService::Tensor>> CoordinatorService::AddTensor(
    const std::string& requested, std::shared_ptr<Mesh> mesh, DTensorSpec spec,
    const std::string& owner) {
  if (requested.size() > kMaxNameLength || requested.find('/') != std::string::npos ||
      (!requested.empty() && requested[0] == '.')) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor name '", requested, "' must be at most ", kMaxNameLength,
                     " characters, without '/' and not starting with '.'"));
  }
  if (mesh->mesh.device_type() != "cpu") {
    // Workers keep DTensor shards in host memory; NCCL needs them in device memory.
    return absl::UnimplementedError(absl::StrCat("DTensors live on cpu meshes for now; mesh '",
                                                 mesh->name, "' is ", mesh->mesh.device_type()));
  }
  std::vector<int64_t> bytes(static_cast<size_t>(mesh->mesh.size()));
  for (int64_t p = 0; p < mesh->mesh.size(); ++p) bytes[p] = ShardBytes(spec, p);
  std::vector<int64_t> budgets;
  for (int64_t id : mesh->mesh.ranks()) {
    absl::StatusOr<WorkerHandle> w = dispatcher_->registry().Get(id);
    if (!w.ok()) return w.status();
    budgets.push_back(w->memory_budget_bytes);
  }
  auto tensor = std::make_shared<Tensor>(
      Tensor{"", std::move(mesh), std::move(spec), owner, std::make_shared<Work>()});
  absl::MutexLock lock(&mu_);
  std::string name = requested;
  if (name.empty()) {
    do {
      name = absl::StrCat("t", next_tensor_id_++);
    } while (tensors_.contains(name));
  } else if (tensors_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrCat("a tensor named '", name, "' exists"));
  }
  const std::vector<int64_t>& ranks = tensor->mesh->mesh.ranks();
  for (size_t p = 0; p < ranks.size(); ++p) {
    const int64_t held = held_bytes_[ranks[p]];
    if (budgets[p] > 0 && held + bytes[p] > budgets[p]) {
      return absl::ResourceExhaustedError(
          absl::StrCat("tensor ", tensor->spec.ToString(), " needs ", bytes[p], " bytes on worker ",
                       ranks[p], ", which holds ", held, " of its ", budgets[p], "-byte budget"));
    }
  }
  for (size_t p = 0; p < ranks.size(); ++p) held_bytes_[ranks[p]] += bytes[p];
  tensor->name = name;
  tensors_[name] = tensor;
  return tensor;
}

void CoordinatorService::DropTensor(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return;
  const Tensor& t = *it->second;
  for (int64_t p = 0; p < t.mesh->mesh.size(); ++p) {
    held_bytes_[t.mesh->mesh.ranks()[p]] -= ShardBytes(t.spec, p);
  }
  tensors_.erase(it);
}

void CoordinatorService::PostWork(const Mesh& mesh, const v1::Command& command,
                                  std::shared_ptr<Work> work,
                                  std::vector<std::shared_ptr<Tensor>> inputs) {
  absl::StatusOr<std::vector<WorkerHandle>> workers = MeshWorkers(mesh);
  if (!workers.ok()) {
    work->status = workers.status();
    work->done.Notify();
    return;
  }
  dispatcher_->Post(
      *workers, command, mesh.timeout + kRpcSlack,
      [work, inputs = std::move(inputs)](absl::Status status, std::vector<v1::CommandReply>) {
        for (const auto& in : inputs) {
          if (status.ok()) break;
          // Its replies came first; its own callback may still be on its way.
          if (!in->write->done.WaitForNotificationWithTimeout(absl::Seconds(1)) ||
              in->write->status.ok()) {
            continue;
          }
          status = absl::Status(
              in->write->status.code(),
              absl::StrCat("input '", in->name, "' failed: ", in->write->status.message()));
        }
        work->status = std::move(status);
        work->done.Notify();
      });
}

void CoordinatorService::Release(const Tensor& tensor) {
  DropTensor(tensor.name);
  if (!MeshHealth(*tensor.mesh).ok()) return;  // its workers lost it already
  v1::Command command;
  command.mutable_delete_tensors()->add_names(WorkerName(tensor.name));
  PostWork(*tensor.mesh, command, std::make_shared<Work>());
}

v1::TensorInfo CoordinatorService::Describe(const Tensor& tensor) const {
  v1::TensorInfo info;
  info.set_name(tensor.name);
  info.set_mesh(tensor.mesh->name);
  *info.mutable_meta() = ToProto(tensor.spec);
  info.set_owner(tensor.owner);
  if (!tensor.write->done.HasBeenNotified()) {
    info.set_state(v1::PENDING);
  } else if (tensor.write->status.ok()) {
    info.set_state(v1::READY);
  } else {
    info.set_state(v1::FAILED);
    info.set_error(std::string(tensor.write->status.message()));
  }
  return info;
}

grpc::Status CoordinatorService::CreateTensor(grpc::ServerContext* context,
                                              const v1::CreateTensorRequest* request,
                                              v1::TensorInfo* reply) {
  const std::string client = ClientId(*context);
  leases_.Touch(client);
  absl::StatusOr<std::shared_ptr<Mesh>> mesh = ReadyMesh(request->mesh());
  if (!mesh.ok()) return ToGrpcStatus(mesh.status());
  absl::StatusOr<DType> dtype = FromProto(request->dtype());
  if (!dtype.ok()) return ToGrpcStatus(dtype.status());
  absl::StatusOr<Shape> shape = FromProto(request->shape());
  if (!shape.ok()) return ToGrpcStatus(shape.status());
  absl::StatusOr<std::vector<Placement>> placements = FromProto(request->placements());
  if (!placements.ok()) return ToGrpcStatus(placements.status());
  absl::StatusOr<DTensorSpec> spec =
      MakeDTensorSpec((*mesh)->mesh, *std::move(placements), *std::move(shape), *dtype);
  if (!spec.ok()) return ToGrpcStatus(spec.status());
  if (request->factory() <= v1::FACTORY_UNSPECIFIED || request->factory() > v1::RANDN) {
    return Invalid(absl::StrCat("factory ", request->factory(), " is not a factory"));
  }
  if ((request->factory() == v1::RAND || request->factory() == v1::RANDN) &&
      !IsFloatingPoint(*dtype)) {
    return Invalid(absl::StrCat("rand and randn need a floating dtype, not ", DTypeName(*dtype)));
  }
  absl::StatusOr<std::shared_ptr<Tensor>> t = AddTensor(request->name(), *mesh, *spec, client);
  if (!t.ok()) return ToGrpcStatus(t.status());
  v1::Command command;
  v1::FillTensor* fill = command.mutable_fill_tensor();
  fill->set_mesh_id((*mesh)->id);
  fill->set_output(WorkerName((*t)->name));
  *fill->mutable_spec() = ToProto(*spec);
  fill->set_factory(request->factory());
  fill->set_value(request->value());
  fill->set_seed(request->seed());
  PostWork(**mesh, command, (*t)->write);
  *reply = Describe(**t);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetTensor(grpc::ServerContext* context,
                                           const v1::GetTensorRequest* request,
                                           v1::TensorInfo* reply) {
  leases_.Touch(ClientId(*context));
  absl::StatusOr<std::shared_ptr<Tensor>> t = FindTensor(request->name());
  if (!t.ok()) return ToGrpcStatus(t.status());
  *reply = Describe(**t);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListTensors(grpc::ServerContext* context,
                                             const v1::ListTensorsRequest* request,
                                             v1::ListTensorsReply* reply) {
  leases_.Touch(ClientId(*context));
  std::vector<std::shared_ptr<Tensor>> tensors;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, t] : tensors_) {
      if (request->mesh().empty() || t->mesh->name == request->mesh()) tensors.push_back(t);
    }
  }
  for (const auto& t : tensors) *reply->add_tensors() = Describe(*t);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::FreeTensor(grpc::ServerContext* context,
                                            const v1::FreeTensorRequest* request,
                                            v1::FreeTensorReply*) {
  const std::string client = ClientId(*context);
  leases_.Touch(client);
  absl::StatusOr<std::shared_ptr<Tensor>> t = FindTensor(request->name());
  if (!t.ok()) return ToGrpcStatus(t.status());
  if ((*t)->owner != client) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("tensor '", request->name(), "' belongs to client '",
                                     (*t)->owner, "', not '", client, "'"));
  }
  Release(**t);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Redistribute(grpc::ServerContext* context,
                                              const v1::RedistributeRequest* request,
                                              v1::RedistributeReply* reply) {
  const std::string client = ClientId(*context);
  leases_.Touch(client);
  absl::StatusOr<std::shared_ptr<Tensor>> src = UsableTensor(request->name());
  if (!src.ok()) return ToGrpcStatus(src.status());
  absl::StatusOr<std::vector<Placement>> placements = FromProto(request->placements());
  if (!placements.ok()) return ToGrpcStatus(placements.status());
  absl::StatusOr<PlannerKind> planner = PlannerOf(request->planner());
  if (!planner.ok()) return ToGrpcStatus(planner.status());
  if (!request->mesh().empty() && request->mesh() != (*src)->mesh->name) {
    absl::StatusOr<std::shared_ptr<Mesh>> dst = ReadyMesh(request->mesh());
    if (!dst.ok()) return ToGrpcStatus(dst.status());
    return MoveAcrossMeshes(context, **src, *dst, *std::move(placements), request->output(), client,
                            reply);
  }
  const DTensorSpec& spec = (*src)->spec;
  absl::StatusOr<RedistributePlan> plan = PlanRedistribute(spec, *placements, *planner);
  if (!plan.ok()) return ToGrpcStatus(plan.status());
  *reply->mutable_plan() = ToProto(*plan);
  if (request->explain()) return grpc::Status::OK;
  DTensorSpec dst = spec;
  absl::StatusOr<std::vector<Placement>> normalized =
      NormalizePlacements(spec.mesh, *std::move(placements), static_cast<int>(spec.shape.size()));
  if (!normalized.ok()) return ToGrpcStatus(normalized.status());
  dst.placements = *std::move(normalized);
  absl::StatusOr<std::shared_ptr<Tensor>> out =
      AddTensor(request->output(), (*src)->mesh, dst, client);
  if (!out.ok()) return ToGrpcStatus(out.status());
  v1::Command command;
  v1::RedistributeTensor* r = command.mutable_redistribute();
  r->set_mesh_id((*src)->mesh->id);
  r->set_input(WorkerName((*src)->name));
  r->set_output(WorkerName((*out)->name));
  *r->mutable_spec() = ToProto(spec);
  *r->mutable_plan() = reply->plan();
  PostWork(*(*src)->mesh, command, (*out)->write, {*src});
  *reply->mutable_output() = Describe(**out);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::RunOp(grpc::ServerContext* context, const v1::OpRequest* request,
                                       v1::OpReply* reply) {
  const std::string client = ClientId(*context);
  leases_.Touch(client);
  absl::StatusOr<OpCall> op = FromProto(request->op());
  if (!op.ok()) return ToGrpcStatus(op.status());
  if (request->inputs_size() != op->num_inputs()) {
    return Invalid(absl::StrCat(OpKindName(op->kind), " takes ", op->num_inputs(), " inputs, not ",
                                request->inputs_size()));
  }
  std::vector<std::shared_ptr<Tensor>> inputs;
  std::vector<DTensorSpec> specs;
  for (const std::string& name : request->inputs()) {
    absl::StatusOr<std::shared_ptr<Tensor>> t = UsableTensor(name);
    if (!t.ok()) return ToGrpcStatus(t.status());
    if (!inputs.empty() && (*t)->mesh != inputs[0]->mesh) {
      return Invalid(absl::StrCat("inputs '", inputs[0]->name, "' and '", name,
                                  "' are on different meshes ('", inputs[0]->mesh->name, "', '",
                                  (*t)->mesh->name, "'); redistribute one to the other's mesh"));
    }
    specs.push_back((*t)->spec);
    inputs.push_back(*std::move(t));
  }
  absl::StatusOr<OpSharding> sharding = PropagateSharding(*op, specs);
  if (!sharding.ok()) return ToGrpcStatus(sharding.status());
  absl::StatusOr<std::shared_ptr<Tensor>> out =
      AddTensor(request->output(), inputs[0]->mesh, sharding->output, client);
  if (!out.ok()) return ToGrpcStatus(out.status());
  v1::Command command;
  v1::RunOp* run = command.mutable_run_op();
  run->set_mesh_id(inputs[0]->mesh->id);
  *run->mutable_op() = ToProto(*op);
  run->set_output(WorkerName((*out)->name));
  for (size_t i = 0; i < inputs.size(); ++i) {
    v1::OpInput* in = run->add_inputs();
    in->set_tensor(WorkerName(inputs[i]->name));
    *in->mutable_spec() = ToProto(specs[i]);
    *in->mutable_plan() = ToProto(sharding->input_plans[i]);
    if (!sharding->input_plans[i].steps.empty()) {
      v1::InputRedistribution* r = reply->add_redistributions();
      r->set_input(inputs[i]->name);
      *r->mutable_from_placements() = ToProto(specs[i].placements);
      *r->mutable_to_placements() = ToProto(sharding->strategy.inputs[i]);
      *r->mutable_plan() = in->plan();
    }
  }
  PostWork(*inputs[0]->mesh, command, (*out)->write, inputs);
  *reply->mutable_output() = Describe(**out);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Synchronize(grpc::ServerContext* context,
                                             const v1::SynchronizeRequest* request,
                                             v1::SynchronizeReply*) {
  const std::string client = ClientId(*context);
  leases_.Touch(client);
  std::vector<std::shared_ptr<Tensor>> tensors;
  if (request->names().empty()) {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, t] : tensors_) {
      if (t->owner == client) tensors.push_back(t);
    }
  } else {
    for (const std::string& name : request->names()) {
      absl::StatusOr<std::shared_ptr<Tensor>> t = FindTensor(name);
      if (!t.ok()) return ToGrpcStatus(t.status());
      tensors.push_back(*std::move(t));
    }
  }
  const absl::Time deadline = absl::FromChrono(context->deadline());
  for (const auto& t : tensors) {
    if (!t->write->done.WaitForNotificationWithDeadline(deadline)) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          absl::StrCat("tensor '", t->name, "' is still being written"));
    }
    if (!t->write->status.ok()) {
      return ToGrpcStatus(absl::Status(
          t->write->status.code(),
          absl::StrCat("tensor '", t->name, "' failed: ", t->write->status.message())));
    }
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::KeepAlive(grpc::ServerContext* context,
                                           const v1::KeepAliveRequest*, v1::KeepAliveReply* reply) {
  const std::string client = ClientId(*context);
  if (client.empty()) {
    return Invalid("KeepAlive needs a client id in the 'tessera-client' metadata entry");
  }
  leases_.KeepAlive(client);
  reply->set_grace_ms(absl::ToInt64Milliseconds(leases_.grace()));
  return grpc::Status::OK;
}

void CoordinatorService::ReclaimExpired() {
  for (const std::string& client : leases_.TakeExpired()) {
    std::vector<std::shared_ptr<Tensor>> owned;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [name, t] : tensors_) {
        if (t->owner == client) owned.push_back(t);
      }
    }
    for (const auto& t : owned) Release(*t);
  }
}

}  // namespace tessera
