#ifndef TESSERA_CORE_SHARDING_ELEMENTWISE_REDUCE_H_
#define TESSERA_CORE_SHARDING_ELEMENTWISE_REDUCE_H_

#include <cstdint>

#include "core/dtype.h"
#include "core/sharding/placement.h"

namespace tessera {

// The host reductions collectives need, one implementation for every dtype. float16 and bfloat16
// are computed in float32 and rounded back to nearest even. For bool, sum/avg/max are logical or
// and product/min are logical and.

// acc[i] = op(acc[i], in[i]) for `n` elements. kAvg accumulates a sum: finish with DivideInPlace.
void ReduceInto(ReduceOp op, DType dtype, void* acc, const void* in, int64_t n);

// data[i] /= divisor (integer types truncate toward zero; bool is unchanged). Finishes an average.
void DivideInPlace(DType dtype, void* data, int64_t n, int64_t divisor);

// Fills `n` elements with the identity of `op` (0 for sum and avg, 1 for product, the lowest value
// for max, the highest for min; infinities for floating types).
void FillIdentity(ReduceOp op, DType dtype, void* data, int64_t n);

// True if a Partial(op) rank off coordinate 0 holds the identity rather than a copy of the value
// (sum, product); for avg, max and min every rank holds the value.
inline bool PartitionUsesIdentity(ReduceOp op) {
  return op == ReduceOp::kSum || op == ReduceOp::kProduct;
}

// Tessera's split of a value that every rank of a group holds into that rank's part of a
// Partial(op) (Replicate → Partial, distribute_tensor): the rank at `coordinate` 0 keeps the `n`
// elements; the others become op's identity (sum, product) or keep them too (avg, max, min).
// Reducing the group's parts gives the value back exactly. (torch divides by the group size.)
void PartitionValue(ReduceOp op, int64_t coordinate, DType dtype, void* data, int64_t n);

}  // namespace tessera

#endif  // TESSERA_CORE_SHARDING_ELEMENTWISE_REDUCE_H_
