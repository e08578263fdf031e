#ifndef TESSERA_CORE_MODULES_PROGRAM_CHECK_H_
#define TESSERA_CORE_MODULES_PROGRAM_CHECK_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/modules/module_program.h"

namespace tessera {

// What a step of one kind takes, as core/modules/module_program.h describes each kind.
struct StepSignature {
  enum class Parameter { kNone, kOptional, kRequired };
  int inputs = 0;  // buffers read, exactly
  int min_outputs = 0;
  int max_outputs = 0;
  Parameter weight = Parameter::kNone;
  Parameter bias = Parameter::kNone;
  bool in_forward = false;   // may be a step of Program::forward
  bool in_backward = false;  // may be a step of Program::backward
  // The weight and bias may be buffers (weight_buffer, bias_buffer) in place of parameters; a
  // backward step then writes their gradients' buffers (weight_grad_buffer, bias_grad_buffer).
  bool buffer_operands = false;
};

// The signature of `kind`; nullopt for a number that is no kind.
std::optional<StepSignature> SignatureOf(ProgramOpKind kind);

// How failures name a step: `forward step 3 (linear, module "net1")`; `list` is "forward" or
// "backward".
std::string ProgramStepLabel(absl::string_view list, int index, const ProgramStep& step);

// Checks that `program` is well formed, apart from its fit to a mesh: every step has a known kind
// that belongs in its list, as many inputs and outputs as its kind takes, buffers within
// [0, num_buffers) that are written once and read only after they are written (StepReads,
// StepWrites; buffer 0 holds the input; `grad_output` is set before backward and written by no
// step), a weight and bias where its kind takes them and none where it does not (a parameter
// index within range, or a buffer where the kind takes buffer operands, not both; a backward
// step's gradient buffer exactly with a buffer operand), and sensible attributes (heads, size,
// eps, activation, dims, reduce op, scale); parameters have valid shapes and the same number of
// placements; data_parallel_dims are distinct mesh dims other than tp_mesh_dim. INVALID_ARGUMENT
// naming the step (ProgramStepLabel) or parameter and the field.
absl::Status CheckProgram(const Program& program);

}  // namespace tessera

#endif  // TESSERA_CORE_MODULES_PROGRAM_CHECK_H_
