#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

DeviceMesh Mesh(Shape shape, std::vector<std::string> names = {}, std::vector<int64_t> ranks = {},
                std::string device_type = "cpu") {
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create(device_type, shape, names, ranks);
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  return *mesh;
}

DTensorSpec Spec(DeviceMesh mesh, const std::string& placements, Shape shape,
                 DType dtype = DType::kFloat32) {
  absl::StatusOr<std::vector<Placement>> p = ParsePlacements(placements);
  EXPECT_TRUE(p.ok()) << p.status();
  absl::StatusOr<DTensorSpec> spec = MakeDTensorSpec(std::move(mesh), *p, shape, dtype);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// Serializes and parses `message`, as a trip over the wire does.
template <typename M>
M OverTheWire(const M& message) {
  std::string bytes;
  EXPECT_TRUE(message.SerializeToString(&bytes));
  M parsed;
  EXPECT_TRUE(parsed.ParseFromString(bytes));
  return parsed;
}

void ExpectSameSpec(const DTensorSpec& got, const DTensorSpec& want) {
  EXPECT_EQ(got.mesh, want.mesh);
  EXPECT_EQ(got.placements, want.placements);
  EXPECT_EQ(got.shape, want.shape);
  EXPECT_EQ(got.dtype, want.dtype);
}

template <typename T>
void ExpectInvalid(const absl::StatusOr<T>& result, const std::string& message_part) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr(message_part));
}

// --- dtype and reduce op --------------------------------------------------------------------

class DTypeConvertTest : public ::testing::TestWithParam<DType> {};

TEST_P(DTypeConvertTest, RoundTripsWithTheSameNumberAndName) {
  const DType dtype = GetParam();
  const v1::DType proto = ToProto(dtype);
  EXPECT_EQ(static_cast<int>(proto), static_cast<int>(dtype));
  EXPECT_EQ(v1::DType_Name(proto), absl::AsciiStrToUpper(DTypeName(dtype)));
  absl::StatusOr<DType> back = FromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, dtype);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, DTypeConvertTest, ::testing::ValuesIn(kAllDTypes),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(DTypeConvertTest, RejectsUnspecifiedAndUnknownNumbers) {
  ExpectInvalid(FromProto(v1::DTYPE_UNSPECIFIED), "DTYPE_UNSPECIFIED");
  ExpectInvalid(FromProto(static_cast<v1::DType>(42)), "unknown dtype number 42");
  ExpectInvalid(FromProto(static_cast<v1::DType>(-1)), "unknown dtype number -1");
}

class ReduceOpConvertTest : public ::testing::TestWithParam<ReduceOp> {};

TEST_P(ReduceOpConvertTest, RoundTripsWithTheSameNumberAndName) {
  const ReduceOp op = GetParam();
  const v1::ReduceOp proto = ToProto(op);
  EXPECT_EQ(static_cast<int>(proto), static_cast<int>(op));
  EXPECT_EQ(v1::ReduceOp_Name(proto), absl::AsciiStrToUpper(ReduceOpName(op)));
  absl::StatusOr<ReduceOp> back = FromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, op);
}

INSTANTIATE_TEST_SUITE_P(AllReduceOps, ReduceOpConvertTest, ::testing::ValuesIn(kAllReduceOps),
                         [](const auto& info) { return std::string(ReduceOpName(info.param)); });

TEST(ReduceOpConvertTest, RejectsUnspecifiedAndUnknownNumbers) {
  ExpectInvalid(FromProto(v1::REDUCE_OP_UNSPECIFIED), "REDUCE_OP_UNSPECIFIED");
  ExpectInvalid(FromProto(static_cast<v1::ReduceOp>(6)), "unknown reduce op number 6");
}

// --- shape ----------------------------------------------------------------------------------

TEST(ShapeConvertTest, RoundTripsIncludingScalarsAndEmptyDims) {
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{2, 5}, Shape{3, 0, 7}}) {
    const v1::Shape proto = OverTheWire(ToProto(shape));
    EXPECT_EQ(std::vector<int64_t>(proto.dims().begin(), proto.dims().end()), shape);
    absl::StatusOr<Shape> back = FromProto(proto);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, shape);
  }
}

TEST(ShapeConvertTest, RejectsNegativeSizesAndOverflow) {
  v1::Shape negative;
  negative.add_dims(2);
  negative.add_dims(-3);
  ExpectInvalid(FromProto(negative), "-3");
  v1::Shape huge;
  for (int i = 0; i < 3; ++i) huge.add_dims(int64_t{1} << 30);
  ExpectInvalid(FromProto(huge), "int64");
}

// --- placements -----------------------------------------------------------------------------

class PlacementConvertTest : public ::testing::TestWithParam<Placement> {};

TEST_P(PlacementConvertTest, RoundTrips) {
  const Placement placement = GetParam();
  const v1::Placement proto = OverTheWire(ToProto(placement));
  switch (placement.kind) {
    case Placement::Kind::kShard:
      ASSERT_EQ(proto.kind_case(), v1::Placement::kShard);
      EXPECT_EQ(proto.shard().dim(), placement.dim);
      break;
    case Placement::Kind::kReplicate:
      EXPECT_EQ(proto.kind_case(), v1::Placement::kReplicate);
      break;
    case Placement::Kind::kPartial:
      ASSERT_EQ(proto.kind_case(), v1::Placement::kPartial);
      EXPECT_EQ(static_cast<int>(proto.partial().op()), static_cast<int>(placement.op));
      break;
  }
  absl::StatusOr<Placement> back = FromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, placement) << PlacementToString(*back);
}

INSTANTIATE_TEST_SUITE_P(
    AllKinds, PlacementConvertTest,
    ::testing::Values(Placement::Shard(0), Placement::Shard(3), Placement::Shard(-1),
                      Placement::Replicate(), Placement::Partial(ReduceOp::kSum),
                      Placement::Partial(ReduceOp::kAvg), Placement::Partial(ReduceOp::kMax),
                      Placement::Partial(ReduceOp::kMin), Placement::Partial(ReduceOp::kProduct)));

TEST(PlacementConvertTest, PartialWithoutOpIsSum) {
  v1::Placement proto;
  proto.mutable_partial();
  absl::StatusOr<Placement> p = FromProto(proto);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, Placement::Partial(ReduceOp::kSum));
}

TEST(PlacementConvertTest, RejectsEmptyPlacementAndUnknownOp) {
  ExpectInvalid(FromProto(v1::Placement()), "no kind set");
  v1::Placement bad_op;
  bad_op.mutable_partial()->set_op(static_cast<v1::ReduceOp>(9));
  ExpectInvalid(FromProto(bad_op), "unknown reduce op number 9");
}

TEST(PlacementConvertTest, ListRoundTripsAndNamesTheBadIndex) {
  const std::vector<Placement> placements = {Placement::Shard(1), Placement::Replicate(),
                                             Placement::Partial(ReduceOp::kMax)};
  google::protobuf::RepeatedPtrField<v1::Placement> proto = ToProto(placements);
  ASSERT_EQ(proto.size(), 3);
  absl::StatusOr<std::vector<Placement>> back = FromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, placements);

  proto.Mutable(1)->Clear();
  ExpectInvalid(FromProto(proto), "placements[1]");
}

// --- device mesh ----------------------------------------------------------------------------

TEST(MeshConvertTest, OneDimMeshWritesItsRanks) {
  const DeviceMesh mesh = Mesh({4});
  const v1::MeshSpec proto = OverTheWire(ToProto(mesh));
  EXPECT_EQ(proto.device_type(), "cpu");
  EXPECT_THAT(proto.shape(), ElementsAre(4));
  EXPECT_TRUE(proto.dim_names().empty());
  EXPECT_THAT(proto.ranks(), ElementsAre(0, 1, 2, 3));
  absl::StatusOr<DeviceMesh> back = FromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, mesh);
}

TEST(MeshConvertTest, NamedTwoByTwoMeshRoundTrips) {
  const DeviceMesh mesh = Mesh({2, 2}, {"dp", "tp"});
  const v1::MeshSpec proto = OverTheWire(ToProto(mesh));
  EXPECT_THAT(proto.shape(), ElementsAre(2, 2));
  EXPECT_THAT(proto.dim_names(), ElementsAre("dp", "tp"));
  absl::StatusOr<DeviceMesh> back = FromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, mesh);
  EXPECT_EQ(*back->DimIndex("tp"), 1);
}

TEST(MeshConvertTest, CustomRanksAndDeviceTypeRoundTrip) {
  const DeviceMesh mesh = Mesh({2, 3}, {}, {5, 7, 1, 3, 0, 9}, "cuda");
  const v1::MeshSpec proto = OverTheWire(ToProto(mesh));
  EXPECT_EQ(proto.device_type(), "cuda");
  EXPECT_THAT(proto.ranks(), ElementsAre(5, 7, 1, 3, 0, 9));
  absl::StatusOr<DeviceMesh> back = FromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, mesh);
  EXPECT_EQ(back->RankAt(std::vector<int64_t>{1, 0}), 3);
}

TEST(MeshConvertTest, MissingRanksMeanZeroToN) {
  v1::MeshSpec proto;
  proto.set_device_type("cpu");
  proto.add_shape(2);
  proto.add_shape(3);
  absl::StatusOr<DeviceMesh> mesh = FromProto(proto);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  EXPECT_THAT(mesh->ranks(), ElementsAre(0, 1, 2, 3, 4, 5));
}

TEST(MeshConvertTest, RejectsBadMeshesNamingTheValue) {
  const v1::MeshSpec good = ToProto(Mesh({2, 2}, {"dp", "tp"}));

  v1::MeshSpec device = good;
  device.set_device_type("tpu");
  ExpectInvalid(FromProto(device), "'tpu'");

  v1::MeshSpec no_dims = good;
  no_dims.clear_shape();
  no_dims.clear_dim_names();
  no_dims.clear_ranks();
  ExpectInvalid(FromProto(no_dims), "at least one dim");

  v1::MeshSpec zero = good;
  zero.set_shape(1, 0);
  zero.clear_ranks();
  ExpectInvalid(FromProto(zero), "size 0");

  v1::MeshSpec names = good;
  names.set_dim_names(1, "dp");
  ExpectInvalid(FromProto(names), "repeats 'dp'");

  v1::MeshSpec too_few = good;
  too_few.mutable_ranks()->RemoveLast();
  ExpectInvalid(FromProto(too_few), "3 ranks");

  v1::MeshSpec twice = good;
  twice.set_ranks(3, 0);
  ExpectInvalid(FromProto(twice), "rank 0 appears twice");

  v1::MeshSpec negative = good;
  negative.set_ranks(2, -4);
  ExpectInvalid(FromProto(negative), "-4");
}

TEST(MeshConvertTest, RejectsMeshesPastTheSizeLimitBeforeAllocating) {
  v1::MeshSpec huge;
  huge.set_device_type("cpu");
  huge.add_shape(int64_t{1} << 40);
  huge.add_shape(int64_t{1} << 40);
  ExpectInvalid(FromProto(huge), "slots");

  v1::MeshSpec just_over;
  just_over.set_device_type("cpu");
  just_over.add_shape(kMaxMeshSize + 1);
  ExpectInvalid(FromProto(just_over), std::to_string(kMaxMeshSize + 1));
}

// --- DTensor spec ---------------------------------------------------------------------------

TEST(DTensorConvertTest, UnevenNestedShardingFillsEveryRanksShard) {
  const DTensorSpec spec = Spec(Mesh({2, 2}), "S(1),S(1)", {2, 5});
  const v1::DTensorMeta meta = OverTheWire(ToProto(spec));

  EXPECT_THAT(meta.shape().dims(), ElementsAre(2, 5));
  EXPECT_EQ(meta.dtype(), v1::FLOAT32);
  EXPECT_EQ(meta.nbytes(), 2 * 5 * 4);
  ASSERT_EQ(meta.placements_size(), 2);
  EXPECT_EQ(meta.placements(0).shard().dim(), 1);
  EXPECT_EQ(meta.placements(1).shard().dim(), 1);
  ASSERT_EQ(meta.shards_size(), 4);
  const std::vector<std::pair<Shape, std::vector<int64_t>>> want = {
      {{2, 2}, {0, 0}}, {{2, 1}, {0, 2}}, {{2, 1}, {0, 3}}, {{2, 1}, {0, 4}}};
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(meta.shards(i).rank(), i);
    EXPECT_EQ(Shape(meta.shards(i).local_shape().begin(), meta.shards(i).local_shape().end()),
              want[i].first);
    EXPECT_EQ(std::vector<int64_t>(meta.shards(i).global_offset().begin(),
                                   meta.shards(i).global_offset().end()),
              want[i].second);
  }

  absl::StatusOr<DTensorSpec> back = FromProto(meta);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameSpec(*back, spec);
}

TEST(DTensorConvertTest, EmptyShardsGetTheEndOffset) {
  // Chunks of 2 over 4 ranks: [0,2) [2,4) [4,5) and an empty chunk at offset 5.
  const v1::DTensorMeta meta = ToProto(Spec(Mesh({4}), "S(0)", {5, 2}));
  ASSERT_EQ(meta.shards_size(), 4);
  EXPECT_THAT(meta.shards(2).local_shape(), ElementsAre(1, 2));
  EXPECT_THAT(meta.shards(2).global_offset(), ElementsAre(4, 0));
  EXPECT_THAT(meta.shards(3).local_shape(), ElementsAre(0, 2));
  EXPECT_THAT(meta.shards(3).global_offset(), ElementsAre(5, 0));
  EXPECT_TRUE(FromProto(meta).ok());
}

TEST(DTensorConvertTest, ShardsFollowCustomRanksInMeshOrder) {
  const DTensorSpec spec = Spec(Mesh({2, 2}, {"dp", "tp"}, {6, 4, 2, 0}), "R,S(0)", {4, 3});
  const v1::DTensorMeta meta = ToProto(spec);
  ASSERT_EQ(meta.shards_size(), 4);
  EXPECT_EQ(meta.shards(0).rank(), 6);
  EXPECT_EQ(meta.shards(3).rank(), 0);
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<LocalShard> want = LocalShapeAndOffset(spec, meta.shards(i).rank());
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(Shape(meta.shards(i).local_shape().begin(), meta.shards(i).local_shape().end()),
              want->shape);
  }
  EXPECT_THAT(meta.shards(1).global_offset(), ElementsAre(2, 0));
  absl::StatusOr<DTensorSpec> back = FromProto(OverTheWire(meta));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameSpec(*back, spec);
}

TEST(DTensorConvertTest, ScalarAndPartialSpecsRoundTrip) {
  for (const DTensorSpec& spec :
       {Spec(Mesh({2}), "R", {}, DType::kInt64), Spec(Mesh({2}), "P(max)", {}, DType::kBool),
        Spec(Mesh({2, 2}), "P(avg),S(0)", {5}, DType::kBFloat16)}) {
    SCOPED_TRACE(spec.ToString());
    const v1::DTensorMeta meta = OverTheWire(ToProto(spec));
    EXPECT_TRUE(meta.has_shape());
    EXPECT_EQ(meta.nbytes(), NumElements(spec.shape) * static_cast<int64_t>(DTypeSize(spec.dtype)));
    absl::StatusOr<DTensorSpec> back = FromProto(meta);
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectSameSpec(*back, spec);
  }
}

TEST(DTensorConvertTest, DerivedFieldsMayBeOmittedAndNegativeDimsNormalize) {
  v1::DTensorMeta meta;
  *meta.mutable_shape() = ToProto(Shape{2, 5});
  meta.set_dtype(v1::FLOAT16);
  *meta.mutable_mesh() = ToProto(Mesh({2}));
  meta.add_placements()->mutable_shard()->set_dim(-1);
  absl::StatusOr<DTensorSpec> spec = FromProto(meta);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->placements[0], Placement::Shard(1));
  EXPECT_EQ(spec->dtype, DType::kFloat16);
}

// Every combination of mesh, placements and (often uneven) global shape; the shards in the message
// must tile the tensor: each element held by exactly as many ranks as the non-Shard mesh dims have.
using Layout = std::pair<Shape, std::string>;  // mesh shape, placements
using ProductParam = std::tuple<Layout, Shape>;
class DTensorProductTest : public ::testing::TestWithParam<ProductParam> {};

TEST_P(DTensorProductTest, ShardsCoverTheTensorAndRoundTrip) {
  const auto& [layout, shape] = GetParam();
  const auto& [mesh_shape, placements_text] = layout;
  absl::StatusOr<std::vector<Placement>> placements = ParsePlacements(placements_text);
  ASSERT_TRUE(placements.ok()) << placements.status();
  const DTensorSpec spec = Spec(Mesh(mesh_shape), placements_text, shape, DType::kInt32);
  const v1::DTensorMeta meta = OverTheWire(ToProto(spec));

  int64_t copies = 1;
  for (size_t m = 0; m < mesh_shape.size(); ++m) {
    if (!(*placements)[m].is_shard()) copies *= mesh_shape[m];
  }
  std::vector<int64_t> held(NumElements(shape), 0);
  const std::vector<int64_t> strides = ContiguousStrides(shape);
  ASSERT_EQ(meta.shards_size(), NumElements(mesh_shape));
  for (const v1::LocalShard& s : meta.shards()) {
    ASSERT_EQ(s.local_shape_size(), static_cast<int>(shape.size()));
    ASSERT_EQ(s.global_offset_size(), static_cast<int>(shape.size()));
    // Visit every element of the local block.
    const Shape local(s.local_shape().begin(), s.local_shape().end());
    for (int64_t i = 0; i < NumElements(local); ++i) {
      int64_t rest = i, flat = 0;
      for (int d = static_cast<int>(local.size()) - 1; d >= 0; --d) {
        const int64_t g = s.global_offset(d) + rest % local[d];
        rest /= local[d];
        ASSERT_LT(g, shape[d]);
        flat += g * strides[d];
      }
      ++held[flat];
    }
  }
  for (int64_t h : held) EXPECT_EQ(h, copies);

  absl::StatusOr<DTensorSpec> back = FromProto(meta);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameSpec(*back, spec);
}

INSTANTIATE_TEST_SUITE_P(
    MeshesPlacementsShapes, DTensorProductTest,
    ::testing::Combine(::testing::Values(Layout{{3}, "S(0)"}, Layout{{3}, "S(1)"}, Layout{{3}, "R"},
                                         Layout{{3}, "P(sum)"}, Layout{{2, 2}, "S(0),S(0)"},
                                         Layout{{2, 2}, "S(1),S(1)"}, Layout{{2, 3}, "S(0),S(1)"},
                                         Layout{{2, 3}, "S(1),S(0)"}, Layout{{2, 3}, "S(1),R"},
                                         Layout{{2, 3}, "P(max),S(0)"}, Layout{{3, 2}, "R,R"},
                                         Layout{{2, 2, 2}, "S(0),R,S(0)"}),
                       ::testing::Values(Shape{2, 5}, Shape{7, 3}, Shape{1, 1}, Shape{0, 4})));

TEST(DTensorConvertTest, RejectsBadMetaWithItsCode) {
  const v1::DTensorMeta good = ToProto(Spec(Mesh({2, 2}), "S(0),S(1)", {4, 6}));

  v1::DTensorMeta no_shape = good;
  no_shape.clear_shape();
  ExpectInvalid(FromProto(no_shape), "no shape");

  v1::DTensorMeta no_mesh = good;
  no_mesh.clear_mesh();
  ExpectInvalid(FromProto(no_mesh), "no mesh");

  v1::DTensorMeta no_dtype = good;
  no_dtype.clear_dtype();
  ExpectInvalid(FromProto(no_dtype), "DTensorMeta.dtype: dtype is DTYPE_UNSPECIFIED");

  v1::DTensorMeta unknown_dtype = good;
  unknown_dtype.set_dtype(static_cast<v1::DType>(77));
  ExpectInvalid(FromProto(OverTheWire(unknown_dtype)), "unknown dtype number 77");

  v1::DTensorMeta negative = good;
  negative.mutable_shape()->set_dims(0, -4);
  ExpectInvalid(FromProto(negative), "DTensorMeta.shape");

  v1::DTensorMeta out_of_range = good;
  out_of_range.mutable_placements(1)->mutable_shard()->set_dim(2);
  out_of_range.clear_shards();
  ExpectInvalid(FromProto(out_of_range), "shards dim 2 of a tensor with 2 dims");

  v1::DTensorMeta too_few = good;
  too_few.mutable_placements()->RemoveLast();
  ExpectInvalid(FromProto(too_few), "give one placement per mesh dim");

  v1::DTensorMeta unset = good;
  unset.mutable_placements(0)->Clear();
  ExpectInvalid(FromProto(unset), "DTensorMeta.placements[0]: placement has no kind set");

  v1::DTensorMeta bad_mesh = good;
  bad_mesh.mutable_mesh()->set_device_type("gpu");
  ExpectInvalid(FromProto(bad_mesh), "DTensorMeta.mesh: unknown device type 'gpu'");

  v1::DTensorMeta too_big;
  too_big.mutable_shape()->add_dims(int64_t{1} << 61);
  too_big.set_dtype(v1::FLOAT64);
  *too_big.mutable_mesh() = ToProto(Mesh({1}));
  too_big.add_placements()->mutable_replicate();
  ExpectInvalid(FromProto(too_big), "more bytes than fit in int64");
}

TEST(DTensorConvertTest, RejectsDerivedFieldsThatDisagree) {
  const v1::DTensorMeta good = ToProto(Spec(Mesh({2, 2}), "S(1),S(1)", {2, 5}));

  v1::DTensorMeta nbytes = good;
  nbytes.set_nbytes(41);
  ExpectInvalid(FromProto(nbytes), "nbytes is 41");

  v1::DTensorMeta count = good;
  count.mutable_shards()->RemoveLast();
  ExpectInvalid(FromProto(count), "3 shards but its mesh has 4 ranks");

  v1::DTensorMeta offset = good;
  offset.mutable_shards(2)->set_global_offset(1, 2);
  ExpectInvalid(FromProto(offset), "DTensorMeta.shards[2] is [2, 1]@[0, 2] on rank 2");

  v1::DTensorMeta rank = good;
  rank.mutable_shards(0)->set_rank(9);
  ExpectInvalid(FromProto(rank), "on rank 9");
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(PlanToProto, CarriesEveryStepAndTheTotals) {
  const DTensorSpec src = MakeDTensorSpec(DeviceMesh::Create("cpu", {2, 2}).value(),
                                          {Placement::Partial(ReduceOp::kMax), Placement::Shard(0)},
                                          {8, 6}, DType::kFloat32)
                              .value();
  const RedistributePlan plan =
      PlanRedistribute(src, {Placement::Replicate(), Placement::Replicate()}).value();
  const v1::RedistributePlan msg = ToProto(plan);
  ASSERT_EQ(msg.steps_size(), static_cast<int>(plan.steps.size()));
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const v1::RedistributeStep& s = msg.steps(static_cast<int>(i));
    EXPECT_EQ(s.mesh_dim(), plan.steps[i].mesh_dim);
    EXPECT_EQ(static_cast<int>(s.collective()), static_cast<int>(plan.steps[i].collective));
    EXPECT_EQ(FromProto(s.from_placement()).value(), plan.steps[i].from);
    EXPECT_EQ(FromProto(s.to_placement()).value(), plan.steps[i].to);
    EXPECT_EQ(s.recv_bytes(), plan.steps[i].recv_bytes);
    if (plan.steps[i].collective == Collective::kAllReduce) {
      EXPECT_EQ(s.reduce_op(), v1::MAX);
    }
  }
  EXPECT_EQ(msg.total_recv_bytes(), plan.total_recv_bytes());
  EXPECT_GT(msg.total_recv_bytes(), 0);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Every collective a plan step can name crosses the wire and back.
class PlanStepCollectiveTest : public ::testing::TestWithParam<Collective> {};

TEST_P(PlanStepCollectiveTest, RoundTrips) {
  const RedistributeStep step{0, Placement::Shard(0), Placement::Partial(), GetParam(), 16, 16};
  const v1::RedistributePlan msg = ToProto(RedistributePlan{{step}});
  absl::StatusOr<RedistributePlan> back = FromProto(msg, 1);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->steps.size(), 1u);
  EXPECT_EQ(back->steps[0].collective, GetParam());
  EXPECT_EQ(CollectiveName(back->steps[0].collective), CollectiveName(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(All, PlanStepCollectiveTest,
                         ::testing::Values(Collective::kLocalChunk, Collective::kLocalPartition,
                                           Collective::kAllGather, Collective::kAllReduce,
                                           Collective::kReduceScatter, Collective::kAllToAll,
                                           Collective::kLocalEmbed),
                         [](const auto& info) { return std::string(CollectiveName(info.param)); });

TEST(PlanFromProto, UnknownCollectiveIsInvalidArgument) {
  v1::RedistributePlan msg;
  msg.add_steps()->set_collective(static_cast<v1::Collective>(8));
  EXPECT_EQ(FromProto(msg, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

// A registry call's arguments as a client gives them: every kind of value, positional or by
// keyword, comes back as it went (an empty list keeps its kind).
TEST(OpArgsConvertTest, EveryValueRoundTrips) {
  const std::vector<ops::NamedValue> args = {
      {"", ops::TensorRef{1}},
      {"", ops::NoneValue{}},
      {"", true},
      {"", int64_t{-3}},
      {"", 2.5},
      {"", std::vector<int64_t>{0, -1}},
      {"", std::vector<int64_t>{}},
      {"dtype", DType::kBFloat16},
      {"approximate", std::string("tanh")},
      {"tensors", ops::TensorList{{0, -1, 1}}},
      {"empty", ops::TensorList{}},
  };
  v1::OpCall call;
  call.set_name("aten::f");
  ArgsToProto(args, call);
  ASSERT_EQ(call.args_size(), static_cast<int>(args.size()));
  EXPECT_EQ(call.args(6).value_case(), v1::OpArgument::kInts);
  EXPECT_EQ(call.args(10).value_case(), v1::OpArgument::kTensors);
  absl::StatusOr<std::vector<ops::NamedValue>> back = ArgsFromProto(OverTheWire(call));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    EXPECT_EQ((*back)[i].name, args[i].name) << i;
    EXPECT_TRUE((*back)[i].value == args[i].value)
        << i << ": " << ops::OpValueToString((*back)[i].value);
  }
}

}  // namespace
}  // namespace tessera
