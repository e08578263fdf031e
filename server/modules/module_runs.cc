#include "server/modules/module_runs.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/modules/program_edges.h"
#include "core/sharding/simulated_mesh.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "proto/convert.h"

namespace tessera {
namespace {

// A published module's forward, for the inference endpoint.
class PublishedModule : public ModelRunner {
 public:
  PublishedModule(ModuleRuns* runs, std::shared_ptr<ModuleEntry> module)
      : runs_(runs), module_(std::move(module)) {}

  absl::StatusOr<HostTensor> Run(const HostTensor& input, absl::Time deadline) override {
    RunInput in;
    in.full = input.Clone();
    absl::StatusOr<RunResult> result =
        runs_->Forward(*module_, std::move(in), RunOutputs{},
                       std::min(deadline, absl::Now() + ModuleRuns::kServedTimeout));
    if (!result.ok()) return result.status();
    if (!result->full.has_value()) return absl::InternalError("the forward gave no output");
    return std::move(*result->full);
  }

 private:
  ModuleRuns* runs_;
  std::shared_ptr<ModuleEntry> module_;
};

// A published imported program's forward: its named inputs to its outputs.
class PublishedProgram : public ModelRunner {
 public:
  PublishedProgram(ModuleRuns* runs, std::shared_ptr<ModuleEntry> module)
      : runs_(runs), module_(std::move(module)) {}

  absl::StatusOr<HostTensor> Run(const HostTensor& input, absl::Time deadline) override {
    std::vector<HostTensor> inputs;
    inputs.push_back(input.Clone());
    ASSIGN_OR_RETURN(std::vector<HostTensor> outputs, RunAll(std::move(inputs), deadline));
    return std::move(outputs[0]);
  }

  absl::StatusOr<std::vector<HostTensor>> RunAll(std::vector<HostTensor> inputs,
                                                 absl::Time deadline) override {
    return runs_->ForwardGraph(*module_, std::move(inputs),
                               std::min(deadline, absl::Now() + ModuleRuns::kServedTimeout));
  }

 private:
  ModuleRuns* runs_;
  std::shared_ptr<ModuleEntry> module_;
};

// The outcome of a run, shared with the callback that completes it.
struct RunState {
  absl::Notification done;
  absl::Status status;
  std::vector<v1::CommandReply> replies;
};

// `placement` as an output gradient is laid out: a Partial output's every part has the whole
// output's gradient.
Placement GradientPlacement(const Placement& placement) {
  return placement.is_partial() ? Placement::Replicate() : placement;
}

// t *= factor, for the floating dtypes module outputs have.
absl::Status Scale(HostTensor& t, double factor) {
  switch (t.dtype()) {
    case DType::kFloat32:
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        t.data_as<float>()[i] *= static_cast<float>(factor);
      }
      return absl::OkStatus();
    case DType::kFloat64:
      for (int64_t i = 0; i < t.num_elements(); ++i) t.data_as<double>()[i] *= factor;
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat("an output gradient of ", DTypeName(t.dtype()),
                                                     " cannot be scaled; float32 or float64"));
  }
}

// A tensor of `shape` whose every element is `value` (floating dtypes).
absl::StatusOr<HostTensor> Filled(DType dtype, const Shape& shape, double value) {
  ASSIGN_OR_RETURN(HostTensor t, HostTensor::Zeros(dtype, shape));
  if (dtype == DType::kFloat32) {
    std::fill_n(t.data_as<float>(), t.num_elements(), static_cast<float>(value));
    return t;
  }
  if (dtype == DType::kFloat64) {
    std::fill_n(t.data_as<double>(), t.num_elements(), value);
    return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("an output gradient of ", DTypeName(dtype), "; float32 or float64"));
}

// True iff the rank at `coordinate` is at 0 on every mesh dim `placements` replicate: one of the
// ranks whose outputs make the full output.
bool HoldsAReplica(const std::vector<int64_t>& coordinate,
                   const std::vector<Placement>& placements) {
  for (size_t m = 0; m < placements.size(); ++m) {
    if (placements[m].is_replicate() && coordinate[m] != 0) return false;
  }
  return true;
}

// The full output from the outputs of the ranks that HoldsAReplica (in row-major order), laid out
// on `mesh` as `placements`: the one rank's when every mesh dim replicates it; else those put
// together on the mesh of the other dims.
absl::StatusOr<HostTensor> AssembleReplicas(std::vector<HostTensor> locals, const DeviceMesh& mesh,
                                            const std::vector<Placement>& placements) {
  Shape dims;
  std::vector<Placement> kept;
  for (int m = 0; m < mesh.ndim(); ++m) {
    if (placements[m].is_replicate()) continue;
    dims.push_back(mesh.size(m));
    kept.push_back(placements[m]);
  }
  if (dims.empty()) {
    if (locals.size() == 1) return std::move(locals[0]);
    return absl::InternalError(absl::StrCat(locals.size(), " outputs of a replicated output"));
  }
  ASSIGN_OR_RETURN(const DeviceMesh holders, DeviceMesh::Create(mesh.device_type(), dims));
  return AssembleEdge(std::move(locals), holders, kept);
}

// True iff every mesh dim of `spec` replicates it: every rank holds it whole.
bool AllReplicate(const DTensorSpec& spec) {
  return std::all_of(spec.placements.begin(), spec.placements.end(),
                     [](const Placement& p) { return p.is_replicate(); });
}

// Marks the write of each of `tensors` done with `status`.
void CompleteWrites(const std::vector<std::shared_ptr<DTensorEntry>>& tensors,
                    const absl::Status& status) {
  for (const auto& t : tensors) {
    if (t->write->done.HasBeenNotified()) continue;
    t->write->status = status;
    t->write->done.Notify();
  }
}

}  // namespace

absl::StatusOr<std::vector<HostTensor>> ModuleRuns::LocalInputs(const ModuleEntry& module,
                                                                RunInput input) {
  const Program& program = module.program;
  const DeviceMesh& mesh = module.mesh->mesh;
  if (input.full.has_value()) {
    RETURN_IF_ERROR(CheckModelInput(program.input, input.full->dtype(), input.full->shape()));
    const std::vector<Placement> placements =
        EdgePlacements(mesh, program, program.input_layout.placement);
    if (std::all_of(placements.begin(), placements.end(),
                    [](const Placement& p) { return p.is_replicate(); })) {
      std::vector<HostTensor> whole;
      whole.push_back(*std::move(input.full));
      return whole;
    }
    return SplitEdge(*input.full, mesh, placements);
  }
  if (static_cast<int64_t>(input.locals.size()) != mesh.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(input.locals.size(), " local inputs for module '", module.name, "' on mesh '",
                     module.mesh->name, "' of ", mesh.size(), " ranks; give one per rank"));
  }
  for (size_t r = 0; r < input.locals.size(); ++r) {
    const HostTensor& t = input.locals[r];
    if (t.dtype() != program.input.dtype || t.shape().size() != program.input.shape.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", r, "'s local input ", DTypeName(t.dtype()), ShapeToString(t.shape()),
          " does not fit the model, which takes ", DTypeName(program.input.dtype),
          ShapeToString(program.input.shape), " (-1: any size)"));
    }
  }
  return std::move(input.locals);
}

absl::StatusOr<std::vector<HostTensor>> ModuleRuns::LocalGradients(const ModuleEntry& module,
                                                                   const Shape& input_shape,
                                                                   const StepOptions& step) {
  const Program& program = module.program;
  const DeviceMesh& mesh = module.mesh->mesh;
  const int64_t groups = DataParallelSize(mesh, program);
  if (step.loss_sum && groups == 1) return std::vector<HostTensor>();
  const Shape output_shape = OutputShapeFor(program, input_shape);
  HostTensor grad;
  if (step.loss_sum) {
    ASSIGN_OR_RETURN(grad, Filled(program.output_dtype, output_shape, 1));
  } else {
    const HostTensor& given = *step.grad_output;
    if (given.dtype() != program.output_dtype || given.shape() != output_shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("grad_output ", DTypeName(given.dtype()), ShapeToString(given.shape()),
                       " is not laid out as the output, ", DTypeName(program.output_dtype),
                       ShapeToString(output_shape)));
    }
    grad = given.Clone();
  }
  // The program averages gradients over the data-parallel groups; scaled by their number, the
  // average is the gradient of the whole batch's loss, as one process computes it.
  if (groups > 1) RETURN_IF_ERROR(Scale(grad, static_cast<double>(groups)));
  return SplitEdge(
      grad, mesh,
      EdgePlacements(mesh, program, GradientPlacement(program.output_layout.placement)));
}

std::vector<v1::Command> ModuleRuns::Commands(const ModuleEntry& module,
                                              const std::vector<HostTensor>& inputs,
                                              const std::vector<HostTensor>& grads,
                                              const StepOptions* step,
                                              const std::vector<bool>& returned) {
  std::vector<v1::Command> commands(static_cast<size_t>(module.mesh->mesh.size()));
  for (size_t r = 0; r < commands.size(); ++r) {
    v1::RunProgram* run = commands[r].mutable_run_program();
    run->set_mesh_id(module.mesh->id);
    run->set_program_id(module.program_id);
    *run->mutable_input() = ToProto(inputs[inputs.size() == 1 ? 0 : r]);
    run->set_return_output(returned[r]);
    if (step == nullptr) continue;
    run->set_train(true);
    run->set_loss_sum(grads.empty());
    if (r < grads.size()) *run->mutable_grad_output() = ToProto(grads[r]);
    if (step->sgd.has_value()) *run->mutable_sgd() = *step->sgd;
  }
  return commands;
}

absl::StatusOr<std::vector<v1::CommandReply>> ModuleRuns::Dispatch(
    const ModuleEntry& module, std::vector<v1::Command> commands, absl::Time deadline,
    std::function<void(const absl::Status&)> done) {
  absl::StatusOr<std::vector<WorkerHandle>> workers = tensors_->meshes().ReadyWorkers(*module.mesh);
  if (!workers.ok()) {
    absl::Status ready = programs_->MeshReady(*module.mesh);
    if (done) done(ready);
    return ready;
  }
  auto state = std::make_shared<RunState>();
  tensors_->dispatcher().PostEach(
      *workers, std::move(commands), module.mesh->command_timeout(),
      [state, done = std::move(done)](absl::Status status, std::vector<v1::CommandReply> replies) {
        if (done) done(status);
        state->status = std::move(status);
        state->replies = std::move(replies);
        state->done.Notify();
      });
  if (!state->done.WaitForNotificationWithDeadline(deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat("module '", module.name, "' did not finish on mesh '", module.mesh->name,
                     "' within the call's deadline (the workers go on with it)"));
  }
  if (!state->status.ok()) {
    return WithContext(absl::StrCat("module '", module.name, "'"), state->status);
  }
  return std::move(state->replies);
}

absl::StatusOr<std::vector<HostTensor>> ModuleRuns::Run(
    const ModuleEntry& module, std::vector<v1::Command> commands, const std::vector<bool>& returned,
    absl::Time deadline, std::function<void(const absl::Status&)> done) {
  ASSIGN_OR_RETURN(const std::vector<v1::CommandReply> replies,
                   Dispatch(module, std::move(commands), deadline, std::move(done)));
  std::vector<HostTensor> outputs;
  for (size_t r = 0; r < replies.size(); ++r) {
    if (!returned[r]) continue;
    absl::StatusOr<HostTensor> out = FromProto(replies[r].output());
    if (!out.ok()) {
      return absl::DataLossError(absl::StrCat("rank ", r, "'s output: ", out.status().message()));
    }
    outputs.push_back(*std::move(out));
  }
  return outputs;
}

std::vector<bool> ModuleRuns::ReturnedOutputs(const ModuleEntry& module, RunOutputs outputs) {
  const DeviceMesh& mesh = module.mesh->mesh;
  std::vector<bool> returned(static_cast<size_t>(mesh.size()), outputs.full || outputs.locals);
  if (outputs.locals || !outputs.full) return returned;
  const std::vector<Placement> placements =
      EdgePlacements(mesh, module.program, module.program.output_layout.placement);
  for (int64_t r = 0; r < mesh.size(); ++r) {
    returned[r] = HoldsAReplica(mesh.CoordinateOfIndex(r), placements);
  }
  return returned;
}

absl::StatusOr<RunResult> ModuleRuns::Result(const ModuleEntry& module,
                                             std::vector<HostTensor> locals, RunOutputs outputs) {
  const Program& program = module.program;
  RunResult result;
  result.output_layout = program.output_layout;
  result.tp_mesh_dim = program.tp_mesh_dim;
  if (outputs.locals) {
    for (const HostTensor& t : locals) result.locals.push_back(t.Clone());
  }
  if (outputs.full) {
    const DeviceMesh& mesh = module.mesh->mesh;
    const std::vector<Placement> placements =
        EdgePlacements(mesh, program, program.output_layout.placement);
    absl::StatusOr<HostTensor> full = static_cast<int64_t>(locals.size()) == mesh.size()
                                          ? AssembleEdge(std::move(locals), mesh, placements)
                                          : AssembleReplicas(std::move(locals), mesh, placements);
    if (!full.ok()) {
      return absl::DataLossError(
          absl::StrCat("the ranks' outputs of module '", module.name,
                       "' do not make one tensor: ", full.status().message()));
    }
    result.full = *std::move(full);
  }
  return result;
}

absl::StatusOr<RunResult> ModuleRuns::Forward(ModuleEntry& module, RunInput input,
                                              RunOutputs outputs, absl::Time deadline) {
  absl::ReaderMutexLock lock(&module.mu);
  if (module.removed) {
    return absl::NotFoundError(absl::StrCat("module '", module.name, "' was removed"));
  }
  RETURN_IF_ERROR(programs_->MeshReady(*module.mesh));
  ASSIGN_OR_RETURN(std::vector<HostTensor> locals, LocalInputs(module, std::move(input)));
  const std::vector<bool> returned = ReturnedOutputs(module, outputs);
  ASSIGN_OR_RETURN(
      std::vector<HostTensor> out,
      Run(module, Commands(module, locals, {}, nullptr, returned), returned, deadline, nullptr));
  return Result(module, std::move(out), outputs);
}

absl::StatusOr<RunResult> ModuleRuns::Step(ModuleEntry& module, RunInput input, StepOptions step,
                                           RunOutputs outputs, absl::Time deadline) {
  absl::MutexLock lock(&module.mu);
  if (module.removed) {
    return absl::NotFoundError(absl::StrCat("module '", module.name, "' was removed"));
  }
  RETURN_IF_ERROR(programs_->MeshReady(*module.mesh));
  if (!step.loss_sum && !step.grad_output.has_value()) {
    return absl::InvalidArgumentError(
        "a step needs the loss \"sum\" or the output's gradient (grad_output)");
  }
  const bool full = input.full.has_value();
  Shape input_shape = full ? input.full->shape() : Shape();
  ASSIGN_OR_RETURN(std::vector<HostTensor> locals, LocalInputs(module, std::move(input)));
  if (!full) {
    std::vector<Shape> shapes;
    for (const HostTensor& t : locals) shapes.push_back(t.shape());
    const Program& program = module.program;
    ASSIGN_OR_RETURN(input_shape, AssembledShape(shapes, module.mesh->mesh,
                                                 EdgePlacements(module.mesh->mesh, program,
                                                                program.input_layout.placement)));
  }
  ASSIGN_OR_RETURN(std::vector<HostTensor> grads, LocalGradients(module, input_shape, step));
  // The gradients' DTensors: made by the first step, written again by each one after.
  const bool fresh = module.gradients.empty();
  std::vector<std::shared_ptr<DTensorEntry>> gradients = module.gradients;
  if (fresh) {
    for (size_t i = 0; i < module.parameters.size(); ++i) {
      const DTensorEntry& p = *module.parameters[i];
      absl::StatusOr<std::shared_ptr<DTensorEntry>> g =
          tensors_->Add(GradientTensorName(module.name, module.program.parameters[i].fqn),
                        module.mesh, p.spec, ModuleOwner(module.name));
      if (!g.ok()) {
        for (const auto& made : gradients) tensors_->Release(*made);
        return g.status();
      }
      gradients.push_back(*std::move(g));
    }
  }
  const std::vector<bool> returned = ReturnedOutputs(module, outputs);
  absl::StatusOr<std::vector<HostTensor>> out =
      Run(module, Commands(module, locals, grads, &step, returned), returned, deadline,
          [fresh, gradients](const absl::Status& status) {
            if (fresh) CompleteWrites(gradients, status);
          });
  if (!out.ok() && !absl::IsDeadlineExceeded(out.status())) {
    // The gradients hold nothing usable now.
    for (const auto& g : gradients) tensors_->Release(*g);
    module.gradients.clear();
    return out.status();
  }
  module.gradients = std::move(gradients);
  if (step.sgd.has_value() && step.sgd->momentum() != 0) module.momentum = true;
  if (!out.ok()) return out.status();
  return Result(module, *std::move(out), outputs);
}

absl::StatusOr<std::vector<HostTensor>> ModuleRuns::ForwardGraph(ModuleEntry& module,
                                                                 std::vector<HostTensor> inputs,
                                                                 absl::Time deadline) {
  absl::ReaderMutexLock lock(&module.mu);
  if (module.removed) {
    return absl::NotFoundError(absl::StrCat("module '", module.name, "' was removed"));
  }
  if (module.graph == nullptr) {
    return absl::InternalError(absl::StrCat("module '", module.name, "' is not a program"));
  }
  const ModuleGraph& graph = *module.graph;
  RETURN_IF_ERROR(programs_->MeshReady(*module.mesh));
  if (inputs.size() != graph.user_inputs.size()) {
    std::string names;
    for (int i : graph.user_inputs) {
      absl::StrAppend(&names, names.empty() ? "" : ", ", graph.program.inputs[i].name);
    }
    return absl::InvalidArgumentError(absl::StrCat("module '", module.name, "' takes ",
                                                   graph.user_inputs.size(), " input(s) (", names,
                                                   "); the forward gives ", inputs.size()));
  }
  const DeviceMesh& mesh = module.mesh->mesh;
  SimulatedMesh layout(mesh);  // splits inputs and joins outputs; moves no data between ranks
  std::vector<std::vector<HostTensor>> locals;  // per input: one for all ranks, or one per rank
  for (size_t k = 0; k < inputs.size(); ++k) {
    const int i = graph.user_inputs[k];
    const ops::TensorMeta& meta = graph.program.value_metas[i];
    if (inputs[k].dtype() != meta.dtype || inputs[k].shape() != meta.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", graph.program.inputs[i].name, "' of module '", module.name,
                       "' is ", DTypeName(inputs[k].dtype()), ShapeToString(inputs[k].shape()),
                       "; the program was exported for ", DTypeName(meta.dtype),
                       ShapeToString(meta.shape), " (its shapes are static)"));
    }
    const DTensorSpec& spec = graph.planned.values[i];
    std::vector<HostTensor> parts;
    if (AllReplicate(spec)) {
      parts.push_back(std::move(inputs[k]));
    } else {
      ASSIGN_OR_RETURN(parts, layout.Distribute(inputs[k], spec));
    }
    locals.push_back(std::move(parts));
  }
  // The outputs come back from rank 0 alone when every one is replicated, else from every rank.
  bool replicated = true;
  for (int v : graph.program.outputs) replicated &= AllReplicate(graph.planned.values[v]);
  std::vector<v1::Command> commands(static_cast<size_t>(mesh.size()));
  for (size_t r = 0; r < commands.size(); ++r) {
    v1::RunGraph* run = commands[r].mutable_run_graph();
    run->set_mesh_id(module.mesh->id);
    run->set_program_id(module.program_id);
    for (const std::vector<HostTensor>& parts : locals) {
      *run->add_inputs() = ToProto(parts[parts.size() == 1 ? 0 : r]);
    }
    run->set_return_outputs(!replicated || r == 0);
  }
  ASSIGN_OR_RETURN(const std::vector<v1::CommandReply> replies,
                   Dispatch(module, std::move(commands), deadline, nullptr));
  std::vector<HostTensor> outputs;
  for (size_t o = 0; o < graph.program.outputs.size(); ++o) {
    const DTensorSpec& spec = graph.planned.values[graph.program.outputs[o]];
    std::vector<HostTensor> shards;
    for (size_t r = 0; r < replies.size() && (!replicated || r == 0); ++r) {
      if (replies[r].outputs_size() != static_cast<int>(graph.program.outputs.size())) {
        return absl::DataLossError(absl::StrCat("rank ", r, " sent ", replies[r].outputs_size(),
                                                " outputs of module '", module.name, "'; it has ",
                                                graph.program.outputs.size()));
      }
      absl::StatusOr<HostTensor> t = FromProto(replies[r].outputs(static_cast<int>(o)));
      if (!t.ok()) {
        return absl::DataLossError(
            absl::StrCat("rank ", r, "'s output ", o, ": ", t.status().message()));
      }
      shards.push_back(*std::move(t));
    }
    if (replicated) {
      outputs.push_back(std::move(shards[0]));
      continue;
    }
    absl::StatusOr<HostTensor> full = layout.FullTensor(spec, std::move(shards));
    if (!full.ok()) {
      return absl::DataLossError(
          absl::StrCat("the ranks' output '", graph.program.output_names[o], "' of module '",
                       module.name, "' does not make one tensor: ", full.status().message()));
    }
    outputs.push_back(*std::move(full));
  }
  return outputs;
}

std::shared_ptr<ModelRunner> ModuleRuns::RunnerFor(std::shared_ptr<ModuleEntry> module) {
  if (module->graph != nullptr) {
    return std::make_shared<PublishedProgram>(this, std::move(module));
  }
  return std::make_shared<PublishedModule>(this, std::move(module));
}

}  // namespace tessera
