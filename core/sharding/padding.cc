#include "core/sharding/padding.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/sharding/chunk.h"

namespace tessera {
namespace {

// The elements before `dim` of a tensor of `shape`: 1 when the slices along `dim` are adjacent.
int64_t Outer(const Shape& shape, int dim) {
  int64_t outer = 1;
  for (int d = 0; d < dim; ++d) outer *= shape[d];
  return outer;
}

}  // namespace

absl::Status CheckChunkPiecesFit(const Shape& shape, int dim, int64_t k, const Shape& block_shape) {
  if (dim < 0 || dim >= static_cast<int>(shape.size()) || block_shape.size() != shape.size() ||
      k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot split shape ", ShapeToString(shape), " along dim ", dim, " into ", k,
                     " blocks of shape ", ShapeToString(block_shape)));
  }
  for (size_t e = 0; e < shape.size(); ++e) {
    const int64_t piece = static_cast<int>(e) == dim ? ChunkSize(shape[e], k) : shape[e];
    if (piece > block_shape[e]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a chunk of shape ", ShapeToString(shape), " split ", k, " ways along dim ", dim,
          " does not fit a block of shape ", ShapeToString(block_shape), " (dim ", e, ")"));
    }
  }
  return absl::OkStatus();
}

Shape BlocksShape(int64_t k, const Shape& block_shape) {
  Shape out = {k};
  out.insert(out.end(), block_shape.begin(), block_shape.end());
  return out;
}

absl::StatusOr<const std::byte*> ChunkBlocksData(const HostTensor& t, int dim, int64_t k,
                                                 const Shape& block_shape, HostTensor& padded) {
  if (IsChunkBlocks(t.shape(), dim, k, block_shape)) return t.data();
  absl::StatusOr<HostTensor> p = PadToChunks(t, dim, k, block_shape);
  if (!p.ok()) return p.status();
  padded = *std::move(p);
  return std::as_const(padded).data();
}

bool PadsWithTrailingZeros(const Shape& shape, int dim, int64_t k, const Shape& block_shape) {
  const int64_t n = shape[dim];
  return Outer(shape, dim) == 1 && (n == 0 || ChunkSize(n, k) == block_shape[dim]) &&
         WithDimSize(shape, dim, 0) == WithDimSize(block_shape, dim, 0);
}

bool IsChunkBlocks(const Shape& shape, int dim, int64_t k, const Shape& block_shape) {
  if (dim < 0 || dim >= static_cast<int>(shape.size()) || block_shape.size() != shape.size()) {
    return false;
  }
  for (size_t e = 0; e < shape.size(); ++e) {
    const int64_t want = static_cast<int>(e) == dim ? k * block_shape[e] : block_shape[e];
    if (shape[e] != want) return false;
  }
  return k == 1 || Outer(shape, dim) == 1;
}

absl::StatusOr<HostTensor> PadToChunks(const HostTensor& t, int dim, int64_t k,
                                       const Shape& block_shape) {
  if (absl::Status s = CheckChunkPiecesFit(t.shape(), dim, k, block_shape); !s.ok()) return s;
  const DType dtype = t.dtype();
  if (PadsWithTrailingZeros(t.shape(), dim, k, block_shape)) {
    absl::StatusOr<HostTensor> out = HostTensor::Uninitialized(dtype, BlocksShape(k, block_shape));
    if (!out.ok()) return out.status();
    std::memcpy(out->data(), t.data(), t.nbytes());
    std::memset(out->data() + t.nbytes(), 0, out->nbytes() - t.nbytes());
    return out;
  }
  absl::StatusOr<HostTensor> out = HostTensor::Zeros(dtype, BlocksShape(k, block_shape));
  if (!out.ok()) return out.status();
  const int64_t n = t.shape()[dim];
  for (int64_t q = 0; q < k; ++q) {
    const ChunkRange r = ChunkOf(n, k, q);
    absl::StatusOr<ConstStridedView> piece = t.Narrow(dim, r.offset, r.size);
    if (!piece.ok()) return piece.status();
    CopyStrided(*piece, BlockCorner(out->data(), dtype, q, block_shape, piece->shape));
  }
  return out;
}

absl::StatusOr<HostTensor> PadToChunks(const HostTensor& t, int dim, int64_t k) {
  if (dim < 0 || dim >= t.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim ", dim, " is not a dim of shape ", ShapeToString(t.shape())));
  }
  return PadToChunks(t, dim, k, WithDimSize(t.shape(), dim, ChunkSize(t.shape()[dim], k)));
}

absl::Status UnpadFromChunks(const HostTensor& blocks, int dim, HostTensor& out) {
  if (blocks.rank() != out.rank() + 1 || blocks.dtype() != out.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("blocks ", DTypeName(blocks.dtype()), ShapeToString(blocks.shape()),
                     " cannot fill ", DTypeName(out.dtype()), ShapeToString(out.shape())));
  }
  const int64_t k = blocks.shape()[0];
  const Shape block_shape(blocks.shape().begin() + 1, blocks.shape().end());
  if (absl::Status s = CheckChunkPiecesFit(out.shape(), dim, k, block_shape); !s.ok()) return s;
  const int64_t n = out.shape()[dim];
  for (int64_t q = 0; q < k; ++q) {
    const ChunkRange r = ChunkOf(n, k, q);
    const Shape sizes = WithDimSize(out.shape(), dim, r.size);
    std::vector<int64_t> offsets(out.shape().size(), 0);
    offsets[dim] = r.offset;
    absl::StatusOr<StridedView> target = out.Block(offsets, sizes);
    if (!target.ok()) return target.status();
    CopyStrided(BlockCorner(blocks.data(), blocks.dtype(), q, block_shape, sizes), *target);
  }
  return absl::OkStatus();
}

absl::StatusOr<HostTensor> UnpadFromChunks(const HostTensor& blocks, int dim, const Shape& shape) {
  absl::StatusOr<HostTensor> out = HostTensor::Uninitialized(blocks.dtype(), shape);
  if (!out.ok()) return out.status();
  if (absl::Status s = UnpadFromChunks(blocks, dim, *out); !s.ok()) return s;
  return out;
}

}  // namespace tessera
