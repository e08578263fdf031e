// ReplicaRepair::RepairCommand against the pure planner: for every layout of a 2x2 and a 2x3 mesh
// and every set of one or two restarted ranks, it finds a repair exactly when TensorLoss says every
// block of a non-Partial tensor survives on a live rank, and the broadcast it describes gives each
// rank the block LocalShapeAndOffsetAt assigns it, from a rank that was not restarted.

#include "server/recovery/replica_repair.h"

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/sharding/dtensor_spec.h"
#include "gtest/gtest.h"
#include "server/cluster/worker_loss.h"

namespace tessera {
namespace {

using RepairCase = std::tuple<Shape, std::string, std::vector<int64_t>>;

class RepairCommandTest : public ::testing::TestWithParam<RepairCase> {};

TEST_P(RepairCommandTest, MatchesThePlanner) {
  const auto& [mesh_shape, placements_text, restarted] = GetParam();
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create("cpu", mesh_shape);
  ASSERT_TRUE(mesh.ok());
  for (int64_t p : restarted) {
    if (p >= mesh->size()) GTEST_SKIP() << "rank " << p << " is outside the mesh";
  }
  absl::StatusOr<std::vector<Placement>> placements = ParsePlacements(placements_text);
  ASSERT_TRUE(placements.ok()) << placements.status();
  const DTensorSpec spec{*mesh, *placements, {12, 6}, DType::kFloat32};
  const auto is_restarted = [&](int64_t p) {
    return std::find(restarted.begin(), restarted.end(), p) != restarted.end();
  };
  const absl::Status loss = TensorLoss("t", spec, mesh->ranks(), [&](int64_t p) -> absl::Status {
    return is_restarted(p) ? absl::UnavailableError("restarted") : absl::OkStatus();
  });
  const bool repairable = !HasPartial(spec) && loss.code() != absl::StatusCode::kDataLoss;
  const std::optional<v1::SpreadTensor> command = ReplicaRepair::RepairCommand(spec, restarted);
  if (!repairable) {
    EXPECT_FALSE(command.has_value());
    return;
  }
  // One or two restarted ranks of a non-Partial tensor whose blocks survive: one broadcast always
  // reaches them, each group along its dim from a rank of its own (for two diagonal ranks of a 2x2
  // mesh the groups' sources differ).
  ASSERT_TRUE(command.has_value());
  ASSERT_EQ(command->broadcast_dims_size(), 1);
  const int m = command->broadcast_dims(0);
  ASSERT_TRUE(spec.placements[m].is_replicate());
  ASSERT_EQ(command->source_coordinate_size(), mesh->ndim());
  const bool by_group = command->group_sources_size() > 0;
  if (by_group) {
    ASSERT_EQ(command->group_sources_size(), mesh->size());
  }
  for (int64_t p = 0; p < mesh->size(); ++p) {
    std::vector<int64_t> from = mesh->CoordinateOfIndex(p);
    from[m] =
        by_group ? command->group_sources(static_cast<int>(p)) : command->source_coordinate(m);
    const int64_t from_index = mesh->IndexOfCoordinate(from);
    EXPECT_FALSE(is_restarted(from_index)) << "rank " << p << " receives from a restarted rank";
    EXPECT_EQ(LocalShapeAndOffsetAt(spec, from),
              LocalShapeAndOffsetAt(spec, mesh->CoordinateOfIndex(p)))
        << "rank " << p << " receives another block";
    if (by_group) {  // every rank of p's group names the same source
      EXPECT_EQ(command->group_sources(static_cast<int>(from_index)),
                command->group_sources(static_cast<int>(p)))
          << "rank " << p << "'s group names two sources";
    }
  }
}

// Three of a 2x2 mesh's four ranks restarted, the fourth holding the only copy of an R,R tensor:
// the copy survives, but reaching the three takes two broadcasts (along one dim, then the other),
// which a repair does not do; the tensor is reported lost rather than repaired wrongly.
TEST(RepairCommandBeyondOneBroadcast, ThreeOfFourRestarted) {
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create("cpu", Shape{2, 2});
  ASSERT_TRUE(mesh.ok());
  const DTensorSpec spec{
      *mesh, {Placement::Replicate(), Placement::Replicate()}, {4}, DType::kFloat32};
  EXPECT_FALSE(ReplicaRepair::RepairCommand(spec, {0, 1, 3}).has_value());
  EXPECT_TRUE(ReplicaRepair::RepairCommand(spec, {0, 3}).has_value());
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, RepairCommandTest,
    ::testing::Combine(::testing::Values(Shape{2, 2}, Shape{2, 3}),
                       ::testing::Values("R,R", "R,S(0)", "S(0),R", "S(0),S(1)", "P,R", "R,P",
                                         "S(1),S(1)"),
                       ::testing::Values(std::vector<int64_t>{0}, std::vector<int64_t>{3},
                                         std::vector<int64_t>{5}, std::vector<int64_t>{0, 3},
                                         std::vector<int64_t>{1, 2}, std::vector<int64_t>{0, 1})),
    [](const auto& info) {
      std::string placements = std::get<1>(info.param);
      for (char& c : placements) {
        if (c == ',' || c == '(' || c == ')') c = '_';
      }
      return absl::StrCat("mesh", absl::StrJoin(std::get<0>(info.param), "x"), "_", placements,
                          "_restarted", absl::StrJoin(std::get<2>(info.param), "and"));
    });

}  // namespace
}  // namespace tessera
