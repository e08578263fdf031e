#include "core/modules/program_edges.h"

#include <cctype>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using ::tessera::testing::StatusIs;

// A float32 tensor of `shape` holding 0, 1, 2, ... in row-major order.
HostTensor Iota(const Shape& shape) {
  std::vector<float> values(static_cast<size_t>(NumElements(shape)));
  std::iota(values.begin(), values.end(), 0.0f);
  return HostTensor::FromValues(DType::kFloat32, shape, values);
}

std::vector<float> Values(const HostTensor& t) {
  return std::vector<float>(t.data_as<float>(), t.data_as<float>() + t.num_elements());
}

DeviceMesh MeshOf(const Shape& shape) { return *DeviceMesh::Create("cpu", shape); }

// A program with its tp dim and data-parallel dims as given (nothing else matters to its edges).
Program EdgesOf(int tp_mesh_dim, std::vector<int> data_parallel_dims) {
  Program p;
  p.tp_mesh_dim = tp_mesh_dim;
  p.data_parallel_dims = std::move(data_parallel_dims);
  return p;
}

TEST(EdgePlacementsTest, TheTpDimTakesTheLayoutAndDataParallelDimsSplitTheBatch) {
  const DeviceMesh mesh = MeshOf({2, 3, 2});
  EXPECT_EQ(
      EdgePlacements(mesh, EdgesOf(1, {0, 2}), Placement::Shard(-1)),
      (std::vector<Placement>{Placement::Shard(0), Placement::Shard(-1), Placement::Shard(0)}));
  EXPECT_EQ(DataParallelSize(mesh, EdgesOf(1, {0, 2})), 4);
  // A mesh dim neither tp nor data parallel holds the whole tensor on every rank.
  EXPECT_EQ(
      EdgePlacements(mesh, EdgesOf(1, {2}), Placement::Shard(-1)),
      (std::vector<Placement>{Placement::Replicate(), Placement::Shard(-1), Placement::Shard(0)}));
  EXPECT_EQ(DataParallelSize(mesh, EdgesOf(1, {2})), 2);
  // distribute_module: no data-parallel dim, the batch whole everywhere.
  EXPECT_EQ(EdgePlacements(mesh, EdgesOf(0, {}), Placement::Replicate()),
            (std::vector<Placement>(3, Placement::Replicate())));
  EXPECT_EQ(DataParallelSize(mesh, EdgesOf(0, {})), 1);
  EXPECT_EQ(EdgePlacements(MeshOf({4}), EdgesOf(0, {}), Placement::Partial()),
            (std::vector<Placement>{Placement::Partial()}));
}

TEST(CheckModelInputTest, NamesBothDtypesAndShapes) {
  const ModuleInput expected{DType::kFloat32, {-1, 10}};
  EXPECT_TRUE(CheckModelInput(expected, DType::kFloat32, {7, 10}).ok());
  EXPECT_TRUE(StatusIs(CheckModelInput(expected, DType::kFloat32, {7, 9}),
                       absl::StatusCode::kInvalidArgument, {"float32[7, 9]", "float32[-1, 10]"}));
  EXPECT_TRUE(StatusIs(CheckModelInput(expected, DType::kFloat64, {7, 10}),
                       absl::StatusCode::kInvalidArgument, {"float64[7, 10]"}));
  EXPECT_TRUE(StatusIs(CheckModelInput(expected, DType::kFloat32, {7, 1, 10}),
                       absl::StatusCode::kInvalidArgument, {"[7, 1, 10]"}));
}

TEST(OutputShapeForTest, FeaturesReplaceTheLastDimOrFollowIds) {
  Program program;
  program.output_features = 16;
  program.input = {DType::kFloat32, {-1, 10}};
  EXPECT_EQ(OutputShapeFor(program, {5, 10}), (Shape{5, 16}));
  program.input = {DType::kInt64, {-1, -1}};
  EXPECT_EQ(OutputShapeFor(program, {2, 3}), (Shape{2, 3, 16}));
}

// Worked by hand: [5, 4] on a (2 dp, 2 tp) mesh, tp Shard(1), the batch split on dp.
TEST(SplitEdgeTest, CutsTorchChunkBlocksInRowMajorRankOrder) {
  const HostTensor full = Iota({5, 4});
  absl::StatusOr<std::vector<HostTensor>> locals =
      SplitEdge(full, MeshOf({2, 2}), {Placement::Shard(0), Placement::Shard(1)});
  ASSERT_TRUE(locals.ok()) << locals.status();
  ASSERT_EQ(locals->size(), 4u);
  EXPECT_EQ((*locals)[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(Values((*locals)[0]), (std::vector<float>{0, 1, 4, 5, 8, 9}));
  EXPECT_EQ(Values((*locals)[1]), (std::vector<float>{2, 3, 6, 7, 10, 11}));
  EXPECT_EQ((*locals)[2].shape(), (Shape{2, 2}));
  EXPECT_EQ(Values((*locals)[2]), (std::vector<float>{12, 13, 16, 17}));
  EXPECT_EQ(Values((*locals)[3]), (std::vector<float>{14, 15, 18, 19}));
}

TEST(SplitEdgeTest, PartialGivesCoordinateZeroTheValueAndTheOthersTheIdentity) {
  const HostTensor full = Iota({2, 2});
  absl::StatusOr<std::vector<HostTensor>> locals =
      SplitEdge(full, MeshOf({3}), {Placement::Partial()});
  ASSERT_TRUE(locals.ok()) << locals.status();
  EXPECT_EQ(Values((*locals)[0]), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(Values((*locals)[1]), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(Values((*locals)[2]), (std::vector<float>{0, 0, 0, 0}));
}

TEST(AssembleEdgeTest, SumsPartialsAndTakesCoordinateZeroOfReplicas) {
  const DeviceMesh mesh = MeshOf({2});
  std::vector<HostTensor> parts;
  parts.push_back(HostTensor::FromValues<float>(DType::kFloat32, {2}, {1, 2}));
  parts.push_back(HostTensor::FromValues<float>(DType::kFloat32, {2}, {10, 20}));
  absl::StatusOr<HostTensor> sum = AssembleEdge(std::move(parts), mesh, {Placement::Partial()});
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(Values(*sum), (std::vector<float>{11, 22}));

  std::vector<HostTensor> copies;
  copies.push_back(HostTensor::FromValues<float>(DType::kFloat32, {2}, {1, 2}));
  copies.push_back(HostTensor::FromValues<float>(DType::kFloat32, {2}, {7, 7}));
  absl::StatusOr<HostTensor> first =
      AssembleEdge(std::move(copies), mesh, {Placement::Replicate()});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(Values(*first), (std::vector<float>{1, 2}));
}

TEST(AssembleEdgeTest, RefusesLocalsThatDoNotMakeOneTensor) {
  const DeviceMesh mesh = MeshOf({2});
  std::vector<HostTensor> one;
  one.push_back(Iota({2}));
  EXPECT_TRUE(StatusIs(AssembleEdge(std::move(one), mesh, {Placement::Shard(0)}).status(),
                       absl::StatusCode::kInvalidArgument, {"1 local tensors", "2 ranks"}));
  std::vector<HostTensor> uneven;
  uneven.push_back(Iota({1, 3}));
  uneven.push_back(Iota({2, 3}));
  // Shard(0) of 3 rows over 2 ranks gives 2 and 1, not 1 and 2.
  EXPECT_TRUE(StatusIs(AssembleEdge(std::move(uneven), mesh, {Placement::Shard(0)}).status(),
                       absl::StatusCode::kInvalidArgument, {"rank 0", "[1, 3]", "[2, 3]"}));
  std::vector<HostTensor> mixed;
  mixed.push_back(Iota({2}));
  mixed.push_back(HostTensor::ZerosOfValidShape(DType::kFloat64, {2}));
  EXPECT_TRUE(StatusIs(AssembleEdge(std::move(mixed), mesh, {Placement::Shard(0)}).status(),
                       absl::StatusCode::kInvalidArgument, {"rank 1", "float64"}));
}

// Every edge layout round-trips: split a full tensor, then put it together again, on 1-D and 2-D
// meshes with the tp dim first or last, the other dims data parallel or not, for sizes that do
// and do not divide.
using RoundTripParam = std::tuple<Shape /*mesh*/, std::string /*tp placement*/, bool /*tp last*/,
                                  bool /*data parallel*/, Shape /*tensor*/>;
class EdgeRoundTripTest : public ::testing::TestWithParam<RoundTripParam> {};

TEST_P(EdgeRoundTripTest, AssembleUndoesSplit) {
  const auto& [mesh_shape, tp_text, tp_last, data_parallel, shape] = GetParam();
  const DeviceMesh mesh = MeshOf(mesh_shape);
  const int tp = tp_last ? mesh.ndim() - 1 : 0;
  std::vector<int> dp;
  for (int d = 0; d < mesh.ndim() && data_parallel; ++d) {
    if (d != tp) dp.push_back(d);
  }
  const std::vector<Placement> placements =
      EdgePlacements(mesh, EdgesOf(tp, dp), *ParsePlacement(tp_text));
  const HostTensor full = Iota(shape);
  absl::StatusOr<std::vector<HostTensor>> locals = SplitEdge(full, mesh, placements);
  ASSERT_TRUE(locals.ok()) << locals.status();
  absl::StatusOr<HostTensor> back = AssembleEdge(*std::move(locals), mesh, placements);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->BitEqual(full)) << PlacementsToString(placements);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, EdgeRoundTripTest,
    ::testing::Combine(::testing::Values(Shape{1}, Shape{3}, Shape{4}, Shape{2, 2}, Shape{3, 2}),
                       ::testing::Values("R", "S(0)", "S(1)", "S(-1)", "P(sum)", "P(max)"),
                       ::testing::Bool(), ::testing::Bool(),
                       ::testing::Values(Shape{4, 6}, Shape{5, 3}, Shape{1, 7}, Shape{3, 2, 5})),
    [](const ::testing::TestParamInfo<RoundTripParam>& info) {
      std::string name = absl::StrCat(
          "mesh", ShapeToString(std::get<0>(info.param)), "_", std::get<1>(info.param),
          std::get<2>(info.param) ? "_tplast" : "", std::get<3>(info.param) ? "_dp" : "", "_",
          ShapeToString(std::get<4>(info.param)));
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

}  // namespace
}  // namespace tessera
