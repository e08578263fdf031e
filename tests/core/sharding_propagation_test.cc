// Sharding propagation checked end to end on the simulated mesh: for every op × mesh × input
// placements × shape × dtype, the chosen strategy's redistributions and per-rank kernels must give
// the single-process result.

#include "core/sharding/sharding_propagation.h"

#include <cmath>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/sharding/op_call.h"
#include "core/sharding/simulated_mesh.h"
#include "core/small_integer_tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/run_op.h"
#include "kernels/testing/reference.h"
#include "tests/support/placement_product.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// One op call with its input shapes: an even set and an uneven one (a dim smaller than the mesh).
struct OpCase {
  std::string name;
  OpCall op;
  std::vector<Shape> even;
  std::vector<Shape> uneven;
  std::vector<DType> dtypes;
};

OpCall Call(OpKind kind) {
  OpCall op;
  op.kind = kind;
  return op;
}
OpCall Reduction(OpKind kind, std::vector<int> dims, bool keepdim) {
  OpCall op = Call(kind);
  op.dims = std::move(dims);
  op.keepdim = keepdim;
  return op;
}
OpCall Addmm(double alpha, double beta) {
  OpCall op = Call(OpKind::kAddmm);
  op.alpha = alpha;
  op.beta = beta;
  return op;
}
OpCall Transpose(int dim0, int dim1) {
  OpCall op = Call(OpKind::kTranspose);
  op.dim0 = dim0;
  op.dim1 = dim1;
  return op;
}
OpCall Cast(DType dtype) {
  OpCall op = Call(OpKind::kCast);
  op.dtype = dtype;
  return op;
}

const std::vector<OpCase>& OpCases() {
  constexpr DType f32 = DType::kFloat32, f64 = DType::kFloat64, i32 = DType::kInt32;
  static const auto* cases = new std::vector<OpCase>{
      {"mm", Call(OpKind::kMm), {{4, 6}, {6, 8}}, {{5, 3}, {3, 2}}, {f32, f64}},
      {"matmul3d", Call(OpKind::kMatmul), {{2, 4, 6}, {6, 4}}, {{3, 5, 3}, {3, 2}}, {f32}},
      {"matmul1d", Call(OpKind::kMatmul), {{6}, {6, 4}}, {{3}, {3, 5}}, {f32}},
      {"addmm_bias_n", Addmm(2.0, 0.5), {{8}, {4, 6}, {6, 8}}, {{2}, {5, 3}, {3, 2}}, {f32}},
      {"addmm_bias_mn",
       Call(OpKind::kAddmm),
       {{4, 8}, {4, 6}, {6, 8}},
       {{5, 2}, {5, 3}, {3, 2}},
       {f32, f64}},
      {"addmm_bias_m1", Addmm(1.0, 2.0), {{4, 1}, {4, 6}, {6, 8}}, {{5, 1}, {5, 3}, {3, 2}}, {f32}},
      {"add", Call(OpKind::kAdd), {{4, 6}, {4, 6}}, {{5, 3}, {5, 3}}, {f32, i32}},
      {"add_bcast", Call(OpKind::kAdd), {{4, 6}, {6}}, {{5, 3}, {1, 3}}, {f32, i32}},
      {"sub_bcast", Call(OpKind::kSub), {{4, 6}, {4, 1}}, {{5, 3}, {3}}, {f32, i32}},
      {"mul_bcast", Call(OpKind::kMul), {{6}, {4, 6}}, {{5, 3}, {5, 1}}, {f32, i32}},
      {"div", Call(OpKind::kDiv), {{4, 6}, {4, 6}}, {{5, 3}, {3}}, {f32, f64}},
      {"relu", Call(OpKind::kRelu), {{4, 6}}, {{5, 3}}, {f32, i32}},
      {"gelu", Call(OpKind::kGelu), {{4, 6}}, {{5, 3}}, {f32, f64}},
      {"tanh", Call(OpKind::kTanh), {{4, 6}}, {{5, 3}}, {f32}},
      {"sum_all", Reduction(OpKind::kSum, {}, false), {{4, 6}}, {{5, 3}}, {f32, i32}},
      {"sum_dim1_keep", Reduction(OpKind::kSum, {1}, true), {{4, 6}}, {{5, 3}}, {f32, i32}},
      {"sum_dim0", Reduction(OpKind::kSum, {-2}, false), {{2, 4, 6}}, {{3, 5, 3}}, {f32}},
      {"mean_last", Reduction(OpKind::kMean, {-1}, false), {{4, 6}}, {{5, 3}}, {f32, f64}},
      {"mean_all_keep", Reduction(OpKind::kMean, {}, true), {{4, 6}}, {{5, 3}}, {f32}},
      {"max_dim0", Reduction(OpKind::kMax, {0}, false), {{4, 6}}, {{5, 3}}, {f32, i32}},
      {"max_all_keep", Reduction(OpKind::kMax, {0, 1}, true), {{4, 6}}, {{5, 3}}, {f32, i32}},
      {"transpose", Transpose(0, 1), {{4, 6}}, {{5, 3}}, {f32, i32}},
      {"transpose3d", Transpose(-1, 0), {{2, 4, 6}}, {{3, 5, 2}}, {f32}},
      {"cast_f64", Cast(DType::kFloat64), {{4, 6}}, {{5, 3}}, {f32, i32}},
      {"cast_i32", Cast(DType::kInt32), {{4, 6}}, {{5, 3}}, {f32}},
  };
  return *cases;
}

struct Param {
  int op_case;
  Shape mesh;
  bool uneven;
  DType dtype;
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << OpCases()[p.op_case].name << " on mesh " << ShapeToString(p.mesh)
      << (p.uneven ? ", uneven " : ", even ") << DTypeName(p.dtype);
}

std::vector<Param> Params() {
  std::vector<Param> out;
  for (int i = 0; i < static_cast<int>(OpCases().size()); ++i) {
    for (const Shape& mesh : {Shape{2}, Shape{4}, Shape{2, 2}}) {
      for (bool uneven : {false, true}) {
        for (DType dtype : OpCases()[i].dtypes) out.push_back({i, mesh, uneven, dtype});
      }
    }
  }
  return out;
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const Param& p = info.param;
  return absl::StrCat(OpCases()[p.op_case].name, "_mesh", absl::StrJoin(p.mesh, "x"),
                      p.uneven ? "_uneven_" : "_even_", DTypeName(p.dtype));
}

// Every placement tuple of S(d) / R / P(sum) per mesh dim for a tensor of `rank` dims.
std::vector<std::vector<Placement>> AllPlacements(int ndim, int rank) {
  std::vector<Placement> options = {Placement::Replicate(), Placement::Partial()};
  for (int d = 0; d < rank; ++d) options.push_back(Placement::Shard(d));
  return testing::PlacementProduct(options, ndim);
}

// Small integers, with zeros replaced by 3 when the tensor is a divisor.
HostTensor InputTensor(DType dtype, const Shape& shape, uint32_t seed, bool divisor) {
  HostTensor t = SmallIntegerTensor(dtype, shape, seed);
  for (int64_t i = 0; divisor && i < t.num_elements(); ++i) {
    if (kernels::testing::GetDouble(t, i) == 0) kernels::testing::SetFromDouble(t, i, 3);
  }
  return t;
}

// Exact for integers; for floating dtypes a relative tolerance (sums of rounded partial results).
void ExpectClose(const HostTensor& got, const HostTensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const bool floating = IsFloatingPoint(want.dtype());
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double g = kernels::testing::GetDouble(got, i);
    const double w = kernels::testing::GetDouble(want, i);
    if (!floating || std::isnan(w) || std::isinf(w)) {
      ASSERT_TRUE(kernels::testing::SameElement(got, want, i))
          << what << ": element " << i << " is " << g << ", expected " << w;
    } else {
      ASSERT_NEAR(g, w, 1e-5 * std::max(1.0, std::abs(w))) << what << ": element " << i;
    }
  }
}

class ShardingPropagationTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { backend_ = kernels::MakeBackend("cpu").value(); }
  std::unique_ptr<kernels::KernelBackend> backend_;
};

// Runs the sharded op for one choice of input placements and compares with `want`.
void CheckOneLayout(kernels::KernelBackend& backend, const OpCall& op, const DeviceMesh& mesh,
                    const std::vector<HostTensor>& fulls,
                    const std::vector<std::vector<Placement>>& placements, const HostTensor& want) {
  std::vector<DTensorSpec> specs;
  std::vector<Shape> global;
  std::string what = absl::StrCat(OpKindName(op.kind), " on");
  for (size_t i = 0; i < fulls.size(); ++i) {
    specs.push_back(
        MakeDTensorSpec(mesh, placements[i], fulls[i].shape(), fulls[i].dtype()).value());
    global.push_back(fulls[i].shape());
    absl::StrAppend(&what, " ", specs.back().ToString());
  }
  absl::StatusOr<OpSharding> sharding = PropagateSharding(op, specs);
  ASSERT_TRUE(sharding.ok()) << what << ": " << sharding.status();
  absl::StrAppend(&what, " -> ", PlacementsToString(sharding->strategy.output));
  ASSERT_EQ(sharding->output.shape, want.shape()) << what;
  ASSERT_EQ(sharding->output.dtype, want.dtype()) << what;

  SimulatedMesh sim(mesh);
  std::vector<std::vector<HostTensor>> shards;
  int64_t bytes = 0;
  for (size_t i = 0; i < fulls.size(); ++i) {
    const RedistributePlan& plan = sharding->input_plans[i];
    bytes += plan.total_recv_bytes();
    absl::StatusOr<std::vector<HostTensor>> moved =
        sim.Redistribute(specs[i], plan, sim.Distribute(fulls[i], specs[i]).value());
    ASSERT_TRUE(moved.ok()) << what << ": input " << i << ": " << moved.status();
    shards.push_back(*std::move(moved));
  }
  EXPECT_EQ(bytes, sharding->redistribute_bytes) << what;
  std::vector<HostTensor> out_shards;
  for (int64_t pos = 0; pos < mesh.size(); ++pos) {
    std::vector<const HostTensor*> local;
    for (const auto& s : shards) local.push_back(&s[pos]);
    absl::StatusOr<HostTensor> out = kernels::RunLocalOp(backend, op, local, global);
    ASSERT_TRUE(out.ok()) << what << ": position " << pos << ": " << out.status();
    const LocalShard expected =
        LocalShapeAndOffsetAt(sharding->output, mesh.CoordinateOfIndex(pos));
    ASSERT_EQ(out->shape(), expected.shape) << what << ": position " << pos;
    out_shards.push_back(*std::move(out));
  }
  absl::StatusOr<HostTensor> got = sim.FullTensor(sharding->output, std::move(out_shards));
  ASSERT_TRUE(got.ok()) << what << ": " << got.status();
  ExpectClose(*got, want, what);
}

TEST_P(ShardingPropagationTest, ShardedResultMatchesSingleProcess) {
  const Param& p = GetParam();
  const OpCase& c = OpCases()[p.op_case];
  const DeviceMesh mesh = DeviceMesh::Create("cpu", p.mesh).value();
  const std::vector<Shape>& shapes = p.uneven ? c.uneven : c.even;
  std::vector<HostTensor> fulls;
  std::vector<const HostTensor*> full_ptrs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const bool divisor = c.op.kind == OpKind::kDiv && i == 1;
    fulls.push_back(InputTensor(p.dtype, shapes[i], 17 + static_cast<uint32_t>(i), divisor));
  }
  for (const HostTensor& t : fulls) full_ptrs.push_back(&t);
  const HostTensor want = kernels::RunLocalOp(*backend_, c.op, full_ptrs, shapes).value();

  // Every combination of the inputs' placements; with three inputs on a 2-D mesh, a spread-out
  // sample of them.
  std::vector<std::vector<std::vector<Placement>>> per_input;
  size_t total = 1;
  for (const Shape& s : shapes) {
    per_input.push_back(AllPlacements(mesh.ndim(), static_cast<int>(s.size())));
    total *= per_input.back().size();
  }
  const size_t stride = total > 600 ? total / 300 + 1 : 1;
  int checked = 0;
  for (size_t index = 0; index < total; index += stride) {
    std::vector<std::vector<Placement>> placements;
    size_t rest = index;
    for (const auto& options : per_input) {
      placements.push_back(options[rest % options.size()]);
      rest /= options.size();
    }
    ASSERT_NO_FATAL_FAILURE(CheckOneLayout(*backend_, c.op, mesh, fulls, placements, want));
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(Product, ShardingPropagationTest, ::testing::ValuesIn(Params()),
                         ParamName);

// --- Hand-checked cases ---

DTensorSpec Spec(const DeviceMesh& mesh, absl::string_view placements, Shape shape,
                 DType dtype = DType::kFloat32) {
  return MakeDTensorSpec(mesh, ParsePlacements(placements).value(), std::move(shape), dtype)
      .value();
}

std::string Strategy(const OpStrategy& s) {
  std::vector<std::string> parts;
  for (const auto& in : s.inputs) parts.push_back(PlacementsToString(in));
  return absl::StrCat(absl::StrJoin(parts, " x "), " -> ", PlacementsToString(s.output));
}

class HandCheckedTest : public ::testing::Test {
 protected:
  DeviceMesh mesh_ = DeviceMesh::Create("cpu", {2}).value();
};

TEST_F(HandCheckedTest, MatmulRowShardedStaysRowShardedWithoutTraffic) {
  const DTensorSpec in[] = {Spec(mesh_, "S(0)", {4, 6}), Spec(mesh_, "R", {6, 8})};
  OpSharding s = PropagateSharding(Call(OpKind::kMatmul), in).value();
  EXPECT_EQ(Strategy(s.strategy), "(S(0)) x (R) -> (S(0))");
  EXPECT_EQ(s.redistribute_bytes, 0);
  EXPECT_TRUE(s.input_plans[0].steps.empty() && s.input_plans[1].steps.empty());
  EXPECT_EQ(s.output.shape, (Shape{4, 8}));
}

TEST_F(HandCheckedTest, MatmulContractionShardedGivesPartialSumWithoutTraffic) {
  const DTensorSpec in[] = {Spec(mesh_, "S(1)", {4, 6}), Spec(mesh_, "S(0)", {6, 8})};
  OpSharding s = PropagateSharding(Call(OpKind::kMatmul), in).value();
  EXPECT_EQ(Strategy(s.strategy), "(S(1)) x (S(0)) -> (P(sum))");
  EXPECT_EQ(s.redistribute_bytes, 0);
  EXPECT_TRUE(s.input_plans[0].steps.empty() && s.input_plans[1].steps.empty());
}

TEST_F(HandCheckedTest, ReplicatedInputsPickReplicateWithoutRedistribution) {
  const DTensorSpec in[] = {Spec(mesh_, "R", {4, 6}), Spec(mesh_, "R", {6, 8})};
  OpSharding s = PropagateSharding(Call(OpKind::kMm), in).value();
  // Local chunks and partitions cost no bytes either; no redistribution at all wins the tie.
  EXPECT_EQ(Strategy(s.strategy), "(R) x (R) -> (R)");
  EXPECT_TRUE(s.input_plans[0].steps.empty() && s.input_plans[1].steps.empty());
}

TEST_F(HandCheckedTest, PicksTheCheapestRedistribution) {
  // a is small and b large: gathering a (16 B received per rank) beats gathering b (256 B).
  const DTensorSpec in[] = {Spec(mesh_, "S(0)", {8, 1}), Spec(mesh_, "S(1)", {1, 128})};
  OpSharding s = PropagateSharding(Call(OpKind::kMm), in).value();
  EXPECT_EQ(Strategy(s.strategy), "(R) x (S(1)) -> (S(1))");
  EXPECT_EQ(s.redistribute_bytes, 16);
  ASSERT_EQ(s.input_plans[0].steps.size(), 1u);
  EXPECT_EQ(s.input_plans[0].steps[0].collective, Collective::kAllGather);
  EXPECT_TRUE(s.input_plans[1].steps.empty());
}

TEST_F(HandCheckedTest, ReduceScatterBeatsAllReduceBeforeANonlinearOp) {
  const DTensorSpec in[] = {Spec(mesh_, "P(sum)", {4, 6})};
  OpSharding s = PropagateSharding(Call(OpKind::kRelu), in).value();
  EXPECT_EQ(Strategy(s.strategy), "(S(0)) -> (S(0))");
  EXPECT_EQ(s.input_plans[0].steps.at(0).collective, Collective::kReduceScatter);
}

TEST_F(HandCheckedTest, ReductionOfAShardedDimIsPartial) {
  const DTensorSpec in[] = {Spec(mesh_, "S(1)", {4, 6})};
  EXPECT_EQ(Strategy(PropagateSharding(Reduction(OpKind::kSum, {1}, false), in)->strategy),
            "(S(1)) -> (P(sum))");
  EXPECT_EQ(Strategy(PropagateSharding(Reduction(OpKind::kMax, {-1}, true), in)->strategy),
            "(S(1)) -> (P(max))");
  EXPECT_EQ(Strategy(PropagateSharding(Reduction(OpKind::kMean, {0}, false), in)->strategy),
            "(S(1)) -> (S(0))");
}

TEST_F(HandCheckedTest, TransposeSwapsShardDims) {
  const DTensorSpec in[] = {Spec(mesh_, "S(0)", {4, 6})};
  OpSharding s = PropagateSharding(Call(OpKind::kTranspose), in).value();
  EXPECT_EQ(Strategy(s.strategy), "(S(0)) -> (S(1))");
  EXPECT_EQ(s.output.shape, (Shape{6, 4}));
}

TEST_F(HandCheckedTest, StrategiesOfMatmulOnOneMeshDim) {
  const DTensorSpec in[] = {Spec(mesh_, "R", {4, 6}), Spec(mesh_, "R", {6, 8})};
  absl::StatusOr<std::vector<OpStrategy>> strategies = OpStrategies(Call(OpKind::kMm), in);
  ASSERT_TRUE(strategies.ok()) << strategies.status();
  std::vector<std::string> got;
  for (const OpStrategy& s : *strategies) got.push_back(Strategy(s));
  EXPECT_THAT(got,
              ::testing::ElementsAre("(S(0)) x (R) -> (S(0))", "(R) x (S(1)) -> (S(1))",
                                     "(S(1)) x (S(0)) -> (P(sum))", "(R) x (R) -> (R)",
                                     "(P(sum)) x (R) -> (P(sum))", "(R) x (P(sum)) -> (P(sum))"));
}

TEST_F(HandCheckedTest, InputsOnDifferentMeshesAreRejected) {
  const DeviceMesh other = DeviceMesh::Create("cpu", {2}, {}, {2, 3}).value();
  const DTensorSpec in[] = {Spec(mesh_, "R", {4, 6}), Spec(other, "R", {4, 6})};
  absl::StatusOr<OpSharding> s = PropagateSharding(Call(OpKind::kAdd), in);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), AllOf(HasSubstr("[0, 1]"), HasSubstr("[2, 3]")));
}

TEST(InferOpOutputTest, ShapesAndDTypes) {
  constexpr DType f32 = DType::kFloat32;
  EXPECT_EQ(InferOpOutput(Call(OpKind::kMatmul), {Shape{3, 2, 4}, Shape{4, 5}}, {f32, f32})->shape,
            (Shape{3, 2, 5}));
  EXPECT_EQ(InferOpOutput(Call(OpKind::kMatmul), {Shape{4}, Shape{4, 5}}, {f32, f32})->shape,
            (Shape{5}));
  EXPECT_EQ(InferOpOutput(Call(OpKind::kAdd), {Shape{4, 1, 6}, Shape{5, 1}}, {f32, f32})->shape,
            (Shape{4, 5, 6}));
  EXPECT_EQ(InferOpOutput(Reduction(OpKind::kSum, {0, -1}, true), {Shape{2, 3, 4}}, {DType::kInt32})
                .value()
                .dtype,
            DType::kInt64);
  EXPECT_EQ(InferOpOutput(Reduction(OpKind::kMax, {}, false), {Shape{2, 3}}, {f32})->shape,
            Shape{});
  EXPECT_EQ(InferOpOutput(Cast(DType::kBool), {Shape{2}}, {f32})->dtype, DType::kBool);
}

TEST(InferOpOutputTest, ErrorsNameTheShapesDimsAndDTypes) {
  constexpr DType f32 = DType::kFloat32, i32 = DType::kInt32;
  absl::Status s =
      InferOpOutput(Call(OpKind::kMm), {Shape{4, 6}, Shape{5, 8}}, {f32, f32}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("[4, 6]"), HasSubstr("[5, 8]")));
  s = InferOpOutput(Call(OpKind::kAdd), {Shape{4}, Shape{4}}, {f32, i32}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("float32"), HasSubstr("int32")));
  s = InferOpOutput(Call(OpKind::kAdd), {Shape{4, 6}, Shape{4}}, {f32, f32}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("[4, 6]"), HasSubstr("[4]")));
  s = InferOpOutput(Reduction(OpKind::kSum, {2}, false), {Shape{4, 6}}, {f32}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("dim 2"), HasSubstr("[4, 6]")));
  s = InferOpOutput(Reduction(OpKind::kSum, {1, -1}, false), {Shape{4, 6}}, {f32}).status();
  EXPECT_THAT(s.message(), HasSubstr("more than once"));
  s = InferOpOutput(Transpose(0, -3), {Shape{4, 6}}, {f32}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("-3"), HasSubstr("[4, 6]")));
  s = InferOpOutput(Call(OpKind::kDiv), {Shape{4}, Shape{4}}, {i32, i32}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("div"), HasSubstr("int32")));
  s = InferOpOutput(Reduction(OpKind::kMean, {}, false), {Shape{4}}, {i32}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("mean"), HasSubstr("int32")));
  s = InferOpOutput(Call(OpKind::kAddmm), {Shape{3}, Shape{4, 6}, Shape{6, 8}}, {f32, f32, f32})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("[3]"), HasSubstr("[4, 8]")));
  s = InferOpOutput(Call(OpKind::kMatmul), {Shape{4, 6}, Shape{2, 6, 8}}, {f32, f32}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = InferOpOutput(Call(OpKind::kRelu), {Shape{4}, Shape{4}}, {f32, f32}).status();
  EXPECT_THAT(s.message(), HasSubstr("takes 1 inputs"));
}

TEST(OpKindTest, NamesRoundTripAndUnknownNamesListTheValidOnes) {
  for (int v = 1; v <= 15; ++v) {
    const OpKind kind = static_cast<OpKind>(v);
    EXPECT_EQ(ParseOpKind(OpKindName(kind)).value(), kind);
  }
  absl::Status s = ParseOpKind("conv2d").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("conv2d"), HasSubstr("addmm"), HasSubstr("transpose")));
  EXPECT_EQ(Call(OpKind::kAddmm).num_inputs(), 3);
  EXPECT_EQ(Call(OpKind::kDiv).num_inputs(), 2);
  EXPECT_EQ(Call(OpKind::kCast).num_inputs(), 1);
}

TEST(RunLocalOpTest, MaxOverAnEmptyLocalDimGivesTheIdentity) {
  std::unique_ptr<kernels::KernelBackend> backend = kernels::MakeBackend("cpu").value();
  const HostTensor empty = HostTensor::Zeros(DType::kFloat32, {0, 3}).value();
  const HostTensor* in[] = {&empty};
  const Shape global[] = {{5, 3}};
  HostTensor out =
      kernels::RunLocalOp(*backend, Reduction(OpKind::kMax, {0}, false), in, global).value();
  ASSERT_EQ(out.shape(), (Shape{3}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out.data_as<float>()[i], -INFINITY);
}

TEST(RunLocalOpTest, MeanDividesTheLocalSumByTheGlobalCount) {
  std::unique_ptr<kernels::KernelBackend> backend = kernels::MakeBackend("cpu").value();
  const HostTensor x = HostTensor::FromValues<float>(DType::kFloat32, {2, 2}, {1, 2, 3, 4});
  const HostTensor* in[] = {&x};
  const Shape global[] = {{2, 8}};
  HostTensor out =
      kernels::RunLocalOp(*backend, Reduction(OpKind::kMean, {1}, false), in, global).value();
  EXPECT_EQ(out.data_as<float>()[0], 3.0f / 8);
  EXPECT_EQ(out.data_as<float>()[1], 7.0f / 8);
}

}  // namespace
}  // namespace tessera
