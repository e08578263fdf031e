#ifndef TESSERA_CORE_SHARDING_CHUNK_H_
#define TESSERA_CORE_SHARDING_CHUNK_H_

#include <cstdint>

namespace tessera {

// One rank's piece of a dimension: elements [offset, offset + size).
struct ChunkRange {
  int64_t offset = 0;
  int64_t size = 0;
  friend bool operator==(const ChunkRange&, const ChunkRange&) = default;
};

// The torch.chunk rule: chunk size c = ceil(n / k); piece r is [r*c, min(n, (r+1)*c)). Pieces past
// the end are empty with offset n, as DTensor pads torch.chunk's result up to k pieces.
inline int64_t ChunkSize(int64_t n, int64_t k) { return k <= 0 ? 0 : (n + k - 1) / k; }

inline ChunkRange ChunkOf(int64_t n, int64_t k, int64_t r) {
  const int64_t c = ChunkSize(n, k);
  const int64_t begin = r * c < n ? r * c : n;
  const int64_t end = (r + 1) * c < n ? (r + 1) * c : n;
  return ChunkRange{begin, end - begin};
}

}  // namespace tessera

#endif  // TESSERA_CORE_SHARDING_CHUNK_H_
