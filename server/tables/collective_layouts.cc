#include "server/tables/collective_layouts.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/sharding/chunk.h"

namespace tessera {
namespace {

Shape WithRows(Shape shape, int64_t rows) {
  shape[0] = rows;
  return shape;
}

}  // namespace

std::vector<std::vector<int64_t>> PositionGroups(const DeviceMesh& mesh, int mesh_dim) {
  if (mesh_dim < 0) {
    std::vector<int64_t> all(static_cast<size_t>(mesh.size()));
    for (int64_t i = 0; i < mesh.size(); ++i) all[static_cast<size_t>(i)] = i;
    return {all};
  }
  // Row-major: positions along `mesh_dim` are `stride` apart.
  int64_t stride = 1;
  for (int d = mesh.ndim() - 1; d > mesh_dim; --d) stride *= mesh.size(d);
  std::vector<std::vector<int64_t>> groups;
  for (int64_t index = 0; index < mesh.size(); ++index) {
    if (mesh.CoordinateOfIndex(index)[static_cast<size_t>(mesh_dim)] != 0) continue;
    std::vector<int64_t>& group = groups.emplace_back();
    for (int64_t c = 0; c < mesh.size(mesh_dim); ++c) group.push_back(index + c * stride);
  }
  return groups;
}

std::string LayoutToString(const LocalLayout& layout) {
  return absl::StrCat(DTypeName(layout.dtype), ShapeToString(layout.shape));
}

int64_t LayoutBytes(const LocalLayout& layout) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (int64_t d : layout.shape) {
    if (d == 0) return 0;
  }
  int64_t bytes = static_cast<int64_t>(DTypeSize(layout.dtype));
  for (int64_t d : layout.shape) {
    if (d < 0 || bytes > kMax / d) return kMax;
    bytes *= d;
  }
  return bytes;
}

absl::StatusOr<RankLayouts> CollectiveOutputs(v1::CollectiveOp op, const std::string& input,
                                              const RankLayouts& in,
                                              const std::vector<std::vector<int64_t>>& groups,
                                              int64_t root, int64_t peer) {
  RankLayouts out(in.size());
  const bool splits = op == v1::ALL_GATHER_OP || op == v1::GATHER || op == v1::SCATTER ||
                      op == v1::REDUCE_SCATTER_OP || op == v1::ALL_TO_ALL_OP;
  for (const std::vector<int64_t>& group : groups) {
    const int64_t k = static_cast<int64_t>(group.size());
    // The group ranks whose inputs must agree: a send/recv reads the sender's and sizes the
    // receiver's buffer by its own; every other collective reads all of them.
    std::vector<int64_t> readers;
    if (op == v1::SEND_RECV) {
      readers = {root, peer};
    } else {
      for (int64_t r = 0; r < k; ++r) readers.push_back(r);
    }
    const std::optional<LocalLayout>& first = in[static_cast<size_t>(group[readers[0]])];
    if (!first.has_value()) {
      return absl::NotFoundError(
          absl::StrCat("tensor '", input, "' is not on mesh position ", group[readers[0]]));
    }
    for (int64_t r : readers) {
      const std::optional<LocalLayout>& mine = in[static_cast<size_t>(group[r])];
      if (!mine.has_value()) {
        return absl::NotFoundError(
            absl::StrCat("tensor '", input, "' is not on mesh position ", group[r]));
      }
      if (*mine != *first) {
        return absl::FailedPreconditionError(absl::StrCat(
            "mesh positions ", group[readers[0]], " and ", group[r], " of one group hold '", input,
            "' as ", LayoutToString(*first), " and ", LayoutToString(*mine),
            "; a collective needs the same dtype and shape on every rank of the group"));
      }
    }
    const LocalLayout& l = *first;
    if (splits && l.shape.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", input, "' is a scalar; this collective works along dim 0"));
    }
    const int64_t n0 = l.shape.empty() ? 1 : l.shape[0];
    for (int64_t r = 0; r < k; ++r) {
      std::optional<LocalLayout>& o = out[static_cast<size_t>(group[r])];
      switch (op) {
        case v1::BROADCAST:
        case v1::ALL_REDUCE_OP:
          o = l;
          break;
        case v1::REDUCE:
          if (r == root) o = l;
          break;
        case v1::ALL_GATHER_OP:
          o = LocalLayout{l.dtype, WithRows(l.shape, k * n0)};
          break;
        case v1::GATHER:
          if (r == root) o = LocalLayout{l.dtype, WithRows(l.shape, k * n0)};
          break;
        case v1::SCATTER:
        case v1::REDUCE_SCATTER_OP:
          o = LocalLayout{l.dtype, WithRows(l.shape, ChunkOf(n0, k, r).size)};
          break;
        case v1::ALL_TO_ALL_OP:
          o = LocalLayout{l.dtype, WithRows(l.shape, k * ChunkOf(n0, k, r).size)};
          break;
        case v1::SEND_RECV:
          if (r == peer) o = l;
          break;
        default:
          return absl::InvalidArgumentError(
              absl::StrCat("collective op ", op, " writes no tensor"));
      }
    }
  }
  return out;
}

}  // namespace tessera
