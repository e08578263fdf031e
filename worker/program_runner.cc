#include "worker/program_runner.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/modules/program_check.h"
#include "core/sharding/chunk.h"
#include "core/sharding/dtensor_spec.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "worker/program_steps.h"

namespace tessera {
namespace {

// A last use that never comes: the buffer is neither taken nor freed by a step.
constexpr int kNever = std::numeric_limits<int>::max();

bool IsCollective(ProgramOpKind kind) {
  switch (kind) {
    case ProgramOpKind::kAllReduce:
    case ProgramOpKind::kAllGather:
    case ProgramOpKind::kReduceScatter:
    case ProgramOpKind::kChunk:
    case ProgramOpKind::kAllToAll:
    case ProgramOpKind::kGradAllReduce:
      return true;
    default:
      return false;
  }
}

// Mesh dims 0 .. n-1.
std::vector<int> EveryDim(int n) {
  std::vector<int> dims(n);
  for (int m = 0; m < n; ++m) dims[m] = m;
  return dims;
}

std::string ParameterLabel(const ProgramParameter& p, int index) {
  return absl::StrCat("parameter ", index, " (\"", p.fqn, "\")");
}

template <typename Tensor>
std::string Describe(const Tensor& t) {
  return absl::StrCat(DTypeName(t.dtype()), ShapeToString(t.shape()));
}

}  // namespace

// The state of one run: its buffers, the parameters it reads and (in backward) the gradients it
// accumulates into.
struct ProgramRunner::RunState {
  kernels::KernelBackend& kernels;
  ShardStore& store;
  std::span<comm::Communicator* const> dim_groups;
  bool training = false;
  std::vector<std::optional<kernels::DeviceTensor>> buffers;
  std::vector<std::shared_ptr<const kernels::DeviceTensor>> parameters;
  std::vector<kernels::DeviceTensor>* grads = nullptr;
  std::vector<std::shared_ptr<const kernels::PreparedWeight>> prepared;  // kept for the run
  // This rank's first failure; from then on it computes nothing and only agrees with its peers.
  absl::Status failure = {};
  // 1 + the mesh position of a failed rank this one learned of at an agreement; 0: none.
  int64_t stopped_by = 0;
  // Where this rank learned of it ("forward step 3 (all_reduce, ...)").
  std::string stopped_at = {};
  std::optional<kernels::DeviceTensor> flag = {};  // the agreements' one int64, in its memory

  bool stopped() const { return !failure.ok() || stopped_by != 0; }
};

ProgramRunner::ProgramRunner(WorkerProgram program, DeviceMesh mesh,
                             std::vector<int64_t> coordinate)
    : program_(std::move(program)), mesh_(std::move(mesh)), coordinate_(std::move(coordinate)) {}

absl::StatusOr<std::unique_ptr<ProgramRunner>> ProgramRunner::Create(
    WorkerProgram program, DeviceMesh mesh, std::vector<int64_t> coordinate,
    const ShardStore& store) {
  RETURN_IF_ERROR(CheckProgram(program.program));
  const Program& p = program.program;
  if (static_cast<int>(coordinate.size()) != mesh.ndim()) {
    return absl::InternalError(absl::StrCat("coordinate of ", coordinate.size(),
                                            " dims on a mesh of ", mesh.ndim(), " dims"));
  }
  if (p.tp_mesh_dim >= mesh.ndim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp_mesh_dim is ", p.tp_mesh_dim, " on a mesh of ", mesh.ndim(), " dims"));
  }
  for (int d : p.data_parallel_dims) {
    if (d >= mesh.ndim()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data-parallel dim ", d, " on a mesh of ", mesh.ndim(), " dims"));
    }
  }
  for (auto [list, steps] :
       {std::pair<absl::string_view, const std::vector<ProgramStep>*>{"forward", &p.forward},
        {"backward", &p.backward}}) {
    for (int i = 0; i < static_cast<int>(steps->size()); ++i) {
      const ProgramStep& step = (*steps)[i];
      if (IsCollective(step.kind) && step.mesh_dim >= mesh.ndim()) {
        return absl::InvalidArgumentError(absl::StrCat(ProgramStepLabel(list, i, step),
                                                       ": mesh_dim is ", step.mesh_dim,
                                                       " on a mesh of ", mesh.ndim(), " dims"));
      }
    }
  }
  if (const Placement& in = p.input_layout.placement; in.is_shard()) {
    const int rank = static_cast<int>(p.input.shape.size());
    if (in.dim >= rank || in.dim < -rank) {
      return absl::InvalidArgumentError(absl::StrCat("input_layout ", PlacementToString(in),
                                                     " shards a dim the input ",
                                                     ShapeToString(p.input.shape), " lacks"));
    }
  }
  std::vector<Shape> local_shapes;
  std::vector<std::vector<int64_t>> offsets;
  for (int i = 0; i < static_cast<int>(p.parameters.size()); ++i) {
    const ProgramParameter& param = p.parameters[i];
    absl::StatusOr<DTensorSpec> spec =
        MakeDTensorSpec(mesh, param.placements, param.shape, DType::kFloat32);
    if (!spec.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(ParameterLabel(param, i), ": ", spec.status().message()));
    }
    const LocalShard shard = LocalShapeAndOffsetAt(*spec, coordinate);
    local_shapes.push_back(shard.shape);
    offsets.push_back(shard.offset);
  }
  std::unique_ptr<ProgramRunner> runner(
      new ProgramRunner(std::move(program), std::move(mesh), std::move(coordinate)));
  runner->local_shapes_ = std::move(local_shapes);
  runner->offsets_ = std::move(offsets);
  RETURN_IF_ERROR(runner->FetchParameters(store).status());
  runner->PlanBufferUses();
  return runner;
}

void ProgramRunner::PlanBufferUses() {
  const Program& p = program_.program;
  const int forward = static_cast<int>(p.forward.size());
  const auto last_uses = [&](bool training) {
    std::vector<int> last(p.num_buffers, -1);
    const auto visit = [&](const ProgramStep& step, int position) {
      for (int b : StepReads(step)) last[b] = position;
      for (int b : StepWrites(step)) last[b] = std::max(last[b], position);
    };
    for (int i = 0; i < forward; ++i) visit(p.forward[i], i);
    bool backward_reads_output = false;
    if (training) {
      for (int j = 0; j < static_cast<int>(p.backward.size()); ++j) {
        visit(p.backward[j], forward + j);
        for (int b : StepReads(p.backward[j])) backward_reads_output |= b == p.output;
      }
    }
    // The output outlives the forward: it is moved out then, or copied out when backward reads
    // it (and freed after that read).
    if (!backward_reads_output) last[p.output] = kNever;
    return last;
  };
  const auto free_lists = [&](const std::vector<int>& last, int positions) {
    std::vector<std::vector<int>> free_after(positions);
    for (int b = 0; b < p.num_buffers; ++b) {
      if (last[b] >= 0 && last[b] < positions) free_after[last[b]].push_back(b);
    }
    return free_after;
  };
  uses_.last_forward_use = last_uses(false);
  uses_.last_training_use = last_uses(true);
  uses_.free_after_forward = free_lists(uses_.last_forward_use, forward);
  uses_.free_after_training =
      free_lists(uses_.last_training_use, forward + static_cast<int>(p.backward.size()));
}

absl::StatusOr<std::vector<std::shared_ptr<const kernels::DeviceTensor>>>
ProgramRunner::FetchParameters(const ShardStore& store) const {
  std::vector<std::shared_ptr<const kernels::DeviceTensor>> values;
  for (int i = 0; i < static_cast<int>(program_.program.parameters.size()); ++i) {
    const ProgramParameter& param = program_.program.parameters[i];
    const std::string& name = program_.tensors[i].tensor;
    absl::StatusOr<std::shared_ptr<const kernels::DeviceTensor>> value = store.Get(name);
    if (!value.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(ParameterLabel(param, i), ": no local tensor '", name, "' on this worker"));
    }
    if ((*value)->shape() != LocalShape(i)) {
      return absl::FailedPreconditionError(absl::StrCat(
          ParameterLabel(param, i), ": local tensor '", name, "' is ", Describe(**value),
          ", but this rank's shard of ", ShapeToString(param.shape), " ",
          PlacementsToString(param.placements), " is ", ShapeToString(LocalShape(i))));
    }
    values.push_back(*std::move(value));
  }
  return values;
}

absl::Status ProgramRunner::CheckInput(const HostTensor& input) const {
  const Program& p = program_.program;
  const Shape& full = p.input.shape;
  const std::string want = absl::StrCat(DTypeName(p.input.dtype), ShapeToString(full));
  if (input.dtype() != p.input.dtype || input.rank() != static_cast<int>(full.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input ", Describe(input), " does not fit the program's input ", want, " (-1: any size)"));
  }
  Shape piece = full;
  if (const Placement& in = p.input_layout.placement; in.is_shard()) {
    const int d = in.dim < 0 ? in.dim + input.rank() : in.dim;
    if (piece[d] >= 0) {
      piece[d] = ChunkOf(piece[d], mesh_.size(p.tp_mesh_dim), coordinate_[p.tp_mesh_dim]).size;
    }
  }
  if (!piece.empty() && !p.data_parallel_dims.empty()) piece[0] = -1;
  for (int d = 0; d < input.rank(); ++d) {
    if (piece[d] >= 0 && input.shape()[d] != piece[d]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input ", Describe(input), " is not this rank's piece ", ShapeToString(piece),
          " of the program's input ", want, ": dim ", d, " must be ", piece[d]));
    }
  }
  return absl::OkStatus();
}

absl::Status ProgramRunner::RunStep(RunState& state, absl::string_view list, int index,
                                    int position) const {
  const Program& p = program_.program;
  const ProgramStep& step = list == "forward" ? p.forward[index] : p.backward[index];
  // Before a step that communicates, the ranks taking part agree whether one of them failed:
  // then none of them enters it, and each goes on agreeing at the steps after, so that every
  // group sees the same agreements and no rank waits in a collective its peer never joins.
  if (IsCollective(step.kind) || step.kind == ProgramOpKind::kGatherParameter) {
    const std::vector<int> dims = step.kind == ProgramOpKind::kGatherParameter
                                      ? EveryDim(mesh_.ndim())
                                      : std::vector<int>{step.mesh_dim};
    RETURN_IF_ERROR(Agree(state, dims, [&] { return ProgramStepLabel(list, index, step); }));
  }
  if (state.stopped()) return absl::OkStatus();
  absl::Status status = ExecuteStep(state, step, position);
  if (!status.ok()) {
    state.failure = WithContext(ProgramStepLabel(list, index, step), status);
    // A failed collective may have left its peers mid-way: the communicator is not to be trusted
    // with agreements after it (the command executor reports it broken where it is).
    if (IsCollective(step.kind) || step.kind == ProgramOpKind::kGatherParameter) {
      return state.failure;
    }
    state.buffers.clear();
    return absl::OkStatus();
  }
  const auto& free_after = state.training ? uses_.free_after_training : uses_.free_after_forward;
  for (int b : free_after[position]) state.buffers[b].reset();
  return absl::OkStatus();
}

absl::Status ProgramRunner::Agree(RunState& state, std::span<const int> mesh_dims,
                                  absl::FunctionRef<std::string()> where) const {
  for (int m : mesh_dims) {
    comm::Communicator* group = state.dim_groups[m];
    if (group == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("no communicator for mesh dim ", m));
    }
    if (group->size() == 1) continue;
    if (!state.flag.has_value()) {
      ASSIGN_OR_RETURN(state.flag.emplace(), state.kernels.Allocate(DType::kInt64, {1}));
    }
    const int64_t mine =
        !state.failure.ok() ? mesh_.IndexOfCoordinate(coordinate_) + 1 : state.stopped_by;
    RETURN_IF_ERROR(state.kernels.Fill(state.flag->View(), static_cast<double>(mine)));
    absl::Status agreed = group->AllReduce(state.flag->data(), 1, DType::kInt64, ReduceOp::kMax);
    if (!agreed.ok()) {
      return WithContext(
          absl::StrCat(where(), ": agreeing with mesh dim ", m, " whether a rank failed"), agreed);
    }
    ASSIGN_OR_RETURN(const HostTensor got,
                     state.kernels.Download(std::as_const(*state.flag).View()));
    const int64_t failed = got.data_as<int64_t>()[0];
    if (failed != 0 && !state.stopped()) {
      state.stopped_by = failed;
      state.stopped_at = where();
      state.buffers.clear();
    }
  }
  return absl::OkStatus();
}

absl::Status ProgramRunner::Outcome(const RunState& state) const {
  if (!state.failure.ok()) return state.failure;
  if (state.stopped_by == 0) return absl::OkStatus();
  const std::vector<int64_t> at = mesh_.CoordinateOfIndex(state.stopped_by - 1);
  return absl::AbortedError(absl::StrCat("stopped before ", state.stopped_at,
                                         ": the rank at mesh coordinate [", absl::StrJoin(at, ", "),
                                         "] failed this run; nothing was updated"));
}

absl::Status ProgramRunner::ExecuteStep(RunState& state, const ProgramStep& step,
                                        int position) const {
  const Program& p = program_.program;
  const std::vector<int>& last = state.training ? uses_.last_training_use : uses_.last_forward_use;
  comm::Communicator* group = IsCollective(step.kind) ? state.dim_groups[step.mesh_dim] : nullptr;
  if (IsCollective(step.kind) && group == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("no communicator for mesh dim ", step.mesh_dim));
  }
  if (step.kind == ProgramOpKind::kGradAllReduce) {
    kernels::DeviceTensor& grad = (*state.grads)[step.weight];
    return group->AllReduce(grad.data(), grad.num_elements(), grad.dtype(), step.reduce_op);
  }
  const std::vector<int> reads = StepReads(step);
  for (int b : reads) {
    if (!state.buffers[b].has_value()) {
      return absl::InternalError(absl::StrCat("buffer ", b, " is not held"));
    }
  }
  std::vector<StepInput> inputs;
  for (int b : step.inputs) {
    const bool once = std::count(reads.begin(), reads.end(), b) == 1;
    inputs.push_back({&*state.buffers[b], once && last[b] == position});
  }
  std::vector<kernels::DeviceTensor> outputs;
  if (step.kind == ProgramOpKind::kGatherParameter) {
    ASSIGN_OR_RETURN(
        outputs.emplace_back(),
        GatherParameter(state.kernels, p.parameters[step.weight], *state.parameters[step.weight],
                        mesh_, coordinate_, state.dim_groups));
  } else if (IsCollective(step.kind)) {
    ASSIGN_OR_RETURN(outputs.emplace_back(),
                     RunCollectiveStep(state.kernels, step, *group, inputs[0]));
  } else {
    ASSIGN_OR_RETURN(outputs, RunCompute(state, step, inputs));
  }
  if (outputs.size() != step.outputs.size()) {
    return absl::InternalError(absl::StrCat("the step made ", outputs.size(), " outputs"));
  }
  for (size_t j = 0; j < step.outputs.size(); ++j) {
    state.buffers[step.outputs[j]] = std::move(outputs[j]);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<kernels::DeviceTensor>> ProgramRunner::RunCompute(
    RunState& state, const ProgramStep& step, std::span<const StepInput> inputs) const {
  // A weight or bias from a buffer has its whole gradient, zeroed, in a buffer of its own.
  std::optional<kernels::DeviceTensor> weight_grad, bias_grad;
  const auto operand =
      [&](int i, int buffer, int grad_buffer,
          std::optional<kernels::DeviceTensor>& grad) -> absl::StatusOr<StepParameter> {
    if (buffer >= 0) {
      const kernels::DeviceTensor& value = *state.buffers[buffer];
      if (grad_buffer < 0) return StepParameter{&value, nullptr, {}};
      ASSIGN_OR_RETURN(grad.emplace(), state.kernels.Zeros(value.dtype(), value.shape()));
      return StepParameter{&value, &*grad, {}};
    }
    if (i < 0) return StepParameter{};
    return StepParameter{state.parameters[i].get(),
                         state.grads == nullptr ? nullptr : &(*state.grads)[i], offsets_[i]};
  };
  ASSIGN_OR_RETURN(StepParameter weight,
                   operand(step.weight, step.weight_buffer, step.weight_grad_buffer, weight_grad));
  ASSIGN_OR_RETURN(const StepParameter bias,
                   operand(step.bias, step.bias_buffer, step.bias_grad_buffer, bias_grad));
  RETURN_IF_ERROR(PrepareLinearWeight(state, step, inputs, weight));
  ASSIGN_OR_RETURN(std::vector<kernels::DeviceTensor> outputs,
                   RunComputeStep(state.kernels, step, inputs, weight, bias));
  if (weight_grad.has_value()) state.buffers[step.weight_grad_buffer] = *std::move(weight_grad);
  if (bias_grad.has_value()) state.buffers[step.bias_grad_buffer] = *std::move(bias_grad);
  return outputs;
}

absl::Status ProgramRunner::PrepareLinearWeight(RunState& state, const ProgramStep& step,
                                                std::span<const StepInput> inputs,
                                                StepParameter& weight) const {
  // A forward-only Linear on a parameter whose shapes fit reads the prepared weight.
  if (step.kind != ProgramOpKind::kLinear || state.training || step.weight_buffer >= 0 ||
      step.weight < 0) {
    return absl::OkStatus();
  }
  const kernels::DeviceTensor& x = *inputs[0].tensor;
  const kernels::DeviceTensor& w = *weight.value;
  const int64_t features = x.rank() == 0 ? 0 : x.shape().back();
  const int64_t rows = features == 0 ? 0 : x.num_elements() / features;
  if (w.rank() == 2 && w.shape()[1] == features && rows >= 1 && w.dtype() == x.dtype() &&
      IsFloatingPoint(w.dtype())) {
    ASSIGN_OR_RETURN(state.prepared.emplace_back(),
                     PreparedParameter(state.kernels, state.store, step.weight,
                                       state.parameters[step.weight], rows));
    weight.prepared = state.prepared.back().get();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const kernels::PreparedWeight>> ProgramRunner::PreparedParameter(
    kernels::KernelBackend& kernels, ShardStore& store, int i,
    const std::shared_ptr<const kernels::DeviceTensor>& value, int64_t rows) const {
  {
    absl::MutexLock lock(&prepared_mu_);
    if (prepared_.empty()) prepared_.resize(program_.program.parameters.size());
    const Prepared& kept = prepared_[i];
    // The same owner: the very entry the store held (a weak_ptr keeps the owner from reuse).
    const bool same_value = !kept.value.owner_before(value) && !value.owner_before(kept.value);
    if (same_value) return kept.weight;
    // The copy of an older value is dropped now, before its successor is charged.
    prepared_[i] = Prepared{};
  }
  // The copy counts against the store's budget for as long as it lives: the weight's own size
  // while it is made (the packed layout is about that size), then what it really holds. Where the
  // budget has no room, the run reads the weight as it is.
  const std::string what = absl::StrCat("a prepared copy of parameter ", i, " (\"",
                                        program_.program.parameters[i].fqn, "\")");
  struct Held {
    std::shared_ptr<const kernels::PreparedWeight> weight;
    std::unique_ptr<ShardStore::Charge> charge, extra;
  };
  auto held = std::make_shared<Held>();
  absl::StatusOr<std::unique_ptr<ShardStore::Charge>> charge =
      store.ChargeOutside(static_cast<int64_t>(value->nbytes()), what);
  if (absl::IsResourceExhausted(charge.status())) return nullptr;
  RETURN_IF_ERROR(charge.status());
  held->charge = *std::move(charge);
  ASSIGN_OR_RETURN(held->weight, kernels.PrepareLinearWeight(value->View(), rows));
  if (held->weight == nullptr) return nullptr;
  if (const int64_t more = held->weight->nbytes() - held->charge->bytes(); more > 0) {
    absl::StatusOr<std::unique_ptr<ShardStore::Charge>> extra = store.ChargeOutside(more, what);
    if (absl::IsResourceExhausted(extra.status())) return nullptr;
    RETURN_IF_ERROR(extra.status());
    held->extra = *std::move(extra);
  }
  // The copy, keeping its charges alive with it.
  std::shared_ptr<const kernels::PreparedWeight> weight(held, held->weight.get());
  absl::MutexLock lock(&prepared_mu_);
  prepared_[i] = Prepared{value, weight};
  return weight;
}

absl::StatusOr<std::vector<kernels::DeviceTensor>> ProgramRunner::ZeroGradients(
    kernels::KernelBackend& kernels, ShardStore& store) const {
  std::vector<kernels::DeviceTensor> grads;
  for (int i = 0; i < static_cast<int>(program_.program.parameters.size()); ++i) {
    ASSIGN_OR_RETURN(std::shared_ptr<const kernels::DeviceTensor> value,
                     store.Get(program_.tensors[i].tensor));
    const DType dtype = value->dtype();
    const size_t bytes = value->nbytes();
    std::optional<kernels::DeviceTensor> reused =
        store.TakeForReuse(program_.tensors[i].grad, dtype, bytes);
    if (reused.has_value()) {
      RETURN_IF_ERROR(reused->Reshape(LocalShape(i)));
      RETURN_IF_ERROR(kernels.SetZero(reused->View()));
      grads.push_back(*std::move(reused));
    } else {
      ASSIGN_OR_RETURN(grads.emplace_back(), kernels.Zeros(dtype, LocalShape(i)));
    }
  }
  return grads;
}

absl::Status ProgramRunner::ApplySgd(const SgdOptions& sgd, kernels::KernelBackend& kernels,
                                     ShardStore& store, std::vector<std::string>& written) const {
  const std::vector<ProgramParameter>& params = program_.program.parameters;
  const bool momentum = sgd.momentum != 0;
  // Every update is checked possible before any is made.
  std::vector<bool> first_step(params.size(), false);
  for (int i = 0; momentum && i < static_cast<int>(params.size()); ++i) {
    const std::string& name = program_.tensors[i].momentum;
    ASSIGN_OR_RETURN(std::shared_ptr<const kernels::DeviceTensor> value,
                     store.Get(program_.tensors[i].tensor));
    absl::StatusOr<std::shared_ptr<const kernels::DeviceTensor>> buffer = store.Get(name);
    if (!buffer.ok()) {
      first_step[i] = true;
      continue;
    }
    if ((*buffer)->dtype() != value->dtype() || (*buffer)->shape() != value->shape()) {
      return absl::FailedPreconditionError(
          absl::StrCat(ParameterLabel(params[i], i), ": momentum buffer '", name, "' is ",
                       Describe(**buffer), " but the parameter is ", Describe(*value)));
    }
  }
  for (int i = 0; i < static_cast<int>(params.size()); ++i) {
    if (!first_step[i]) continue;
    ASSIGN_OR_RETURN(std::shared_ptr<const kernels::DeviceTensor> value,
                     store.Get(program_.tensors[i].tensor));
    ASSIGN_OR_RETURN(kernels::DeviceTensor zeros, kernels.Zeros(value->dtype(), value->shape()));
    RETURN_IF_ERROR(store.Put(program_.tensors[i].momentum, std::move(zeros)));
  }
  for (int i = 0; i < static_cast<int>(params.size()); ++i) {
    const ParameterTensors& names = program_.tensors[i];
    ASSIGN_OR_RETURN(std::shared_ptr<const kernels::DeviceTensor> grad, store.Get(names.grad));
    ASSIGN_OR_RETURN(kernels::DeviceTensor value, store.TakeOrCopy(names.tensor));
    std::optional<kernels::DeviceTensor> buffer;
    if (momentum) {
      absl::StatusOr<kernels::DeviceTensor> taken = store.TakeOrCopy(names.momentum);
      if (!taken.ok()) {
        RETURN_IF_ERROR(store.Put(names.tensor, std::move(value)));
        return taken.status();
      }
      buffer = *std::move(taken);
    }
    kernels::TensorView buffer_view;
    if (buffer.has_value()) buffer_view = buffer->View();
    const absl::Status updated =
        kernels.SgdStep(value.View(), grad->View(), buffer.has_value() ? &buffer_view : nullptr,
                        sgd.lr, sgd.momentum, sgd.weight_decay, first_step[i]);
    // Whatever happened, the tensors go back to the store.
    RETURN_IF_ERROR(store.Put(names.tensor, std::move(value)));
    if (buffer.has_value()) RETURN_IF_ERROR(store.Put(names.momentum, *std::move(buffer)));
    if (!updated.ok()) {
      return WithContext(absl::StrCat("SGD of ", ParameterLabel(params[i], i)), updated);
    }
    written.push_back(names.tensor);
    if (momentum) written.push_back(names.momentum);
  }
  return absl::OkStatus();
}

absl::StatusOr<ProgramRunResult> ProgramRunner::Run(
    HostTensor input, std::optional<TrainingStep> training, kernels::KernelBackend& kernels,
    ShardStore& store, std::span<comm::Communicator* const> dim_groups) const {
  return Run(absl::OkStatus(), std::move(input), std::move(training), kernels, store, dim_groups);
}

absl::Status ProgramRunner::Stand(absl::Status failure, bool training,
                                  kernels::KernelBackend& kernels, ShardStore& store,
                                  std::span<comm::Communicator* const> dim_groups) const {
  std::optional<TrainingStep> step;
  if (training) step.emplace();
  return Run(std::move(failure), HostTensor(), std::move(step), kernels, store, dim_groups)
      .status();
}

absl::StatusOr<ProgramRunResult> ProgramRunner::Run(
    absl::Status failure, HostTensor input, std::optional<TrainingStep> training,
    kernels::KernelBackend& kernels, ShardStore& store,
    std::span<comm::Communicator* const> dim_groups) const {
  const Program& p = program_.program;
  if (static_cast<int>(dim_groups.size()) != mesh_.ndim()) {
    return absl::InternalError(
        absl::StrCat(dim_groups.size(), " communicators for a mesh of ", mesh_.ndim(), " dims"));
  }
  RunState state{kernels, store, dim_groups, training.has_value(), {}, {}, nullptr, {}};
  state.failure = std::move(failure);
  state.buffers.resize(p.num_buffers);
  const auto begin = [&]() -> absl::Status {
    RETURN_IF_ERROR(CheckInput(input));
    ASSIGN_OR_RETURN(state.parameters, FetchParameters(store));
    ASSIGN_OR_RETURN(state.buffers[0], kernels.Upload(input));
    return absl::OkStatus();
  };
  if (state.failure.ok()) state.failure = begin();
  // A failure on this rank stops the steps here and, at the next step that communicates, its
  // peers' (RunStep); every rank still walks every step, so the groups stay in step.
  const int forward = static_cast<int>(p.forward.size());
  for (int i = 0; i < forward; ++i) RETURN_IF_ERROR(RunStep(state, "forward", i, i));
  ProgramRunResult result;
  if (!state.stopped()) {
    absl::StatusOr<HostTensor> out =
        kernels.Download(std::as_const(*state.buffers[p.output]).View());
    if (out.ok()) {
      result.output = *std::move(out);
    } else {
      state.failure = out.status();
    }
  }
  if (!state.training) {
    RETURN_IF_ERROR(Outcome(state));
    return result;
  }
  if (uses_.last_training_use[p.output] == kNever) state.buffers[p.output].reset();

  std::vector<kernels::DeviceTensor> grads;
  const auto begin_backward = [&]() -> absl::Status {
    kernels::DeviceTensor grad_output;
    if (training->grad_output.has_value()) {
      if (training->grad_output->shape() != result.output.shape() ||
          training->grad_output->dtype() != result.output.dtype()) {
        return absl::InvalidArgumentError(
            absl::StrCat("grad_output ", Describe(*training->grad_output),
                         " does not match this rank's output ", Describe(result.output)));
      }
      ASSIGN_OR_RETURN(grad_output, kernels.Upload(*training->grad_output));
    } else {
      ASSIGN_OR_RETURN(grad_output, kernels.Allocate(result.output.dtype(), result.output.shape()));
      RETURN_IF_ERROR(kernels.Fill(grad_output.View(), 1.0));
    }
    state.buffers[p.grad_output] = std::move(grad_output);
    ASSIGN_OR_RETURN(grads, ZeroGradients(kernels, store));
    state.grads = &grads;
    return absl::OkStatus();
  };
  if (!state.stopped()) state.failure = begin_backward();
  for (int j = 0; j < static_cast<int>(p.backward.size()); ++j) {
    RETURN_IF_ERROR(RunStep(state, "backward", j, forward + j));
  }
  state.buffers.clear();
  state.parameters.clear();  // readers of the stored values would make SGD copy them
  // Nothing is stored until every rank of the mesh ran the whole step: one that failed after
  // the last collective must not leave its peers' parameters a step ahead of its own.
  RETURN_IF_ERROR(
      Agree(state, EveryDim(mesh_.ndim()), [] { return std::string("storing the gradients"); }));
  RETURN_IF_ERROR(Outcome(state));
  for (int i = 0; i < static_cast<int>(grads.size()); ++i) {
    RETURN_IF_ERROR(store.Put(program_.tensors[i].grad, std::move(grads[i])));
    result.written.push_back(program_.tensors[i].grad);
  }
  if (training->sgd.has_value()) {
    RETURN_IF_ERROR(ApplySgd(*training->sgd, kernels, store, result.written));
  }
  return result;
}

}  // namespace tessera
