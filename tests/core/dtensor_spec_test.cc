#include "core/sharding/dtensor_spec.h"

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const Placement kR = Placement::Replicate();
Placement S(int dim) { return Placement::Shard(dim); }
Placement P(ReduceOp op = ReduceOp::kSum) { return Placement::Partial(op); }

DeviceMesh Mesh(Shape shape, std::vector<int64_t> ranks = {}) {
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create("cpu", shape, {}, ranks);
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  return *mesh;
}

DTensorSpec Spec(DeviceMesh mesh, std::vector<Placement> placements, Shape shape) {
  absl::StatusOr<DTensorSpec> spec =
      MakeDTensorSpec(std::move(mesh), std::move(placements), shape, DType::kFloat32);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

LocalShard Shard(Shape shape, std::vector<int64_t> offset) { return {shape, offset}; }

// The shards of every rank of `spec`, in the mesh's row-major order.
std::vector<LocalShard> AllShards(const DTensorSpec& spec) {
  std::vector<LocalShard> shards;
  for (int64_t rank : spec.mesh.ranks()) {
    absl::StatusOr<LocalShard> s = LocalShapeAndOffset(spec, rank);
    EXPECT_TRUE(s.ok()) << s.status();
    shards.push_back(*s);
  }
  return shards;
}

}  // namespace

void PrintTo(const LocalShard& s, std::ostream* os) {
  *os << ShapeToString(s.shape) << "@" << ShapeToString(s.offset);
}

namespace {

// --- hand-worked cases from PyTorch -------------------------------------------------------

TEST(LocalShapeAndOffsetTest, TwoMeshDimsShardingOneTensorDimNestLeftToRight) {
  // compute_local_shape_and_global_offset([2, 5], mesh (2, 2), (Shard(1), Shard(1))).
  DTensorSpec spec = Spec(Mesh({2, 2}), {S(1), S(1)}, {2, 5});
  EXPECT_THAT(AllShards(spec), ElementsAre(Shard({2, 2}, {0, 0}), Shard({2, 1}, {0, 2}),
                                           Shard({2, 1}, {0, 3}), Shard({2, 1}, {0, 4})));
}

struct ChunkCase {
  int64_t n;
  int64_t k;
  std::vector<int64_t> sizes;
  std::vector<int64_t> offsets;
};

class TorchChunkTest : public ::testing::TestWithParam<ChunkCase> {};

TEST_P(TorchChunkTest, OneDimMeshFollowsTorchChunk) {
  const ChunkCase& c = GetParam();
  DTensorSpec spec = Spec(Mesh({c.k}), {S(0)}, {c.n, 3});
  std::vector<LocalShard> shards = AllShards(spec);
  ASSERT_EQ(shards.size(), c.sizes.size());
  for (size_t r = 0; r < shards.size(); ++r) {
    EXPECT_EQ(shards[r], Shard({c.sizes[r], 3}, {c.offsets[r], 0})) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Reference, TorchChunkTest,
    ::testing::Values(ChunkCase{5, 4, {2, 2, 1, 0}, {0, 2, 4, 5}},  // empty shard at dim size
                      ChunkCase{3, 4, {1, 1, 1, 0}, {0, 1, 2, 3}},
                      ChunkCase{9, 4, {3, 3, 3, 0}, {0, 3, 6, 9}},
                      ChunkCase{8, 4, {2, 2, 2, 2}, {0, 2, 4, 6}},
                      ChunkCase{1, 3, {1, 0, 0}, {0, 1, 1}}, ChunkCase{0, 2, {0, 0}, {0, 0}},
                      ChunkCase{10, 4, {3, 3, 3, 1}, {0, 3, 6, 9}},
                      ChunkCase{6, 4, {2, 2, 2, 0}, {0, 2, 4, 6}}, ChunkCase{7, 1, {7}, {0}}));

TEST(LocalShapeAndOffsetTest, NestedShardingWithAnEmptyInnerShard) {
  // 3 over (2, 2), (S(0), S(0)): outer pieces [0, 2) and [2, 3); the second splits into [2, 3)
  // and an empty piece at its end, 3.
  DTensorSpec spec = Spec(Mesh({2, 2}), {S(0), S(0)}, {3});
  EXPECT_THAT(AllShards(spec),
              ElementsAre(Shard({1}, {0}), Shard({1}, {1}), Shard({1}, {2}), Shard({0}, {3})));
}

TEST(LocalShapeAndOffsetTest, TwoTensorDimsOnTwoMeshDims) {
  // [5, 7] on (2, 3) with (S(0), S(1)): rows split 3 + 2, columns 3 + 3 + 1.
  DTensorSpec spec = Spec(Mesh({2, 3}), {S(0), S(1)}, {5, 7});
  EXPECT_THAT(AllShards(spec),
              ElementsAre(Shard({3, 3}, {0, 0}), Shard({3, 3}, {0, 3}), Shard({3, 1}, {0, 6}),
                          Shard({2, 3}, {3, 0}), Shard({2, 3}, {3, 3}), Shard({2, 1}, {3, 6})));
}

TEST(LocalShapeAndOffsetTest, ReplicateAndPartialKeepTheWholeDim) {
  DTensorSpec spec = Spec(Mesh({2, 2}), {kR, P()}, {3, 4});
  for (const LocalShard& s : AllShards(spec)) EXPECT_EQ(s, Shard({3, 4}, {0, 0}));
  spec = Spec(Mesh({2, 2}), {P(ReduceOp::kMax), S(1)}, {3, 4});
  EXPECT_THAT(AllShards(spec), ElementsAre(Shard({3, 2}, {0, 0}), Shard({3, 2}, {0, 2}),
                                           Shard({3, 2}, {0, 0}), Shard({3, 2}, {0, 2})));
}

TEST(LocalShapeAndOffsetTest, UsesTheRanksCoordinateInACustomMesh) {
  // [[3, 2], [1, 0]]: rank 3 is at (0, 0) and rank 0 at (1, 1).
  DTensorSpec spec = Spec(Mesh({2, 2}, {3, 2, 1, 0}), {S(0), S(1)}, {4, 6});
  EXPECT_EQ(LocalShapeAndOffset(spec, 3).value(), Shard({2, 3}, {0, 0}));
  EXPECT_EQ(LocalShapeAndOffset(spec, 2).value(), Shard({2, 3}, {0, 3}));
  EXPECT_EQ(LocalShapeAndOffset(spec, 1).value(), Shard({2, 3}, {2, 0}));
  EXPECT_EQ(LocalShapeAndOffset(spec, 0).value(), Shard({2, 3}, {2, 3}));
  absl::StatusOr<LocalShard> missing = LocalShapeAndOffset(spec, 4);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("rank 4"));
}

TEST(LocalShapeAndOffsetTest, ScalarHasOneElementOnEveryRank) {
  DTensorSpec spec = Spec(Mesh({2, 2}), {kR, P()}, {});
  for (const LocalShard& s : AllShards(spec)) EXPECT_EQ(s, Shard({}, {}));
}

// --- MakeDTensorSpec ----------------------------------------------------------------------

TEST(MakeDTensorSpecTest, NormalizesNegativeShardDims) {
  DTensorSpec spec = Spec(Mesh({2}), {S(-1)}, {2, 5});
  EXPECT_THAT(spec.placements, ElementsAre(S(1)));
  EXPECT_THAT(AllShards(spec), ElementsAre(Shard({2, 3}, {0, 0}), Shard({2, 2}, {0, 3})));
  spec = Spec(Mesh({2, 2}), {S(-3), S(-2)}, {4, 4, 4});
  EXPECT_THAT(spec.placements, ElementsAre(S(0), S(1)));
}

TEST(MakeDTensorSpecTest, KeepsMeshShapeAndDType) {
  absl::StatusOr<DTensorSpec> spec =
      MakeDTensorSpec(Mesh({2, 2}), {S(1), kR}, {2, 5}, DType::kBFloat16);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->mesh, Mesh({2, 2}));
  EXPECT_THAT(spec->shape, ElementsAre(2, 5));
  EXPECT_EQ(spec->dtype, DType::kBFloat16);
  EXPECT_FALSE(HasPartial(*spec));
}

TEST(MakeDTensorSpecTest, WrongNumberOfPlacementsNamesBothCounts) {
  absl::StatusOr<DTensorSpec> spec = MakeDTensorSpec(Mesh({2, 2}), {S(0)}, {4}, DType::kFloat32);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("(S(0)) has 1 entries"));
  EXPECT_THAT(spec.status().message(), HasSubstr("2 dims"));
  spec = MakeDTensorSpec(Mesh({4}), {S(0), kR}, {4}, DType::kFloat32);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MakeDTensorSpecTest, ShardDimOutOfRangeNamesTheDim) {
  for (int dim : {2, 5, -3}) {
    absl::StatusOr<DTensorSpec> spec =
        MakeDTensorSpec(Mesh({2}), {S(dim)}, {4, 4}, DType::kFloat32);
    ASSERT_FALSE(spec.ok()) << dim;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(spec.status().message(), HasSubstr(absl::StrCat("S(", dim, ")")));
    EXPECT_THAT(spec.status().message(), HasSubstr("2 dims"));
  }
  // A scalar has no dim to shard.
  EXPECT_EQ(MakeDTensorSpec(Mesh({2}), {S(0)}, {}, DType::kFloat32).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MakeDTensorSpecTest, NegativeShapeIsRejected) {
  absl::StatusOr<DTensorSpec> spec = MakeDTensorSpec(Mesh({2}), {kR}, {3, -1}, DType::kFloat32);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("-1"));
}

TEST(DTensorSpecTest, ToStringAndHasPartial) {
  DTensorSpec spec = Spec(Mesh({2, 2}), {S(1), S(1)}, {2, 5});
  EXPECT_EQ(spec.ToString(), "float32[2, 5] (S(1), S(1)) on DeviceMesh('cpu', [[0, 1], [2, 3]])");
  EXPECT_FALSE(HasPartial(spec));
  EXPECT_TRUE(HasPartial(Spec(Mesh({2, 2}), {S(0), P(ReduceOp::kAvg)}, {2, 5})));
  EXPECT_TRUE(HasPartial(Spec(Mesh({2}), {P()}, {2})));
}

// --- property: every element is held by exactly (product of non-Shard mesh sizes) ranks -------

// Every placement list for `mesh_ndim` mesh dims on a tensor of `tensor_rank` dims: each mesh dim
// is R, P(sum) or S(d) for any d.
std::vector<std::vector<Placement>> AllPlacements(int mesh_ndim, int tensor_rank) {
  std::vector<Placement> choices{kR, P()};
  for (int d = 0; d < tensor_rank; ++d) choices.push_back(S(d));
  std::vector<std::vector<Placement>> out{{}};
  for (int m = 0; m < mesh_ndim; ++m) {
    std::vector<std::vector<Placement>> next;
    for (const std::vector<Placement>& prefix : out) {
      for (const Placement& p : choices) {
        next.push_back(prefix);
        next.back().push_back(p);
      }
    }
    out = std::move(next);
  }
  return out;
}

std::vector<int64_t> Unravel(const Shape& shape, int64_t index) {
  std::vector<int64_t> c(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    c[d] = index % shape[d];
    index /= shape[d];
  }
  return c;
}

class ShardCoverageTest : public ::testing::TestWithParam<std::tuple<Shape, Shape>> {};

TEST_P(ShardCoverageTest, ShardsCoverEveryElementOncePerReplica) {
  const auto& [mesh_shape, tensor_shape] = GetParam();
  const DeviceMesh mesh = Mesh(mesh_shape);
  const int rank = static_cast<int>(tensor_shape.size());
  const int64_t n = NumElements(tensor_shape);
  for (const std::vector<Placement>& placements : AllPlacements(mesh.ndim(), rank)) {
    DTensorSpec spec = Spec(mesh, placements, tensor_shape);
    int64_t replicas = 1;
    for (int m = 0; m < mesh.ndim(); ++m) {
      if (!placements[m].is_shard()) replicas *= mesh.size(m);
    }
    std::vector<int64_t> count(n, 0);
    for (int64_t r = 0; r < mesh.size(); ++r) {
      const LocalShard s = LocalShapeAndOffset(spec, r).value();
      ASSERT_EQ(s, LocalShapeAndOffsetAt(spec, mesh.CoordinateOf(r).value()));
      ASSERT_EQ(s.shape.size(), tensor_shape.size());
      ASSERT_EQ(s.offset.size(), tensor_shape.size());
      for (int d = 0; d < rank; ++d) {
        ASSERT_GE(s.offset[d], 0);
        ASSERT_GE(s.shape[d], 0);
        ASSERT_LE(s.offset[d] + s.shape[d], tensor_shape[d]) << spec.ToString() << " rank " << r;
        if (s.shape[d] > 0) continue;
        // An empty piece sits at the end of the range it was cut from, at most the dim size.
        ASSERT_LE(s.offset[d], tensor_shape[d]);
      }
      for (int64_t e = 0; e < n; ++e) {
        const std::vector<int64_t> c = Unravel(tensor_shape, e);
        bool inside = true;
        for (int d = 0; d < rank; ++d) {
          inside = inside && c[d] >= s.offset[d] && c[d] < s.offset[d] + s.shape[d];
        }
        if (inside) ++count[e];
      }
    }
    for (int64_t e = 0; e < n; ++e) {
      ASSERT_EQ(count[e], replicas) << spec.ToString() << " element " << e;
    }
  }
}

// Along a single sharded dim, each rank's piece has the torch.chunk size: ceil(n / k) while the
// pieces last, then the remainder, then empty pieces.
TEST_P(ShardCoverageTest, OneMeshDimShardingFollowsChunkSizes) {
  const auto& [mesh_shape, tensor_shape] = GetParam();
  const DeviceMesh mesh = Mesh(mesh_shape);
  for (int m = 0; m < mesh.ndim(); ++m) {
    for (int d = 0; d < static_cast<int>(tensor_shape.size()); ++d) {
      std::vector<Placement> placements(mesh.ndim(), kR);
      placements[m] = S(d);
      DTensorSpec spec = Spec(mesh, placements, tensor_shape);
      const int64_t len = tensor_shape[d], k = mesh.size(m), c = (len + k - 1) / k;
      for (int64_t r = 0; r < mesh.size(); ++r) {
        const std::vector<int64_t> coord = mesh.CoordinateOf(r).value();
        const int64_t i = coord[m];
        const int64_t want_size = std::max<int64_t>(0, std::min(len, (i + 1) * c) - i * c);
        const int64_t want_offset = want_size == 0 ? len : i * c;
        const LocalShard s = LocalShapeAndOffsetAt(spec, coord);
        EXPECT_EQ(s.shape[d], want_size) << spec.ToString() << " rank " << r;
        EXPECT_EQ(s.offset[d], want_offset) << spec.ToString() << " rank " << r;
      }
    }
  }
}

const Shape kMeshShapes[] = {{1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {2, 2}, {2, 3}, {2, 2, 2}};
const Shape kTensorShapes[] = {
    {8},       {12},     {5},    {7},    {1},    {0},     // even, uneven, smaller than mesh, empty
    {4, 6},    {5, 3},   {2, 1}, {0, 3}, {7, 0}, {3, 9},  // 2-D
    {3, 2, 5}, {1, 4, 2}};                                // 3-D

INSTANTIATE_TEST_SUITE_P(MeshesAndShapes, ShardCoverageTest,
                         ::testing::Combine(::testing::ValuesIn(kMeshShapes),
                                            ::testing::ValuesIn(kTensorShapes)));

}  // namespace
}  // namespace tessera
