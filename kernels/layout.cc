#include "kernels/layout.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/host_tensor.h"
#include "core/sharding/chunk.h"
#include "core/sharding/padding.h"
#include "core/status_macros.h"

namespace tessera::kernels {
namespace {

absl::Status CheckDim(int dim, const Shape& shape) {
  if (dim >= 0 && dim < static_cast<int>(shape.size())) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("dim ", dim, " is not a dim of shape ", ShapeToString(shape)));
}

// The piece [offset, offset + size) along `dim` of `t`, as a view.
absl::StatusOr<ConstStridedView> Narrow(const ConstTensorView& t, int dim, int64_t offset,
                                        int64_t size) {
  std::vector<int64_t> offsets(t.shape.size(), 0);
  offsets[dim] = offset;
  return BlockOf(t.data, t.dtype, t.shape, offsets, WithDimSize(t.shape, dim, size));
}

}  // namespace

ConstStridedView StridedOf(const ConstTensorView& view) {
  return {view.data, view.dtype, view.shape, ContiguousStrides(view.shape)};
}

StridedView StridedOf(const TensorView& view) {
  return {view.data, view.dtype, view.shape, ContiguousStrides(view.shape)};
}

absl::StatusOr<DeviceTensor> PackBlock(MemorySpace& memory, const ConstTensorView& src,
                                       std::span<const int64_t> offsets,
                                       std::span<const int64_t> sizes) {
  ASSIGN_OR_RETURN(ConstStridedView block, BlockOf(src.data, src.dtype, src.shape, offsets, sizes));
  ASSIGN_OR_RETURN(DeviceTensor out, memory.Allocate(src.dtype, Shape(sizes.begin(), sizes.end())));
  RETURN_IF_ERROR(memory.CopyStrided(block, StridedOf(out.View())));
  return out;
}

absl::Status UnpackBlock(MemorySpace& memory, const ConstTensorView& block,
                         std::span<const int64_t> offsets, const TensorView& dst) {
  if (block.dtype != dst.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write a ", DTypeName(block.dtype),
                                                   " block into a ", DTypeName(dst.dtype),
                                                   " tensor"));
  }
  ASSIGN_OR_RETURN(StridedView target,
                   BlockOf(dst.data, dst.dtype, dst.shape, offsets, block.shape));
  return memory.CopyStrided(StridedOf(block), target);
}

absl::StatusOr<DeviceTensor> SliceAlong(MemorySpace& memory, const ConstTensorView& t, int dim,
                                        int64_t start, int64_t length) {
  RETURN_IF_ERROR(CheckDim(dim, t.shape));
  std::vector<int64_t> offsets(t.shape.size(), 0);
  offsets[dim] = start;
  return PackBlock(memory, t, offsets, WithDimSize(t.shape, dim, length));
}

absl::Status PlaceAlong(MemorySpace& memory, const ConstTensorView& block, int dim, int64_t offset,
                        const TensorView& dst) {
  RETURN_IF_ERROR(CheckDim(dim, dst.shape));
  std::vector<int64_t> offsets(dst.shape.size(), 0);
  offsets[dim] = offset;
  return UnpackBlock(memory, block, offsets, dst);
}

absl::StatusOr<DeviceTensor> Transposed(MemorySpace& memory, const ConstTensorView& x, int d0,
                                        int d1) {
  RETURN_IF_ERROR(CheckDim(d0, x.shape));
  RETURN_IF_ERROR(CheckDim(d1, x.shape));
  ConstStridedView src = StridedOf(x);
  std::swap(src.shape[d0], src.shape[d1]);
  std::swap(src.strides[d0], src.strides[d1]);
  ASSIGN_OR_RETURN(DeviceTensor out, memory.Allocate(x.dtype, src.shape));
  RETURN_IF_ERROR(memory.CopyStrided(src, StridedOf(out.View())));
  return out;
}

absl::StatusOr<DeviceTensor> PadToChunks(MemorySpace& memory, const ConstTensorView& t, int dim,
                                         int64_t k, const Shape& block_shape) {
  RETURN_IF_ERROR(CheckChunkPiecesFit(t.shape, dim, k, block_shape));
  ASSIGN_OR_RETURN(DeviceTensor out, memory.Allocate(t.dtype, BlocksShape(k, block_shape)));
  if (PadsWithTrailingZeros(t.shape, dim, k, block_shape)) {
    RETURN_IF_ERROR(memory.Copy(t, TensorView{out.data(), t.dtype, t.shape}));
    const int64_t rest = out.num_elements() - t.num_elements();
    if (rest > 0) RETURN_IF_ERROR(memory.SetZero({out.data() + t.nbytes(), t.dtype, Shape{rest}}));
    return out;
  }
  RETURN_IF_ERROR(memory.SetZero(out.View()));
  const int64_t n = t.shape[dim];
  for (int64_t q = 0; q < k; ++q) {
    const ChunkRange r = ChunkOf(n, k, q);
    ASSIGN_OR_RETURN(ConstStridedView piece, Narrow(t, dim, r.offset, r.size));
    RETURN_IF_ERROR(
        memory.CopyStrided(piece, BlockCorner(out.data(), t.dtype, q, block_shape, piece.shape)));
  }
  return out;
}

absl::StatusOr<const std::byte*> ChunkBlocksData(MemorySpace& memory, const ConstTensorView& t,
                                                 int dim, int64_t k, const Shape& block_shape,
                                                 DeviceTensor& padded) {
  if (IsChunkBlocks(t.shape, dim, k, block_shape)) return t.data;
  ASSIGN_OR_RETURN(padded, PadToChunks(memory, t, dim, k, block_shape));
  return std::as_const(padded).data();
}

absl::Status UnpadFromChunks(MemorySpace& memory, const ConstTensorView& blocks, int dim,
                             const TensorView& out) {
  if (blocks.rank() != out.rank() + 1 || blocks.dtype != out.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("blocks ", DTypeName(blocks.dtype),
                                                   ShapeToString(blocks.shape), " cannot fill ",
                                                   DTypeName(out.dtype), ShapeToString(out.shape)));
  }
  const int64_t k = blocks.shape[0];
  const Shape block_shape(blocks.shape.begin() + 1, blocks.shape.end());
  RETURN_IF_ERROR(CheckChunkPiecesFit(out.shape, dim, k, block_shape));
  const int64_t n = out.shape[dim];
  for (int64_t q = 0; q < k; ++q) {
    const ChunkRange r = ChunkOf(n, k, q);
    const Shape sizes = WithDimSize(out.shape, dim, r.size);
    std::vector<int64_t> offsets(out.shape.size(), 0);
    offsets[dim] = r.offset;
    ASSIGN_OR_RETURN(StridedView target, BlockOf(out.data, out.dtype, out.shape, offsets, sizes));
    RETURN_IF_ERROR(
        memory.CopyStrided(BlockCorner(blocks.data, blocks.dtype, q, block_shape, sizes), target));
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceTensor> UnpadFromChunks(MemorySpace& memory, const ConstTensorView& blocks,
                                             int dim, const Shape& shape) {
  ASSIGN_OR_RETURN(DeviceTensor out, memory.Allocate(blocks.dtype, shape));
  RETURN_IF_ERROR(UnpadFromChunks(memory, blocks, dim, out.View()));
  return out;
}

}  // namespace tessera::kernels
