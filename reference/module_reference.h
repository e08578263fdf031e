// The single-process reference the tensor-parallel tests compare against: a ModelSpec's forward,
// backward and torch.optim.SGD step with PyTorch's semantics, computed in double with plain loops
// (reference/reference_layers.h), independent of kernels/ and of core's spec helpers.
#ifndef TESSERA_REFERENCE_MODULE_REFERENCE_H_
#define TESSERA_REFERENCE_MODULE_REFERENCE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/host_tensor.h"
#include "core/modules/module_spec.h"
#include "core/shape.h"

namespace tessera {

// A model: its spec and its parameters by state_dict name ("net1.weight", "layers.0.attn.q.bias"),
// all float32 or all float64.
struct ReferenceModel {
  ModelSpec spec;
  std::map<std::string, HostTensor> params;
};

// One parameter of a spec, as torch's state_dict() lists it.
struct ReferenceParameter {
  std::string fqn;                     // "layers.0.net1.weight"
  Shape shape;                         // its full shape
  const ModuleSpec* module = nullptr;  // the module holding it (within the spec walked)
  std::string local_name;              // "weight" or "bias"
};

// The parameters of `root` in state_dict order (a module's weight, then bias, then its children's),
// after checking the tree: positive sizes, a known GELU approximation, dim divisible by n_heads,
// Attention children exactly q, k, v, o as Linear(dim, dim), no children on a leaf, and non-empty,
// unique, dot-free child names. INVALID_ARGUMENT naming the module's FQN and the bad value.
absl::StatusOr<std::vector<ReferenceParameter>> ListReferenceParameters(const ModuleSpec& root);

// Deterministic parameters for `spec` in `dtype` (float32 or float64), drawn as torch initializes
// them: Linear weight and bias uniform(-1/sqrt(in), 1/sqrt(in)), Embedding weight N(0, 1),
// LayerNorm and RMSNorm weight 1 and bias 0. The same (spec, seed) gives the same values on every
// platform.
absl::StatusOr<std::map<std::string, HostTensor>> RandomParameters(const ModelSpec& spec,
                                                                   uint64_t seed,
                                                                   DType dtype = DType::kFloat32);

// The model's output for `input`: float in the parameters' dtype, or int64 ids when the first
// leaf is an Embedding. Computed in double and rounded once to the parameters' dtype (the input's
// when there are none). INVALID_ARGUMENT for a missing, extra or misshapen parameter, mixed
// dtypes, an input whose shape a module cannot take (naming the module's FQN), or an id out of
// range.
absl::StatusOr<HostTensor> ReferenceForward(const ReferenceModel& model, const HostTensor& input);

// A forward and a backward.
struct ReferenceStep {
  HostTensor output;
  std::map<std::string, HostTensor> grads;  // every parameter's gradient, by FQN
  std::optional<HostTensor> grad_input;     // absent for an int64 (Embedding ids) input
};

// Forward and backward of loss = sum(output) when `grad_output` is null, else from that output
// gradient (the output's shape and dtype, else INVALID_ARGUMENT). Errors as ReferenceForward.
absl::StatusOr<ReferenceStep> ReferenceBackward(const ReferenceModel& model,
                                                const HostTensor& input,
                                                const HostTensor* grad_output);

// torch.optim.SGD's hyperparameters (dampening 0, no Nesterov).
struct ReferenceSgdOptions {
  double lr = 0;
  double momentum = 0;
  double weight_decay = 0;
};

// One torch.optim.SGD step on every parameter: g = grad + weight_decay * param; with momentum,
// buf = g on a parameter's first step (no entry in `momentum_buffers` yet) and momentum * buf + g
// after, and g = buf; param -= lr * g. Buffers are kept in the parameters' dtype. INVALID_ARGUMENT
// when a gradient or buffer is missing or misshapen, with nothing changed.
absl::Status ReferenceSgd(ReferenceModel& model, const std::map<std::string, HostTensor>& grads,
                          const ReferenceSgdOptions& options,
                          std::map<std::string, HostTensor>& momentum_buffers);

}  // namespace tessera

#endif  // TESSERA_REFERENCE_MODULE_REFERENCE_H_
