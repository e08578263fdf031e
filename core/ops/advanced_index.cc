#include "core/ops/advanced_index.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/ops/op_meta.h"
#include "core/status_macros.h"

namespace tessera::ops {

absl::StatusOr<AdvancedIndex> DescribeAdvancedIndex(const Shape& self,
                                                    std::span<const std::optional<Shape>> indices) {
  const int rank = static_cast<int>(self.size());
  if (static_cast<int>(indices.size()) > rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "holds ", indices.size(), " entries, too many indices for a tensor of ", rank, " dims"));
  }
  AdvancedIndex a;
  std::vector<Shape> shapes;
  for (int d = 0; d < static_cast<int>(indices.size()); ++d) {
    if (!indices[d].has_value()) continue;
    a.dims.push_back(d);
    shapes.push_back(*indices[d]);
  }
  if (!shapes.empty()) {
    absl::StatusOr<Shape> broadcast = BroadcastShapes("index tensors", shapes);
    if (!broadcast.ok()) return absl::InvalidArgumentError(broadcast.status().message());
    a.index_shape = *std::move(broadcast);
  }
  for (size_t k = 1; k < a.dims.size(); ++k) a.adjacent &= a.dims[k] == a.dims[k - 1] + 1;
  a.insert_at = a.adjacent && !a.dims.empty() ? a.dims[0] : 0;
  a.result_dim.assign(rank, -1);
  auto indexed = [&a](int d) { return std::find(a.dims.begin(), a.dims.end(), d) != a.dims.end(); };
  auto keep = [&](int d) {
    a.result_dim[d] = static_cast<int>(a.result.size());
    a.result.push_back(self[d]);
  };
  // Adjacent: the dims before the indexed ones, the index shape, the dims after; else the index
  // shape, then every dim not indexed.
  if (a.adjacent) {
    for (int d = 0; d < a.insert_at; ++d) keep(d);
  }
  a.result.insert(a.result.end(), a.index_shape.begin(), a.index_shape.end());
  for (int d = 0; d < rank; ++d) {
    if (!indexed(d) && a.result_dim[d] < 0) keep(d);
  }
  return a;
}

}  // namespace tessera::ops
