#ifndef TESSERA_CORE_SHARDING_DTENSOR_SPEC_H_
#define TESSERA_CORE_SHARDING_DTENSOR_SPEC_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/sharding/device_mesh.h"
#include "core/sharding/placement.h"

namespace tessera {

// Everything about a DTensor except its data: global shape, dtype, mesh and one placement per mesh
// dim (Shard dims normalized to [0, rank)).
struct DTensorSpec {
  DeviceMesh mesh;
  std::vector<Placement> placements;
  Shape shape;
  DType dtype = DType::kFloat32;

  // "float32[2, 5] (S(1), S(1)) on DeviceMesh('cpu', [[0, 1], [2, 3]])".
  std::string ToString() const;
};

// Builds a spec, checking that there is one placement per mesh dim and that every Shard dim is a
// dim of the tensor (negative dims count from the end and are normalized).
absl::StatusOr<DTensorSpec> MakeDTensorSpec(DeviceMesh mesh, std::vector<Placement> placements,
                                            Shape shape, DType dtype);

// Validates `placements` for a tensor of `tensor_rank` dims on `mesh` and returns them normalized.
absl::StatusOr<std::vector<Placement>> NormalizePlacements(const DeviceMesh& mesh,
                                                           std::vector<Placement> placements,
                                                           int tensor_rank);

// One rank's shard of a DTensor: its local shape and the global offset of its first element.
struct LocalShard {
  Shape shape;
  std::vector<int64_t> offset;
  friend bool operator==(const LocalShard&, const LocalShard&) = default;
};

// compute_local_shape_and_global_offset: applies each mesh dim's Shard in order (nesting left to
// right) with the torch.chunk rule. An empty shard's offset is the end of the range it was cut
// from.
LocalShard LocalShapeAndOffsetAt(const DTensorSpec& spec, std::span<const int64_t> coordinate);
// The same for a rank id; NOT_FOUND if the rank is not in the spec's mesh.
absl::StatusOr<LocalShard> LocalShapeAndOffset(const DTensorSpec& spec, int64_t rank);

// True iff the ranks of `spec` hold the tensor's value directly (no Partial placement).
bool HasPartial(const DTensorSpec& spec);

}  // namespace tessera

#endif  // TESSERA_CORE_SHARDING_DTENSOR_SPEC_H_
