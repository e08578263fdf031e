// Property tests of the redistribute planner against the simulated mesh, over the product
// meshes × tensor shapes × dtypes × every (source, destination) pair of placements.

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/sharding/redistribute_planner.h"
#include "core/sharding/simulated_mesh.h"
#include "core/small_integer_tensor.h"
#include "gtest/gtest.h"
#include "tests/support/placement_product.h"

namespace tessera {
namespace {

struct Case {
  Shape mesh;
  Shape tensor;
  DType dtype;
};

// Every placement tuple for a tensor of `rank` dims on a mesh of `ndim` dims. Partial ops other
// than sum are included on meshes of up to two dims (the 3-D product would be too large).
std::vector<std::vector<Placement>> AllPlacements(int ndim, int rank) {
  std::vector<Placement> options = {Placement::Replicate(), Placement::Partial(ReduceOp::kSum)};
  for (int d = 0; d < rank; ++d) options.push_back(Placement::Shard(d));
  if (ndim <= 2) {
    options.push_back(Placement::Partial(ReduceOp::kMax));
    options.push_back(Placement::Partial(ReduceOp::kAvg));
  }
  if (ndim == 1) {
    options.push_back(Placement::Partial(ReduceOp::kMin));
    options.push_back(Placement::Partial(ReduceOp::kProduct));
  }
  return testing::PlacementProduct(options, ndim);
}

// A mesh dim can become Partial(op) from Replicate, and Partial(sum) from a Shard too; a Partial
// keeps its op.
bool Supported(const std::vector<Placement>& src, const std::vector<Placement>& dst) {
  for (size_t m = 0; m < src.size(); ++m) {
    if (!dst[m].is_partial() || src[m] == dst[m] || src[m].is_replicate()) continue;
    if (!(src[m].is_shard() && dst[m].is_partial(ReduceOp::kSum))) return false;
  }
  return true;
}

// Checks that `shards` hold `full` laid out as `spec`: bit-exact shards for a layout without
// Partial, and a bit-exact full tensor after reduction otherwise.
void ExpectLayout(SimulatedMesh& sim, const HostTensor& full, const DTensorSpec& spec,
                  std::vector<HostTensor> shards, const std::string& what) {
  if (!HasPartial(spec)) {
    for (int64_t pos = 0; pos < spec.mesh.size(); ++pos) {
      const LocalShard local = LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(pos));
      const HostTensor want = PackBlock(full, local.offset, local.shape).value();
      ASSERT_TRUE(shards[pos].BitEqual(want)) << what << ": shard at position " << pos;
    }
    return;
  }
  absl::StatusOr<HostTensor> got = sim.FullTensor(spec, std::move(shards));
  ASSERT_TRUE(got.ok()) << what << ": " << got.status();
  ASSERT_TRUE(got->BitEqual(full)) << what << ": reduced full tensor differs";
}

// Runs `plan` one step at a time and checks each step's traffic on the simulated mesh against the
// bytes the plan states. Returns the final shards.
std::vector<HostTensor> RunAndCheckBytes(SimulatedMesh& sim, const DTensorSpec& src,
                                         const RedistributePlan& plan,
                                         std::vector<HostTensor> shards, const std::string& what) {
  DTensorSpec spec = src;
  for (const RedistributeStep& step : plan.steps) {
    sim.ResetTraffic();
    RedistributePlan one{{step}};
    absl::StatusOr<std::vector<HostTensor>> next = sim.Redistribute(spec, one, std::move(shards));
    EXPECT_TRUE(next.ok()) << what << ": " << next.status();
    if (!next.ok()) return {};
    shards = *std::move(next);
    const int64_t sent = *std::max_element(sim.bytes_sent().begin(), sim.bytes_sent().end());
    const int64_t received =
        *std::max_element(sim.bytes_received().begin(), sim.bytes_received().end());
    EXPECT_EQ(sent, step.send_bytes)
        << what << ": step on mesh dim " << step.mesh_dim << " " << CollectiveName(step.collective);
    EXPECT_EQ(received, step.recv_bytes)
        << what << ": step on mesh dim " << step.mesh_dim << " " << CollectiveName(step.collective);
    spec.placements[step.mesh_dim] = step.to;
  }
  return shards;
}

class RedistributePropertyTest : public ::testing::TestWithParam<Case> {};

TEST_P(RedistributePropertyTest, DistributeThenGatherIsBitExact) {
  const Case& c = GetParam();
  const DeviceMesh mesh = DeviceMesh::Create("cpu", c.mesh).value();
  SimulatedMesh sim(mesh);
  const HostTensor full = SmallIntegerTensor(c.dtype, c.tensor, 7);
  for (const auto& placements : AllPlacements(mesh.ndim(), static_cast<int>(c.tensor.size()))) {
    const DTensorSpec spec = MakeDTensorSpec(mesh, placements, c.tensor, c.dtype).value();
    const std::string what = spec.ToString();
    std::vector<HostTensor> shards = sim.Distribute(full, spec).value();
    if (!HasPartial(spec)) {
      absl::StatusOr<HostTensor> assembled = AssembleShards(spec, shards);
      ASSERT_TRUE(assembled.ok()) << what << ": " << assembled.status();
      ASSERT_TRUE(assembled->BitEqual(full)) << what;
    }
    absl::StatusOr<HostTensor> gathered = sim.FullTensor(spec, std::move(shards));
    ASSERT_TRUE(gathered.ok()) << what << ": " << gathered.status();
    ASSERT_TRUE(gathered->BitEqual(full)) << what;
  }
}

TEST_P(RedistributePropertyTest, EveryPairMatchesTheLayoutComputedFromTheFullTensor) {
  const Case& c = GetParam();
  const DeviceMesh mesh = DeviceMesh::Create("cpu", c.mesh).value();
  SimulatedMesh sim(mesh);
  const HostTensor full = SmallIntegerTensor(c.dtype, c.tensor, 11);
  const auto all = AllPlacements(mesh.ndim(), static_cast<int>(c.tensor.size()));
  // On 3-D meshes every source meets a fixed, spread-out sample of destinations.
  const size_t dst_stride = mesh.ndim() >= 3 ? 7 : 1;
  int checked = 0;
  for (size_t s = 0; s < all.size(); ++s) {
    const DTensorSpec src = MakeDTensorSpec(mesh, all[s], c.tensor, c.dtype).value();
    for (size_t d = s % dst_stride; d < all.size(); d += dst_stride) {
      const std::vector<Placement>& dst_placements = all[d];
      const std::string what =
          absl::StrCat(src.ToString(), " -> ", PlacementsToString(dst_placements));
      if (!Supported(all[s], dst_placements)) {
        for (PlannerKind kind : {PlannerKind::kGreedy, PlannerKind::kMinCost}) {
          EXPECT_EQ(PlanRedistribute(src, dst_placements, kind).status().code(),
                    absl::StatusCode::kInvalidArgument)
              << what;
        }
        continue;
      }
      const DTensorSpec dst = MakeDTensorSpec(mesh, dst_placements, c.tensor, c.dtype).value();
      int64_t greedy_bytes = 0;
      for (PlannerKind kind : {PlannerKind::kGreedy, PlannerKind::kMinCost}) {
        const std::string label =
            absl::StrCat(what, kind == PlannerKind::kGreedy ? " [greedy]" : " [min-cost]");
        absl::StatusOr<RedistributePlan> plan = PlanRedistribute(src, dst_placements, kind);
        ASSERT_TRUE(plan.ok()) << label << ": " << plan.status();
        std::vector<HostTensor> shards =
            RunAndCheckBytes(sim, src, *plan, sim.Distribute(full, src).value(), label);
        ASSERT_EQ(static_cast<int64_t>(shards.size()), mesh.size()) << label;
        ExpectLayout(sim, full, dst, std::move(shards), label);
        if (kind == PlannerKind::kGreedy) {
          greedy_bytes = plan->total_recv_bytes();
        } else {
          EXPECT_LE(plan->total_recv_bytes(), greedy_bytes) << label << "\n" << plan->ToString();
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// Partial's contract for distribute_tensor: reducing each Partial mesh dim (inner to outer, with
// core's element-wise reductions, not the simulated collectives) gives every rank the shard of the
// full tensor it would hold were those dims Replicate. How the value is split among the ranks
// (Tessera: the value at coordinate 0 and the identity elsewhere, or the value everywhere;
// torch: the value divided by the group size) is not part of it.
TEST_P(RedistributePropertyTest, DistributeOntoPartialReducesToTheValue) {
  const Case& c = GetParam();
  const DeviceMesh mesh = DeviceMesh::Create("cpu", c.mesh).value();
  SimulatedMesh sim(mesh);
  const HostTensor full = SmallIntegerTensor(c.dtype, c.tensor, 17);
  const std::vector<int64_t> strides = ContiguousStrides(mesh.shape());
  int checked = 0;
  for (const auto& placements : AllPlacements(mesh.ndim(), static_cast<int>(c.tensor.size()))) {
    const DTensorSpec spec = MakeDTensorSpec(mesh, placements, c.tensor, c.dtype).value();
    if (!HasPartial(spec)) continue;
    std::vector<HostTensor> shards = sim.Distribute(full, spec).value();
    DTensorSpec reduced = spec;
    for (int m = mesh.ndim() - 1; m >= 0; --m) {
      if (!placements[m].is_partial()) continue;
      const ReduceOp op = placements[m].op;
      for (int64_t first = 0; first < mesh.size(); ++first) {
        if (mesh.CoordinateOfIndex(first)[m] != 0) continue;
        HostTensor acc = shards[first].Clone();
        for (int64_t q = 1; q < mesh.size(m); ++q) {
          const HostTensor& in = shards[first + q * strides[m]];
          ReduceInto(op, c.dtype, acc.data(), in.data(), in.num_elements());
        }
        if (op == ReduceOp::kAvg)
          DivideInPlace(c.dtype, acc.data(), acc.num_elements(), mesh.size(m));
        for (int64_t q = 0; q < mesh.size(m); ++q) shards[first + q * strides[m]] = acc.Clone();
      }
      reduced.placements[m] = Placement::Replicate();
    }
    for (int64_t pos = 0; pos < mesh.size(); ++pos) {
      const LocalShard local = LocalShapeAndOffsetAt(reduced, mesh.CoordinateOfIndex(pos));
      EXPECT_TRUE(shards[pos].BitEqual(PackBlock(full, local.offset, local.shape).value()))
          << spec.ToString() << ": rank position " << pos;
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

// Shard(d) → Partial(sum) on one mesh dim, for every layout without Partial and every mesh dim
// that shards: each rank holds zeros of its new local shape with its old shard at the old shard's
// place (from the global offsets), and the reduction gives back the full tensor.
TEST_P(RedistributePropertyTest, ShardToPartialSumHoldsEachShardInZeros) {
  const Case& c = GetParam();
  const DeviceMesh mesh = DeviceMesh::Create("cpu", c.mesh).value();
  SimulatedMesh sim(mesh);
  const HostTensor full = SmallIntegerTensor(c.dtype, c.tensor, 13);
  int checked = 0;
  for (const auto& placements : AllPlacements(mesh.ndim(), static_cast<int>(c.tensor.size()))) {
    const DTensorSpec src = MakeDTensorSpec(mesh, placements, c.tensor, c.dtype).value();
    if (HasPartial(src)) continue;
    for (int m = 0; m < mesh.ndim(); ++m) {
      if (!placements[m].is_shard()) continue;
      absl::StatusOr<RedistributeStep> step = PlanStep(src, m, Placement::Partial());
      const std::string what = absl::StrCat(src.ToString(), ": mesh dim ", m, " -> P(sum)");
      bool inner_shards_same_dim = false;
      for (int inner = m + 1; inner < mesh.ndim(); ++inner) {
        inner_shards_same_dim |= placements[inner].is_shard(placements[m].dim);
      }
      if (inner_shards_same_dim) {
        EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument) << what;
        continue;
      }
      ASSERT_TRUE(step.ok()) << what << ": " << step.status();
      EXPECT_EQ(step->collective, Collective::kLocalEmbed) << what;
      EXPECT_EQ(step->recv_bytes, 0) << what;
      DTensorSpec dst = src;
      dst.placements[m] = Placement::Partial();
      sim.ResetTraffic();
      absl::StatusOr<std::vector<HostTensor>> shards =
          sim.Redistribute(src, RedistributePlan{{*step}}, sim.Distribute(full, src).value());
      ASSERT_TRUE(shards.ok()) << what << ": " << shards.status();
      for (int64_t pos = 0; pos < mesh.size(); ++pos) {
        EXPECT_EQ(sim.bytes_sent()[pos], 0) << what;
        const std::vector<int64_t> coord = mesh.CoordinateOfIndex(pos);
        const LocalShard before = LocalShapeAndOffsetAt(src, coord);
        const LocalShard after = LocalShapeAndOffsetAt(dst, coord);
        HostTensor want = HostTensor::Zeros(c.dtype, after.shape).value();
        std::vector<int64_t> at(before.offset.size());
        for (size_t d = 0; d < at.size(); ++d) at[d] = before.offset[d] - after.offset[d];
        ASSERT_TRUE(
            UnpackBlock(PackBlock(full, before.offset, before.shape).value(), at, want).ok())
            << what;
        EXPECT_TRUE((*shards)[pos].BitEqual(want)) << what << ": rank position " << pos;
      }
      ExpectLayout(sim, full, dst, *std::move(shards), what);
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

std::vector<Case> Cases() {
  const std::vector<Shape> meshes = {{1}, {2}, {3}, {4}, {5}, {8}, {2, 2}, {2, 3}, {2, 2, 2}};
  const std::vector<Shape> shapes = {{8, 12}, {5, 7}, {1, 3}, {0, 6}, {3, 4, 5}};
  std::vector<Case> cases;
  for (const Shape& mesh : meshes) {
    for (const Shape& shape : shapes) {
      // Rank-3 tensors on the 3-D mesh would multiply the pair count again; rank 2 covers it.
      if (mesh.size() == 3 && shape.size() == 3) continue;
      for (DType dtype : kAllDTypes) cases.push_back({mesh, shape, dtype});
    }
  }
  return cases;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return absl::StrCat("mesh", absl::StrJoin(info.param.mesh, "x"), "_tensor",
                      absl::StrJoin(info.param.tensor, "x"), "_", DTypeName(info.param.dtype));
}

INSTANTIATE_TEST_SUITE_P(Product, RedistributePropertyTest, ::testing::ValuesIn(Cases()), CaseName);

}  // namespace
}  // namespace tessera
