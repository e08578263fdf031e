#ifndef TESSERA_SERVER_TABLES_COLLECTIVE_LAYOUTS_H_
#define TESSERA_SERVER_TABLES_COLLECTIVE_LAYOUTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/sharding/device_mesh.h"
#include "tessera/v1/worker.pb.h"

namespace tessera {

// What one rank holds of a tensor.
struct LocalLayout {
  DType dtype;
  Shape shape;
  friend bool operator==(const LocalLayout&, const LocalLayout&) = default;
};

// What every rank of a mesh holds of one tensor, by row-major mesh position; nullopt where a rank
// holds none.
using RankLayouts = std::vector<std::optional<LocalLayout>>;

// The process groups of `mesh_dim` (-1: one group of the whole mesh) as row-major mesh positions,
// each in group-rank order: the groups the workers' communicators form.
std::vector<std::vector<int64_t>> PositionGroups(const DeviceMesh& mesh, int mesh_dim);

// A collective on tensor `input` laid out as `in` over `groups`, as the workers run it: checks
// that every rank whose input the collective reads holds it, with the same dtype and shape as the
// rest of its group (Gloo and NCCL exchange fixed byte counts, so a disagreement cannot run), and
// that the ops splitting along dim 0 get no scalar. Returns what every rank holds of the output
// afterwards (nullopt where it writes none). FAILED_PRECONDITION names the mesh positions that
// disagree and their layouts; INVALID_ARGUMENT a scalar given to a collective along dim 0.
absl::StatusOr<RankLayouts> CollectiveOutputs(v1::CollectiveOp op, const std::string& input,
                                              const RankLayouts& in,
                                              const std::vector<std::vector<int64_t>>& groups,
                                              int64_t root, int64_t peer);

std::string LayoutToString(const LocalLayout& layout);
// The bytes a rank holding `layout` holds; INT64_MAX when they would not fit in an int64_t.
int64_t LayoutBytes(const LocalLayout& layout);

}  // namespace tessera

#endif  // TESSERA_SERVER_TABLES_COLLECTIVE_LAYOUTS_H_
