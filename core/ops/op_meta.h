// The pieces the families' meta and strategy functions share.
#ifndef TESSERA_CORE_OPS_OP_META_H_
#define TESSERA_CORE_OPS_OP_META_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/ops/op_registry.h"
#include "core/ops/type_promotion.h"
#include "core/shape.h"

namespace tessera::ops {

// Parses `schema` and adds an op of `family` to `registry`, returning it for its fields to be
// set; a schema that does not parse aborts (the registry's texts are the program's own, and a
// test builds the registry).
OpDef& DefineOp(OpRegistry& registry, absl::string_view schema, OpFamily family);

// Splits "self,other" into names.
std::vector<std::string> SplitNames(absl::string_view names);

// numpy's broadcasting of `shapes` (aligned at their last dims; sizes equal or 1).
// INVALID_ARGUMENT naming the op and the shapes otherwise.
absl::StatusOr<Shape> BroadcastShapes(absl::string_view op, std::span<const Shape> shapes);

// An argument error of a call: "aten::softmax.int: argument 'dim' ...: <detail>".
absl::Status ArgError(const CallContext& call, absl::string_view arg, absl::string_view detail);

// The call's operands of the arguments named `names` (Tensor or Scalar arguments): each tensor
// with its shape and dtype, each number as a wrapped number of shape [], None skipped.
struct Operand {
  int input = -1;  // the input tensor's index, -1 for a number
  Shape shape;
  PromotionOperand promotion;
};
std::vector<Operand> Operands(const CallContext& call, std::span<const std::string> names);

// The meta of `input` (a Tensor argument holding a tensor); INVALID_ARGUMENT naming the argument
// when it holds a number or None.
absl::StatusOr<TensorMeta> InputTensor(const CallContext& call, absl::string_view arg);

// `dim` of a tensor of `rank` dims normalized (rank 0 takes -1 and 0, as torch);
// INVALID_ARGUMENT naming the op, the argument and the value.
absl::StatusOr<int> CallDim(const CallContext& call, absl::string_view arg, int64_t dim, int rank);
// The dims of an `int[1]? dim` argument normalized and sorted (None or [] means every dim).
absl::StatusOr<std::vector<int>> ReductionDims(const CallContext& call, absl::string_view arg,
                                               int rank);

// Whether the output of a floating op may be `dtype` (a floating dtype).
bool IsFloating(DType dtype);
bool IsIntegral(DType dtype);  // the integers, not bool

// The per-dim candidates of pointwise ops over broadcast operands: output dim o sharded with each
// tensor operand sharded on its dim aligned with o where it has that dim unbroadcast (size != 1),
// Replicate where it broadcasts; then all Replicate. Inputs that are no operand are Replicate.
std::vector<DimChoice> ShardAlignedChoices(std::span<const Operand> operands,
                                           const Shape& out_shape, int num_inputs);

// The pointwise family's meta (broadcast shape, promoted dtype, the traits' dtype checks) and
// strategies (ShardAlignedChoices and the traits' Partial rule), for ops of other files that are
// pointwise in their sharding.
absl::StatusOr<OutputMeta> PointwiseMeta(const CallContext& call);
absl::StatusOr<StrategyCandidates> PointwiseStrategies(const CallContext& call,
                                                       std::span<const DTensorSpec> specs,
                                                       const OutputMeta& out);

// The dims a reduction-family call reduces (normalized, sorted; every dim for a call without a
// dim, or `argmax(dim=None)`), whether they are kept as size 1, whether the shape is kept whole
// (scans, softmax), and the Partial a sharded reduced dim gives (none where the dim must be
// whole). INVALID_ARGUMENT naming a dim out of range.
struct ReductionInfo {
  std::vector<int> dims;
  bool keepdim = false;
  bool along = false;
  bool flattens = false;  // argmax/argmin over every dim (dim=None)
  std::optional<ReduceOp> partial;
};
absl::StatusOr<ReductionInfo> DescribeReduction(const CallContext& call);

}  // namespace tessera::ops

#endif  // TESSERA_CORE_OPS_OP_META_H_
