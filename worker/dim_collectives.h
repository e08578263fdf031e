#ifndef TESSERA_WORKER_DIM_COLLECTIVES_H_
#define TESSERA_WORKER_DIM_COLLECTIVES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/sharding/placement.h"
#include "kernels/device_tensor.h"
#include "kernels/memory_space.h"
#include "worker/comm/communicator.h"

namespace tessera {

// The collectives that move a tensor between layouts along one tensor dim of a process group, as
// DTensor runs them: pieces are torch.chunk pieces (uneven ones zero-padded to the chunk size on
// the wire, core/sharding/padding.h). Every rank of `group` calls with the same dims and shapes
// (its own piece's size along the sharded dim); the communicator's error if the collective fails.
// Tensors and the buffers made for the collective live in `memory`, the communicator's memory
// space.

// Shard(d) -> Replicate: every rank's piece of `full_shape` (the gathered shape) along d, joined.
absl::StatusOr<kernels::DeviceTensor> AllGatherAlong(kernels::MemorySpace& memory,
                                                     comm::Communicator& group,
                                                     const kernels::DeviceTensor& local, int d,
                                                     const Shape& full_shape);

// Partial(op) -> Shard(d): this rank's torch.chunk piece along d of the reduction of every rank's
// `local` (all of the same shape).
absl::StatusOr<kernels::DeviceTensor> ReduceScatterAlong(kernels::MemorySpace& memory,
                                                         comm::Communicator& group,
                                                         const kernels::DeviceTensor& local, int d,
                                                         ReduceOp op);

// Shard(i) -> Shard(j): `local` is this rank's piece along i of a tensor whose size there is `ni`;
// returns its piece along j of the same tensor (full along i).
absl::StatusOr<kernels::DeviceTensor> AllToAllAlong(kernels::MemorySpace& memory,
                                                    comm::Communicator& group,
                                                    const kernels::DeviceTensor& local, int i,
                                                    int j, int64_t ni);

}  // namespace tessera

#endif  // TESSERA_WORKER_DIM_COLLECTIVES_H_
