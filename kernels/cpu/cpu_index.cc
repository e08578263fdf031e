// The CPU backend's indexing kernels: the index range check, the wrap of negative indices,
// gather, scatter (written or added) and index_select, as loops over the index in order.

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/host_element.h"

namespace tessera::kernels {
namespace {

// Calls line(p, indexed, other, n) for each run of n positions p .. p + n - 1 of `walk` along its
// last dim, in order: `indexed` and `other` are the offsets of the run's first position without
// the indexed dim's term.
template <typename Walk, typename Line>
void ForEachLine(const Walk& walk, Line&& line) {
  const int rank = static_cast<int>(walk.shape.size());
  const int64_t n = walk.shape[rank - 1];
  std::vector<int64_t> coordinate(rank, 0);
  int64_t indexed = 0, other = 0;
  for (int64_t p = 0; n > 0;) {
    line(p, indexed, other, n);
    p += n;
    int d = rank - 2;
    for (; d >= 0; --d) {
      const int64_t step_indexed = d == walk.dim ? 0 : walk.indexed_strides[d];
      if (++coordinate[d] < walk.shape[d]) {
        indexed += step_indexed;
        other += walk.other_strides[d];
        break;
      }
      indexed -= (walk.shape[d] - 1) * step_indexed;
      other -= (walk.shape[d] - 1) * walk.other_strides[d];
      coordinate[d] = 0;
    }
    if (d < 0) break;
  }
}

// The offset in the indexed tensor of position p + j of a line starting at `indexed`.
template <typename Walk>
int64_t IndexedOffset(const Walk& walk, const int64_t* index, int64_t p, int64_t j,
                      int64_t indexed) {
  const int last = static_cast<int>(walk.shape.size()) - 1;
  const int64_t along = walk.dim == last ? 0 : j * walk.indexed_strides[last];
  return indexed + along + index[p + j] * walk.indexed_strides[walk.dim];
}

// An unsigned integer of `size` bytes, for moving elements without looking at them.
template <size_t kSize>
using Word = std::conditional_t<
    kSize == 1, uint8_t,
    std::conditional_t<kSize == 2, uint16_t, std::conditional_t<kSize == 4, uint32_t, uint64_t>>>;

template <typename F>
void VisitWord(size_t size, F&& f) {
  switch (size) {
    case 1:
      return f(Word<1>{});
    case 2:
      return f(Word<2>{});
    case 4:
      return f(Word<4>{});
    default:
      return f(Word<8>{});
  }
}

// a + b in T: integers wrap, bool is logical or, float16 and bfloat16 round each sum.
template <typename T>
T Added(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return a || b;
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return Store<T>(Load(a) + Load(b));
  }
}

template <typename T, typename Args>
void ScatterTyped(const Args& s) {
  const auto* index = reinterpret_cast<const int64_t*>(s.index);
  const T* src = reinterpret_cast<const T*>(s.src);
  T* dst = reinterpret_cast<T*>(s.dst);
  const int64_t other_step = s.walk.other_strides.back();
  const bool sum = s.reduce == ScatterReduce::kSum;
  ForEachLine(s.walk, [&](int64_t p, int64_t indexed, int64_t other, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
      T& to = dst[IndexedOffset(s.walk, index, p, j, indexed)];
      const T from = src[other + j * other_step];
      to = sum ? Added(to, from) : from;
    }
  });
}

}  // namespace

absl::StatusOr<int64_t> CpuBackend::DoFindIndexOutside(const std::byte* index, int64_t count,
                                                       int64_t lo, int64_t hi) {
  const auto* values = reinterpret_cast<const int64_t*>(index);
  for (int64_t i = 0; i < count; ++i) {
    if (values[i] < lo || values[i] >= hi) return i;
  }
  return -1;
}

absl::Status CpuBackend::DoWrapIndices(std::byte* index, int64_t count, int64_t size) {
  auto* values = reinterpret_cast<int64_t*>(index);
  for (int64_t i = 0; i < count; ++i) {
    if (values[i] < 0) values[i] += size;
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::DoGather(const GatherArgs& g) {
  const auto* index = reinterpret_cast<const int64_t*>(g.index);
  const int64_t other_step = g.walk.other_strides.back();
  VisitWord(DTypeSize(g.dtype), [&](auto word) {
    using W = decltype(word);
    const W* x = reinterpret_cast<const W*>(g.x);
    W* out = reinterpret_cast<W*>(g.out);
    ForEachLine(g.walk, [&](int64_t p, int64_t indexed, int64_t other, int64_t n) {
      for (int64_t j = 0; j < n; ++j) {
        out[other + j * other_step] = x[IndexedOffset(g.walk, index, p, j, indexed)];
      }
    });
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::DoScatter(const ScatterArgs& s) {
  if (s.reduce == ScatterReduce::kNone) {
    // Elements move as they are: scatter them as words of their size.
    VisitWord(DTypeSize(s.dtype), [&](auto word) { ScatterTyped<decltype(word)>(s); });
  } else {
    VisitDType(s.dtype, [&](auto tag) { ScatterTyped<typename decltype(tag)::type>(s); });
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::DoIndexSelect(const IndexSelectArgs& a) {
  const auto* index = reinterpret_cast<const int64_t*>(a.index);
  const size_t element = DTypeSize(a.dtype);
  const size_t row = static_cast<size_t>(a.inner) * element;
  for (int64_t o = 0; o < a.outer; ++o) {
    const std::byte* x = a.x + static_cast<size_t>(o * a.size) * row;
    std::byte* out = a.out + static_cast<size_t>(o * a.count) * row;
    for (int64_t c = 0; c < a.count; ++c) {
      std::memcpy(out + static_cast<size_t>(c) * row, x + static_cast<size_t>(index[c]) * row, row);
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::kernels
