// torch's advanced indexing (`x[i, :, j]`, index_put) in shapes: which dims of self the index
// tensors of a Tensor?[] argument index, the shape they broadcast to, and where that shape sits in
// the result. Shared by the meta and strategy functions and the ranks' local implementations.
#ifndef TESSERA_CORE_OPS_ADVANCED_INDEX_H_
#define TESSERA_CORE_OPS_ADVANCED_INDEX_H_

#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/shape.h"

namespace tessera::ops {

// self[indices], described by shapes.
struct AdvancedIndex {
  std::vector<int> dims;  // the dims of self an index tensor indexes, ascending
  Shape index_shape;      // the index tensors' shapes broadcast together
  // Whether `dims` are consecutive: then index_shape takes their place in the result, else it
  // comes first (torch's rule); insert_at is where it starts.
  bool adjacent = true;
  int insert_at = 0;
  Shape result;                 // the shape of self[indices]
  std::vector<int> result_dim;  // for each dim of self, its dim in the result (-1 if indexed)
};

// `indices[i]` is the shape of the index tensor of self's dim i, or nullopt for None (the whole
// dim); the dims after the last entry are whole. No index tensor at all leaves self as it is.
// INVALID_ARGUMENT (a message naming neither op nor argument) for more entries than self has dims
// or index shapes that do not broadcast.
absl::StatusOr<AdvancedIndex> DescribeAdvancedIndex(const Shape& self,
                                                    std::span<const std::optional<Shape>> indices);

}  // namespace tessera::ops

#endif  // TESSERA_CORE_OPS_ADVANCED_INDEX_H_
