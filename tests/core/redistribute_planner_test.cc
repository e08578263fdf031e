// Hand-worked plans: which collectives, on which mesh dims, and how many bytes.

#include "core/sharding/redistribute_planner.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

DTensorSpec Spec(Shape mesh, std::vector<Placement> placements, Shape shape,
                 DType dtype = DType::kFloat32) {
  return MakeDTensorSpec(DeviceMesh::Create("cpu", std::move(mesh)).value(), std::move(placements),
                         std::move(shape), dtype)
      .value();
}

RedistributePlan Plan(const DTensorSpec& src, std::vector<Placement> dst,
                      PlannerKind kind = PlannerKind::kMinCost) {
  absl::StatusOr<RedistributePlan> plan = PlanRedistribute(src, dst, kind);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : RedistributePlan{};
}

const Placement R = Placement::Replicate();
const Placement P = Placement::Partial();
Placement S(int d) { return Placement::Shard(d); }

struct OneStepCase {
  const char* name;
  Shape mesh;
  Shape shape;
  std::vector<Placement> from, to;
  Collective collective;
  int64_t bytes;  // per rank, worked out by hand
};

class OneStepTest : public ::testing::TestWithParam<OneStepCase> {};

TEST_P(OneStepTest, CollectiveAndBytes) {
  const OneStepCase& c = GetParam();
  for (PlannerKind kind : {PlannerKind::kGreedy, PlannerKind::kMinCost}) {
    const RedistributePlan plan = Plan(Spec(c.mesh, c.from, c.shape), c.to, kind);
    ASSERT_EQ(plan.steps.size(), 1u) << plan.ToString();
    EXPECT_EQ(plan.steps[0].collective, c.collective);
    EXPECT_EQ(plan.steps[0].send_bytes, c.bytes);
    EXPECT_EQ(plan.steps[0].recv_bytes, c.bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(
    HandWorked, OneStepTest,
    ::testing::Values(
        // 8x6 float32 rows over 4 ranks: chunks of 2x6 = 48 B, each rank receives 3 of them.
        OneStepCase{"AllGatherEven", {4}, {8, 6}, {S(0)}, {R}, Collective::kAllGather, 144},
        // 5 rows over 4 ranks (2,2,1,0) are padded to 2 rows on the wire: still 3 x 48 B.
        OneStepCase{"AllGatherUneven", {4}, {5, 6}, {S(0)}, {R}, Collective::kAllGather, 144},
        // 48 elements: ring all_reduce moves 2 x 3 blocks of 12 floats.
        OneStepCase{"AllReduce", {4}, {8, 6}, {P}, {R}, Collective::kAllReduce, 288},
        OneStepCase{"ReduceScatter", {4}, {8, 6}, {P}, {S(0)}, Collective::kReduceScatter, 144},
        // 8x8 over 4: each rank sends 3 blocks of 2x2 floats.
        OneStepCase{"AllToAll", {4}, {8, 8}, {S(0)}, {S(1)}, Collective::kAllToAll, 48},
        OneStepCase{"LocalChunk", {4}, {8, 6}, {R}, {S(1)}, Collective::kLocalChunk, 0},
        OneStepCase{"LocalPartition", {4}, {8, 6}, {R}, {P}, Collective::kLocalPartition, 0},
        // Shard -> Partial(sum) writes each shard into zeros where it is: no traffic.
        OneStepCase{"LocalEmbed", {4}, {5, 6}, {S(0)}, {P}, Collective::kLocalEmbed, 0},
        OneStepCase{
            "InnerLocalEmbed", {2, 3}, {4, 7}, {S(0), S(1)}, {S(0), P}, Collective::kLocalEmbed, 0},
        // On a 2x2 mesh the inner S(1) -> S(2) works within the outer S(1) chunk: one step.
        OneStepCase{"NestedAllToAll",
                    {2, 2},
                    {4, 8, 8},
                    {S(1), S(1)},
                    {S(1), S(2)},
                    Collective::kAllToAll,
                    4 * 2 * 4 * 4},
        // All-gather along mesh dim 1 of a 2x2 mesh of a [4,6] tensor already split by rows.
        OneStepCase{"InnerAllGather",
                    {2, 2},
                    {4, 6},
                    {S(0), S(1)},
                    {S(0), R},
                    Collective::kAllGather,
                    2 * 3 * 4}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(PlanRedistribute, SameLayoutNeedsNoSteps) {
  EXPECT_TRUE(Plan(Spec({2, 2}, {S(0), R}, {4, 4}), {S(0), R}).steps.empty());
}

TEST(PlanRedistribute, NestedShardingIsReplicatedFirst) {
  // (S0, S0) -> (R, S0): the inner shard of dim 0 sits inside the outer one and must be undone.
  const RedistributePlan plan =
      Plan(Spec({2, 2}, {S(0), S(0)}, {8, 4}), {R, S(0)}, PlannerKind::kGreedy);
  ASSERT_EQ(plan.steps.size(), 3u) << plan.ToString();
  EXPECT_EQ(plan.steps[0].mesh_dim, 1);
  EXPECT_EQ(plan.steps[0].collective, Collective::kAllGather);
  EXPECT_EQ(plan.steps[1].mesh_dim, 0);
  EXPECT_EQ(plan.steps[1].collective, Collective::kAllGather);
  EXPECT_EQ(plan.steps[2].mesh_dim, 1);
  EXPECT_EQ(plan.steps[2].collective, Collective::kLocalChunk);
}

TEST(PlanRedistribute, MinCostNeverMovesMoreThanGreedy) {
  const DTensorSpec src = Spec({2, 2}, {S(0), S(1)}, {8, 8});
  const std::vector<Placement> dst = {S(1), S(0)};
  EXPECT_LE(Plan(src, dst).total_recv_bytes(),
            Plan(src, dst, PlannerKind::kGreedy).total_recv_bytes());
}

TEST(PlanRedistribute, ShardToPartialOtherThanSumIsRefused) {
  for (ReduceOp op : {ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct}) {
    const Placement to = Placement::Partial(op);
    for (PlannerKind kind : {PlannerKind::kGreedy, PlannerKind::kMinCost}) {
      absl::StatusOr<RedistributePlan> plan =
          PlanRedistribute(Spec({4}, {S(0)}, {8, 8}), {to}, kind);
      ASSERT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << PlacementToString(to);
      EXPECT_THAT(plan.status().message(), HasSubstr("S(0)"));
      EXPECT_THAT(plan.status().message(), HasSubstr(PlacementToString(to)));
    }
    EXPECT_EQ(PlanStep(Spec({4}, {S(0)}, {8, 8}), 0, to).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(PlanStep, ShardToPartialSumRefusesADimAnInnerMeshDimShards) {
  absl::StatusOr<RedistributeStep> step = PlanStep(Spec({2, 2}, {S(0), S(0)}, {8, 4}), 0, P);
  ASSERT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(step.status().message(), HasSubstr("inner mesh dim 1 also shards tensor dim 0"));
}

TEST(PlanRedistribute, NestedShardToPartialSumGathersTheInnerDimFirst) {
  // (S0, S0) -> (P, S0): the inner shard of dim 0 must be undone before the outer one becomes
  // Partial, then redone.
  for (PlannerKind kind : {PlannerKind::kGreedy, PlannerKind::kMinCost}) {
    const RedistributePlan plan = Plan(Spec({2, 2}, {S(0), S(0)}, {8, 4}), {P, S(0)}, kind);
    ASSERT_EQ(plan.steps.size(), 3u) << plan.ToString();
    EXPECT_EQ(plan.steps[0].mesh_dim, 1);
    EXPECT_EQ(plan.steps[0].collective, Collective::kAllGather);
    EXPECT_EQ(plan.steps[1].mesh_dim, 0);
    EXPECT_EQ(plan.steps[1].collective, Collective::kLocalEmbed);
    EXPECT_EQ(plan.steps[2].mesh_dim, 1);
    EXPECT_EQ(plan.steps[2].collective, Collective::kLocalChunk);
  }
}

TEST(PlanRedistribute, PartialOpChangeIsRefused) {
  absl::StatusOr<RedistributePlan> plan = PlanRedistribute(
      Spec({2}, {Placement::Partial(ReduceOp::kMax)}, {4}), {Placement::Partial(ReduceOp::kSum)});
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("P(max)"));
}

TEST(PlanRedistribute, WrongPlacementCountNamesBoth) {
  absl::StatusOr<RedistributePlan> plan = PlanRedistribute(Spec({2, 2}, {R, R}, {4}), {R});
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("1 entries but the mesh has 2 dims"));
}

TEST(PlanRedistribute, ShardDimOutOfRangeIsRefused) {
  absl::StatusOr<RedistributePlan> plan = PlanRedistribute(Spec({2}, {R}, {4, 4}), {S(2)});
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("shards dim 2"));
}

TEST(PlanStep, RefusesCuttingADimThatAnInnerMeshDimShards) {
  absl::StatusOr<RedistributeStep> step = PlanStep(Spec({2, 2}, {S(0), S(0)}, {8, 4}), 0, R);
  ASSERT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(step.status().message(), HasSubstr("inner mesh dim 1 also shards tensor dim 0"));
}

TEST(RedistributePlan, ToStringListsEachStep) {
  const RedistributePlan plan = Plan(Spec({4}, {S(0)}, {8, 6}), {R});
  EXPECT_THAT(plan.ToString(), HasSubstr("all_gather"));
  EXPECT_THAT(plan.ToString(), HasSubstr("recv 144 B"));
}

}  // namespace
}  // namespace tessera
