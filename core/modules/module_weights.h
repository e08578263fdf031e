#ifndef TESSERA_CORE_MODULES_MODULE_WEIGHTS_H_
#define TESSERA_CORE_MODULES_MODULE_WEIGHTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/modules/module_spec.h"
#include "core/shape.h"

namespace tessera {

// How a module's parameters start: from a weights file checked against the spec, or from a seed
// as torch's reset_parameters() draws them.

// The dtype a model's parameters hold: its input's when that is floating (the kernels compute in
// one dtype), float32 otherwise (an Embedding's int64 ids).
DType ParameterDType(const ModuleInput& input);

// A tensor of a weights file, as its header lists it.
struct WeightsTensor {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
};

// OK iff `weights` holds exactly the model's `parameters` (in any order), each of its shape and
// of `dtype`. Otherwise INVALID_ARGUMENT listing every problem: a parameter missing, a tensor the
// model has no parameter for, a repeated name, a shape that differs (naming the parameter and
// both shapes) or a dtype that differs.
absl::Status CheckWeights(const std::vector<ParameterInfo>& parameters,
                          const std::vector<WeightsTensor>& weights, DType dtype);

// What a parameter is filled with when a module is made from a seed, as torch's
// reset_parameters() does: Linear (and Attention's q/k/v/o) weight and bias uniform in
// [-1/sqrt(in_features), 1/sqrt(in_features)); Embedding weight normal(0, 1); LayerNorm and
// RMSNorm weight ones and bias zeros.
struct ParameterInit {
  enum class Kind : int { kUniform, kNormal, kOnes, kZeros };
  Kind kind = Kind::kZeros;
  double bound = 0;  // kUniform: draws lie in [-bound, bound)
};
// The fill of the parameter `local_name` ("weight", "bias") of `owner`, the module holding it.
ParameterInit InitOf(const ModuleSpec& owner, absl::string_view local_name);

}  // namespace tessera

#endif  // TESSERA_CORE_MODULES_MODULE_WEIGHTS_H_
