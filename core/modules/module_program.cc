#include "core/modules/module_program.h"

#include <map>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace tessera {

absl::string_view ProgramOpKindName(ProgramOpKind kind) {
  switch (kind) {
    case ProgramOpKind::kLinear:
      return "linear";
    case ProgramOpKind::kEmbedding:
      return "embedding";
    case ProgramOpKind::kLayerNorm:
      return "layer_norm";
    case ProgramOpKind::kRmsNorm:
      return "rms_norm";
    case ProgramOpKind::kActivation:
      return "activation";
    case ProgramOpKind::kAttention:
      return "attention";
    case ProgramOpKind::kAdd:
      return "add";
    case ProgramOpKind::kBiasAdd:
      return "bias_add";
    case ProgramOpKind::kAllReduce:
      return "all_reduce";
    case ProgramOpKind::kAllGather:
      return "all_gather";
    case ProgramOpKind::kReduceScatter:
      return "reduce_scatter";
    case ProgramOpKind::kChunk:
      return "chunk";
    case ProgramOpKind::kAllToAll:
      return "all_to_all";
    case ProgramOpKind::kGatherParameter:
      return "gather_parameter";
    case ProgramOpKind::kLinearBackward:
      return "linear_backward";
    case ProgramOpKind::kEmbeddingBackward:
      return "embedding_backward";
    case ProgramOpKind::kLayerNormBackward:
      return "layer_norm_backward";
    case ProgramOpKind::kRmsNormBackward:
      return "rms_norm_backward";
    case ProgramOpKind::kActivationBackward:
      return "activation_backward";
    case ProgramOpKind::kAttentionBackward:
      return "attention_backward";
    case ProgramOpKind::kAccumulate:
      return "accumulate";
    case ProgramOpKind::kScale:
      return "scale";
    case ProgramOpKind::kBiasAddBackward:
      return "bias_add_backward";
    case ProgramOpKind::kShardGrad:
      return "shard_grad";
    case ProgramOpKind::kGradAllReduce:
      return "grad_all_reduce";
  }
  return "invalid";
}

std::vector<int> StepReads(const ProgramStep& step) {
  std::vector<int> reads = step.inputs;
  if (step.weight_buffer >= 0) reads.push_back(step.weight_buffer);
  if (step.bias_buffer >= 0) reads.push_back(step.bias_buffer);
  return reads;
}

std::vector<int> StepWrites(const ProgramStep& step) {
  std::vector<int> writes = step.outputs;
  if (step.weight_grad_buffer >= 0) writes.push_back(step.weight_grad_buffer);
  if (step.bias_grad_buffer >= 0) writes.push_back(step.bias_grad_buffer);
  return writes;
}

namespace {

// An activation as the compiler tracks it: its buffer and how the ranks' local tensors make the
// full tensor on the tp mesh dim.
struct Act {
  int buffer = 0;
  Placement placement;     // dims normalized to [0, rank)
  bool is_dtensor = true;  // false: a plain local tensor (after use_local_output)
  bool known = true;       // false only for the program input before anything decides its layout
  int rank = 0;
  int64_t features = 0;  // full size of the last dim
  DType dtype = DType::kFloat32;
};

// What backward needs to know of a forward buffer.
struct BufferInfo {
  Placement placement;
  bool requires_grad = false;
};

// A gradient reaching a buffer: the gradient's buffer and its layout.
struct GradPart {
  int buffer;
  Placement placement;
};

// A weight or bias as a step reads it: a parameter, or a buffer holding one gathered whole.
struct Operand {
  int parameter = -1;
  int buffer = -1;
};

// Every parameter's placements under distribute_module, by FQN.
using Partition = std::map<std::string, std::vector<Placement>>;

std::string Where(const std::string& fqn) { return fqn.empty() ? "the root module" : fqn; }

// The placement a buffer's gradient is brought to: the buffer's own, but Replicate for a Partial
// one (as DTensor's backward does).
Placement GradTarget(const Placement& p) { return p.is_partial() ? Placement::Replicate() : p; }

class Compiler {
 public:
  Compiler(const ModelSpec& model, const DeviceMesh& mesh, int tp)
      : model_(model), mesh_(mesh), tp_(tp), tp_size_(mesh.size(tp)) {}

  absl::StatusOr<Program> CompileParallelize(const ParallelizePlan& plan) {
    ASSIGN_OR_RETURN(PlanMatch match, MatchPlan(model_.root, plan));
    for (const auto& [fqn, index] : match.assigned) styles_[fqn] = &plan.styles[index].second;
    program_.unmatched = std::move(match.unmatched);
    return Compile();
  }

  // No styles: every parameter takes its placements from `partition`; no mesh dim is data
  // parallel.
  absl::StatusOr<Program> CompileDistribute(Partition partition) {
    partition_ = std::move(partition);
    distribute_ = true;
    return Compile();
  }

 private:
  absl::StatusOr<Program> Compile() {
    program_.tp_mesh_dim = tp_;
    program_.input = model_.input;
    RETURN_IF_ERROR(AddParameters(model_.root, ""));
    Act in;
    in.buffer = 0;
    in.known = false;
    in.is_dtensor = false;
    in.rank = static_cast<int>(model_.input.shape.size());
    in.dtype = model_.input.dtype;
    in.features = in.rank > 0 ? model_.input.shape.back() : 0;
    if (in.rank == 0) return absl::InvalidArgumentError("the model's input has no dims");
    buffers_.push_back({Placement::Replicate(), false});
    ASSIGN_OR_RETURN(Act out, Forward(model_.root, "", in));
    if (!input_layout_.has_value()) input_layout_ = EdgeLayout{Placement::Replicate(), false};
    program_.input_layout = *input_layout_;
    program_.output = out.buffer;
    program_.output_layout = {out.placement, out.is_dtensor};
    program_.output_rank = out.rank;
    program_.output_dtype = out.dtype;
    program_.output_features = out.features;
    program_.forward = std::move(steps_);
    steps_.clear();
    RETURN_IF_ERROR(Backward(out));
    program_.backward = std::move(steps_);
    program_.num_buffers = static_cast<int>(buffers_.size());
    for (int d = 0; d < mesh_.ndim() && !distribute_; ++d) {
      if (d != tp_) AddDataParallel(program_, d);
    }
    return std::move(program_);
  }

  // --- parameters ---

  // Records every parameter with its placements: a style's on the tp dim, Replicate elsewhere;
  // under distribute_module the partition's.
  absl::Status AddParameters(const ModuleSpec& module, const std::string& fqn) {
    const ParallelStyle* style = StyleOf(fqn);
    for (const ParameterInfo& own : OwnParameters(module)) {
      ProgramParameter p;
      p.fqn = fqn.empty() ? own.fqn : absl::StrCat(fqn, ".", own.fqn);
      p.shape = own.shape;
      p.placements.assign(mesh_.ndim(), Placement::Replicate());
      if (style != nullptr) p.placements[tp_] = StylePlacement(*style, module, own.fqn);
      if (auto it = partition_.find(p.fqn); it != partition_.end()) p.placements = it->second;
      param_index_[p.fqn] = static_cast<int>(program_.parameters.size());
      program_.parameters.push_back(std::move(p));
    }
    for (const ModuleSpec& child : module.children) {
      RETURN_IF_ERROR(AddParameters(child, Join(fqn, child.name)));
    }
    return absl::OkStatus();
  }

  // A parameter's placement on the tp dim under `style` (torch's partition functions).
  static Placement StylePlacement(const ParallelStyle& style, const ModuleSpec& module,
                                  const std::string& name) {
    const bool linear = module.type == ModuleType::kLinear;
    if (style.kind == StyleKind::kColwise) {
      // Linear weight [out, in] and bias [out] on dim 0; Embedding weight [num, dim] on dim 1.
      return Placement::Shard(linear ? 0 : 1);
    }
    if (style.kind == StyleKind::kRowwise) {
      if (!linear) return Placement::Shard(0);
      return name == "weight" ? Placement::Shard(1) : Placement::Replicate();
    }
    return Placement::Replicate();
  }

  int Param(const std::string& fqn, absl::string_view name) {
    auto it = param_index_.find(Join(fqn, std::string(name)));
    return it == param_index_.end() ? -1 : it->second;
  }
  Placement ParamPlacement(int index) const { return program_.parameters[index].placements[tp_]; }

  // True iff some mesh dim shards parameter `index` (only distribute_module shards a parameter of
  // a module without a style).
  bool Sharded(int index) const {
    for (const Placement& p : program_.parameters[index].placements) {
      if (p.is_shard()) return true;
    }
    return false;
  }

  // Parameter `index` (or -1) as a step of a module without a style reads it: the parameter
  // itself when every rank holds it whole, else a buffer it is first gathered into.
  Operand Use(int index, const std::string& fqn) {
    if (index < 0 || !Sharded(index)) return {index, -1};
    const int buffer = NewBuffer(Placement::Replicate(), false);
    Emit(ProgramOpKind::kGatherParameter, {}, {buffer}, fqn).weight = index;
    gathered_[buffer] = index;
    return {-1, buffer};
  }

  static void SetOperands(ProgramStep& step, const Operand& weight, const Operand& bias) {
    step.weight = weight.parameter;
    step.weight_buffer = weight.buffer;
    step.bias = bias.parameter;
    step.bias_buffer = bias.buffer;
  }

  static std::string Join(const std::string& fqn, const std::string& name) {
    return fqn.empty() ? name : absl::StrCat(fqn, ".", name);
  }

  const ParallelStyle* StyleOf(const std::string& fqn) const {
    auto it = styles_.find(fqn);
    return it == styles_.end() ? nullptr : it->second;
  }

  // --- buffers and steps ---

  int NewBuffer(const Placement& placement, bool requires_grad) {
    buffers_.push_back({placement, requires_grad});
    return static_cast<int>(buffers_.size()) - 1;
  }

  ProgramStep& Emit(ProgramOpKind kind, std::vector<int> inputs, std::vector<int> outputs,
                    const std::string& fqn) {
    ProgramStep step;
    step.kind = kind;
    step.inputs = std::move(inputs);
    step.outputs = std::move(outputs);
    step.module = fqn;
    step.mesh_dim = tp_;
    steps_.push_back(std::move(step));
    return steps_.back();
  }

  bool RequiresGrad(int buffer) const { return buffers_[buffer].requires_grad; }

  // A new activation like `from` in a new buffer with `placement`.
  Act Derived(const Act& from, const Placement& placement, bool requires_grad) {
    Act out = from;
    out.placement = placement;
    out.buffer = NewBuffer(placement, requires_grad);
    return out;
  }

  // --- layouts ---

  // A placement of a tensor of `rank` dims with its Shard dim normalized.
  static absl::StatusOr<Placement> Normalized(const Placement& p, int rank,
                                              const std::string& fqn) {
    if (!p.is_shard()) return p;
    if (p.dim < -rank || p.dim >= rank) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: layout %s does not fit its %d-dim activation", Where(fqn),
                          PlacementToString(p), rank));
    }
    return Placement::Shard(p.dim < 0 ? p.dim + rank : p.dim);
  }

  // Decides the program input's layout the first time something needs it.
  void Settle(Act& act, const Placement& placement) {
    if (act.known) return;
    if (input_layout_.has_value()) {
      act.placement = input_layout_->placement;
    } else {
      act.placement = placement;
      input_layout_ = EdgeLayout{placement, false};
      buffers_[0].placement = placement;
    }
    act.known = true;
  }

  // `act` brought to `target` on the tp dim with the collective DTensor would run.
  absl::StatusOr<Act> Redistribute(Act act, const Placement& target, const std::string& fqn) {
    Settle(act, target);
    if (act.placement == target) return act;
    const bool grad = RequiresGrad(act.buffer);
    if (tp_size_ == 1 && !target.is_partial() && !act.placement.is_partial()) {
      act.placement = target;  // one rank: every layout holds the whole tensor
      return act;
    }
    const Placement& from = act.placement;
    if (from.is_shard() && target.is_shard()) {
      Act out = Derived(act, target, grad);
      ProgramStep& s = Emit(ProgramOpKind::kAllToAll, {act.buffer}, {out.buffer}, fqn);
      s.dim = from.dim;
      s.dim2 = target.dim;
      return out;
    }
    if (from.is_shard() && target.is_replicate()) {
      Act out = Derived(act, target, grad);
      Emit(ProgramOpKind::kAllGather, {act.buffer}, {out.buffer}, fqn).dim = from.dim;
      return out;
    }
    if (from.is_partial() && target.is_replicate()) {
      Act out = Derived(act, target, grad);
      Emit(ProgramOpKind::kAllReduce, {act.buffer}, {out.buffer}, fqn).reduce_op = from.op;
      return out;
    }
    if (from.is_partial() && target.is_shard()) {
      Act out = Derived(act, target, grad);
      ProgramStep& s = Emit(ProgramOpKind::kReduceScatter, {act.buffer}, {out.buffer}, fqn);
      s.dim = target.dim;
      s.reduce_op = from.op;
      return out;
    }
    if (from.is_replicate() && target.is_shard()) {
      Act out = Derived(act, target, grad);
      Emit(ProgramOpKind::kChunk, {act.buffer}, {out.buffer}, fqn).dim = target.dim;
      return out;
    }
    if (from.is_replicate() && target.is_partial(ReduceOp::kSum)) {
      Act out = Derived(act, target, grad);
      Emit(ProgramOpKind::kScale, {act.buffer}, {out.buffer}, fqn).scale =
          1.0 / static_cast<double>(tp_size_);
      return out;
    }
    if (from.is_shard() && target.is_partial()) {
      ASSIGN_OR_RETURN(Act full, Redistribute(act, Placement::Replicate(), fqn));
      return Redistribute(full, target, fqn);
    }
    if (from.is_partial() && target.is_partial()) {
      ASSIGN_OR_RETURN(Act full, Redistribute(act, Placement::Replicate(), fqn));
      return Redistribute(full, target, fqn);
    }
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot bring an activation from %s to %s", Where(fqn),
                        PlacementToString(from), PlacementToString(target)));
  }

  // Brings `act` where a module computing on whole rows of its last dim can take it: not
  // Partial, last dim not sharded.
  absl::StatusOr<Act> WholeLastDim(Act act, const std::string& fqn) {
    Settle(act, Placement::Replicate());
    if (act.placement.is_partial() || act.placement.is_shard(act.rank - 1)) {
      return Redistribute(act, Placement::Replicate(), fqn);
    }
    return act;
  }

  // --- forward ---

  absl::StatusOr<Act> Forward(const ModuleSpec& module, const std::string& fqn, Act in) {
    const ParallelStyle* style = StyleOf(fqn);
    if (style != nullptr) {
      ASSIGN_OR_RETURN(in, PrepareInput(*style, module, in, fqn));
    }
    ASSIGN_OR_RETURN(Act out, Body(module, fqn, in, style));
    if (style != nullptr) {
      ASSIGN_OR_RETURN(out, PrepareOutput(*style, out, fqn));
    }
    return out;
  }

  // The layouts a style gives a module's (single) input: torch's input_layouts and
  // desired_input_layouts, with Rowwise on an Embedding wanting Replicate.
  static void InputLayouts(const ParallelStyle& style, const ModuleSpec& module, Layout& given,
                           Layout& desired) {
    given = style.input_layouts.empty() ? std::nullopt : style.input_layouts[0];
    desired = style.desired_input_layouts.empty() ? given : style.desired_input_layouts[0];
    if (style.kind == StyleKind::kRowwise && module.type == ModuleType::kEmbedding) {
      desired = Placement::Replicate();
    }
    if (style.kind == StyleKind::kPrepareModuleOutput) given = desired = std::nullopt;
  }

  absl::StatusOr<Act> PrepareInput(const ParallelStyle& style, const ModuleSpec& module, Act in,
                                   const std::string& fqn) {
    Layout given, desired;
    InputLayouts(style, module, given, desired);
    if (!given.has_value()) return in;  // torch's None: not a tensor to lay out
    if (!in.is_dtensor) {
      ASSIGN_OR_RETURN(Placement annotated, Normalized(*given, in.rank, fqn));
      Settle(in, annotated);
      if (!(in.placement == annotated)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s (%s): its input is a local tensor laid out as %s but %s says input_layouts=%s",
            Where(fqn), ModuleTypeName(module.type), PlacementToString(in.placement),
            StyleKindName(style.kind), PlacementToString(*given)));
      }
      in.is_dtensor = true;
    }
    if (desired.has_value()) {
      ASSIGN_OR_RETURN(Placement target, Normalized(*desired, in.rank, fqn));
      if (!in.is_dtensor) in.is_dtensor = true;
      ASSIGN_OR_RETURN(in, Redistribute(in, target, fqn));
    }
    if (style.kind == StyleKind::kPrepareModuleInput && style.use_local_output) {
      in.is_dtensor = false;
    }
    return in;
  }

  // Colwise's and Rowwise's output layout on an activation of `rank` dims.
  static absl::StatusOr<Placement> OutputLayout(const ParallelStyle& style, int rank,
                                                const std::string& fqn) {
    if (style.output_layouts.empty() || !style.output_layouts[0].has_value()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: %s needs an output layout, not None",
                                                        Where(fqn), StyleKindName(style.kind)));
    }
    return Normalized(*style.output_layouts[0], rank, fqn);
  }

  absl::StatusOr<Act> PrepareOutput(const ParallelStyle& style, Act out, const std::string& fqn) {
    switch (style.kind) {
      case StyleKind::kColwise: {
        ASSIGN_OR_RETURN(Placement target, OutputLayout(style, out.rank, fqn));
        ASSIGN_OR_RETURN(out, Redistribute(out, target, fqn));
        break;
      }
      case StyleKind::kRowwise:  // the output layout was reached in Body (the bias comes after)
      case StyleKind::kSequenceParallel:
      case StyleKind::kPrepareModuleInput:
        break;
      case StyleKind::kPrepareModuleOutput: {
        const Layout given = style.output_layouts.empty() ? std::nullopt : style.output_layouts[0];
        const Layout desired =
            style.desired_output_layouts.empty() ? given : style.desired_output_layouts[0];
        if (given.has_value() && !out.is_dtensor) {
          ASSIGN_OR_RETURN(Placement annotated, Normalized(*given, out.rank, fqn));
          Settle(out, annotated);
          if (!(out.placement == annotated)) {
            return absl::InvalidArgumentError(absl::StrFormat(
                "%s: its output is a local tensor laid out as %s but PrepareModuleOutput says "
                "output_layouts=%s",
                Where(fqn), PlacementToString(out.placement), PlacementToString(*given)));
          }
        }
        if (desired.has_value()) {
          ASSIGN_OR_RETURN(Placement target, Normalized(*desired, out.rank, fqn));
          ASSIGN_OR_RETURN(out, Redistribute(out, target, fqn));
        }
        break;
      }
    }
    if (style.kind == StyleKind::kPrepareModuleInput) return out;
    out.is_dtensor = !style.use_local_output;
    return out;
  }

  absl::Status CheckFeatures(const Act& in, int64_t want, const ModuleSpec& module,
                             const std::string& fqn) {
    if (in.features == want) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrFormat("%s (%s) takes %d features but gets an activation with %d", Where(fqn),
                        ModuleTypeName(module.type), want, in.features));
  }

  absl::StatusOr<Act> Body(const ModuleSpec& module, const std::string& fqn, Act in,
                           const ParallelStyle* style) {
    switch (module.type) {
      case ModuleType::kLinear:
        return LinearBody(module, fqn, in, style);
      case ModuleType::kEmbedding:
        return EmbeddingBody(module, fqn, in, style);
      case ModuleType::kLayerNorm:
      case ModuleType::kRMSNorm: {
        ASSIGN_OR_RETURN(in, WholeLastDim(in, fqn));
        RETURN_IF_ERROR(CheckFeatures(in, module.normalized_shape, module, fqn));
        const bool layer = module.type == ModuleType::kLayerNorm;
        const Operand weight = Use(Param(fqn, "weight"), fqn);
        const Operand bias = Use(Param(fqn, "bias"), fqn);
        const bool grad = RequiresGrad(in.buffer) || weight.parameter >= 0 || weight.buffer >= 0;
        Act out = Derived(in, in.placement, grad);
        std::vector<int> outputs = {out.buffer};
        if (layer) outputs.push_back(NewBuffer(in.placement, false));  // mean
        outputs.push_back(NewBuffer(in.placement, false));             // rstd
        ProgramStep& s = Emit(layer ? ProgramOpKind::kLayerNorm : ProgramOpKind::kRmsNorm,
                              {in.buffer}, std::move(outputs), fqn);
        SetOperands(s, weight, bias);
        s.eps = module.eps;
        return out;
      }
      case ModuleType::kReLU:
      case ModuleType::kGELU:
      case ModuleType::kSiLU: {
        Settle(in, Placement::Replicate());
        if (in.placement.is_partial()) {
          ASSIGN_OR_RETURN(in, Redistribute(in, Placement::Replicate(), fqn));
        }
        ActivationKind f = ActivationKind::kRelu;
        if (module.type == ModuleType::kGELU) {
          f = module.approximate == "tanh" ? ActivationKind::kGeluTanh : ActivationKind::kGelu;
        } else if (module.type == ModuleType::kSiLU) {
          f = ActivationKind::kSilu;
        }
        Act out = Derived(in, in.placement, RequiresGrad(in.buffer));
        Emit(ProgramOpKind::kActivation, {in.buffer}, {out.buffer}, fqn).activation = f;
        return out;
      }
      case ModuleType::kDropout:
        return in;  // the identity in eval mode
      case ModuleType::kAttention:
        return AttentionBody(module, fqn, in);
      case ModuleType::kSequential:
      case ModuleType::kModuleList:
      case ModuleType::kModule: {
        Act out = in;
        for (const ModuleSpec& child : module.children) {
          ASSIGN_OR_RETURN(out, Forward(child, Join(fqn, child.name), out));
        }
        if (!module.residual) return out;
        return Residual(module, fqn, in, out);
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(Where(fqn), ": unknown module type"));
  }

  absl::StatusOr<Act> LinearBody(const ModuleSpec& module, const std::string& fqn, Act in,
                                 const ParallelStyle* style) {
    const int weight = Param(fqn, "weight");
    const int bias = Param(fqn, "bias");
    if (in.dtype == DType::kInt64) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(fqn), " (Linear) gets int64 ids; it needs a floating input"));
    }
    const StyleKind kind = style == nullptr ? StyleKind::kPrepareModuleInput : style->kind;
    if (kind == StyleKind::kColwise) {
      // Input Replicate (the style's desired layout): each rank computes its output features.
      RETURN_IF_ERROR(CheckFeatures(in, module.in_features, module, fqn));
      Act out = Derived(in, Placement::Shard(in.rank - 1), true);
      out.features = module.out_features;
      ProgramStep& s = Emit(ProgramOpKind::kLinear, {in.buffer}, {out.buffer}, fqn);
      s.weight = weight;
      s.bias = bias;
      return out;
    }
    if (kind == StyleKind::kRowwise) {
      // Input Shard(-1): partial products, reduced to the output layout, then the bias.
      if (!in.placement.is_shard(in.rank - 1)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s (Linear, RowwiseParallel) needs its input sharded on the last dim, not %s",
            Where(fqn), PlacementToString(in.placement)));
      }
      RETURN_IF_ERROR(CheckFeatures(in, module.in_features, module, fqn));
      Act partial = Derived(in, Placement::Partial(), true);
      partial.features = module.out_features;
      Emit(ProgramOpKind::kLinear, {in.buffer}, {partial.buffer}, fqn).weight = weight;
      ASSIGN_OR_RETURN(Placement target, OutputLayout(*style, partial.rank, fqn));
      if (bias < 0) return Redistribute(partial, target, fqn);
      // The bias goes on whole rows of a reduced output: through Replicate when the output
      // layout splits features or stays Partial.
      const bool via_replicate = target.is_shard(partial.rank - 1) || target.is_partial();
      ASSIGN_OR_RETURN(Act out,
                       Redistribute(partial, via_replicate ? Placement::Replicate() : target, fqn));
      Act biased = Derived(out, out.placement, true);
      Emit(ProgramOpKind::kBiasAdd, {out.buffer}, {biased.buffer}, fqn).bias = bias;
      return Redistribute(biased, target, fqn);
    }
    // No style: whole parameters (gathered when distributed sharded) on whatever rows this rank
    // holds.
    ASSIGN_OR_RETURN(in, WholeLastDim(in, fqn));
    RETURN_IF_ERROR(CheckFeatures(in, module.in_features, module, fqn));
    const Operand w = Use(weight, fqn);
    const Operand b = Use(bias, fqn);
    Act out = Derived(in, in.placement, true);
    out.features = module.out_features;
    SetOperands(Emit(ProgramOpKind::kLinear, {in.buffer}, {out.buffer}, fqn), w, b);
    return out;
  }

  absl::StatusOr<Act> EmbeddingBody(const ModuleSpec& module, const std::string& fqn, Act in,
                                    const ParallelStyle* style) {
    if (in.dtype != DType::kInt64) {
      return absl::InvalidArgumentError(absl::StrFormat("%s (Embedding) needs int64 ids, not %s",
                                                        Where(fqn), DTypeName(in.dtype)));
    }
    Settle(in, Placement::Replicate());
    if (!in.placement.is_replicate() && !in.placement.is_shard()) {
      ASSIGN_OR_RETURN(in, Redistribute(in, Placement::Replicate(), fqn));
    }
    const int weight = Param(fqn, "weight");
    const StyleKind kind = style == nullptr ? StyleKind::kPrepareModuleInput : style->kind;
    Act out = in;
    out.rank = in.rank + 1;
    out.dtype = DType::kFloat32;
    out.features = module.embedding_dim;
    Placement placement = in.placement;  // ids sharded on a dim shard the output on it
    if (kind == StyleKind::kColwise) placement = Placement::Shard(out.rank - 1);
    if (kind == StyleKind::kRowwise) placement = Placement::Partial();
    out.placement = placement;
    const bool styled = kind == StyleKind::kColwise || kind == StyleKind::kRowwise;
    const Operand w = styled ? Operand{weight, -1} : Use(weight, fqn);
    out.buffer = NewBuffer(placement, true);
    ProgramStep& s = Emit(ProgramOpKind::kEmbedding, {in.buffer}, {out.buffer}, fqn);
    SetOperands(s, w, Operand{});
    s.size = module.num_embeddings;
    if (kind == StyleKind::kRowwise) {
      ASSIGN_OR_RETURN(Placement target, OutputLayout(*style, out.rank, fqn));
      return Redistribute(out, target, fqn);
    }
    return out;
  }

  absl::StatusOr<Act> AttentionBody(const ModuleSpec& module, const std::string& fqn, Act in) {
    ASSIGN_OR_RETURN(in, WholeLastDim(in, fqn));
    if (in.rank != 3) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s (Attention) needs a [batch, sequence, dim] input, not %d dims", Where(fqn), in.rank));
    }
    RETURN_IF_ERROR(CheckFeatures(in, module.dim, module, fqn));
    std::vector<Act> qkv;
    for (const ModuleSpec& child : module.children) {
      if (child.name == "o") continue;
      ASSIGN_OR_RETURN(Act a, Forward(child, Join(fqn, child.name), in));
      qkv.push_back(a);
    }
    if (qkv.size() != 3) return absl::InvalidArgumentError(Where(fqn) + " lacks q, k or v");
    // The core mixes the sequence: each of q, k, v must hold whole sequences, and all three the
    // same heads or the same batch rows.
    Placement common = qkv[0].placement;
    for (const Act& a : qkv) {
      if (!(a.placement == common)) common = Placement::Replicate();
    }
    if (common.is_partial() || common.is_shard(1)) common = Placement::Replicate();
    int64_t heads = module.n_heads;
    if (common.is_shard(2)) {
      if (module.n_heads % tp_size_ != 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s (Attention): %d heads do not split evenly over the %d ranks of the tp mesh dim",
            Where(fqn), module.n_heads, tp_size_));
      }
      heads = module.n_heads / tp_size_;
    }
    std::vector<int> inputs;
    for (Act& a : qkv) {
      ASSIGN_OR_RETURN(a, Redistribute(a, common, fqn));
      inputs.push_back(a.buffer);
    }
    Act out = Derived(qkv[0], common, true);
    out.features = module.dim;
    const int probs = NewBuffer(common, false);
    ProgramStep& s = Emit(ProgramOpKind::kAttention, inputs, {out.buffer, probs}, fqn);
    s.heads = heads;
    s.causal = module.causal;
    for (const ModuleSpec& child : module.children) {
      if (child.name == "o") return Forward(child, Join(fqn, "o"), out);
    }
    return absl::InvalidArgumentError(Where(fqn) + " lacks o");
  }

  absl::StatusOr<Act> Residual(const ModuleSpec& module, const std::string& fqn, Act in, Act out) {
    Settle(in, Placement::Replicate());
    if (in.rank != out.rank || in.features != out.features || in.dtype != out.dtype) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s (%s, residual): its children give %d features where the input has %d",
                          Where(fqn), ModuleTypeName(module.type), out.features, in.features));
    }
    if (in.placement.is_partial()) {
      ASSIGN_OR_RETURN(in, Redistribute(in, Placement::Replicate(), fqn));
    }
    ASSIGN_OR_RETURN(out, Redistribute(out, in.placement, fqn));
    Act sum = Derived(in, in.placement, true);
    sum.is_dtensor = in.is_dtensor || out.is_dtensor;
    Emit(ProgramOpKind::kAdd, {in.buffer, out.buffer}, {sum.buffer}, fqn);
    return sum;
  }

  // --- backward ---

  // Adds a gradient for `buffer`, unless the buffer needs none.
  void Contribute(int buffer, int grad, const Placement& placement) {
    if (!RequiresGrad(buffer)) return;
    parts_[buffer].push_back({grad, placement});
  }

  int NewGrad(const Placement& placement) { return NewBuffer(placement, false); }

  // Emits a collective moving gradient `g` from `from` to `to` on the tp dim; returns the new
  // buffer.
  // Copies a forward step's weight and bias onto its backward step `s`, with a buffer for the
  // whole gradient of each one read from a buffer.
  void TakeOperands(const ProgramStep& forward, ProgramStep& s) {
    s.weight = forward.weight;
    s.bias = forward.bias;
    s.weight_buffer = forward.weight_buffer;
    s.bias_buffer = forward.bias_buffer;
    if (s.weight_buffer >= 0) s.weight_grad_buffer = NewGrad(Placement::Replicate());
    if (s.bias_buffer >= 0) s.bias_grad_buffer = NewGrad(Placement::Replicate());
  }

  // Cuts the whole gradients backward step `s` wrote for gathered parameters to this rank's
  // shards of their gradients.
  void ShardGrads(const ProgramStep s) {
    for (auto [grad, buffer] : {std::pair{s.weight_grad_buffer, s.weight_buffer},
                                std::pair{s.bias_grad_buffer, s.bias_buffer}}) {
      if (grad < 0) continue;
      Emit(ProgramOpKind::kShardGrad, {grad}, {}, s.module).weight = gathered_.at(buffer);
    }
  }

  absl::StatusOr<int> MoveGrad(int g, const Placement& from, const Placement& to,
                               const std::string& fqn) {
    Act a;
    a.buffer = g;
    a.placement = from;
    a.rank = 0;
    ASSIGN_OR_RETURN(Act moved, Redistribute(a, to, fqn));
    return moved.buffer;
  }

  // The gradient of `buffer`, every part reduced into one laid out as GradTarget of the buffer's
  // placement; -1 if nothing reached it. Partial parts are summed locally first, so one
  // reduction serves them all (Megatron's single all-reduce for q, k and v).
  absl::StatusOr<int> Gradient(int buffer, const std::string& fqn) {
    auto it = parts_.find(buffer);
    if (it == parts_.end() || it->second.empty()) return -1;
    const Placement target = GradTarget(buffers_[buffer].placement);
    std::vector<GradPart> parts = std::move(it->second);
    parts_.erase(it);
    int partial = -1;
    Placement partial_placement;
    std::vector<int> ready;
    for (const GradPart& p : parts) {
      if (p.placement.is_partial()) {
        partial = partial < 0 ? p.buffer : Accumulate(partial, p.buffer, fqn);
        partial_placement = p.placement;
      } else if (p.placement == target) {
        ready.push_back(p.buffer);
      } else {
        ASSIGN_OR_RETURN(int moved, MoveGrad(p.buffer, p.placement, target, fqn));
        ready.push_back(moved);
      }
    }
    if (partial >= 0) {
      ASSIGN_OR_RETURN(int moved, MoveGrad(partial, partial_placement, target, fqn));
      ready.push_back(moved);
    }
    int total = ready[0];
    for (size_t i = 1; i < ready.size(); ++i) total = Accumulate(total, ready[i], fqn);
    return total;
  }

  int Accumulate(int a, int b, const std::string& fqn) {
    const int out = NewGrad(buffers_[a].placement);
    Emit(ProgramOpKind::kAccumulate, {a, b}, {out}, fqn);
    return out;
  }

  // Marks a replicated parameter whose gradient came from a sharded activation: its parts must
  // be summed over the tp group.
  void NoteParamGrad(int param, const Placement& activation) {
    if (param < 0) return;
    if (ParamPlacement(param).is_replicate() && !activation.is_replicate()) {
      partial_params_[param] = true;
    }
  }

  absl::Status Backward(const Act& out) {
    const Placement target = GradTarget(out.placement);
    program_.grad_output = NewGrad(target);
    if (RequiresGrad(out.buffer)) parts_[out.buffer].push_back({program_.grad_output, target});
    std::vector<ProgramStep> forward = program_.forward;
    for (auto step = forward.rbegin(); step != forward.rend(); ++step) {
      RETURN_IF_ERROR(StepBackward(*step));
    }
    for (const auto& [param, partial] : partial_params_) {
      if (!partial) continue;
      ProgramStep& s = Emit(ProgramOpKind::kGradAllReduce, {}, {}, program_.parameters[param].fqn);
      s.weight = param;
      s.reduce_op = ReduceOp::kSum;
    }
    return absl::OkStatus();
  }

  // A new gradient for `input` laid out as `placement`, contributed to it; -1 if it needs none.
  int InputGrad(int input, const Placement& placement) {
    if (!RequiresGrad(input)) return -1;
    const int g = NewGrad(placement);
    Contribute(input, g, placement);
    return g;
  }

  absl::Status StepBackward(const ProgramStep& step) {
    const std::string& fqn = step.module;
    const int y = step.outputs[0];
    ASSIGN_OR_RETURN(int gy, Gradient(y, fqn));
    if (gy < 0) return absl::OkStatus();
    const Placement gp = GradTarget(buffers_[y].placement);
    switch (step.kind) {
      case ProgramOpKind::kLinear:
        LinearBackward(step, gy, gp);
        return absl::OkStatus();
      case ProgramOpKind::kBiasAdd: {
        ProgramStep& s = Emit(ProgramOpKind::kBiasAddBackward, {gy}, {}, fqn);
        TakeOperands(step, s);
        ShardGrads(s);
        NoteParamGrad(step.bias, gp);
        Contribute(step.inputs[0], gy, gp);
        return absl::OkStatus();
      }
      case ProgramOpKind::kEmbedding: {
        ProgramStep& s = Emit(ProgramOpKind::kEmbeddingBackward, {step.inputs[0], gy}, {}, fqn);
        TakeOperands(step, s);
        ShardGrads(s);
        NoteParamGrad(step.weight, gp);
        return absl::OkStatus();
      }
      case ProgramOpKind::kLayerNorm:
      case ProgramOpKind::kRmsNorm:
        NormBackward(step, gy, gp);
        return absl::OkStatus();
      case ProgramOpKind::kActivation:
        ActivationBackward(step, gy, gp);
        return absl::OkStatus();
      case ProgramOpKind::kAttention:
        AttentionBackward(step, gy, gp);
        return absl::OkStatus();
      case ProgramOpKind::kAdd:
        Contribute(step.inputs[0], gy, gp);
        Contribute(step.inputs[1], gy, gp);
        return absl::OkStatus();
      case ProgramOpKind::kAllReduce:
      case ProgramOpKind::kAllGather:
      case ProgramOpKind::kReduceScatter:
      case ProgramOpKind::kChunk:
      case ProgramOpKind::kAllToAll:
      case ProgramOpKind::kScale:
        // A layout change: the gradient is the same tensor, brought back to the input's layout
        // when the input's gradient is gathered (Gradient()).
        Contribute(step.inputs[0], gy, gp);
        return absl::OkStatus();
      default:
        return absl::InternalError(
            absl::StrCat("no backward for forward step ", ProgramOpKindName(step.kind)));
    }
  }

  // The backward of linear `step`, its output's gradient `gy` laid out as `gp`.
  void LinearBackward(const ProgramStep& step, int gy, const Placement& gp) {
    const int x = step.inputs[0];
    // Output features sharded (colwise): each rank's dx is a partial sum.
    const bool colwise = step.weight >= 0 && ParamPlacement(step.weight).is_shard(0);
    const int gx = InputGrad(x, colwise ? Placement::Partial() : GradTarget(buffers_[x].placement));
    ProgramStep& s = Emit(ProgramOpKind::kLinearBackward, {x, gy},
                          gx < 0 ? std::vector<int>{} : std::vector<int>{gx}, step.module);
    TakeOperands(step, s);
    ShardGrads(s);
    NoteParamGrad(step.weight, gp);
    NoteParamGrad(step.bias, gp);
  }

  // The backward of layer_norm or rms_norm `step`.
  void NormBackward(const ProgramStep& step, int gy, const Placement& gp) {
    const bool layer = step.kind == ProgramOpKind::kLayerNorm;
    const int x = step.inputs[0];
    const int gx = InputGrad(x, gp);
    std::vector<int> inputs = {x, step.outputs[1]};
    if (layer) inputs.push_back(step.outputs[2]);
    inputs.push_back(gy);
    ProgramStep& s =
        Emit(layer ? ProgramOpKind::kLayerNormBackward : ProgramOpKind::kRmsNormBackward,
             std::move(inputs), gx < 0 ? std::vector<int>{} : std::vector<int>{gx}, step.module);
    TakeOperands(step, s);
    s.eps = step.eps;
    ShardGrads(s);
    NoteParamGrad(step.weight, gp);
    NoteParamGrad(step.bias, gp);
  }

  // The backward of activation `step`; an identity passes `gy` on as it is.
  void ActivationBackward(const ProgramStep& step, int gy, const Placement& gp) {
    const int x = step.inputs[0];
    if (!RequiresGrad(x)) return;
    if (step.activation == ActivationKind::kIdentity) {
      Contribute(x, gy, gp);
      return;
    }
    const int gx = InputGrad(x, gp);
    Emit(ProgramOpKind::kActivationBackward, {x, gy}, {gx}, step.module).activation =
        step.activation;
  }

  // The backward of attention `step`: a gradient for every input.
  void AttentionBackward(const ProgramStep& step, int gy, const Placement& gp) {
    std::vector<int> grads;
    for (int input : step.inputs) {
      const int g = NewGrad(gp);
      Contribute(input, g, gp);
      grads.push_back(g);
    }
    std::vector<int> inputs = step.inputs;
    inputs.push_back(step.outputs[1]);
    inputs.push_back(gy);
    ProgramStep& s =
        Emit(ProgramOpKind::kAttentionBackward, std::move(inputs), std::move(grads), step.module);
    s.heads = step.heads;
    s.causal = step.causal;
  }

  const ModelSpec& model_;
  const DeviceMesh& mesh_;
  const int tp_;
  const int64_t tp_size_;
  Program program_;
  std::map<std::string, const ParallelStyle*> styles_;
  std::map<std::string, int> param_index_;
  std::vector<BufferInfo> buffers_;
  std::vector<ProgramStep> steps_;
  std::optional<EdgeLayout> input_layout_;
  std::map<int, std::vector<GradPart>> parts_;
  std::map<int, bool> partial_params_;
  Partition partition_;          // distribute_module's placements
  bool distribute_ = false;      // compiling under distribute_module
  std::map<int, int> gathered_;  // a gathered parameter's buffer -> the parameter
};

absl::StatusOr<int> TpDim(const ParallelizePlan& plan, const DeviceMesh& mesh) {
  if (!plan.mesh_dim_name.empty()) {
    // A dim the mesh lacks is a bad plan, as a bad index is (and as a request's is).
    absl::StatusOr<int> dim = mesh.DimIndex(plan.mesh_dim_name);
    if (!dim.ok()) return absl::InvalidArgumentError(dim.status().message());
    return dim;
  }
  if (plan.mesh_dim_index < 0 || plan.mesh_dim_index >= mesh.ndim()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("plan mesh_dim %d is not a dim of the %d-dim mesh %s", plan.mesh_dim_index,
                        mesh.ndim(), mesh.ToString()));
  }
  return plan.mesh_dim_index;
}

}  // namespace

absl::StatusOr<Program> CompileParallelize(const ModelSpec& model, const ParallelizePlan& plan,
                                           const DeviceMesh& mesh) {
  ASSIGN_OR_RETURN(int tp, TpDim(plan, mesh));
  Compiler compiler(model, mesh, tp);
  return compiler.CompileParallelize(plan);
}

absl::StatusOr<Program> CompileDistribute(const ModelSpec& model, const DistributePlan& plan,
                                          const DeviceMesh& mesh) {
  ASSIGN_OR_RETURN(auto placements, DistributePlacements(model.root, plan, mesh.ndim()));
  Partition partition(placements.begin(), placements.end());
  Compiler compiler(model, mesh, 0);
  return compiler.CompileDistribute(std::move(partition));
}

void AddDataParallel(Program& program, int dp_mesh_dim) {
  for (size_t i = 0; i < program.parameters.size(); ++i) {
    ProgramStep step;
    step.kind = ProgramOpKind::kGradAllReduce;
    step.weight = static_cast<int>(i);
    step.mesh_dim = dp_mesh_dim;
    step.reduce_op = ReduceOp::kAvg;
    step.module = program.parameters[i].fqn;
    program.backward.push_back(std::move(step));
  }
  program.data_parallel_dims.push_back(dp_mesh_dim);
}

}  // namespace tessera
