// The op set: every computation Tessera runs on DTensors is an op of this registry, named as ATen
// names it ("aten::softmax.int"), with torch's schema, a meta function, DTensor's sharding
// strategies, an implementation (a kernel family entry or a decomposition into registered ops)
// and its derivative in registered ops.
#ifndef TESSERA_CORE_OPS_OP_REGISTRY_H_
#define TESSERA_CORE_OPS_OP_REGISTRY_H_

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/ops/op_graph.h"
#include "core/ops/op_schema.h"
#include "core/ops/type_promotion.h"
#include "core/shape.h"
#include "core/sharding/dtensor_spec.h"
#include "core/sharding/placement.h"

namespace tessera::ops {

// The families of ops, by how their sharding is decided. kNn: normalization layers and
// attention (the dims they normalize or attend over whole, the others keep their shards).
enum class OpFamily { kPointwise, kReduction, kMatmul, kView, kTensor, kFactory, kNn };
absl::string_view OpFamilyName(OpFamily family);

// The shape and dtype of one input tensor of a call.
struct TensorMeta {
  Shape shape;
  DType dtype = DType::kFloat32;
};

// What an op's meta function answers: the output's shape and dtype.
struct OutputMeta {
  Shape shape;
  DType dtype = DType::kFloat32;
};

// One way to run an op: the placements each input tensor must have and the output's.
struct Strategy {
  std::vector<std::vector<Placement>> inputs;
  std::vector<Placement> output;
  // An op with several outputs: the placements of each after the first; empty: the first's.
  std::vector<std::vector<Placement>> more = {};
};

// One mesh dim's choice of a strategy that decides each mesh dim apart: the placement of every
// input on it and the output's. The op's strategies are their product over the mesh dims.
struct DimChoice {
  std::vector<Placement> inputs;
  Placement output;
  // An op with several outputs: the placement of each after the first; empty: the first's.
  std::vector<Placement> more = {};
};

struct OpDef;

// A call being planned: the op, its bound arguments, and its inputs' metas. A call's inputs are
// its tensors in schema order, one per occurrence (a Tensor[] argument gives one per element, a
// tensor given twice is two inputs): the arguments refer to them by that index, and a strategy
// gives each its placements.
struct CallContext {
  const OpDef& op;
  const BoundArgs& args;
  std::span<const TensorMeta> inputs;
};

// Which Partial placements a pointwise op passes through (DTensor keeps a Partial only where
// the op is linear in that input).
enum class PartialRule {
  kNone,       // none: a Partial input is made Replicate first
  kLinear,     // P(sum) or P(avg) on every tensor operand alike (add, sub, neg); not with a number
  kScaled,     // P(sum) or P(avg) on one of `partial_operands`, the others Replicate (mul, div)
  kCopy,       // any Partial on the one input (clone, alias, detach)
  kMonotonic,  // P(max) or P(min) on the one input (a cast to a non-bool dtype)
};

// What pointwise ops need to be planned: the operands that broadcast and promote, the promotion
// kind and the partial rule.
struct PointwiseTraits {
  std::vector<std::string> operands;  // the Tensor and Scalar arguments, in order
  PromotionKind promotion = PromotionKind::kDefault;
  PartialRule partial = PartialRule::kNone;
  std::vector<int> partial_operands;  // kScaled: positions in `operands`
  bool rejects_bool = false;          // of the result type: neg, sub, abs, relu, ...
  bool rejects_floating = false;      // bitwise ops
};

using MetaFn = absl::StatusOr<OutputMeta> (*)(const CallContext& call);
// The outputs after the first of an op with several (a tuple or a Tensor[] return), from the
// first's meta: topk's indices, native_layer_norm's mean and rstd, split's pieces after the first.
using MoreOutputsFn = absl::StatusOr<std::vector<OutputMeta>> (*)(const CallContext& call,
                                                                  const OutputMeta& first);
// Candidate strategies per mesh dim (product over the mesh), or whole strategies (`whole`).
struct StrategyCandidates {
  std::vector<DimChoice> per_dim;
  std::vector<Strategy> whole;  // used instead of per_dim when not empty
};
using StrategyFn = absl::StatusOr<StrategyCandidates> (*)(const CallContext& call,
                                                          std::span<const DTensorSpec> specs,
                                                          const OutputMeta& out);
// An op that runs as other registered ops: the graph of a call whose meta function has accepted
// it. Its inputs are the call's inputs, in CallContext's numbering.
using DecomposeFn = absl::StatusOr<OpGraph> (*)(const CallContext& call);

// One registered op.
struct OpDef {
  OpSchema schema;
  OpFamily family = OpFamily::kPointwise;
  MetaFn meta = nullptr;
  // Set for an op with several outputs. Every output takes the placements the chosen strategy
  // gives the first (a strategy shards no dim an output lacks: topk's values and indices, a
  // split's pieces and a norm's statistics are laid out alike) unless the strategy gives the
  // others placements of their own (DimChoice::more: a norm backward's parameter gradients).
  MoreOutputsFn more_outputs = nullptr;
  StrategyFn strategies = nullptr;
  // Set for an op that runs as its decomposition (no strategies, no local implementation): each
  // node is planned and run as a call of its own, so a Partial or a shard flows between them as
  // DTensor's would (cross_entropy on class-sharded logits never gathers them).
  DecomposeFn decompose = nullptr;
  PointwiseTraits pointwise;
  // How each rank computes it: "kernel <family>.<entry>" or "decomposition: <registered ops>".
  std::string implementation;
  // The derivative in registered ops ("grad * result" for exp); empty: none (integer outputs,
  // or not differentiable).
  std::string derivative;
  // The sharding strategies in words, for `tessera ops list`.
  std::string strategy_text;
  // The row of its family's table it was registered from.
  int entry = -1;

  const std::string& name() const { return qualified_name; }
  std::string qualified_name;  // "aten::softmax.int"
  // Whether it draws from the caller's random stream (rand, dropout, ...): each call takes the
  // stream's next elements, one per output element (core/ops/factory_call.h).
  bool random = false;
};

// The registry: every op, by qualified name.
class OpRegistry {
 public:
  // The op named `name`: "aten::softmax.int", "softmax.int", or "softmax" for the default
  // overload (or the only one). UNIMPLEMENTED naming the op when there is none (with the
  // overloads there are, when the name has some).
  absl::StatusOr<const OpDef*> Find(absl::string_view name) const;
  // Every op, sorted by qualified name.
  const std::vector<const OpDef*>& ops() const { return sorted_; }

  // Adds an op; its schema text must parse (checked when the registry is built).
  void Add(std::unique_ptr<OpDef> op);
  void Finish();

 private:
  std::vector<std::unique_ptr<OpDef>> ops_;
  absl::flat_hash_map<std::string, const OpDef*> by_name_;
  std::vector<const OpDef*> sorted_;
};

// The registry of the op set, built once.
const OpRegistry& Registry();

// The families' registrations (one file each), called by Registry().
void RegisterPointwiseOps(OpRegistry& registry);
void RegisterReductionOps(OpRegistry& registry);
void RegisterMatmulOps(OpRegistry& registry);
void RegisterViewOps(OpRegistry& registry);
void RegisterTensorOps(OpRegistry& registry);
void RegisterNormOps(OpRegistry& registry);
void RegisterIndexOps(OpRegistry& registry);
void RegisterLossOps(OpRegistry& registry);
void RegisterFactoryOps(OpRegistry& registry);

}  // namespace tessera::ops

#endif  // TESSERA_CORE_OPS_OP_REGISTRY_H_
