#include "kernels/broadcast.h"

#include <algorithm>

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
  const std::vector<int64_t> sa = StridesAlignedTo(a, out);
  const std::vector<int64_t> sb = StridesAlignedTo(b, out);
  BroadcastLayout layout;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 1) continue;
    if (!layout.shape.empty() && layout.a_strides.back() == sa[i] * out[i] &&
        layout.b_strides.back() == sb[i] * out[i]) {
      layout.shape.back() *= out[i];
      layout.a_strides.back() = sa[i];
      layout.b_strides.back() = sb[i];
      continue;
    }
    layout.shape.push_back(out[i]);
    layout.a_strides.push_back(sa[i]);
    layout.b_strides.push_back(sb[i]);
  }
  return layout;
}

}  // namespace tessera::kernels
