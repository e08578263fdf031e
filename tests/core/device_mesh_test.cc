#include "core/sharding/device_mesh.h"

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {

void PrintTo(const DeviceMesh& mesh, std::ostream* os) { *os << mesh.ToString(); }

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Names = std::vector<std::string>;
using Ranks = std::vector<int64_t>;

DeviceMesh Mesh(Shape shape, Names names = {}, Ranks ranks = {}) {
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create("cpu", shape, names, ranks);
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  return *mesh;
}

void ExpectInvalid(const absl::StatusOr<DeviceMesh>& mesh, const std::string& message_part) {
  ASSERT_FALSE(mesh.ok()) << mesh->ToString();
  EXPECT_EQ(mesh.status().code(), absl::StatusCode::kInvalidArgument) << mesh.status();
  EXPECT_THAT(mesh.status().message(), HasSubstr(message_part));
}

// --- Create -------------------------------------------------------------------------------

TEST(DeviceMeshCreateTest, DefaultsRanksToRowMajorIota) {
  DeviceMesh mesh = Mesh({2, 3});
  EXPECT_EQ(mesh.device_type(), "cpu");
  EXPECT_THAT(mesh.shape(), ElementsAre(2, 3));
  EXPECT_EQ(mesh.ndim(), 2);
  EXPECT_EQ(mesh.size(), 6);
  EXPECT_EQ(mesh.size(0), 2);
  EXPECT_EQ(mesh.size(1), 3);
  EXPECT_TRUE(mesh.dim_names().empty());
  EXPECT_THAT(mesh.ranks(), ElementsAre(0, 1, 2, 3, 4, 5));
}

TEST(DeviceMeshCreateTest, AcceptsCudaNamesAndCustomRanks) {
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create("cuda", {2, 2}, {"dp", "tp"}, {7, 3, 0, 12});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_EQ(mesh->device_type(), "cuda");
  EXPECT_THAT(mesh->dim_names(), ElementsAre("dp", "tp"));
  EXPECT_THAT(mesh->ranks(), ElementsAre(7, 3, 0, 12));
}

TEST(DeviceMeshCreateTest, UnknownDeviceTypeNamesIt) {
  ExpectInvalid(DeviceMesh::Create("tpu", {4}), "'tpu'");
  ExpectInvalid(DeviceMesh::Create("", {4}), "''");
  ExpectInvalid(DeviceMesh::Create("CPU", {4}), "'CPU'");
}

TEST(DeviceMeshCreateTest, NeedsAtLeastOneDim) {
  ExpectInvalid(DeviceMesh::Create("cpu", {}), "at least one dim");
}

TEST(DeviceMeshCreateTest, ZeroOrNegativeSizeNamesTheDim) {
  ExpectInvalid(DeviceMesh::Create("cpu", {2, 0}), "size 0 at dim 1");
  ExpectInvalid(DeviceMesh::Create("cpu", {-1, 2}), "size -1 at dim 0");
  ExpectInvalid(DeviceMesh::Create("cpu", {0}), "[0]");
}

TEST(DeviceMeshCreateTest, NamesCountMustMatchDims) {
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create("cpu", {2, 2}, {"dp"});
  ExpectInvalid(mesh, "1 names");
  EXPECT_THAT(mesh.status().message(), HasSubstr("2 dims"));
  EXPECT_THAT(mesh.status().message(), HasSubstr("dp"));
  ExpectInvalid(DeviceMesh::Create("cpu", {4}, {"dp", "tp"}), "2 names");
}

TEST(DeviceMeshCreateTest, DuplicateNamesNameTheRepeatedOne) {
  ExpectInvalid(DeviceMesh::Create("cpu", {2, 2}, {"tp", "tp"}), "'tp'");
  ExpectInvalid(DeviceMesh::Create("cpu", {2, 2, 2}, {"dp", "tp", "dp"}), "repeats 'dp'");
  ExpectInvalid(DeviceMesh::Create("cpu", {2, 2}, {"dp", ""}), "mesh dim name ''");
  ExpectInvalid(DeviceMesh::Create("cpu", {2, 2}, {"dp", "1"}), "not starting with a digit");
  ExpectInvalid(DeviceMesh::Create("cpu", {2}, {std::string(50000, 'd')}), "(50000 bytes)");
}

TEST(DeviceMeshCreateTest, RanksCountMustMatchSlots) {
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create("cpu", {2, 3}, {}, {0, 1, 2, 3, 4});
  ExpectInvalid(mesh, "6 slots");
  EXPECT_THAT(mesh.status().message(), HasSubstr("5 ranks"));
  ExpectInvalid(DeviceMesh::Create("cpu", {2}, {}, {0, 1, 2}), "3 ranks");
}

TEST(DeviceMeshCreateTest, DuplicateOrNegativeRanksNameTheRank) {
  ExpectInvalid(DeviceMesh::Create("cpu", {2, 2}, {}, {0, 3, 1, 3}), "rank 3");
  ExpectInvalid(DeviceMesh::Create("cpu", {3}, {}, {0, -2, 1}), "-2");
}

// --- coordinates --------------------------------------------------------------------------

struct MeshCase {
  Shape shape;
  Ranks ranks;  // row-major
};

class MeshCoordinateTest : public ::testing::TestWithParam<MeshCase> {};

// Naive row-major coordinate of slot `index`.
std::vector<int64_t> NaiveCoordinate(const Shape& shape, int64_t index) {
  std::vector<int64_t> c(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    c[d] = index % shape[d];
    index /= shape[d];
  }
  return c;
}

TEST_P(MeshCoordinateTest, CoordinatesAndRankAtInvertEachOther) {
  const MeshCase& mc = GetParam();
  DeviceMesh mesh = Mesh(mc.shape, {}, mc.ranks);
  for (size_t i = 0; i < mc.ranks.size(); ++i) {
    const std::vector<int64_t> want = NaiveCoordinate(mc.shape, static_cast<int64_t>(i));
    EXPECT_EQ(mesh.CoordinateOfIndex(static_cast<int64_t>(i)), want);
    EXPECT_EQ(mesh.IndexOfCoordinate(want), static_cast<int64_t>(i));
    absl::StatusOr<std::vector<int64_t>> c = mesh.CoordinateOf(mc.ranks[i]);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(*c, want) << "rank " << mc.ranks[i];
    EXPECT_EQ(mesh.RankAt(want), mc.ranks[i]);
    EXPECT_TRUE(mesh.Contains(mc.ranks[i]));
  }
}

TEST_P(MeshCoordinateTest, RankOutsideTheMeshIsNotFound) {
  DeviceMesh mesh = Mesh(GetParam().shape, {}, GetParam().ranks);
  const int64_t absent = *std::max_element(GetParam().ranks.begin(), GetParam().ranks.end()) + 1;
  EXPECT_FALSE(mesh.Contains(absent));
  absl::StatusOr<std::vector<int64_t>> c = mesh.CoordinateOf(absent);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr(absl::StrCat("rank ", absent)));
}

// Groups along each mesh dim: every rank is in exactly one group; a group's members share all
// coordinates but the dim's, and are ordered by it; GroupAlong at any member returns its group.
TEST_P(MeshCoordinateTest, GroupsAlongPartitionTheMeshByDim) {
  const MeshCase& mc = GetParam();
  DeviceMesh mesh = Mesh(mc.shape, {}, mc.ranks);
  for (int dim = 0; dim < mesh.ndim(); ++dim) {
    const std::vector<std::vector<int64_t>> groups = mesh.GroupsAlong(dim);
    EXPECT_EQ(static_cast<int64_t>(groups.size()), mesh.size() / mesh.size(dim));
    std::multiset<int64_t> seen;
    for (const std::vector<int64_t>& g : groups) {
      ASSERT_EQ(static_cast<int64_t>(g.size()), mesh.size(dim));
      const std::vector<int64_t> c0 = mesh.CoordinateOf(g[0]).value();
      for (int64_t i = 0; i < mesh.size(dim); ++i) {
        std::vector<int64_t> ci = mesh.CoordinateOf(g[i]).value();
        EXPECT_EQ(ci[dim], i);
        ci[dim] = c0[dim];
        EXPECT_EQ(ci, c0) << "group member " << g[i] << " along dim " << dim;
        EXPECT_EQ(mesh.GroupAlong(dim, mesh.CoordinateOf(g[i]).value()), g);
        seen.insert(g[i]);
      }
    }
    EXPECT_EQ(seen, std::multiset<int64_t>(mc.ranks.begin(), mc.ranks.end()));
  }
}

INSTANTIATE_TEST_SUITE_P(Meshes, MeshCoordinateTest,
                         ::testing::Values(MeshCase{{4}, {0, 1, 2, 3}},
                                           MeshCase{{5}, {9, 2, 7, 0, 4}},
                                           MeshCase{{2, 3}, {0, 1, 2, 3, 4, 5}},
                                           MeshCase{{2, 3}, {10, 4, 8, 1, 0, 6}},
                                           MeshCase{{3, 2}, {5, 4, 3, 2, 1, 0}},
                                           MeshCase{{2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}},
                                           MeshCase{{2, 2, 2}, {14, 3, 9, 0, 7, 21, 5, 2}},
                                           MeshCase{{1, 4, 1}, {3, 1, 2, 0}}));

TEST(DeviceMeshCoordinateTest, HandWorked2x3WithCustomRanks) {
  //  [[10, 4, 8],
  //   [ 1, 0, 6]]
  DeviceMesh mesh = Mesh({2, 3}, {"dp", "tp"}, {10, 4, 8, 1, 0, 6});
  EXPECT_THAT(mesh.CoordinateOf(8).value(), ElementsAre(0, 2));
  EXPECT_THAT(mesh.CoordinateOf(1).value(), ElementsAre(1, 0));
  EXPECT_THAT(mesh.CoordinateOf(0).value(), ElementsAre(1, 1));
  EXPECT_EQ(mesh.RankAt(std::vector<int64_t>{1, 2}), 6);
  EXPECT_EQ(mesh.RankAt(std::vector<int64_t>{0, 1}), 4);
  EXPECT_THAT(mesh.GroupsAlong(0),
              ElementsAre(ElementsAre(10, 1), ElementsAre(4, 0), ElementsAre(8, 6)));
  EXPECT_THAT(mesh.GroupsAlong(1), ElementsAre(ElementsAre(10, 4, 8), ElementsAre(1, 0, 6)));
  EXPECT_THAT(mesh.GroupAlong(1, std::vector<int64_t>{1, 2}), ElementsAre(1, 0, 6));
  EXPECT_THAT(mesh.GroupAlong(0, std::vector<int64_t>{1, 2}), ElementsAre(8, 6));
}

TEST(DeviceMeshCoordinateTest, HandWorked2x2x2WithCustomRanks) {
  // [[[14, 3], [9, 0]], [[7, 21], [5, 2]]]
  DeviceMesh mesh = Mesh({2, 2, 2}, {"pp", "dp", "tp"}, {14, 3, 9, 0, 7, 21, 5, 2});
  EXPECT_THAT(mesh.CoordinateOf(21).value(), ElementsAre(1, 0, 1));
  EXPECT_THAT(mesh.CoordinateOf(0).value(), ElementsAre(0, 1, 1));
  EXPECT_EQ(mesh.RankAt(std::vector<int64_t>{1, 1, 0}), 5);
  EXPECT_THAT(mesh.GroupsAlong(0), ElementsAre(ElementsAre(14, 7), ElementsAre(3, 21),
                                               ElementsAre(9, 5), ElementsAre(0, 2)));
  EXPECT_THAT(mesh.GroupsAlong(1), ElementsAre(ElementsAre(14, 9), ElementsAre(3, 0),
                                               ElementsAre(7, 5), ElementsAre(21, 2)));
  EXPECT_THAT(mesh.GroupsAlong(2), ElementsAre(ElementsAre(14, 3), ElementsAre(9, 0),
                                               ElementsAre(7, 21), ElementsAre(5, 2)));
}

TEST(DeviceMeshCoordinateTest, HandWorked2x2Groups) {
  // [[0, 1], [2, 3]]: dim 0 groups {0, 2}, {1, 3}; dim 1 groups {0, 1}, {2, 3}.
  DeviceMesh mesh = Mesh({2, 2});
  EXPECT_THAT(mesh.GroupsAlong(0), ElementsAre(ElementsAre(0, 2), ElementsAre(1, 3)));
  EXPECT_THAT(mesh.GroupsAlong(1), ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)));
  EXPECT_THAT(mesh.GroupAlong(0, std::vector<int64_t>{1, 1}), ElementsAre(1, 3));
  EXPECT_THAT(mesh.GroupAlong(1, std::vector<int64_t>{1, 0}), ElementsAre(2, 3));
}

// --- names, slicing, flattening ----------------------------------------------------------

TEST(DeviceMeshSliceTest, DimIndex) {
  DeviceMesh mesh = Mesh({2, 3}, {"dp", "tp"});
  EXPECT_EQ(mesh.DimIndex("dp").value(), 0);
  EXPECT_EQ(mesh.DimIndex("tp").value(), 1);
  absl::StatusOr<int> missing = mesh.DimIndex("pp");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("'pp'"));
  EXPECT_THAT(missing.status().message(), HasSubstr("dp, tp"));
  EXPECT_EQ(Mesh({4}).DimIndex("dp").status().code(), absl::StatusCode::kNotFound);
}

TEST(DeviceMeshSliceTest, SlicesOneNamedDimThroughARank) {
  // [[0, 1, 2], [3, 4, 5]]
  DeviceMesh mesh = Mesh({2, 3}, {"dp", "tp"});
  const Names tp{"tp"}, dp{"dp"};
  for (int64_t rank : {3, 4, 5}) {
    absl::StatusOr<DeviceMesh> sub = mesh.Slice(tp, rank);
    ASSERT_TRUE(sub.ok()) << sub.status();
    EXPECT_EQ(*sub, Mesh({3}, {"tp"}, {3, 4, 5}));
  }
  absl::StatusOr<DeviceMesh> sub = mesh.Slice(dp, 4);
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_EQ(*sub, Mesh({2}, {"dp"}, {1, 4}));
}

TEST(DeviceMeshSliceTest, SlicingAllDimsInOrderGivesTheMesh) {
  DeviceMesh mesh = Mesh({2, 3}, {"dp", "tp"}, {10, 4, 8, 1, 0, 6});
  const Names both{"dp", "tp"};
  absl::StatusOr<DeviceMesh> sub = mesh.Slice(both, 0);
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_EQ(*sub, mesh);
}

TEST(DeviceMeshSliceTest, SlicesTwoOfThreeDimsWithCustomRanks) {
  // [[[14, 3], [9, 0]], [[7, 21], [5, 2]]]; rank 21 is at (1, 0, 1).
  DeviceMesh mesh = Mesh({2, 2, 2}, {"pp", "dp", "tp"}, {14, 3, 9, 0, 7, 21, 5, 2});
  const Names pp_tp{"pp", "tp"}, dp_tp{"dp", "tp"}, pp_dp{"pp", "dp"};
  EXPECT_EQ(mesh.Slice(pp_tp, 21).value(), Mesh({2, 2}, {"pp", "tp"}, {14, 3, 7, 21}));
  EXPECT_EQ(mesh.Slice(dp_tp, 21).value(), Mesh({2, 2}, {"dp", "tp"}, {7, 21, 5, 2}));
  EXPECT_EQ(mesh.Slice(pp_dp, 21).value(), Mesh({2, 2}, {"pp", "dp"}, {3, 0, 21, 2}));
}

TEST(DeviceMeshSliceTest, Errors) {
  DeviceMesh mesh = Mesh({2, 3}, {"dp", "tp"});
  const Names reversed{"tp", "dp"}, repeated{"tp", "tp"}, unknown{"pp"}, none{}, tp{"tp"};

  absl::StatusOr<DeviceMesh> sub = mesh.Slice(reversed, 0);
  ASSERT_FALSE(sub.ok());
  EXPECT_EQ(sub.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(sub.status().message(), HasSubstr("tp, dp"));

  EXPECT_EQ(mesh.Slice(repeated, 0).status().code(), absl::StatusCode::kInvalidArgument);

  sub = mesh.Slice(unknown, 0);
  ASSERT_FALSE(sub.ok());
  EXPECT_EQ(sub.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(sub.status().message(), HasSubstr("'pp'"));

  EXPECT_EQ(mesh.Slice(none, 0).status().code(), absl::StatusCode::kInvalidArgument);

  sub = mesh.Slice(tp, 6);
  ASSERT_FALSE(sub.ok());
  EXPECT_EQ(sub.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(sub.status().message(), HasSubstr("rank 6"));

  EXPECT_EQ(Mesh({2, 2}).Slice(tp, 0).status().code(), absl::StatusCode::kNotFound);
}

TEST(DeviceMeshSliceTest, SliceAllReturnsEverySubMeshRowMajor) {
  DeviceMesh mesh = Mesh({2, 3}, {"dp", "tp"}, {10, 4, 8, 1, 0, 6});
  const Names tp{"tp"}, dp{"dp"}, both{"dp", "tp"}, reversed{"tp", "dp"};
  absl::StatusOr<std::vector<DeviceMesh>> subs = mesh.SliceAll(tp);
  ASSERT_TRUE(subs.ok()) << subs.status();
  EXPECT_THAT(*subs, ElementsAre(Mesh({3}, {"tp"}, {10, 4, 8}), Mesh({3}, {"tp"}, {1, 0, 6})));
  subs = mesh.SliceAll(dp);
  ASSERT_TRUE(subs.ok()) << subs.status();
  EXPECT_THAT(*subs, ElementsAre(Mesh({2}, {"dp"}, {10, 1}), Mesh({2}, {"dp"}, {4, 0}),
                                 Mesh({2}, {"dp"}, {8, 6})));
  subs = mesh.SliceAll(both);
  ASSERT_TRUE(subs.ok()) << subs.status();
  EXPECT_THAT(*subs, ElementsAre(mesh));
  EXPECT_EQ(mesh.SliceAll(reversed).status().code(), absl::StatusCode::kInvalidArgument);
}

// SliceAll's sub-meshes along one dim are exactly GroupsAlong that dim.
TEST(DeviceMeshSliceTest, SliceAllAgreesWithGroupsAlong) {
  DeviceMesh mesh = Mesh({2, 2, 2}, {"pp", "dp", "tp"}, {14, 3, 9, 0, 7, 21, 5, 2});
  for (int dim = 0; dim < 3; ++dim) {
    const Names name{mesh.dim_names()[dim]};
    absl::StatusOr<std::vector<DeviceMesh>> subs = mesh.SliceAll(name);
    ASSERT_TRUE(subs.ok()) << subs.status();
    const std::vector<std::vector<int64_t>> groups = mesh.GroupsAlong(dim);
    ASSERT_EQ(subs->size(), groups.size());
    for (size_t i = 0; i < groups.size(); ++i) EXPECT_EQ((*subs)[i].ranks(), groups[i]);
  }
}

TEST(DeviceMeshFlattenTest, DefaultNameJoinsDimNames) {
  DeviceMesh mesh = Mesh({2, 3}, {"dp", "tp"}, {10, 4, 8, 1, 0, 6});
  absl::StatusOr<DeviceMesh> flat = mesh.Flatten();
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(*flat, Mesh({6}, {"dp_tp"}, {10, 4, 8, 1, 0, 6}));
  absl::StatusOr<DeviceMesh> flat3 = Mesh({2, 2, 2}, {"pp", "dp", "tp"}).Flatten();
  ASSERT_TRUE(flat3.ok()) << flat3.status();
  EXPECT_THAT(flat3->dim_names(), ElementsAre("pp_dp_tp"));
  EXPECT_THAT(flat3->ranks(), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
}

TEST(DeviceMeshFlattenTest, CustomName) {
  absl::StatusOr<DeviceMesh> flat = Mesh({2, 2}, {"dp", "tp"}).Flatten("world");
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(*flat, Mesh({4}, {"world"}));
}

TEST(DeviceMeshToStringTest, MatchesTorchRepr) {
  EXPECT_EQ(Mesh({4}).ToString(), "DeviceMesh('cpu', [0, 1, 2, 3])");
  EXPECT_EQ(Mesh({1}).ToString(), "DeviceMesh('cpu', [0])");
  EXPECT_EQ(Mesh({2, 2}, {"dp", "tp"}).ToString(),
            "DeviceMesh('cpu', [[0, 1], [2, 3]], mesh_dim_names=('dp', 'tp'))");
  EXPECT_EQ(Mesh({2, 3}, {}, {10, 4, 8, 1, 0, 6}).ToString(),
            "DeviceMesh('cpu', [[10, 4, 8], [1, 0, 6]])");
  EXPECT_EQ(Mesh({2, 2, 2}).ToString(), "DeviceMesh('cpu', [[[0, 1], [2, 3]], [[4, 5], [6, 7]]])");
  EXPECT_EQ(Mesh({3, 1}).ToString(), "DeviceMesh('cpu', [[0], [1], [2]])");
  // A 1-tuple prints with a trailing comma in Python.
  EXPECT_EQ(Mesh({4}, {"tp"}).ToString(),
            "DeviceMesh('cpu', [0, 1, 2, 3], mesh_dim_names=('tp',))");
  EXPECT_EQ(DeviceMesh::Create("cuda", {2}).value().ToString(), "DeviceMesh('cuda', [0, 1])");
}

TEST(DeviceMeshTest, EqualityComparesEveryField) {
  EXPECT_EQ(Mesh({2, 2}), Mesh({2, 2}));
  EXPECT_NE(Mesh({2, 2}), Mesh({4}));
  EXPECT_NE(Mesh({2, 2}), Mesh({2, 2}, {"dp", "tp"}));
  EXPECT_NE(Mesh({2, 2}), Mesh({2, 2}, {}, {0, 1, 3, 2}));
  EXPECT_NE(Mesh({2}), DeviceMesh::Create("cuda", {2}).value());
}

}  // namespace
}  // namespace tessera
