// View ops through a dim map: the maps against torch's _view_ops (view_groups, expand, squeeze,
// unsqueeze, permute) worked out by hand, the placements a view keeps or must redistribute, and,
// over the product of meshes, shapes (uneven and empty shards included), views and placements,
// every rank's local view of its block checked against the global view on the simulated mesh.

#include "core/sharding/view_ops.h"

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "core/sharding/simulated_mesh.h"
#include "core/small_integer_tensor.h"
#include "gtest/gtest.h"
#include "tests/support/placement_product.h"

namespace tessera {
namespace {

using P = Placement;

std::string MapString(const absl::StatusOr<std::vector<ViewDim>>& map) {
  if (!map.ok()) return map.status().ToString();
  return absl::StrJoin(*map, ", ",
                       [](std::string* out, const ViewDim& v) { out->append(v.ToString()); });
}

TEST(ViewDimMapTest, MatchesTorchsViewGroups) {
  EXPECT_EQ(MapString(ViewDimMap({2, 3}, std::vector<int64_t>{3, 2})),
            "Split(Flatten(0, 1), [3, 2], 0), Split(Flatten(0, 1), [3, 2], 1)");
  EXPECT_EQ(MapString(ViewDimMap({4, 6}, std::vector<int64_t>{24})), "Flatten(0, 1)");
  EXPECT_EQ(MapString(ViewDimMap({24}, std::vector<int64_t>{4, 6})),
            "Split(InputDim(0), [4, 6], 0), Split(InputDim(0), [4, 6], 1)");
  EXPECT_EQ(MapString(ViewDimMap({2, 1, 3}, std::vector<int64_t>{2, 3})),
            "InputDim(0), InputDim(2)");
  EXPECT_EQ(MapString(ViewDimMap({2, 3}, std::vector<int64_t>{2, 1, 3})),
            "InputDim(0), Singleton(), InputDim(1)");
  EXPECT_EQ(MapString(ViewDimMap({6}, std::vector<int64_t>{-1, 2})),
            "Split(InputDim(0), [3, 2], 0), Split(InputDim(0), [3, 2], 1)");
  // A size-1 piece of a split is a singleton; the other pieces index the group without it.
  EXPECT_EQ(MapString(ViewDimMap({6}, std::vector<int64_t>{3, 1, 2})),
            "Split(InputDim(0), [3, 2], 0), Singleton(), Split(InputDim(0), [3, 2], 1)");
  EXPECT_EQ(MapString(ViewDimMap({4, 3, 2}, std::vector<int64_t>{4, 6})),
            "InputDim(0), Flatten(1, 2)");
  EXPECT_EQ(MapString(ViewDimMap({}, std::vector<int64_t>{1, 1})), "Singleton(), Singleton()");
  EXPECT_EQ(MapString(ViewDimMap({1}, std::vector<int64_t>{})), "");
  // No element: every output dim is new.
  EXPECT_EQ(MapString(ViewDimMap({0, 4}, std::vector<int64_t>{4, 0})), "NewDim(4), NewDim(0)");
}

TEST(ViewDimMapTest, BadShapesNameTheOpAndTheSizes) {
  absl::StatusOr<std::vector<ViewDim>> bad = ViewDimMap({2, 3}, std::vector<int64_t>{4}, "view");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "view: shape '[4]' is invalid for input of size 6");
  EXPECT_EQ(ViewDimMap({6}, std::vector<int64_t>{-1, -1}, "reshape").status().message(),
            "reshape: only one dimension can be inferred");
  EXPECT_FALSE(ViewDimMap({6}, std::vector<int64_t>{-2, 3}).ok());
  EXPECT_FALSE(ViewDimMap({0}, std::vector<int64_t>{-1, 0}).ok());
  EXPECT_FALSE(ViewDimMap({7}, std::vector<int64_t>{-1, 2}).ok());
  EXPECT_EQ(MapString(UnflattenDimMap({6, 2}, 0, std::vector<int64_t>{4, -1})),
            "INVALID_ARGUMENT: unflatten of dim 0: unflatten: shape '[4, -1]' is invalid for "
            "input of size 6");
  EXPECT_FALSE(PermuteDimMap({2, 3}, std::vector<int>{0, 0}).ok());
  EXPECT_FALSE(PermuteDimMap({2, 3}, std::vector<int>{0}).ok());
  EXPECT_FALSE(ExpandDimMap({3, 2}, std::vector<int64_t>{3, 4}).ok());
  EXPECT_FALSE(ExpandDimMap({3}, std::vector<int64_t>{-1, 3}).ok());
  EXPECT_FALSE(FlattenDimMap({2, 3}, 1, 0).ok());
  EXPECT_FALSE(UnsqueezeDimMap({2, 3}, 3).ok());
}

TEST(ViewDimMapTest, TheOtherViewOps) {
  EXPECT_EQ(MapString(UnsqueezeDimMap({2, 3}, 1)), "InputDim(0), Singleton(), InputDim(1)");
  EXPECT_EQ(MapString(UnsqueezeDimMap({2, 3}, -1)), "InputDim(0), InputDim(1), Singleton()");
  EXPECT_EQ(MapString(SqueezeDimMap({2, 1, 3}, 1)), "InputDim(0), InputDim(2)");
  EXPECT_EQ(MapString(SqueezeDimMap({2, 4}, 1)), "InputDim(0), InputDim(1)");  // not 1: kept
  EXPECT_EQ(MapString(PermuteDimMap({2, 3, 4}, std::vector<int>{2, 0, 1})),
            "InputDim(2), InputDim(0), InputDim(1)");
  EXPECT_EQ(MapString(TransposeDimMap({2, 3}, 0, -1)), "InputDim(1), InputDim(0)");
  EXPECT_EQ(MapString(ExpandDimMap({3, 1}, std::vector<int64_t>{2, 3, 4})),
            "NewDim(2), InputDim(0), Broadcast(InputDim(1), 4)");
  EXPECT_EQ(MapString(ExpandDimMap({3, 1}, std::vector<int64_t>{-1, 1})),
            "InputDim(0), InputDim(1)");
  EXPECT_EQ(MapString(FlattenDimMap({2, 3, 4}, 1, 2)), "InputDim(0), Flatten(1, 2)");
  EXPECT_EQ(MapString(UnflattenDimMap({2, 12}, 1, std::vector<int64_t>{3, -1})),
            "InputDim(0), Split(InputDim(1), [3, 4], 0), Split(InputDim(1), [3, 4], 1)");
}

DTensorSpec Spec(const DeviceMesh& mesh, std::vector<Placement> placements, Shape shape) {
  absl::StatusOr<DTensorSpec> spec =
      MakeDTensorSpec(mesh, std::move(placements), std::move(shape), DType::kFloat32);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

std::string Placements(const std::vector<Placement>& p) { return PlacementsToString(p); }

TEST(PropagateViewTest, KeepsAShardOnlyWhereEveryBlockStaysABlock) {
  const DeviceMesh two = *DeviceMesh::Create("cpu", {2}, {}, {0, 1});
  const DeviceMesh grid = *DeviceMesh::Create("cpu", {2, 2}, {}, {0, 1, 2, 3});
  auto view = [&](const DeviceMesh& mesh, std::vector<Placement> in, Shape from,
                  std::vector<int64_t> to) {
    const DTensorSpec spec = Spec(mesh, std::move(in), from);
    absl::StatusOr<ViewSharding> s = PropagateView(spec, *ViewDimMap(from, to));
    EXPECT_TRUE(s.ok()) << s.status();
    return Placements(s->input) + " -> " + Placements(s->output) + " " + ShapeToString(s->shape);
  };
  // A merge keeps the leading dim's shard when it divides evenly...
  EXPECT_EQ(view(two, {P::Shard(0)}, {4, 6}, {24}), "(S(0)) -> (S(0)) [24]");
  // ... but not an uneven one, nor a dim merged behind another.
  EXPECT_EQ(view(two, {P::Shard(0)}, {5, 4}, {20}), "(R) -> (R) [20]");
  EXPECT_EQ(view(two, {P::Shard(1)}, {4, 6}, {24}), "(R) -> (R) [24]");
  // A split keeps it on its first piece when that piece divides evenly.
  EXPECT_EQ(view(two, {P::Shard(0)}, {8}, {4, 2}), "(S(0)) -> (S(0)) [4, 2]");
  EXPECT_EQ(view(two, {P::Shard(0)}, {6}, {3, 2}), "(R) -> (R) [3, 2]");
  // A dim passed through keeps its shard, uneven or empty shards included.
  EXPECT_EQ(view(two, {P::Shard(0)}, {3, 1, 4}, {3, 4}), "(S(0)) -> (S(0)) [3, 4]");
  EXPECT_EQ(view(two, {P::Shard(1)}, {3, 1, 5}, {3, 5}), "(R) -> (R) [3, 5]");  // dropped dim
  EXPECT_EQ(view(two, {P::Shard(2)}, {3, 1, 5}, {3, 5}), "(S(2)) -> (S(1)) [3, 5]");
  // Partial passes through a view (it is linear).
  EXPECT_EQ(view(two, {P::Partial()}, {4, 6}, {2, 12}), "(P(sum)) -> (P(sum)) [2, 12]");
  // Two mesh dims on one tensor dim: the merge needs it divisible by both.
  EXPECT_EQ(view(grid, {P::Shard(0), P::Shard(0)}, {8, 3}, {24}),
            "(S(0), S(0)) -> (S(0), S(0)) [24]");
  EXPECT_EQ(view(grid, {P::Shard(0), P::Shard(0)}, {6, 3}, {18}), "(R, R) -> (R, R) [18]");
  EXPECT_EQ(view(grid, {P::Shard(0), P::Shard(1)}, {4, 6}, {24}), "(S(0), R) -> (S(0), R) [24]");

  const DTensorSpec s = Spec(two, {P::Shard(1)}, {3, 4});
  EXPECT_EQ(Placements(PropagateView(s, *PermuteDimMap({3, 4}, std::vector<int>{1, 0}))->output),
            "(S(0))");
  const DTensorSpec b = Spec(two, {P::Shard(1)}, {3, 1});
  absl::StatusOr<ViewSharding> expanded =
      PropagateView(b, *ExpandDimMap({3, 1}, std::vector<int64_t>{3, 4}));
  EXPECT_EQ(Placements(expanded->input), "(R)");  // a broadcast dim is never sharded
  EXPECT_EQ(ShapeToString(expanded->shape), "[3, 4]");
}

// Every placement of a tensor of `rank` dims on a mesh of `mesh_ndim` dims: R, S(d), P(sum).
std::vector<std::vector<Placement>> AllPlacements(int mesh_ndim, int rank) {
  std::vector<Placement> one = {P::Replicate(), P::Partial()};
  for (int d = 0; d < rank; ++d) one.push_back(P::Shard(d));
  return testing::PlacementProduct(one, mesh_ndim);
}

TEST(PropagateViewTest, EveryLocalViewIsItsBlockOfTheGlobalView) {
  const std::vector<DeviceMesh> meshes = {*DeviceMesh::Create("cpu", {2}, {}, {0, 1}),
                                          *DeviceMesh::Create("cpu", {3}, {}, {0, 1, 2}),
                                          *DeviceMesh::Create("cpu", {2, 2}, {}, {0, 1, 2, 3})};
  const std::vector<std::pair<Shape, std::vector<int64_t>>> views = {
      {{6}, {2, 3}},       {{6}, {3, 2}},        {{6}, {6, 1}},       {{2, 3}, {6}},
      {{2, 3}, {3, 2}},    {{4, 6}, {24}},       {{4, 6}, {2, 12}},   {{4, 6}, {8, 3}},
      {{4, 6}, {4, 2, 3}}, {{5, 4}, {20}},       {{5, 4}, {5, 2, 2}}, {{3, 1, 4}, {3, 4}},
      {{3, 4}, {3, 1, 4}}, {{1, 4}, {4}},        {{1, 4}, {2, 2}},    {{0, 4}, {4, 0}},
      {{2, 0}, {0}},       {{8}, {2, 2, 2}},     {{2, 2, 2}, {8}},    {{7, 3}, {-1}},
      {{4, 3, 2}, {4, 6}}, {{4, 3, 2}, {12, 2}}, {{12}, {-1, 4}},     {{1}, {}},
      {{}, {1}},           {{1, 5}, {5, 1}},     {{2, 1}, {1, 2}},    {{16}, {2, 8}},
  };
  int checked = 0, kept = 0;
  for (const DeviceMesh& mesh : meshes) {
    SimulatedMesh sim(mesh);
    for (const auto& [from, to] : views) {
      const absl::StatusOr<std::vector<ViewDim>> map = ViewDimMap(from, to);
      ASSERT_TRUE(map.ok()) << map.status();
      const HostTensor full = SmallIntegerTensor(DType::kFloat32, from, 7);
      for (const std::vector<Placement>& placements :
           AllPlacements(mesh.ndim(), static_cast<int>(from.size()))) {
        const std::string what = absl::StrCat(ShapeToString(from), " -> ", ShapeToString(to), " ",
                                              Placements(placements), " on ", mesh.ToString());
        const absl::StatusOr<ViewSharding> s = PropagateView(Spec(mesh, placements, from), *map);
        ASSERT_TRUE(s.ok()) << what << ": " << s.status();
        // The input as the view needs it (what a redistribution would give), viewed rank by rank.
        absl::StatusOr<std::vector<HostTensor>> shards =
            sim.Distribute(full, Spec(mesh, s->input, from));
        ASSERT_TRUE(shards.ok()) << what << ": " << shards.status();
        const DTensorSpec out = Spec(mesh, s->output, s->shape);
        for (int64_t r = 0; r < mesh.size(); ++r) {
          const Shape local = LocalShapeAndOffsetAt(out, mesh.CoordinateOfIndex(r)).shape;
          ASSERT_TRUE((*shards)[r].Reshape(local).ok())
              << what << ": rank " << r << "'s block " << ShapeToString((*shards)[r].shape())
              << " is not its output block " << ShapeToString(local);
        }
        absl::StatusOr<HostTensor> got = sim.FullTensor(out, *std::move(shards));
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        HostTensor want = full.Clone();
        ASSERT_TRUE(want.Reshape(s->shape).ok());
        EXPECT_TRUE(got->BitEqual(want)) << what << " gives " << Placements(s->output);
        ++checked;
        for (const Placement& p : s->output) kept += p.is_shard();
      }
    }
  }
  EXPECT_GT(checked, 600);
  EXPECT_GT(kept, checked / 4);  // the shards kept are many, not a Replicate of everything
}

}  // namespace
}  // namespace tessera
