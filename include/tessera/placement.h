#ifndef TESSERA_INCLUDE_TESSERA_PLACEMENT_H_
#define TESSERA_INCLUDE_TESSERA_PLACEMENT_H_

// The value types of the client API, from the sharding model (core/, installed with the client as
// tessera/core/): DType, Shape, HostTensor, ReduceOp and Placement, and DTensor's placement names.

#include "core/dtype.h"
#include "core/host_tensor.h"
#include "core/shape.h"
#include "core/sharding/placement.h"

namespace tessera::client {

// torch.distributed.tensor's Shard(dim), Replicate() and Partial(op).
inline Placement Shard(int dim) { return Placement::Shard(dim); }
inline Placement Replicate() { return Placement::Replicate(); }
inline Placement Partial(ReduceOp op = ReduceOp::kSum) { return Placement::Partial(op); }

}  // namespace tessera::client

#endif  // TESSERA_INCLUDE_TESSERA_PLACEMENT_H_
