#include "worker/dim_collectives.h"

#include <utility>

#include "core/sharding/chunk.h"
#include "core/sharding/padding.h"
#include "kernels/layout.h"

namespace tessera {

// Shard(d) → Replicate: all_gather of shards padded to the chunk size c, each rank's rows placed
// at its chunk's offset. `full_shape` is the shard's shape after the step.
absl::StatusOr<kernels::DeviceTensor> AllGatherAlong(kernels::MemorySpace& memory,
                                                     comm::Communicator& group,
                                                     const kernels::DeviceTensor& local, int d,
                                                     const Shape& full_shape) {
  const int64_t k = group.size();
  const Shape block_shape = WithDimSize(full_shape, d, ChunkSize(full_shape[d], k));
  kernels::DeviceTensor padded;
  absl::StatusOr<const std::byte*> send =
      kernels::ChunkBlocksData(memory, local.View(), d, 1, block_shape, padded);
  if (!send.ok()) return send.status();
  // The blocks are the output when they are adjacent and unpadded.
  const bool direct = IsChunkBlocks(full_shape, d, k, block_shape);
  absl::StatusOr<kernels::DeviceTensor> received =
      memory.Allocate(local.dtype(), direct ? full_shape : BlocksShape(k, block_shape));
  if (!received.ok()) return received.status();
  if (absl::Status s =
          group.AllGather(*send, received->data(), NumElements(block_shape), local.dtype());
      !s.ok()) {
    return s;
  }
  if (direct) return received;
  return kernels::UnpadFromChunks(memory, std::as_const(*received).View(), d, full_shape);
}

// Partial(op) → Shard(d): reduce_scatter of k blocks of c slices along d (padded with zeros), each
// rank keeping its chunk's rows of the reduced block.
absl::StatusOr<kernels::DeviceTensor> ReduceScatterAlong(kernels::MemorySpace& memory,
                                                         comm::Communicator& group,
                                                         const kernels::DeviceTensor& local, int d,
                                                         ReduceOp op) {
  const Shape& shape = local.shape();
  const int64_t k = group.size();
  const Shape block_shape = WithDimSize(shape, d, ChunkSize(shape[d], k));
  kernels::DeviceTensor padded;
  absl::StatusOr<const std::byte*> send =
      kernels::ChunkBlocksData(memory, local.View(), d, k, block_shape, padded);
  if (!send.ok()) return send.status();
  absl::StatusOr<kernels::DeviceTensor> reduced =
      memory.Allocate(local.dtype(), BlocksShape(1, block_shape));
  if (!reduced.ok()) return reduced.status();
  if (absl::Status s =
          group.ReduceScatter(*send, reduced->data(), NumElements(block_shape), local.dtype(), op);
      !s.ok()) {
    return s;
  }
  const Shape mine = WithDimSize(shape, d, ChunkOf(shape[d], k, group.rank()).size);
  if (mine == block_shape) {
    if (absl::Status s = reduced->Reshape(mine); !s.ok()) return s;
    return reduced;
  }
  return kernels::UnpadFromChunks(memory, std::as_const(*reduced).View(), d, mine);
}

// Shard(i) → Shard(j): all_to_all of k blocks (block q: slice q along j, padded to c_i along i and
// c_j along j), then each peer's block placed at its chunk's offset along i.
absl::StatusOr<kernels::DeviceTensor> AllToAllAlong(kernels::MemorySpace& memory,
                                                    comm::Communicator& group,
                                                    const kernels::DeviceTensor& local, int i,
                                                    int j, int64_t ni) {
  const Shape& shape = local.shape();
  const int64_t k = group.size();
  const int64_t nj = shape[j];
  const Shape block_shape =
      WithDimSize(WithDimSize(shape, i, ChunkSize(ni, k)), j, ChunkSize(nj, k));
  kernels::DeviceTensor padded;
  absl::StatusOr<const std::byte*> send =
      kernels::ChunkBlocksData(memory, local.View(), j, k, block_shape, padded);
  if (!send.ok()) return send.status();
  const Shape out_shape =
      WithDimSize(WithDimSize(shape, i, ni), j, ChunkOf(nj, k, group.rank()).size);
  // The blocks are the output when they are adjacent and unpadded.
  const bool direct = IsChunkBlocks(out_shape, i, k, block_shape);
  absl::StatusOr<kernels::DeviceTensor> received =
      memory.Allocate(local.dtype(), direct ? out_shape : BlocksShape(k, block_shape));
  if (!received.ok()) return received.status();
  if (absl::Status s =
          group.AllToAll(*send, received->data(), NumElements(block_shape), local.dtype());
      !s.ok()) {
    return s;
  }
  if (direct) return received;
  return kernels::UnpadFromChunks(memory, std::as_const(*received).View(), i, out_shape);
}

}  // namespace tessera
