#ifndef TESSERA_KERNELS_LAYOUT_H_
#define TESSERA_KERNELS_LAYOUT_H_

// The layout moves of shards (blocks, slices along a dim, torch.chunk pieces padded for a
// collective and cut after it) on tensors of any memory space: core's host versions
// (core/host_tensor.h, core/sharding/padding.h) with the same rules and errors, every copy made by
// the space's strided copy. The worker's shards live in its device's memory and move with these.

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/shape.h"
#include "kernels/device_tensor.h"
#include "kernels/memory_space.h"
#include "kernels/tensor_view.h"

namespace tessera::kernels {

// The whole of `view` as a strided view.
ConstStridedView StridedOf(const ConstTensorView& view);
StridedView StridedOf(const TensorView& view);

// The sub-block at `offsets` of size `sizes` of `src`, as a new tensor (core's PackBlock).
absl::StatusOr<DeviceTensor> PackBlock(MemorySpace& memory, const ConstTensorView& src,
                                       std::span<const int64_t> offsets,
                                       std::span<const int64_t> sizes);
// Writes `block` into `dst` at `offsets` (core's UnpackBlock); `dst` is untouched on error.
absl::Status UnpackBlock(MemorySpace& memory, const ConstTensorView& block,
                         std::span<const int64_t> offsets, const TensorView& dst);
// Elements [start, start + length) of `t` along `dim`, as a new tensor (core's SliceAlong).
absl::StatusOr<DeviceTensor> SliceAlong(MemorySpace& memory, const ConstTensorView& t, int dim,
                                        int64_t start, int64_t length);
// Writes `block` into `dst` at `offset` along `dim` (core's PlaceAlong).
absl::Status PlaceAlong(MemorySpace& memory, const ConstTensorView& block, int dim, int64_t offset,
                        const TensorView& dst);
// `x` with dims d0 and d1 swapped, as a new contiguous tensor (dims already normalized).
absl::StatusOr<DeviceTensor> Transposed(MemorySpace& memory, const ConstTensorView& x, int d0,
                                        int d1);

// core's PadToChunks: `t` split along `dim` into k torch.chunk pieces, each in the origin corner
// of a zero block of `block_shape`, as a [k, block...] tensor.
absl::StatusOr<DeviceTensor> PadToChunks(MemorySpace& memory, const ConstTensorView& t, int dim,
                                         int64_t k, const Shape& block_shape);
// core's ChunkBlocksData: t's own bytes when they already are those blocks (IsChunkBlocks), else
// those of a padded copy left in `padded`.
absl::StatusOr<const std::byte*> ChunkBlocksData(MemorySpace& memory, const ConstTensorView& t,
                                                 int dim, int64_t k, const Shape& block_shape,
                                                 DeviceTensor& padded);
// core's UnpadFromChunks: `out` receives from block q of `blocks` ([k, block...]) torch.chunk
// piece q along `dim`; `out` is untouched on error.
absl::Status UnpadFromChunks(MemorySpace& memory, const ConstTensorView& blocks, int dim,
                             const TensorView& out);
absl::StatusOr<DeviceTensor> UnpadFromChunks(MemorySpace& memory, const ConstTensorView& blocks,
                                             int dim, const Shape& shape);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_LAYOUT_H_
