#ifndef TESSERA_CORE_SHARDING_PADDING_H_
#define TESSERA_CORE_SHARDING_PADDING_H_

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/host_tensor.h"
#include "core/shape.h"

namespace tessera {

// Uneven shards around collectives, as DTensor does it: a collective moves equal blocks, so each
// torch.chunk piece of a dim (n elements over k ranks) is zero-padded to the chunk size
// c = ceil(n/k) before it is sent, and the padding is cut off after it arrives. Blocks are laid
// out back to back, as a tensor of shape [k, block...].

// `t` split along `dim` into k torch.chunk pieces, each copied into the origin corner of a zero
// block of `block_shape` (t's rank; at least the piece in every dim), as a [k, block...] tensor.
// With k = 1 it is `t` padded to one block. INVALID_ARGUMENT if a piece does not fit a block.
absl::StatusOr<HostTensor> PadToChunks(const HostTensor& t, int dim, int64_t k,
                                       const Shape& block_shape);
// The same with blocks of t's shape cut to the chunk size c along `dim`.
absl::StatusOr<HostTensor> PadToChunks(const HostTensor& t, int dim, int64_t k);

// The inverse: `out` (n = out's size along `dim`) receives from block q of `blocks` ([k, block...])
// the corner holding torch.chunk piece q, at that piece's offset along `dim`; the rest of each
// block is padding and is dropped. INVALID_ARGUMENT, `out` untouched, if a piece does not fit.
absl::Status UnpadFromChunks(const HostTensor& blocks, int dim, HostTensor& out);
// The same into a new tensor of `shape`.
absl::StatusOr<HostTensor> UnpadFromChunks(const HostTensor& blocks, int dim, const Shape& shape);

// OK if every torch.chunk piece along `dim` (k of them) of a tensor of `shape` fits in a block of
// `block_shape`; INVALID_ARGUMENT naming the shapes otherwise.
absl::Status CheckChunkPiecesFit(const Shape& shape, int dim, int64_t k, const Shape& block_shape);

// The shape of k blocks of `block_shape` back to back: [k, block...].
Shape BlocksShape(int64_t k, const Shape& block_shape);

// `t`'s bytes as the k blocks PadToChunks makes: t's own when IsChunkBlocks holds (no copy), else
// those of a padded copy left in `padded`. For the send buffer of a collective.
absl::StatusOr<const std::byte*> ChunkBlocksData(const HostTensor& t, int dim, int64_t k,
                                                 const Shape& block_shape, HostTensor& padded);

// True if the k blocks PadToChunks makes of a contiguous tensor of `shape` (whose pieces fit, as
// CheckChunkPiecesFit says) are its bytes followed by zeros: the pieces are adjacent in memory and
// each fills its block but the last ones, so one copy and one fill make them.
bool PadsWithTrailingZeros(const Shape& shape, int dim, int64_t k, const Shape& block_shape);

// Block q (of `block_shape`) of a [k, block...] buffer at `base`, cut to `sizes`, as a view: the
// corner of the block that holds a piece of PadToChunks's.
template <typename Byte>
BasicStridedView<Byte> BlockCorner(Byte* base, DType dtype, int64_t q, const Shape& block_shape,
                                   Shape sizes) {
  Byte* data = base + q * NumElements(block_shape) * static_cast<int64_t>(DTypeSize(dtype));
  return {data, dtype, std::move(sizes), ContiguousStrides(block_shape)};
}

// True if a contiguous tensor of `shape` already is, byte for byte, the k blocks of `block_shape`
// that PadToChunks would make (no piece needs padding and the pieces are adjacent in memory), so a
// collective can send it, or write into it, as it is.
bool IsChunkBlocks(const Shape& shape, int dim, int64_t k, const Shape& block_shape);

}  // namespace tessera

#endif  // TESSERA_CORE_SHARDING_PADDING_H_
