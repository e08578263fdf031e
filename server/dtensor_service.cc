#include "server/dtensor_service.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/names.h"
#include "core/sharding/redistribute_planner.h"
#include "core/sharding/sharding_propagation.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "security/client_tokens.h"

namespace tessera {
namespace {

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

// The spec of a factory tensor, and a check of the factory and its dtype.
absl::StatusOr<DTensorSpec> FactorySpec(const Mesh& mesh, const v1::CreateTensorRequest& request) {
  ASSIGN_OR_RETURN(const DType dtype, FromProto(request.dtype()));
  ASSIGN_OR_RETURN(Shape shape, FromProto(request.shape()));
  ASSIGN_OR_RETURN(std::vector<Placement> placements, FromProto(request.placements()));
  ASSIGN_OR_RETURN(DTensorSpec spec,
                   MakeDTensorSpec(mesh.mesh, std::move(placements), std::move(shape), dtype));
  if (request.factory() <= v1::FACTORY_UNSPECIFIED || request.factory() > v1::RANDN) {
    return absl::InvalidArgumentError(
        absl::StrCat("factory ", request.factory(), " is not a factory"));
  }
  if ((request.factory() == v1::RAND || request.factory() == v1::RANDN) &&
      !IsFloatingPoint(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rand and randn need a floating dtype, not ", DTypeName(dtype)));
  }
  return spec;
}

}  // namespace

DTensorService::DTensorService(DTensorTable* tensors, absl::Duration client_grace,
                               absl::Duration stream_idle_timeout, absl::Duration grant_lifetime,
                               absl::Duration session_idle_timeout)
    : tensors_(tensors),
      session_idle_(session_idle_timeout, "the coordinator's --session_stream_idle_timeout"),
      streams_(tensors, stream_idle_timeout),
      direct_(tensors, &streams_, grant_lifetime),
      direct_reads_(tensors, &streams_, grant_lifetime),
      checkpoints_(tensors),
      eager_ops_(tensors),
      leases_(client_grace) {
  reaper_ = std::thread([this] {
    const absl::Duration period =
        std::clamp(leases_.grace() / 4, absl::Milliseconds(50), absl::Seconds(5));
    while (!stopping_.WaitForNotificationWithTimeout(period)) ReclaimExpired();
  });
}

DTensorService::~DTensorService() {
  stopping_.Notify();
  reaper_.join();
}

absl::StatusOr<std::string> DTensorService::ClientId(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("tessera-client");
  const std::string id =
      it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
  // An id names the caller's lease and tensors' owner: bounded as any name a client makes.
  if (!id.empty()) RETURN_IF_ERROR(CheckName(NameKind::kClient, id));
  // With bearer tokens, a client's ids live under its token's name: one cannot renew or reclaim
  // another's lease.
  if (const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context()) {
    for (const grpc::string_ref& name : auth->FindPropertyValues(kClientNameProperty)) {
      return absl::StrCat(std::string(name.data(), name.size()), "/", id);
    }
  }
  return id;
}

absl::StatusOr<std::string> DTensorService::Caller(const grpc::ServerContext& context) {
  ASSIGN_OR_RETURN(std::string client, ClientId(context));
  leases_.Touch(client);
  return client;
}

grpc::Status DTensorService::DistributeTensor(grpc::ServerContext* context,
                                              grpc::ServerReader<v1::DistributeChunk>* reader,
                                              v1::TensorInfo* reply) {
  return ToGrpcStatus(DistributeTensorImpl(*context, reader, *reply));
}

absl::Status DTensorService::DistributeTensorImpl(grpc::ServerContext& context,
                                                  grpc::ServerReader<v1::DistributeChunk>* reader,
                                                  v1::TensorInfo& reply) {
  ASSIGN_OR_RETURN(const StreamLimits::Ticket admitted,
                   AdmitStream(limits_, context, "DistributeTensor"));
  ASSIGN_OR_RETURN(const std::string client, Caller(context));
  ASSIGN_OR_RETURN(reply, streams_.Distribute(context, reader, client));
  return absl::OkStatus();
}

grpc::Status DTensorService::PlanUpload(grpc::ServerContext* context,
                                        const v1::PlanUploadRequest* request,
                                        v1::UploadPlan* reply) {
  return ToGrpcStatus(PlanUploadImpl(*context, *request, *reply));
}

absl::Status DTensorService::PlanUploadImpl(const grpc::ServerContext& context,
                                            const v1::PlanUploadRequest& request,
                                            v1::UploadPlan& reply) {
  ASSIGN_OR_RETURN(const std::string client, Caller(context));
  ASSIGN_OR_RETURN(reply, direct_.Plan(request, client));
  return absl::OkStatus();
}

grpc::Status DTensorService::CommitUpload(grpc::ServerContext* context,
                                          const v1::CommitUploadRequest* request,
                                          v1::TensorInfo* reply) {
  return ToGrpcStatus(CommitUploadImpl(*context, *request, *reply));
}

absl::Status DTensorService::CommitUploadImpl(const grpc::ServerContext& context,
                                              const v1::CommitUploadRequest& request,
                                              v1::TensorInfo& reply) {
  ASSIGN_OR_RETURN(const std::string client, Caller(context));
  ASSIGN_OR_RETURN(reply, direct_.Commit(request, client));
  return absl::OkStatus();
}

grpc::Status DTensorService::PlanDownload(grpc::ServerContext* context,
                                          const v1::PlanDownloadRequest* request,
                                          v1::DownloadPlan* reply) {
  return ToGrpcStatus(PlanDownloadImpl(*context, *request, *reply));
}

absl::Status DTensorService::PlanDownloadImpl(const grpc::ServerContext& context,
                                              const v1::PlanDownloadRequest& request,
                                              v1::DownloadPlan& reply) {
  ASSIGN_OR_RETURN(const std::string client, Caller(context));
  ASSIGN_OR_RETURN(reply,
                   direct_reads_.Plan(request, client, absl::FromChrono(context.deadline())));
  return absl::OkStatus();
}

grpc::Status DTensorService::ReleaseDownload(grpc::ServerContext* context,
                                             const v1::ReleaseDownloadRequest* request,
                                             v1::ReleaseDownloadReply*) {
  return ToGrpcStatus(ReleaseDownloadImpl(*context, *request));
}

absl::Status DTensorService::ReleaseDownloadImpl(const grpc::ServerContext& context,
                                                 const v1::ReleaseDownloadRequest& request) {
  ASSIGN_OR_RETURN(const std::string client, Caller(context));
  return direct_reads_.Release(request.download_id(), client);
}

grpc::Status DTensorService::FromLocal(grpc::ServerContext* context,
                                       grpc::ServerReader<v1::FromLocalChunk>* reader,
                                       v1::TensorInfo* reply) {
  return ToGrpcStatus(FromLocalImpl(*context, reader, *reply));
}

absl::Status DTensorService::FromLocalImpl(grpc::ServerContext& context,
                                           grpc::ServerReader<v1::FromLocalChunk>* reader,
                                           v1::TensorInfo& reply) {
  ASSIGN_OR_RETURN(const StreamLimits::Ticket admitted, AdmitStream(limits_, context, "FromLocal"));
  ASSIGN_OR_RETURN(const std::string client, Caller(context));
  ASSIGN_OR_RETURN(reply, streams_.FromLocal(context, reader, client));
  return absl::OkStatus();
}

grpc::Status DTensorService::ToLocal(grpc::ServerContext* context,
                                     const v1::ToLocalRequest* request,
                                     grpc::ServerWriter<v1::TensorData>* writer) {
  return ToGrpcStatus(ToLocalImpl(*context, *request, writer));
}

absl::Status DTensorService::ToLocalImpl(const grpc::ServerContext& context,
                                         const v1::ToLocalRequest& request,
                                         grpc::ServerWriter<v1::TensorData>* writer) {
  ASSIGN_OR_RETURN(const StreamLimits::Ticket admitted, AdmitStream(limits_, context, "ToLocal"));
  RETURN_IF_ERROR(Caller(context).status());
  return streams_.ToLocal(context, request, writer);
}

grpc::Status DTensorService::FullTensor(grpc::ServerContext* context,
                                        const v1::FullTensorRequest* request,
                                        grpc::ServerWriter<v1::TensorData>* writer) {
  return ToGrpcStatus(FullTensorImpl(*context, *request, writer));
}

absl::Status DTensorService::FullTensorImpl(const grpc::ServerContext& context,
                                            const v1::FullTensorRequest& request,
                                            grpc::ServerWriter<v1::TensorData>* writer) {
  ASSIGN_OR_RETURN(const StreamLimits::Ticket admitted,
                   AdmitStream(limits_, context, "FullTensor"));
  RETURN_IF_ERROR(Caller(context).status());
  return streams_.FullTensor(context, request, writer);
}

grpc::Status DTensorService::CreateTensor(grpc::ServerContext* context,
                                          const v1::CreateTensorRequest* request,
                                          v1::TensorInfo* reply) {
  return ToGrpcStatus(CreateTensorImpl(*context, *request, *reply));
}

absl::Status DTensorService::CreateTensorImpl(const grpc::ServerContext& context,
                                              const v1::CreateTensorRequest& request,
                                              v1::TensorInfo& reply) {
  ASSIGN_OR_RETURN(const std::string client, Caller(context));
  ASSIGN_OR_RETURN(const std::shared_ptr<Mesh> mesh, tensors_->meshes().Ready(request.mesh()));
  ASSIGN_OR_RETURN(const DTensorSpec spec, FactorySpec(*mesh, request));
  ASSIGN_OR_RETURN(const std::shared_ptr<DTensorEntry> t,
                   tensors_->Add(request.name(), mesh, spec, client));
  v1::Command command;
  v1::FillTensor* fill = command.mutable_fill_tensor();
  fill->set_mesh_id(mesh->id);
  fill->set_output(DTensorTable::WorkerName(t->name));
  *fill->mutable_spec() = ToProto(spec);
  fill->set_factory(request.factory());
  fill->set_value(request.value());
  fill->set_seed(request.seed());
  RETURN_IF_ERROR(tensors_->PostWrite(*t, command));
  reply = tensors_->Describe(*t);
  return absl::OkStatus();
}

grpc::Status DTensorService::GetTensor(grpc::ServerContext* context,
                                       const v1::GetTensorRequest* request, v1::TensorInfo* reply) {
  return ToGrpcStatus(GetTensorImpl(*context, *request, *reply));
}

absl::Status DTensorService::GetTensorImpl(const grpc::ServerContext& context,
                                           const v1::GetTensorRequest& request,
                                           v1::TensorInfo& reply) {
  RETURN_IF_ERROR(Caller(context).status());
  ASSIGN_OR_RETURN(const std::shared_ptr<DTensorEntry> t, tensors_->Find(request.name()));
  reply = tensors_->Describe(*t);
  return absl::OkStatus();
}

grpc::Status DTensorService::ListTensors(grpc::ServerContext* context,
                                         const v1::ListTensorsRequest* request,
                                         v1::ListTensorsReply* reply) {
  return ToGrpcStatus(ListTensorsImpl(*context, *request, *reply));
}

absl::Status DTensorService::ListTensorsImpl(const grpc::ServerContext& context,
                                             const v1::ListTensorsRequest& request,
                                             v1::ListTensorsReply& reply) {
  RETURN_IF_ERROR(Caller(context).status());
  for (const auto& t : tensors_->OnMesh(request.mesh())) {
    *reply.add_tensors() = tensors_->Describe(*t);
  }
  return absl::OkStatus();
}

grpc::Status DTensorService::FreeTensor(grpc::ServerContext* context,
                                        const v1::FreeTensorRequest* request,
                                        v1::FreeTensorReply*) {
  return ToGrpcStatus(FreeTensorImpl(*context, *request));
}

absl::Status DTensorService::FreeTensorImpl(const grpc::ServerContext& context,
                                            const v1::FreeTensorRequest& request) {
  std::shared_ptr<const TensorWrite> workers_freed;
  ASSIGN_OR_RETURN(const std::string client, Caller(context));
  RETURN_IF_ERROR(FreeTensorFor(client, request.name(), &workers_freed));
  // Answered once the erasure of its record is durable (queued; one commit serves many) and the
  // workers have freed the shards (so their memory is free when the call returns), or said why not.
  RETURN_IF_ERROR(tensors_->Flush());
  if (workers_freed == nullptr) return absl::OkStatus();
  const absl::Time deadline = absl::FromChrono(context.deadline());
  if (!workers_freed->done.WaitForNotificationWithDeadline(deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "tensor '", request.name(), "' is removed; its workers had not freed its shards yet"));
  }
  if (!workers_freed->status.ok()) {
    return WithContext(
        absl::StrCat("tensor '", request.name(), "' is removed, but its shards were not all freed"),
        workers_freed->status);
  }
  return absl::OkStatus();
}

absl::Status DTensorService::FreeTensorFor(const std::string& client, const std::string& name,
                                           std::shared_ptr<const TensorWrite>* workers_freed) {
  ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> t, tensors_->Find(name));
  if (t->owner != client) {
    return absl::PermissionDeniedError(
        absl::StrCat("tensor '", name, "' belongs to client '", t->owner, "', not '", client, "'"));
  }
  // Both callers flush before answering.
  std::shared_ptr<const TensorWrite> freed = tensors_->Release(*t, Durability::kQueued);
  if (workers_freed != nullptr) *workers_freed = std::move(freed);
  return absl::OkStatus();
}

absl::Status DTensorService::RedistributeInMesh(const v1::RedistributeRequest& request,
                                                const std::shared_ptr<DTensorEntry>& src,
                                                std::vector<Placement> placements,
                                                const std::string& owner,
                                                v1::RedistributeReply* reply) {
  ASSIGN_OR_RETURN(const PlannerKind planner, PlannerOf(request.planner()));
  const DTensorSpec& spec = src->spec;
  ASSIGN_OR_RETURN(const RedistributePlan plan, PlanRedistribute(spec, placements, planner));
  *reply->mutable_plan() = ToProto(plan);
  if (request.explain()) return absl::OkStatus();
  DTensorSpec dst = spec;
  ASSIGN_OR_RETURN(dst.placements, NormalizePlacements(spec.mesh, std::move(placements),
                                                       static_cast<int>(spec.shape.size())));
  ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> out,
                   tensors_->Add(request.output(), src->mesh, dst, owner));
  v1::Command command;
  v1::RedistributeTensor* r = command.mutable_redistribute();
  r->set_mesh_id(src->mesh->id);
  r->set_input(DTensorTable::WorkerName(src->name));
  r->set_output(DTensorTable::WorkerName(out->name));
  *r->mutable_spec() = ToProto(spec);
  *r->mutable_plan() = reply->plan();
  RETURN_IF_ERROR(tensors_->PostWrite(*out, command, {src}));
  *reply->mutable_output() = tensors_->Describe(*out);
  return absl::OkStatus();
}

grpc::Status DTensorService::Redistribute(grpc::ServerContext* context,
                                          const v1::RedistributeRequest* request,
                                          v1::RedistributeReply* reply) {
  return ToGrpcStatus(RedistributeImpl(*context, *request, *reply));
}

absl::Status DTensorService::RedistributeImpl(const grpc::ServerContext& context,
                                              const v1::RedistributeRequest& request,
                                              v1::RedistributeReply& reply) {
  ASSIGN_OR_RETURN(const std::string client, Caller(context));
  ASSIGN_OR_RETURN(const std::shared_ptr<DTensorEntry> src, tensors_->Usable(request.name()));
  ASSIGN_OR_RETURN(std::vector<Placement> placements, FromProto(request.placements()));
  RETURN_IF_ERROR(PlannerOf(request.planner()).status());
  if (request.mesh().empty() || request.mesh() == src->mesh->name) {
    return RedistributeInMesh(request, src, std::move(placements), client, &reply);
  }
  ASSIGN_OR_RETURN(const std::shared_ptr<Mesh> dst, tensors_->meshes().Ready(request.mesh()));
  return streams_.MoveAcrossMeshes(context, *src, dst, std::move(placements), request.output(),
                                   client, &reply);
}

grpc::Status DTensorService::RunOp(grpc::ServerContext* context, const v1::OpRequest* request,
                                   v1::OpReply* reply) {
  return ToGrpcStatus(RunOpImpl(*context, *request, *reply));
}

absl::Status DTensorService::RunOpImpl(const grpc::ServerContext& context,
                                       const v1::OpRequest& request, v1::OpReply& reply) {
  ASSIGN_OR_RETURN(const std::string client, Caller(context));
  return RunOpFor(client, request, &reply);
}

grpc::Status DTensorService::ListOps(grpc::ServerContext* context,
                                     const v1::ListOpsRequest* request, v1::ListOpsReply* reply) {
  return ToGrpcStatus(ListOpsImpl(*context, *request, *reply));
}

absl::Status DTensorService::ListOpsImpl(const grpc::ServerContext& context,
                                         const v1::ListOpsRequest& request,
                                         v1::ListOpsReply& reply) {
  RETURN_IF_ERROR(Caller(context).status());
  reply = EagerOps::List(request.filter());
  return absl::OkStatus();
}

grpc::Status DTensorService::OpStream(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::StreamResults, v1::StreamCalls>* stream) {
  return ToGrpcStatus(OpStreamImpl(*context, stream));
}

absl::Status DTensorService::OpStreamImpl(
    const grpc::ServerContext& context,
    grpc::ServerReaderWriter<v1::StreamResults, v1::StreamCalls>* stream) {
  ASSIGN_OR_RETURN(const StreamLimits::Ticket admitted, AdmitStream(limits_, context, "OpStream"));
  ASSIGN_OR_RETURN(const std::string client, Caller(context));
  // A stream that moves nothing for the limit is cut (the clients close an idle one themselves
  // well before, so that no call of theirs meets the cut).
  const std::unique_ptr<IdleStreams::Watch> watch = session_idle_.Start(context, "OpStream");
  v1::StreamCalls calls;
  v1::StreamResults results;
  while (watch->Read(*stream, &calls)) {
    results.Clear();
    std::vector<int> freed;  // the results of the message's frees that succeeded
    // The message's ops leave together, one batch per worker, once all are queued.
    std::optional<Dispatcher::HoldSends> hold(std::in_place, tensors_->dispatcher());
    for (const v1::StreamCall& call : calls.calls()) {
      v1::StreamResult* result = results.add_results();
      result->set_id(call.id());
      absl::Status status;
      switch (call.call_case()) {
        case v1::StreamCall::kOp:
          status = RunOpFor(client, call.op(), call.describe() ? result->mutable_op() : nullptr);
          break;
        case v1::StreamCall::kFree:
          status = FreeTensorFor(client, call.free().name());
          if (status.ok()) freed.push_back(results.results_size() - 1);
          break;
        case v1::StreamCall::CALL_NOT_SET:
          status = absl::InvalidArgumentError(
              absl::StrCat("stream call ", call.id(), " carries neither an op nor a free"));
          break;
      }
      if (!status.ok()) {
        result->clear_op();
        result->set_code(static_cast<int>(status.code()));
        result->set_message(std::string(status.message()));
      }
    }
    hold.reset();
    // The message's frees are answered once their records' erasures are durable: one commit.
    if (absl::Status durable = freed.empty() ? absl::OkStatus() : tensors_->Flush();
        !durable.ok()) {
      for (int i : freed) {
        results.mutable_results(i)->set_code(static_cast<int>(durable.code()));
        results.mutable_results(i)->set_message(std::string(durable.message()));
      }
    }
    if (!watch->Write(*stream, results)) break;  // the client went away
  }
  return watch->expired() ? watch->ExpiredError() : absl::OkStatus();
}

absl::Status DTensorService::RunOpFor(const std::string& client, const v1::OpRequest& request,
                                      v1::OpReply* reply) {
  if (!request.op().name().empty()) return eager_ops_.Run(client, request, reply);
  ASSIGN_OR_RETURN(OpCall op, FromProto(request.op()));
  if (request.inputs_size() != op.num_inputs()) {
    return absl::InvalidArgumentError(absl::StrCat(OpKindName(op.kind), " takes ", op.num_inputs(),
                                                   " inputs, not ", request.inputs_size()));
  }
  std::vector<std::shared_ptr<DTensorEntry>> inputs;
  std::vector<DTensorSpec> specs;
  for (const std::string& name : request.inputs()) {
    absl::StatusOr<std::shared_ptr<DTensorEntry>> t = tensors_->Usable(name);
    if (!t.ok()) return t.status();
    if (!inputs.empty() && (*t)->mesh != inputs[0]->mesh) {
      return absl::InvalidArgumentError(
          absl::StrCat("inputs '", inputs[0]->name, "' and '", name, "' are on different meshes ('",
                       inputs[0]->mesh->name, "', '", (*t)->mesh->name,
                       "'); redistribute one to the other's mesh"));
    }
    specs.push_back((*t)->spec);
    inputs.push_back(*std::move(t));
  }
  ASSIGN_OR_RETURN(OpSharding sharding, PropagateSharding(op, specs));
  ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> out,
                   tensors_->Add(request.output(), inputs[0]->mesh, sharding.output, client));
  v1::Command command;
  v1::RunOp* run = command.mutable_run_op();
  run->set_mesh_id(inputs[0]->mesh->id);
  *run->mutable_op() = ToProto(op);
  run->set_output(DTensorTable::WorkerName(out->name));
  for (size_t i = 0; i < inputs.size(); ++i) {
    v1::OpInput* in = run->add_inputs();
    in->set_tensor(DTensorTable::WorkerName(inputs[i]->name));
    *in->mutable_spec() = ToProto(specs[i]);
    *in->mutable_plan() = ToProto(sharding.input_plans[i]);
    if (reply != nullptr && !sharding.input_plans[i].steps.empty()) {
      v1::InputRedistribution* r = reply->add_redistributions();
      r->set_input(inputs[i]->name);
      *r->mutable_from_placements() = ToProto(specs[i].placements);
      *r->mutable_to_placements() = ToProto(sharding.strategy.inputs[i]);
      *r->mutable_plan() = in->plan();
    }
  }
  RETURN_IF_ERROR(tensors_->PostWrite(*out, command, inputs));
  if (reply != nullptr) *reply->mutable_output() = tensors_->Describe(*out);
  return absl::OkStatus();
}

grpc::Status DTensorService::SaveTensor(grpc::ServerContext* context,
                                        const v1::SaveTensorRequest* request,
                                        v1::SaveTensorReply* reply) {
  return ToGrpcStatus(SaveTensorImpl(*context, *request, *reply));
}

absl::Status DTensorService::SaveTensorImpl(const grpc::ServerContext& context,
                                            const v1::SaveTensorRequest& request,
                                            v1::SaveTensorReply& reply) {
  RETURN_IF_ERROR(Caller(context).status());
  return checkpoints_.Save(request, absl::FromChrono(context.deadline()), &reply);
}

grpc::Status DTensorService::LoadTensor(grpc::ServerContext* context,
                                        const v1::LoadTensorRequest* request,
                                        v1::TensorInfo* reply) {
  return ToGrpcStatus(LoadTensorImpl(*context, *request, *reply));
}

absl::Status DTensorService::LoadTensorImpl(const grpc::ServerContext& context,
                                            const v1::LoadTensorRequest& request,
                                            v1::TensorInfo& reply) {
  ASSIGN_OR_RETURN(const std::string client, Caller(context));
  return checkpoints_.Load(request, client, absl::FromChrono(context.deadline()), &reply);
}

grpc::Status DTensorService::Synchronize(grpc::ServerContext* context,
                                         const v1::SynchronizeRequest* request,
                                         v1::SynchronizeReply*) {
  return ToGrpcStatus(SynchronizeImpl(*context, *request));
}

absl::Status DTensorService::SynchronizeImpl(const grpc::ServerContext& context,
                                             const v1::SynchronizeRequest& request) {
  ASSIGN_OR_RETURN(const std::string client, Caller(context));
  std::vector<std::shared_ptr<DTensorEntry>> tensors;
  if (request.names().empty()) {
    tensors = tensors_->OwnedBy(client);
  } else {
    for (const std::string& name : request.names()) {
      ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> t, tensors_->Find(name));
      tensors.push_back(std::move(t));
    }
  }
  return DTensorTable::AwaitWrites(tensors, absl::FromChrono(context.deadline()));
}

grpc::Status DTensorService::KeepAlive(grpc::ServerContext* context, const v1::KeepAliveRequest*,
                                       v1::KeepAliveReply* reply) {
  return ToGrpcStatus(KeepAliveImpl(*context, *reply));
}

absl::Status DTensorService::KeepAliveImpl(const grpc::ServerContext& context,
                                           v1::KeepAliveReply& reply) {
  ASSIGN_OR_RETURN(const std::string client, ClientId(context));
  if (client.empty()) {
    return absl::InvalidArgumentError(
        "KeepAlive needs a client id in the 'tessera-client' metadata entry");
  }
  leases_.KeepAlive(client);
  reply.set_grace_ms(absl::ToInt64Milliseconds(leases_.grace()));
  return absl::OkStatus();
}

grpc::Status DTensorService::ManualSeed(grpc::ServerContext* context,
                                        const v1::ManualSeedRequest* request,
                                        v1::ManualSeedReply*) {
  return ToGrpcStatus(ManualSeedImpl(*context, *request));
}

absl::Status DTensorService::ManualSeedImpl(const grpc::ServerContext& context,
                                            const v1::ManualSeedRequest& request) {
  ASSIGN_OR_RETURN(const std::string client, Caller(context));
  eager_ops_.ManualSeed(client, request.seed());
  return absl::OkStatus();
}

void DTensorService::ReclaimExpired() {
  for (const std::string& client : leases_.TakeExpired()) {
    eager_ops_.Forget(client);
    for (const auto& t : tensors_->OwnedBy(client)) tensors_->Release(*t);
  }
}

}  // namespace tessera
