#include "core/modules/program_check.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

using Parameter = StepSignature::Parameter;

// A forward-only, backward-only or either-list step with one input and one output.
StepSignature Unary(bool in_forward, bool in_backward) {
  return {1, 1, 1, Parameter::kNone, Parameter::kNone, in_forward, in_backward};
}

bool IsReduceOp(ReduceOp op) {
  for (ReduceOp known : kAllReduceOps) {
    if (op == known) return true;
  }
  return false;
}

bool IsActivationKind(ActivationKind f) {
  return static_cast<int>(f) >= static_cast<int>(ActivationKind::kIdentity) &&
         static_cast<int>(f) <= static_cast<int>(ActivationKind::kSilu);
}

// Checks a step's weight (or bias) against its kind: `index` the parameter, `buffer` and
// `grad_buffer` the buffers naming it and its gradient in place of a parameter.
absl::Status CheckOperand(absl::string_view field, int index, int buffer, int grad_buffer,
                          Parameter takes, const StepSignature& sig, bool backward,
                          int num_parameters) {
  if (index < -1 || index >= num_parameters) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " is parameter ", index, ", outside the program's ", num_parameters, " parameters"));
  }
  if (buffer < -1 || grad_buffer < -1) {
    return absl::InvalidArgumentError(absl::StrCat(field, "_buffer is ", buffer, " and ", field,
                                                   "_grad_buffer ", grad_buffer,
                                                   "; a buffer number or -1"));
  }
  if (buffer != -1 && !sig.buffer_operands) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, "_buffer is buffer ", buffer, " but this kind reads no ", field, " from a buffer"));
  }
  if (index != -1 && buffer != -1) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is parameter ", index, " and ", field,
                                                   "_buffer buffer ", buffer,
                                                   "; one or the other"));
  }
  const bool named = index != -1 || buffer != -1;
  if (takes == Parameter::kNone && named) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is ", index != -1 ? "parameter " : "buffer ",
                     index != -1 ? index : buffer, " but this kind takes no ", field));
  }
  if (takes == Parameter::kRequired && !named) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " and ", field, "_buffer are -1 but this kind needs one"));
  }
  const bool wants_grad = backward && buffer != -1;
  if (wants_grad != (grad_buffer != -1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, "_grad_buffer is ", grad_buffer, " with ", field, "_buffer ", buffer,
        wants_grad ? "; a backward step writes the gradient of a buffer operand"
                   : "; only a backward step with a buffer operand writes its gradient"));
  }
  return absl::OkStatus();
}

// Checks one step's attributes, weight and bias against its kind.
absl::Status CheckAttributes(const ProgramStep& step, const StepSignature& sig, bool backward,
                             int num_parameters) {
  RETURN_IF_ERROR(CheckOperand("weight", step.weight, step.weight_buffer, step.weight_grad_buffer,
                               sig.weight, sig, backward, num_parameters));
  RETURN_IF_ERROR(CheckOperand("bias", step.bias, step.bias_buffer, step.bias_grad_buffer, sig.bias,
                               sig, backward, num_parameters));
  switch (step.kind) {
    case ProgramOpKind::kEmbedding:
      if (step.size <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("size (num_embeddings) is ", step.size, "; it must be positive"));
      }
      break;
    case ProgramOpKind::kLayerNorm:
    case ProgramOpKind::kRmsNorm:
      if (!(step.eps >= 0) || !std::isfinite(step.eps)) {
        return absl::InvalidArgumentError(
            absl::StrCat("eps is ", step.eps, "; it must be finite and >= 0"));
      }
      break;
    case ProgramOpKind::kActivation:
    case ProgramOpKind::kActivationBackward:
      if (!IsActivationKind(step.activation)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "activation ", static_cast<int>(step.activation), " is not an activation kind"));
      }
      break;
    case ProgramOpKind::kAttention:
    case ProgramOpKind::kAttentionBackward:
      if (step.heads <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("heads is ", step.heads, "; it must be positive"));
      }
      break;
    case ProgramOpKind::kScale:
      if (!std::isfinite(step.scale)) {
        return absl::InvalidArgumentError(absl::StrCat("scale is ", step.scale, "; not finite"));
      }
      break;
    default:
      break;
  }
  const int kind = static_cast<int>(step.kind);
  const bool collective = (kind >= 20 && kind <= 24) || step.kind == ProgramOpKind::kGradAllReduce;
  if (!collective) return absl::OkStatus();
  if (step.mesh_dim < 0) {
    return absl::InvalidArgumentError(absl::StrCat("mesh_dim is ", step.mesh_dim));
  }
  if (step.kind != ProgramOpKind::kGradAllReduce && step.kind != ProgramOpKind::kAllReduce &&
      step.dim < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim is ", step.dim, "; a step's dims are normalized (>= 0)"));
  }
  if (step.kind == ProgramOpKind::kAllToAll && (step.dim2 < 0 || step.dim2 == step.dim)) {
    return absl::InvalidArgumentError(absl::StrCat("dim2 is ", step.dim2, " with dim ", step.dim,
                                                   "; an all_to_all moves between two dims"));
  }
  if ((step.kind == ProgramOpKind::kAllReduce || step.kind == ProgramOpKind::kReduceScatter) &&
      !IsReduceOp(step.reduce_op)) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce_op ", static_cast<int>(step.reduce_op), " is not a reduce op"));
  }
  if (step.kind == ProgramOpKind::kGradAllReduce && step.reduce_op != ReduceOp::kSum &&
      step.reduce_op != ReduceOp::kAvg) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce_op ", static_cast<int>(step.reduce_op),
                     " is not sum or avg, the reductions of a gradient"));
  }
  return absl::OkStatus();
}

// The buffers a step reads (or writes), each with the field naming it: StepReads (StepWrites) in
// the same order.
std::vector<std::pair<std::string, int>> BufferFields(const ProgramStep& step, bool writes) {
  std::vector<std::pair<std::string, int>> fields;
  const std::vector<int>& listed = writes ? step.outputs : step.inputs;
  for (size_t j = 0; j < listed.size(); ++j) {
    fields.emplace_back(absl::StrCat(writes ? "outputs[" : "inputs[", j, "]"), listed[j]);
  }
  const int weight = writes ? step.weight_grad_buffer : step.weight_buffer;
  const int bias = writes ? step.bias_grad_buffer : step.bias_buffer;
  if (weight >= 0) fields.emplace_back(writes ? "weight_grad_buffer" : "weight_buffer", weight);
  if (bias >= 0) fields.emplace_back(writes ? "bias_grad_buffer" : "bias_buffer", bias);
  return fields;
}

// Checks the steps of one list; `written` says which buffers hold a value before it and is
// updated with what the list writes.
absl::Status CheckSteps(const Program& program, absl::string_view list,
                        std::span<const ProgramStep> steps, std::vector<bool>& written) {
  const bool backward = list == "backward";
  for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
    const ProgramStep& step = steps[i];
    const auto fail = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat(ProgramStepLabel(list, i, step), ": ", what));
    };
    const std::optional<StepSignature> sig = SignatureOf(step.kind);
    if (!sig.has_value()) return fail("kind is not a step kind");
    if (backward ? !sig->in_backward : !sig->in_forward) {
      return fail(absl::StrCat("a ", ProgramOpKindName(step.kind), " step cannot be in ", list));
    }
    if (static_cast<int>(step.inputs.size()) != sig->inputs) {
      return fail(absl::StrCat("has ", step.inputs.size(), " inputs; ",
                               ProgramOpKindName(step.kind), " takes ", sig->inputs));
    }
    const int outputs = static_cast<int>(step.outputs.size());
    if (outputs < sig->min_outputs || outputs > sig->max_outputs) {
      return fail(absl::StrCat("has ", outputs, " outputs; ", ProgramOpKindName(step.kind),
                               " writes ",
                               sig->min_outputs == sig->max_outputs
                                   ? absl::StrCat(sig->min_outputs)
                                   : absl::StrCat(sig->min_outputs, " to ", sig->max_outputs)));
    }
    if (absl::Status s =
            CheckAttributes(step, *sig, backward, static_cast<int>(program.parameters.size()));
        !s.ok()) {
      return fail(std::string(s.message()));
    }
    for (const auto& [field, b] : BufferFields(step, /*writes=*/false)) {
      if (b < 0 || b >= program.num_buffers) {
        return fail(absl::StrCat(field, " is buffer ", b, ", outside the program's ",
                                 program.num_buffers, " buffers"));
      }
      if (!written[b]) {
        return fail(absl::StrCat(field, " reads buffer ", b, " before a step writes it"));
      }
    }
    for (const auto& [field, b] : BufferFields(step, /*writes=*/true)) {
      if (b < 0 || b >= program.num_buffers) {
        return fail(absl::StrCat(field, " is buffer ", b, ", outside the program's ",
                                 program.num_buffers, " buffers"));
      }
      if (written[b]) {
        return fail(absl::StrCat(field, " writes buffer ", b,
                                 b == 0                                 ? ", the input"
                                 : backward && b == program.grad_output ? ", the output's gradient"
                                                                        : ", written before"));
      }
      written[b] = true;
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<StepSignature> SignatureOf(ProgramOpKind kind) {
  constexpr Parameter kNone = Parameter::kNone;
  constexpr Parameter kOptional = Parameter::kOptional;
  constexpr Parameter kRequired = Parameter::kRequired;
  switch (kind) {
    case ProgramOpKind::kLinear:
      return StepSignature{1, 1, 1, kRequired, kOptional, true, false, true};
    case ProgramOpKind::kEmbedding:
      return StepSignature{1, 1, 1, kRequired, kNone, true, false, true};
    case ProgramOpKind::kLayerNorm:
      return StepSignature{1, 3, 3, kOptional, kOptional, true, false, true};
    case ProgramOpKind::kRmsNorm:
      return StepSignature{1, 2, 2, kOptional, kNone, true, false, true};
    case ProgramOpKind::kActivation:
      return Unary(true, false);
    case ProgramOpKind::kAttention:
      return StepSignature{3, 2, 2, kNone, kNone, true, false};
    case ProgramOpKind::kAdd:
      return StepSignature{2, 1, 1, kNone, kNone, true, false};
    case ProgramOpKind::kBiasAdd:
      return StepSignature{1, 1, 1, kNone, kRequired, true, false, true};
    case ProgramOpKind::kAllReduce:
    case ProgramOpKind::kAllGather:
    case ProgramOpKind::kReduceScatter:
    case ProgramOpKind::kChunk:
    case ProgramOpKind::kAllToAll:
      return Unary(true, true);
    case ProgramOpKind::kGatherParameter:
      return StepSignature{0, 1, 1, kRequired, kNone, true, false};
    case ProgramOpKind::kLinearBackward:
      return StepSignature{2, 0, 1, kRequired, kOptional, false, true, true};
    case ProgramOpKind::kEmbeddingBackward:
      return StepSignature{2, 0, 0, kRequired, kNone, false, true, true};
    case ProgramOpKind::kLayerNormBackward:
      return StepSignature{4, 0, 1, kOptional, kOptional, false, true, true};
    case ProgramOpKind::kRmsNormBackward:
      return StepSignature{3, 0, 1, kOptional, kNone, false, true, true};
    case ProgramOpKind::kActivationBackward:
      return StepSignature{2, 1, 1, kNone, kNone, false, true};
    case ProgramOpKind::kAttentionBackward:
      return StepSignature{5, 3, 3, kNone, kNone, false, true};
    case ProgramOpKind::kAccumulate:
      return StepSignature{2, 1, 1, kNone, kNone, false, true};
    case ProgramOpKind::kScale:
      return Unary(true, true);
    case ProgramOpKind::kBiasAddBackward:
      return StepSignature{1, 0, 0, kNone, kRequired, false, true, true};
    case ProgramOpKind::kShardGrad:
      return StepSignature{1, 0, 0, kRequired, kNone, false, true};
    case ProgramOpKind::kGradAllReduce:
      return StepSignature{0, 0, 0, kRequired, kNone, false, true};
  }
  return std::nullopt;
}

std::string ProgramStepLabel(absl::string_view list, int index, const ProgramStep& step) {
  const std::string kind = SignatureOf(step.kind).has_value()
                               ? std::string(ProgramOpKindName(step.kind))
                               : absl::StrCat("kind ", static_cast<int>(step.kind));
  const std::string module =
      step.module.empty() ? "root module" : absl::StrCat("module \"", step.module, "\"");
  return absl::StrCat(list, " step ", index, " (", kind, ", ", module, ")");
}

absl::Status CheckProgram(const Program& program) {
  if (program.tp_mesh_dim < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp_mesh_dim is ", program.tp_mesh_dim, "; it must be >= 0"));
  }
  if (program.num_buffers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_buffers is ", program.num_buffers, "; buffer 0 is the input"));
  }
  for (size_t d = 0; d < program.input.shape.size(); ++d) {
    if (program.input.shape[d] < -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("input shape ", ShapeToString(program.input.shape), " has size ",
                       program.input.shape[d], " at dim ", d, "; sizes are >= 0, or -1 to vary"));
    }
  }
  for (size_t i = 0; i < program.parameters.size(); ++i) {
    const ProgramParameter& p = program.parameters[i];
    const auto fail = [&](const std::string& what) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter ", i, " (\"", p.fqn, "\"): ", what));
    };
    if (p.fqn.empty()) return fail("fqn is empty");
    if (absl::Status s = ValidateShape(p.shape); !s.ok()) return fail(std::string(s.message()));
    if (p.placements.size() != program.parameters[0].placements.size()) {
      return fail(absl::StrCat("has ", p.placements.size(), " placements but parameter 0 has ",
                               program.parameters[0].placements.size(),
                               "; every parameter has one per mesh dim"));
    }
  }
  for (size_t i = 0; i < program.data_parallel_dims.size(); ++i) {
    const int d = program.data_parallel_dims[i];
    const auto first = program.data_parallel_dims.begin();
    if (d < 0 || d == program.tp_mesh_dim || std::find(first, first + i, d) != first + i) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data_parallel_dims[", i, "] is ", d, "; data-parallel dims are distinct mesh dims ",
          "other than tp_mesh_dim ", program.tp_mesh_dim));
    }
  }
  const auto check_buffer = [&](absl::string_view field, int b) -> absl::Status {
    if (b < 0 || b >= program.num_buffers) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " is buffer ", b, ", outside the program's ", program.num_buffers, " buffers"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check_buffer("output", program.output));
  std::vector<bool> written(program.num_buffers, false);
  written[0] = true;
  RETURN_IF_ERROR(CheckSteps(program, "forward", program.forward, written));
  if (!written[program.output]) {
    return absl::InvalidArgumentError(
        absl::StrCat("output is buffer ", program.output, ", which no forward step writes"));
  }
  if (program.backward.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(check_buffer("grad_output", program.grad_output));
  if (written[program.grad_output]) {
    return absl::InvalidArgumentError(absl::StrCat("grad_output is buffer ", program.grad_output,
                                                   ", which forward already writes"));
  }
  written[program.grad_output] = true;
  return CheckSteps(program, "backward", program.backward, written);
}

}  // namespace tessera
