#include "server/module_service.h"

#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/modules/program_edges.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "spdlog/spdlog.h"
#include "transfer/tensor_stream.h"

namespace tessera {
namespace {

// A run's input from its message: the full tensor or every rank's.
absl::StatusOr<RunInput> InputFromProto(const v1::ModuleInput& input) {
  RunInput in;
  if (input.has_full()) {
    if (input.locals_size() > 0) {
      return absl::InvalidArgumentError("give the full input or local inputs, not both");
    }
    absl::StatusOr<HostTensor> full = FromProto(input.full());
    if (!full.ok()) return WithContext("input", full.status());
    in.full = *std::move(full);
    return in;
  }
  if (input.locals_size() == 0) {
    return absl::InvalidArgumentError("the input has neither a full tensor nor local tensors");
  }
  for (int r = 0; r < input.locals_size(); ++r) {
    absl::StatusOr<HostTensor> t = FromProto(input.locals(r));
    if (!t.ok()) return WithContext(absl::StrCat("rank ", r, "'s input"), t.status());
    in.locals.push_back(*std::move(t));
  }
  return in;
}

absl::StatusOr<RunOutputs> OutputsFromProto(v1::ModuleOutputs outputs) {
  switch (outputs) {
    case v1::OUTPUTS_FULL:
      return RunOutputs{.full = true, .locals = false};
    case v1::OUTPUTS_LOCAL:
      return RunOutputs{.full = false, .locals = true};
    case v1::OUTPUTS_BOTH:
      return RunOutputs{.full = true, .locals = true};
    default:
      return absl::InvalidArgumentError(absl::StrCat("outputs ", outputs, " is not one"));
  }
}

void ResultToProto(const RunResult& result, v1::ForwardReply* reply) {
  *reply->mutable_output_layout()->mutable_placement() = ToProto(result.output_layout.placement);
  reply->mutable_output_layout()->set_is_dtensor(result.output_layout.is_dtensor);
  reply->set_tp_mesh_dim(result.tp_mesh_dim);
  if (result.full.has_value()) *reply->mutable_output() = ToProto(*result.full);
  for (const HostTensor& t : result.locals) *reply->add_local_outputs() = ToProto(t);
}

// OK iff each SGD option is a finite non-negative number.
absl::Status CheckSgd(const v1::SgdOptions& sgd) {
  for (const auto& [name, value] : {std::pair<const char*, double>{"lr", sgd.lr()},
                                    {"momentum", sgd.momentum()},
                                    {"weight_decay", sgd.weight_decay()}}) {
    if (!std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("SGD ", name, " ", value, " must be a finite number >= 0"));
    }
  }
  return absl::OkStatus();
}

// The largest dynamic batch a published model may take, and the longest a request may wait for
// its batch to fill.
constexpr int64_t kMaxBatchSize = 65536;
constexpr int64_t kMaxQueueDelayUs = int64_t{60} * 1000 * 1000;

// OK iff `version` is a version number ("1", "2", ...).
absl::Status CheckVersion(const std::string& version) {
  bool digits = !version.empty() && version.size() <= 18 && version[0] != '0';
  for (char c : version) digits = digits && absl::ascii_isdigit(c);
  if (digits) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("version '", version, "' must be a positive number (\"1\", \"2\", ...)"));
}

// FAILED_PRECONDITION for `what` on a module imported from a program, which takes only its own
// plan, given at load (docs/import.md).
absl::Status SpecModulesOnly(const ModuleEntry& module, absl::string_view what) {
  if (module.graph == nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "module '", module.name, "' is imported from a program (", module.graph->source.source(),
      "); ", what, " takes modules made from a spec only: load the program again with its plan"));
}

}  // namespace

ModuleService::ModuleService(DTensorTable* tensors, ModuleTable* modules, ServedModels* served,
                             absl::Duration stream_idle_timeout)
    : tensors_(tensors),
      modules_(modules),
      served_(served),
      streams_(tensors),
      checkpoints_(tensors),
      programs_(tensors),
      loader_(tensors, modules, &programs_, &streams_, &checkpoints_),
      plans_(tensors, &programs_),
      runs_(tensors, &programs_),
      recovery_(tensors, modules, &programs_,
                [this](std::shared_ptr<ModuleEntry> module, const v1::PublishedVersion& p) {
                  if (served_ == nullptr) return absl::OkStatus();
                  return served_->Publish(Served(std::move(module), p));
                }),
      idle_(stream_idle_timeout) {}

void ModuleService::MeshRejoined(const Mesh& old, const std::shared_ptr<Mesh>& now) {
  for (const std::shared_ptr<ModuleEntry>& module : modules_->List()) {
    if (module->mesh.get() != &old) continue;
    v1::ModuleRecord record;
    {
      absl::MutexLock lock(&module->mu);
      if (module->removed) continue;
      record = ModuleTable::Record(*module);
      // The old entry serves no more: its program and momentum buffers on the workers that kept
      // them went with the old mesh's teardown, or are dropped here.
      module->removed = true;
      for (const v1::PublishedVersion& p : module->published) {
        if (served_ != nullptr) served_->Unpublish(p.model(), p.version()).IgnoreError();
      }
      if (module->momentum) {
        v1::Command drop;
        for (const ProgramParameter& p : module->program.parameters) {
          drop.mutable_delete_tensors()->add_names(MomentumWorkerName(module->name, p.fqn));
        }
        tensors_->Post(*now, drop, std::make_shared<TensorWrite>());
      }
    }
    if (absl::Status s = recovery_.Reinstall(record); !s.ok()) {
      spdlog::error("module '{}' was not moved onto mesh '{}' set up again: {}", module->name,
                    now->name, s.ToString());
      continue;
    }
    spdlog::info("module '{}' moved onto mesh '{}' set up again (mesh id {})", module->name,
                 now->name, now->id);
  }
}

grpc::Status ModuleService::LoadModule(grpc::ServerContext* context,
                                       grpc::ServerReader<v1::LoadModuleChunk>* reader,
                                       v1::ModuleInfo* reply) {
  return ToGrpcStatus(LoadModuleImpl(*context, reader, *reply));
}

absl::Status ModuleService::LoadModuleImpl(const grpc::ServerContext& context,
                                           grpc::ServerReader<v1::LoadModuleChunk>* reader,
                                           v1::ModuleInfo& reply) {
  ASSIGN_OR_RETURN(const StreamLimits::Ticket admitted,
                   AdmitStream(limits_, context, "LoadModule"));
  // A client that stops sending is cut: the workers' turns its weights held are released.
  const std::unique_ptr<IdleStreams::Watch> watch = idle_.Start(context, "LoadModule");
  WatchedReader<v1::LoadModuleChunk> watched(reader, watch.get());
  absl::StatusOr<v1::ModuleInfo> info = loader_.Load(context, &watched);
  if (!info.ok()) return watch->expired() ? watch->ExpiredError() : info.status();
  reply = *std::move(info);
  return absl::OkStatus();
}

absl::Status ModuleService::ApplyPlan(const grpc::ServerContext& context, const std::string& name,
                                      PlanSpec plan, const std::string& mesh_dim,
                                      v1::ParallelizeModuleReply* reply) {
  ASSIGN_OR_RETURN(std::shared_ptr<ModuleEntry> module, modules_->Find(name));
  RETURN_IF_ERROR(SpecModulesOnly(*module, "a plan applied after load"));
  // parallelize_module(module, mesh, plan) names the module's own mesh: the plan's dim applies.
  const std::string dim = mesh_dim == module->mesh->name ? "" : mesh_dim;
  {
    // The plan is recorded as pending first: a crash while the parameters move leaves them in
    // either plan's layout (or, cut short, marked by their relayout intents).
    absl::ReaderMutexLock lock(&module->mu);
    if (module->removed) {
      return absl::NotFoundError(absl::StrCat("module '", module->name, "' was removed"));
    }
    RETURN_IF_ERROR(modules_->PersistPending(*module, PlanSpecToJson(plan), dim));
  }
  absl::StatusOr<std::vector<std::string>> applied =
      plans_.Apply(*module, std::move(plan), dim, TransferDeadline(context));
  {
    // Recorded even when the workers failed part-way: the record follows what the module holds.
    absl::ReaderMutexLock lock(&module->mu);
    if (!module->removed) RETURN_IF_ERROR(modules_->Persist(*module));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> unmatched, std::move(applied));
  *reply->mutable_module() = ModuleTable::Describe(*module);
  for (std::string& u : unmatched) reply->add_unmatched(std::move(u));
  return absl::OkStatus();
}

grpc::Status ModuleService::ParallelizeModule(grpc::ServerContext* context,
                                              const v1::ParallelizeModuleRequest* request,
                                              v1::ParallelizeModuleReply* reply) {
  return ToGrpcStatus(ParallelizeModuleImpl(*context, *request, *reply));
}

absl::Status ModuleService::ParallelizeModuleImpl(const grpc::ServerContext& context,
                                                  const v1::ParallelizeModuleRequest& request,
                                                  v1::ParallelizeModuleReply& reply) {
  absl::StatusOr<PlanSpec> plan = ParsePlanSpec(request.plan_json());
  if (!plan.ok()) return WithContext("plan", plan.status());
  if (!plan->parallelize.has_value()) {
    return absl::InvalidArgumentError(
        "the plan is a distribute_module partition; apply it with DistributeModule");
  }
  return ApplyPlan(context, request.name(), *std::move(plan), request.mesh_dim(), &reply);
}

grpc::Status ModuleService::DistributeModule(grpc::ServerContext* context,
                                             const v1::DistributeModuleRequest* request,
                                             v1::ParallelizeModuleReply* reply) {
  return ToGrpcStatus(DistributeModuleImpl(*context, *request, *reply));
}

absl::Status ModuleService::DistributeModuleImpl(const grpc::ServerContext& context,
                                                 const v1::DistributeModuleRequest& request,
                                                 v1::ParallelizeModuleReply& reply) {
  absl::StatusOr<PlanSpec> plan = ParsePlanSpec(request.partition_json());
  if (!plan.ok()) return WithContext("partition", plan.status());
  if (!plan->distribute.has_value()) {
    return absl::InvalidArgumentError(
        "the partition is a parallelize_module plan; apply it with ParallelizeModule");
  }
  return ApplyPlan(context, request.name(), *std::move(plan), "", &reply);
}

grpc::Status ModuleService::ListModules(grpc::ServerContext*, const v1::ListModulesRequest*,
                                        v1::ListModulesReply* reply) {
  for (const auto& module : modules_->List())
    *reply->add_modules() = ModuleTable::Describe(*module);
  return grpc::Status::OK;
}

grpc::Status ModuleService::ShowModule(grpc::ServerContext*, const v1::ShowModuleRequest* request,
                                       v1::ModuleInfo* reply) {
  return ToGrpcStatus(ShowModuleImpl(*request, *reply));
}

absl::Status ModuleService::ShowModuleImpl(const v1::ShowModuleRequest& request,
                                           v1::ModuleInfo& reply) {
  ASSIGN_OR_RETURN(const std::shared_ptr<ModuleEntry> module, modules_->Find(request.name()));
  reply = ModuleTable::Describe(*module);
  return absl::OkStatus();
}

grpc::Status ModuleService::ExportPlan(grpc::ServerContext*, const v1::ExportPlanRequest* request,
                                       v1::ExportPlanReply* reply) {
  return ToGrpcStatus(ExportPlanImpl(*request, *reply));
}

absl::Status ModuleService::ExportPlanImpl(const v1::ExportPlanRequest& request,
                                           v1::ExportPlanReply& reply) {
  ASSIGN_OR_RETURN(const std::shared_ptr<ModuleEntry> module, modules_->Find(request.name()));
  absl::ReaderMutexLock lock(&module->mu);
  reply.set_plan_json(module->plan_json);
  return absl::OkStatus();
}

grpc::Status ModuleService::RemoveModule(grpc::ServerContext*,
                                         const v1::RemoveModuleRequest* request,
                                         v1::RemoveModuleReply*) {
  return ToGrpcStatus(RemoveModuleImpl(*request));
}

absl::Status ModuleService::RemoveModuleImpl(const v1::RemoveModuleRequest& request) {
  ASSIGN_OR_RETURN(const std::shared_ptr<ModuleEntry> taken, modules_->Take(request.name()));
  ModuleEntry& module = *taken;
  absl::MutexLock lock(&module.mu);
  module.removed = true;
  modules_->Unrecord(module.name);
  for (const v1::PublishedVersion& p : module.published) {
    if (served_ != nullptr) served_->Unpublish(p.model(), p.version()).IgnoreError();
  }
  module.published.clear();
  plans_.DropTrainingState(module);
  programs_.Drop(module);
  for (const auto& p : module.parameters) tensors_->Release(*p);
  module.parameters.clear();
  return absl::OkStatus();
}

grpc::Status ModuleService::Forward(grpc::ServerContext* context, const v1::ForwardRequest* request,
                                    v1::ForwardReply* reply) {
  return ToGrpcStatus(ForwardImpl(*context, *request, *reply));
}

absl::Status ModuleService::ForwardImpl(const grpc::ServerContext& context,
                                        const v1::ForwardRequest& request,
                                        v1::ForwardReply& reply) {
  ASSIGN_OR_RETURN(const std::shared_ptr<ModuleEntry> module, modules_->Find(request.name()));
  if (module->graph != nullptr) return ForwardProgram(context, request, *module, reply);
  if (!request.more_inputs().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("module '", module->name,
                                                   "' takes one input; the forward gives ",
                                                   1 + request.more_inputs_size()));
  }
  ASSIGN_OR_RETURN(RunInput input, InputFromProto(request.input()));
  ASSIGN_OR_RETURN(const RunOutputs outputs, OutputsFromProto(request.outputs()));
  ASSIGN_OR_RETURN(const RunResult result,
                   runs_.Forward(*module, std::move(input), outputs, TransferDeadline(context)));
  ResultToProto(result, &reply);
  return absl::OkStatus();
}

absl::Status ModuleService::ForwardProgram(const grpc::ServerContext& context,
                                           const v1::ForwardRequest& request, ModuleEntry& module,
                                           v1::ForwardReply& reply) {
  if (request.outputs() != v1::OUTPUTS_FULL) {
    return absl::InvalidArgumentError(
        absl::StrCat("module '", module.name,
                     "' is a program: a forward gives its full outputs only (OUTPUTS_FULL)"));
  }
  std::vector<HostTensor> inputs;
  for (int k = 0; k <= request.more_inputs_size(); ++k) {
    const v1::ModuleInput& in = k == 0 ? request.input() : request.more_inputs(k - 1);
    if (!in.has_full() || !in.locals().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input ", k, " of module '", module.name,
                       "': a program's forward takes each input full, not as local tensors"));
    }
    absl::StatusOr<HostTensor> t = FromProto(in.full());
    if (!t.ok()) return WithContext(absl::StrCat("input ", k), t.status());
    inputs.push_back(*std::move(t));
  }
  ASSIGN_OR_RETURN(std::vector<HostTensor> outputs,
                   runs_.ForwardGraph(module, std::move(inputs), TransferDeadline(context)));
  for (size_t o = 0; o < outputs.size(); ++o) {
    *(o == 0 ? reply.mutable_output() : reply.add_more_outputs()) = ToProto(outputs[o]);
  }
  return absl::OkStatus();
}

grpc::Status ModuleService::Step(grpc::ServerContext* context, const v1::StepRequest* request,
                                 v1::StepReply* reply) {
  return ToGrpcStatus(StepImpl(*context, *request, *reply));
}

absl::Status ModuleService::StepImpl(const grpc::ServerContext& context,
                                     const v1::StepRequest& request, v1::StepReply& reply) {
  ASSIGN_OR_RETURN(const std::shared_ptr<ModuleEntry> module, modules_->Find(request.name()));
  RETURN_IF_ERROR(SpecModulesOnly(*module, "a training step"));
  ASSIGN_OR_RETURN(RunInput input, InputFromProto(request.input()));
  ASSIGN_OR_RETURN(const RunOutputs outputs, OutputsFromProto(request.outputs()));
  StepOptions step;
  if (request.loss() == "sum") {
    step.loss_sum = true;
  } else if (request.loss().empty() && request.has_grad_output()) {
    step.loss_sum = false;
    absl::StatusOr<HostTensor> grad = FromProto(request.grad_output());
    if (!grad.ok()) return WithContext("grad_output", grad.status());
    step.grad_output = *std::move(grad);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss '", request.loss(), "' is not one; give \"sum\", or no loss and grad_output"));
  }
  if (request.has_sgd()) {
    RETURN_IF_ERROR(CheckSgd(request.sgd()));
    step.sgd = request.sgd();
  }
  ASSIGN_OR_RETURN(const RunResult result, runs_.Step(*module, std::move(input), std::move(step),
                                                      outputs, TransferDeadline(context)));
  ResultToProto(result, reply.mutable_forward());
  v1::ModuleInfo info = ModuleTable::Describe(*module);
  for (v1::ModuleParameter& p : *info.mutable_parameters()) *reply.add_gradients() = std::move(p);
  return absl::OkStatus();
}

absl::Status ModuleService::Save(const grpc::ServerContext& context, ModuleEntry& module,
                                 bool gradients, IdleStreams::Watch& watch,
                                 grpc::ServerWriter<v1::SaveModuleChunk>* writer) {
  absl::ReaderMutexLock lock(&module.mu);
  if (module.removed) {
    return absl::NotFoundError(absl::StrCat("module '", module.name, "' was removed"));
  }
  if (gradients && module.gradients.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("module '", module.name, "' has no gradients yet; run a step first"));
  }
  RETURN_IF_ERROR(programs_.MeshReady(*module.mesh));
  const absl::Time deadline = TransferDeadline(context);
  std::vector<std::pair<std::string, std::shared_ptr<DTensorEntry>>> tensors;
  for (size_t i = 0; i < module.parameters.size(); ++i) {
    tensors.emplace_back(module.program.parameters[i].fqn, module.parameters[i]);
  }
  if (gradients) {
    for (size_t i = 0; i < module.gradients.size(); ++i) {
      tensors.emplace_back(absl::StrCat(module.program.parameters[i].fqn, ".grad"),
                           module.gradients[i]);
    }
  }
  for (const auto& [name, tensor] : tensors) {
    v1::SaveModuleChunk chunk;
    chunk.set_name(name);
    chunk.mutable_data()->set_dtype(ToProto(tensor->spec.dtype));
    *chunk.mutable_data()->mutable_shape() = ToProto(tensor->spec.shape);
    RETURN_IF_ERROR(streams_.ReadFull(*tensor, deadline, [&](std::string window) {
      chunk.mutable_data()->set_data(std::move(window));
      const bool sent = watch.Write(*writer, chunk);
      chunk.Clear();
      return sent;
    }));
  }
  return absl::OkStatus();
}

grpc::Status ModuleService::SaveModule(grpc::ServerContext* context,
                                       const v1::SaveModuleRequest* request,
                                       grpc::ServerWriter<v1::SaveModuleChunk>* writer) {
  return ToGrpcStatus(SaveModuleImpl(*context, *request, writer));
}

absl::Status ModuleService::SaveModuleImpl(const grpc::ServerContext& context,
                                           const v1::SaveModuleRequest& request,
                                           grpc::ServerWriter<v1::SaveModuleChunk>* writer) {
  ASSIGN_OR_RETURN(const StreamLimits::Ticket admitted,
                   AdmitStream(limits_, context, "SaveModule"));
  ASSIGN_OR_RETURN(const std::shared_ptr<ModuleEntry> module, modules_->Find(request.name()));
  const std::unique_ptr<IdleStreams::Watch> watch = idle_.Start(context, "SaveModule");
  absl::Status saved = Save(context, *module, request.gradients(), *watch, writer);
  return watch->expired() ? watch->ExpiredError() : saved;
}

grpc::Status ModuleService::SaveModuleCheckpoint(grpc::ServerContext* context,
                                                 const v1::SaveModuleCheckpointRequest* request,
                                                 v1::SaveTensorReply* reply) {
  return ToGrpcStatus(SaveModuleCheckpointImpl(*context, *request, *reply));
}

absl::Status ModuleService::SaveModuleCheckpointImpl(const grpc::ServerContext& context,
                                                     const v1::SaveModuleCheckpointRequest& request,
                                                     v1::SaveTensorReply& reply) {
  ASSIGN_OR_RETURN(const std::shared_ptr<ModuleEntry> found, modules_->Find(request.name()));
  ModuleEntry& module = *found;
  absl::ReaderMutexLock lock(&module.mu);
  if (module.removed) {
    return absl::NotFoundError(absl::StrCat("module '", module.name, "' was removed"));
  }
  if (request.gradients() && module.gradients.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("module '", module.name, "' has no gradients yet; run a step first"));
  }
  std::vector<Checkpoints::Saved> tensors;
  for (size_t i = 0; i < module.parameters.size(); ++i) {
    tensors.push_back({module.program.parameters[i].fqn, module.parameters[i]});
  }
  if (request.gradients()) {
    for (size_t i = 0; i < module.gradients.size(); ++i) {
      tensors.push_back(
          {absl::StrCat(module.program.parameters[i].fqn, ".grad"), module.gradients[i]});
    }
  }
  return checkpoints_.SaveAll(
      request.path(), tensors, TransferDeadline(context), &reply,
      absl::StrCat("module '", module.name, "': ", tensors.size(), " tensors"));
}

grpc::Status ModuleService::PublishModule(grpc::ServerContext*,
                                          const v1::PublishModuleRequest* request,
                                          v1::PublishModuleReply* reply) {
  return ToGrpcStatus(PublishModuleImpl(*request, *reply));
}

absl::Status ModuleService::PublishModuleImpl(const v1::PublishModuleRequest& request,
                                              v1::PublishModuleReply& reply) {
  if (served_ == nullptr) return absl::UnimplementedError("this coordinator serves no models");
  ASSIGN_OR_RETURN(const std::shared_ptr<ModuleEntry> found, modules_->Find(request.name()));
  ModuleEntry& module = *found;
  if (module.graph != nullptr && request.max_batch_size() > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("module '", module.name,
                     "' is a program exported with static shapes: dynamic batching "
                     "(max_batch_size ",
                     request.max_batch_size(), ") would change them; publish it with 0"));
  }
  v1::PublishedVersion published;
  published.set_model(request.model().empty() ? request.name() : request.model());
  published.set_version(request.version().empty() ? "1" : request.version());
  published.set_max_batch_size(request.max_batch_size());
  published.set_max_queue_delay_us(request.max_queue_delay_us() > 0 ? request.max_queue_delay_us()
                                                                    : 500);
  RETURN_IF_ERROR(CheckVersion(published.version()));
  // Bounded: a batch of at most 65536 rows, a delay of at most a minute (a request waits for its
  // batch at most that long, holding its thread).
  if (request.max_batch_size() < 0 || request.max_batch_size() > kMaxBatchSize ||
      request.max_queue_delay_us() < 0 || request.max_queue_delay_us() > kMaxQueueDelayUs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch_size ", request.max_batch_size(), " must be in 0..", kMaxBatchSize,
        " and max_queue_delay_us ", request.max_queue_delay_us(), " in 0..", kMaxQueueDelayUs));
  }
  absl::MutexLock lock(&module.mu);
  if (module.removed) {
    return absl::NotFoundError(absl::StrCat("module '", module.name, "' was removed"));
  }
  RETURN_IF_ERROR(served_->Publish(Served(found, published)));
  module.published.push_back(published);
  if (absl::Status s = modules_->Persist(module); !s.ok()) {
    module.published.pop_back();
    served_->Unpublish(published.model(), published.version()).IgnoreError();
    return s;
  }
  *reply.mutable_published() = std::move(published);
  return absl::OkStatus();
}

ServedModel ModuleService::Served(std::shared_ptr<ModuleEntry> module,
                                  const v1::PublishedVersion& published) {
  const Program& program = module->program;
  ServedModel model;
  model.name = published.model();
  model.version = published.version();
  if (module->graph != nullptr) {
    // An imported program: its user inputs and outputs by name, with their static shapes.
    const ModuleGraph& g = *module->graph;
    for (int i : g.user_inputs) {
      model.inputs.push_back({g.program.inputs[i].name, g.program.value_metas[i].dtype,
                              g.program.value_metas[i].shape});
    }
    for (size_t o = 0; o < g.program.outputs.size(); ++o) {
      const ops::TensorMeta& meta = g.program.value_metas[g.program.outputs[o]];
      model.outputs.push_back({g.program.output_names[o], meta.dtype, meta.shape});
    }
  } else {
    model.inputs = {{"input", program.input.dtype, program.input.shape}};
    model.outputs = {
        {"output", program.output_dtype, OutputShapeFor(program, program.input.shape)}};
  }
  model.batching.max_batch_size = published.max_batch_size();
  model.batching.max_queue_delay = absl::Microseconds(published.max_queue_delay_us());
  model.runner = runs_.RunnerFor(std::move(module));
  return model;
}

void ModuleService::ForgetPublished(const std::string& model, const std::string& version) {
  for (const auto& module : modules_->List()) {
    absl::MutexLock lock(&module->mu);
    const size_t erased = std::erase_if(module->published, [&](const v1::PublishedVersion& p) {
      return p.model() == model && (version.empty() || p.version() == version);
    });
    if (erased == 0 || module->removed) continue;
    if (absl::Status s = modules_->Persist(*module); !s.ok()) {
      spdlog::error("module '{}' was unpublished but its record still publishes it: {}",
                    module->name, s.ToString());
    }
  }
}

grpc::Status ModuleService::UnpublishModule(grpc::ServerContext*,
                                            const v1::UnpublishModuleRequest* request,
                                            v1::UnpublishModuleReply*) {
  return ToGrpcStatus(UnpublishModuleImpl(*request));
}

absl::Status ModuleService::UnpublishModuleImpl(const v1::UnpublishModuleRequest& request) {
  if (served_ == nullptr) return absl::UnimplementedError("this coordinator serves no models");
  RETURN_IF_ERROR(served_->Unpublish(request.model(), request.version()));
  ForgetPublished(request.model(), request.version());
  return absl::OkStatus();
}

}  // namespace tessera
