#ifndef TESSERA_CORE_OPS_TYPE_PROMOTION_H_
#define TESSERA_CORE_OPS_TYPE_PROMOTION_H_

#include <span>

#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace tessera::ops {

// torch.promote_types(a, b) over Tessera's dtypes (torch/csrc's promoteTypes table): bool < the
// integers < the floatings; uint8 with int8 gives int16, which Tessera lacks, so it is int32 here
// (the one place Tessera differs, named in docs/ops.md); float16 with bfloat16 gives float32.
DType PromoteTypes(DType a, DType b);

// The three ranks of operands in torch.result_type: a tensor with at least one dim, a 0-dim
// tensor, and a wrapped number (a Python scalar: bool, int or float).
enum class OperandKind { kDimTensor, kZeroDim, kWrappedNumber };
struct PromotionOperand {
  DType dtype = DType::kFloat32;  // a wrapped int is kInt64, a wrapped float kFloat64
  OperandKind kind = OperandKind::kDimTensor;
};

// torch.result_type over the operands: each rank promoted within itself (a wrapped float counts
// as the default dtype, float32), then combined from the highest rank down, a lower rank mattering
// only where it is of a higher category (bool < integer < floating): an int32 tensor + 2 stays
// int32, + 2.5 gives float32, a float16 tensor + a float64 0-dim tensor stays float16, a bool
// tensor + 1 gives int64. No operands give the default dtype, float32.
DType ResultType(std::span<const PromotionOperand> operands);

// torch's ELEMENTWISE_TYPE_PROMOTION_KIND: what an elementwise op does with the result type.
enum class PromotionKind {
  kDefault,     // the result type (add, mul, where, maximum, ...)
  kIntToFloat,  // an integer or bool result type becomes float32 (div, exp, sqrt, sigmoid, ...)
  kAlwaysBool,  // the output is bool, computed in the result type (eq, lt, logical_and, isnan)
  kBoolToLong,  // bool becomes int64 (sum, cumsum, prod)
  kNoOpmath,    // the result type, computed as it is (abs, neg, copies)
};

// The dtype an elementwise op computes in and the dtype of its output, for `kind` and operands.
struct Promotion {
  DType compute = DType::kFloat32;
  DType output = DType::kFloat32;
};
Promotion PromoteOperands(PromotionKind kind, std::span<const PromotionOperand> operands);

}  // namespace tessera::ops

#endif  // TESSERA_CORE_OPS_TYPE_PROMOTION_H_
