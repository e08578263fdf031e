// Fuzzes placement and mesh strings as the CLI and clients give them: three lines, a mesh shape
// ("2,2"), placements ("S(0),R") and a tensor shape ("8,6"). Placements print and parse back to
// themselves; for a valid spec every rank's shard lies inside the tensor, and along a dim sharded
// by a 1-D mesh the shards tile it exactly (torch.chunk).
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "core/shape.h"
#include "core/sharding/device_mesh.h"
#include "core/sharding/dtensor_spec.h"
#include "core/sharding/placement.h"
#include "fuzz/fuzz_check.h"

namespace {

// Meshes the service could build: it refuses one with more ranks than it has workers.
constexpr int64_t kMaxMeshRanks = 4096;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::vector<std::string> lines = absl::StrSplit(fuzz::Text(data, size), '\n');
  absl::StatusOr<std::vector<Placement>> placements =
      ParsePlacements(lines.size() > 1 ? lines[1] : lines[0]);
  if (placements.ok()) {
    absl::StatusOr<std::vector<Placement>> back = ParsePlacements(PlacementsToString(*placements));
    FUZZ_CHECK(back.ok() && *back == *placements, "placements print and parse back");
  }
  absl::StatusOr<Shape> mesh_shape = ParseShape(lines[0]);
  if (!mesh_shape.ok() || lines.size() < 3 || !placements.ok()) return 0;
  absl::StatusOr<Shape> shape = ParseShape(lines[2]);
  if (!shape.ok()) return 0;
  int64_t ranks = 1;
  for (int64_t d : *mesh_shape) {
    if (d <= 0 || d > kMaxMeshRanks || (ranks *= d) > kMaxMeshRanks) return 0;
  }
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create("cpu", *mesh_shape);
  if (!mesh.ok()) return 0;
  absl::StatusOr<DTensorSpec> spec = MakeDTensorSpec(*mesh, *placements, *shape, DType::kFloat32);
  if (!spec.ok()) return 0;
  int64_t covered = 0;
  for (int64_t r = 0; r < mesh->size(); ++r) {
    absl::StatusOr<LocalShard> shard = LocalShapeAndOffset(*spec, mesh->ranks()[r]);
    FUZZ_CHECK(shard.ok(), "every rank of the mesh has a shard");
    FUZZ_CHECK(shard->shape.size() == shape->size() && shard->offset.size() == shape->size(),
               "a shard has the tensor's rank");
    for (size_t d = 0; d < shape->size(); ++d) {
      FUZZ_CHECK(shard->shape[d] >= 0 && shard->offset[d] >= 0, "no negative sizes or offsets");
      FUZZ_CHECK(shard->offset[d] + shard->shape[d] <= (*shape)[d], "a shard lies in the tensor");
    }
    if (mesh->ndim() == 1 && spec->placements[0].is_shard()) {
      covered += shard->shape[static_cast<size_t>(spec->placements[0].dim)];
    }
  }
  if (mesh->ndim() == 1 && spec->placements[0].is_shard()) {
    const auto dim = static_cast<size_t>(spec->placements[0].dim);
    FUZZ_CHECK(covered == (*shape)[dim], "shards of a sharded dim tile it");
  }
  return 0;
}
