#ifndef TESSERA_CORE_MODULES_MODULE_SPEC_H_
#define TESSERA_CORE_MODULES_MODULE_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace tessera {

// The module types a spec can hold, named as torch.nn names them.
enum class ModuleType : int {
  kLinear,      // y = x @ weight^T + bias; weight [out, in], bias [out]
  kEmbedding,   // y = weight[ids]; weight [num_embeddings, embedding_dim]; ids int64
  kLayerNorm,   // over the last dim; weight and bias [dim] when elementwise_affine
  kRMSNorm,     // x * rsqrt(mean(x^2) + eps) * weight; weight [dim] when elementwise_affine
  kReLU,        //
  kGELU,        // approximate "none" (erf) or "tanh"
  kSiLU,        // x * sigmoid(x)
  kDropout,     // the identity (eval mode)
  kAttention,   // multi-head scaled dot-product self-attention; children q, k, v, o (Linear)
  kSequential,  // children "0", "1", ... run in order
  kModuleList,  // children "0", "1", ... run in order (as a model's forward loops over them)
  kModule,      // named children run in the order given; `residual` adds the input to the result
};

// "Linear", "Embedding", "LayerNorm", "RMSNorm", "ReLU", "GELU", "SiLU", "Dropout", "Attention",
// "Sequential", "ModuleList", "Module".
absl::string_view ModuleTypeName(ModuleType type);
absl::StatusOr<ModuleType> ParseModuleType(absl::string_view name);

// One module of a tree, with its arguments (those its type does not use stay at their defaults)
// and its children in forward order. Parameters are named as torch's state_dict names them.
struct ModuleSpec {
  ModuleType type = ModuleType::kModule;
  std::string name;  // the child name within its parent; empty for the root

  // Linear
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool bias = true;  // Linear; also the q/k/v/o Linears of Attention
  // Embedding
  int64_t num_embeddings = 0;
  int64_t embedding_dim = 0;
  // LayerNorm, RMSNorm: normalized over the last dim of size `normalized_shape`.
  int64_t normalized_shape = 0;
  double eps = 1e-5;  // LayerNorm default 1e-5; RMSNorm default: float32's epsilon (torch's None)
  bool elementwise_affine = true;
  // GELU: "none" or "tanh"
  std::string approximate = "none";
  // Dropout: the probability (recorded; dropout is the identity in eval mode)
  double p = 0.5;
  // Attention: embedding dim, heads (dim % n_heads == 0), causal mask
  int64_t dim = 0;
  int64_t n_heads = 0;
  bool causal = false;
  // Module: output = input + (children applied in order)
  bool residual = false;

  std::vector<ModuleSpec> children;
};

// What a model takes: the input's dtype and shape, -1 for a size that may vary (the batch, the
// sequence).
struct ModuleInput {
  DType dtype = DType::kFloat32;
  Shape shape;
};

// A whole model: its root module and its input.
struct ModelSpec {
  ModuleSpec root;
  ModuleInput input;
};

// A parameter by fully qualified name ("net1.weight", "layers.0.net2.bias") and full shape.
struct ParameterInfo {
  std::string fqn;
  Shape shape;
};

// Parses a spec file (JSON; docs/modules.md): {"type": ..., <arguments>, "children": [...]}
// with each child carrying "name" (Sequential and ModuleList children are numbered and may omit
// it), and an optional top-level "input": {"dtype": "float32", "shape": [-1, 10]}; without it the
// input is inferred from the first leaf (Linear, norm, activation: [-1, features] float32;
// Embedding: [-1, -1] int64; Attention: [-1, -1, dim] float32). Attention's q/k/v/o children are
// made by the parser (a spec giving them is refused). INVALID_ARGUMENT naming the JSON path and
// value for an unknown type or key, a missing or non-positive size, a duplicate child name, or
// children on a leaf.
absl::StatusOr<ModelSpec> ParseModelSpec(absl::string_view json);
// The spec as JSON that ParseModelSpec reads back to an equal spec.
std::string ModelSpecToJson(const ModelSpec& spec);

// torch's named_modules(): every module with its FQN, the root first as "", then depth first in
// child order ("net1", "layers", "layers.0", "layers.0.net1", ...).
std::vector<std::pair<std::string, const ModuleSpec*>> NamedModules(const ModuleSpec& root);

// torch's state_dict() keys and shapes, in its order (a module's own parameters, weight before
// bias, then its children's).
std::vector<ParameterInfo> NamedParameters(const ModuleSpec& root);

// The parameters `module` itself holds (not its children's), as (local name, shape): "weight",
// "bias".
std::vector<ParameterInfo> OwnParameters(const ModuleSpec& module);

}  // namespace tessera

#endif  // TESSERA_CORE_MODULES_MODULE_SPEC_H_
