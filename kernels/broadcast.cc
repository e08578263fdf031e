#include "kernels/broadcast.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::kernels {
namespace {

// Strides of a contiguous tensor of shape `in` read as shape `out`: 0 on broadcast dims.
std::vector<int64_t> StridesAlignedTo(std::span<const int64_t> in, std::span<const int64_t> out) {
  std::vector<int64_t> strides(out.size(), 0);
  const std::vector<int64_t> own = ContiguousStrides(in);
  const size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) {
    strides[lead + i] = in[i] == 1 ? 0 : own[i];
  }
  return strides;
}

// The walk of N inputs of shapes `in` broadcast to `out`: size-1 dims of out dropped, and a dim
// merged into the one before it where every input's strides allow.
template <size_t N>
void MergeDims(const std::array<std::span<const int64_t>, N>& in, std::span<const int64_t> out,
               Shape* shape, std::array<std::vector<int64_t>, N>* strides) {
  std::array<std::vector<int64_t>, N> aligned;
  for (size_t k = 0; k < N; ++k) aligned[k] = StridesAlignedTo(in[k], out);
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 1) continue;
    bool merges = !shape->empty();
    for (size_t k = 0; k < N && merges; ++k) {
      merges = (*strides)[k].back() == aligned[k][i] * out[i];
    }
    if (merges) {
      shape->back() *= out[i];
      for (size_t k = 0; k < N; ++k) (*strides)[k].back() = aligned[k][i];
      continue;
    }
    shape->push_back(out[i]);
    for (size_t k = 0; k < N; ++k) (*strides)[k].push_back(aligned[k][i]);
  }
}

}  // namespace

absl::StatusOr<Shape> BroadcastShapes(std::span<const int64_t> a, std::span<const int64_t> b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat("shapes ", ShapeToString(a), " and ",
                                                     ShapeToString(b), " do not broadcast (dim ", i,
                                                     " of the result: ", da, " vs ", db, ")"));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

BroadcastLayout MakeBroadcastLayout(std::span<const int64_t> a, std::span<const int64_t> b,
                                    std::span<const int64_t> out) {
  BroadcastLayout layout;
  std::array<std::vector<int64_t>, 2> strides;
  MergeDims<2>({a, b}, out, &layout.shape, &strides);
  layout.a_strides = std::move(strides[0]);
  layout.b_strides = std::move(strides[1]);
  return layout;
}

BroadcastLayout3 MakeBroadcastLayout3(std::span<const int64_t> a, std::span<const int64_t> b,
                                      std::span<const int64_t> c, std::span<const int64_t> out) {
  BroadcastLayout3 layout;
  MergeDims<3>({a, b, c}, out, &layout.shape, &layout.strides);
  return layout;
}

}  // namespace tessera::kernels
