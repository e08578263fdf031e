#ifndef TESSERA_CORE_SHARDING_DEVICE_MESH_H_
#define TESSERA_CORE_SHARDING_DEVICE_MESH_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/shape.h"

namespace tessera {

// The most dims a mesh may have: each dim is one process group (one communicator and its thread
// on every worker), so the count is bounded. PyTorch meshes use up to 4 or 5 (pp, dp, fsdp, cp,
// tp).
inline constexpr int kMaxMeshDims = 8;
// The most ranks a mesh may have, so that a hostile shape cannot make it allocate without bound.
inline constexpr int64_t kMaxMeshSize = int64_t{1} << 20;

// An N-D arrangement of ranks of one device type, as PyTorch's DeviceMesh. Ranks are stored
// row-major: the rank at coordinate c is ranks()[sum c[i] * stride[i]]. Immutable.
class DeviceMesh {
 public:
  // Validates as init_device_mesh does: device type "cpu" or "cuda", positive sizes, as many unique
  // dim names as dims (or none), ranks unique and non-negative and as many as the mesh has slots.
  // With no ranks given, ranks are 0..N-1. At most kMaxMeshDims dims and kMaxMeshSize ranks.
  static absl::StatusOr<DeviceMesh> Create(std::string device_type, Shape shape,
                                           std::vector<std::string> dim_names = {},
                                           std::vector<int64_t> ranks = {});

  // The checks of Create that need no ranks (device type, shape, dim names), allocating nothing
  // in proportion to the sizes; the number of ranks such a mesh has.
  static absl::StatusOr<int64_t> CheckLayout(absl::string_view device_type, const Shape& shape,
                                             std::span<const std::string> dim_names);

  const std::string& device_type() const { return device_type_; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t size() const { return static_cast<int64_t>(ranks_.size()); }
  int64_t size(int mesh_dim) const { return shape_[mesh_dim]; }
  const std::vector<std::string>& dim_names() const { return dim_names_; }
  const std::vector<int64_t>& ranks() const { return ranks_; }

  // Index of the named dim; NOT_FOUND naming the name and the mesh's names.
  absl::StatusOr<int> DimIndex(absl::string_view name) const;

  // True iff `rank` is in the mesh.
  bool Contains(int64_t rank) const;
  // The coordinate of `rank` (get_coordinate); NOT_FOUND if the rank is not in the mesh.
  absl::StatusOr<std::vector<int64_t>> CoordinateOf(int64_t rank) const;
  // The coordinate of the rank stored at row-major position `index`.
  std::vector<int64_t> CoordinateOfIndex(int64_t index) const;
  // The row-major position of `coordinate` (which must be inside the mesh): CoordinateOfIndex's
  // inverse.
  int64_t IndexOfCoordinate(std::span<const int64_t> coordinate) const;
  // The rank at `coordinate` (which must be inside the mesh).
  int64_t RankAt(std::span<const int64_t> coordinate) const;

  // The ranks that differ from `coordinate` only along `mesh_dim`, in order of that coordinate:
  // the process group of that mesh dim that the rank at `coordinate` belongs to.
  std::vector<int64_t> GroupAlong(int mesh_dim, std::span<const int64_t> coordinate) const;
  // Every process group of `mesh_dim`, each in order of its coordinate along the dim.
  std::vector<std::vector<int64_t>> GroupsAlong(int mesh_dim) const;

  // mesh["tp"] / mesh["dp", "tp"]: the sub-mesh of the named dims that contains `rank`. The names
  // must be dims of this mesh in ascending order, as PyTorch requires.
  absl::StatusOr<DeviceMesh> Slice(std::span<const std::string> names, int64_t rank) const;
  // Every sub-mesh of the named dims (one per coordinate of the other dims), row-major.
  absl::StatusOr<std::vector<DeviceMesh>> SliceAll(std::span<const std::string> names) const;

  // _flatten(): a 1-D mesh of all ranks in row-major order, named `name` or, by default, the dim
  // names joined by "_" ("dp_tp").
  absl::StatusOr<DeviceMesh> Flatten(std::string name = "") const;

  // "DeviceMesh('cpu', [[0, 1], [2, 3]], mesh_dim_names=('dp', 'tp'))".
  std::string ToString() const;

  friend bool operator==(const DeviceMesh& a, const DeviceMesh& b) {
    return a.device_type_ == b.device_type_ && a.shape_ == b.shape_ &&
           a.dim_names_ == b.dim_names_ && a.ranks_ == b.ranks_;
  }

 private:
  DeviceMesh() = default;

  std::string device_type_;
  Shape shape_;
  std::vector<std::string> dim_names_;
  std::vector<int64_t> ranks_;
  std::vector<int64_t> strides_;
};

}  // namespace tessera

#endif  // TESSERA_CORE_SHARDING_DEVICE_MESH_H_
