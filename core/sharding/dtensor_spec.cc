#include "core/sharding/dtensor_spec.h"

#include "absl/strings/str_cat.h"
#include "core/sharding/chunk.h"
#include "core/status_macros.h"

namespace tessera {

std::string DTensorSpec::ToString() const {
  return absl::StrCat(DTypeName(dtype), ShapeToString(shape), " ", PlacementsToString(placements),
                      " on ", mesh.ToString());
}

absl::StatusOr<std::vector<Placement>> NormalizePlacements(const DeviceMesh& mesh,
                                                           std::vector<Placement> placements,
                                                           int tensor_rank) {
  if (static_cast<int>(placements.size()) != mesh.ndim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placements ", PlacementsToString(placements), " has ", placements.size(),
        " entries but the mesh has ", mesh.ndim(), " dims; give one placement per mesh dim"));
  }
  for (Placement& p : placements) {
    if (!p.is_shard()) continue;
    absl::StatusOr<int> d = NormalizeDim(p.dim, tensor_rank);
    if (!d.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("placement ", PlacementToString(p),
                                                     " shards dim ", p.dim, " of a tensor with ",
                                                     tensor_rank, " dims"));
    }
    p.dim = *d;
  }
  return placements;
}

absl::StatusOr<DTensorSpec> MakeDTensorSpec(DeviceMesh mesh, std::vector<Placement> placements,
                                            Shape shape, DType dtype) {
  RETURN_IF_ERROR(ValidateTensorShape(dtype, shape));
  ASSIGN_OR_RETURN(
      std::vector<Placement> normalized,
      NormalizePlacements(mesh, std::move(placements), static_cast<int>(shape.size())));
  return DTensorSpec{std::move(mesh), std::move(normalized), std::move(shape), dtype};
}

LocalShard LocalShapeAndOffsetAt(const DTensorSpec& spec, std::span<const int64_t> coordinate) {
  LocalShard shard{spec.shape, std::vector<int64_t>(spec.shape.size(), 0)};
  for (int m = 0; m < spec.mesh.ndim(); ++m) {
    const Placement& p = spec.placements[m];
    if (!p.is_shard()) continue;
    const ChunkRange r = ChunkOf(shard.shape[p.dim], spec.mesh.size(m), coordinate[m]);
    shard.offset[p.dim] += r.offset;
    shard.shape[p.dim] = r.size;
  }
  return shard;
}

absl::StatusOr<LocalShard> LocalShapeAndOffset(const DTensorSpec& spec, int64_t rank) {
  ASSIGN_OR_RETURN(std::vector<int64_t> coord, spec.mesh.CoordinateOf(rank));
  return LocalShapeAndOffsetAt(spec, coord);
}

bool HasPartial(const DTensorSpec& spec) {
  for (const Placement& p : spec.placements) {
    if (p.is_partial()) return true;
  }
  return false;
}

}  // namespace tessera
