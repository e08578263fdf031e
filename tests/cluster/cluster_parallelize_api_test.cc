// PyTorch's test_parallelize_api.py (torch/testing/.../tensor/parallel), case by case, on a real
// local cluster with meshes of 2 and 4 workers: each module is loaded from a safetensors file of
// the reference's parameters, parallelized by the case's plan, and compared as torch's
// _compare_module does with the single-process float64 reference (reference/module_reference.h):
// parameters, the forward's full output, the gradients of output.sum() and the parameters after
// SGD(lr=0.25).step(), within torch's float32 tolerances. PrepareModuleInput and
// PrepareModuleOutput on a module without parameters are checked through every rank's tensors.

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/host_tensor.h"
#include "core/sharding/chunk.h"
#include "core/sharding/placement.h"
#include "kernels/testing/reference.h"
#include "tessera/tessera.h"
#include "tests/cluster/module_cluster.h"

namespace tessera {
namespace {

using ::tessera::client::Module;
using ::tessera::testing::ReferenceOf;
using ::tessera::testing::TensorsMatch;
using ::tessera::testing::Weights;

testing::ModuleCluster* shared = nullptr;
const auto* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new testing::ModuleClusterEnvironment(
        testing::TestClusterOptions(4),
        {{"tp2", {2}, {"tp"}, {0, 1}}, {"tp4", {4}, {"tp"}, {0, 1, 2, 3}}}, &shared));

client::Session& S() { return *shared->session; }
std::string MeshFor(int world) { return absl::StrCat("tp", world); }

// torch.rand(shape): uniform in [0, 1).
HostTensor Rand(const Shape& shape, uint32_t seed) {
  return kernels::testing::RandomTensor(DType::kFloat32, shape, seed, 0.0, 1.0);
}

// inp.chunk(world, dim)[rank].
HostTensor ChunkAt(const HostTensor& t, int dim, int world, int rank) {
  const ChunkRange range = ChunkOf(t.shape()[dim], world, rank);
  return SliceAlong(t, dim, range.offset, range.size).value();
}

// torch.cat(parts, dim=0).
HostTensor Cat0(const std::vector<HostTensor>& parts) {
  Shape shape = parts.front().shape();
  shape[0] = 0;
  for (const HostTensor& p : parts) shape[0] += p.shape()[0];
  HostTensor out = HostTensor::Zeros(parts.front().dtype(), shape).value();
  int64_t offset = 0;
  for (const HostTensor& p : parts) {
    EXPECT_TRUE(PlaceAlong(p, 0, offset, out).ok());
    offset += p.shape()[0];
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The torch modules of the test file.

// nn.Linear(in, out).
std::string LinearSpec(int in, int out) {
  return absl::StrCat(R"js({"type": "Linear", "in_features": )js", in, R"js(, "out_features": )js",
                      out, "}");
}

// common_dtensor's MLPModule: net1 = Linear(10, 16), relu, net2 = Linear(16, 10).
constexpr char kMlpModuleChildren[] = R"js("children": [
    {"name": "net1", "type": "Linear", "in_features": 10, "out_features": 16},
    {"name": "relu", "type": "ReLU"},
    {"name": "net2", "type": "Linear", "in_features": 16, "out_features": 10}])js";

std::string MlpModuleSpec() {
  return absl::StrCat(R"js({"type": "Module", )js", kMlpModuleChildren, "}");
}

// common_dtensor's MLPStacked(n_layers=2): layers = ModuleList([MLPModule(), MLPModule()]).
std::string MlpStackedSpec() {
  const std::string layer = absl::StrCat(R"js({"type": "Module", )js", kMlpModuleChildren, "}");
  return absl::StrCat(R"js({"type": "Module", "children": [{"name": "layers", "type": "ModuleList",
      "children": [)js",
                      layer, ", ", layer, "]}]}");
}

// DummyModule: forward(x) returns x; no parameters, so its input is declared.
constexpr char kDummySpec[] =
    R"js({"type": "Module", "input": {"dtype": "float32", "shape": [-1, 7]}})js";

// The plans of test_prepare_module_input and test_prepare_module_output, on the root module.
constexpr char kPrepareInputPlan[] = R"js({"plan": {"": {"style": "PrepareModuleInput",
    "input_layouts": "Shard(0)", "desired_input_layouts": "Replicate()"}}})js";
constexpr char kPrepareOutputPlan[] = R"js({"plan": {"": {"style": "PrepareModuleOutput",
    "output_layouts": "Replicate()", "desired_output_layouts": "Shard(0)"}}})js";

// ---------------------------------------------------------------------------------------------
// The cases that go through _compare_module.

struct CompareCase {
  std::string name;  // the torch test, without "test_"
  std::string spec;
  std::string plan;
  Shape input;
  // Every parameter's placement once parallelized.
  std::map<std::string, Placement> placements;
  // _compare_module(rowwise=True): each rank's input is inp.chunk(world_size, dim=-1)[rank].
  bool rowwise = false;
};

std::vector<CompareCase> CompareCases() {
  const std::string colwise_replicate =
      R"js({"style": "ColwiseParallel", "output_layouts": "Replicate()"})js";
  const Placement r = Placement::Replicate(), s0 = Placement::Shard(0), s1 = Placement::Shard(1);
  // MLPModule with both Linears colwise.
  const std::map<std::string, Placement> both_colwise = {
      {"net1.weight", s0}, {"net1.bias", s0}, {"net2.weight", s0}, {"net2.bias", s0}};
  std::map<std::string, Placement> stacked;
  for (const char* layer : {"layers.0.", "layers.1."}) {
    stacked.emplace(absl::StrCat(layer, "net1.weight"), s0);
    stacked.emplace(absl::StrCat(layer, "net1.bias"), s0);
    stacked.emplace(absl::StrCat(layer, "net2.weight"), s1);
    stacked.emplace(absl::StrCat(layer, "net2.bias"), r);
  }
  return {
      {"linear_row_wise_parallel",
       LinearSpec(16, 10),
       R"js({"plan": "RowwiseParallel"})js",
       {9, 16},
       {{"weight", s1}, {"bias", r}},
       /*rowwise=*/true},
      {"linear_col_wise_parallel",
       LinearSpec(10, 16),
       absl::StrCat(R"js({"plan": {"": )js", colwise_replicate, "}}"),
       {8, 10},
       {{"weight", s0}, {"bias", s0}}},
      {"parallelize_module_with_star",
       MlpModuleSpec(),
       absl::StrCat(R"js({"plan": {"net*": )js", colwise_replicate, "}}"),
       {12, 10},
       both_colwise},
      {"parallelize_module_with_question",
       MlpModuleSpec(),
       absl::StrCat(R"js({"plan": {"net?": )js", colwise_replicate, "}}"),
       {12, 10},
       both_colwise},
      {"parallelize_module_with_digit",
       MlpModuleSpec(),
       absl::StrCat(R"js({"plan": {"net[1-2]": )js", colwise_replicate, "}}"),
       {12, 10},
       both_colwise},
      {"parallelize_module_multi_wildcard",
       MlpStackedSpec(),
       R"js({"plan": {"layers.*.net[1]": "ColwiseParallel",
                      "layers.*.net[2]": "RowwiseParallel"}})js",
       {12, 10},
       stacked},
  };
}

void PrintTo(const CompareCase& c, std::ostream* os) { *os << c.name; }

class CompareModuleTest : public ::testing::TestWithParam<std::tuple<CompareCase, int>> {};

TEST_P(CompareModuleTest, MatchesTheSingleProcessModule) {
  const auto& [c, world] = GetParam();
  const std::string name = absl::StrCat(c.name, "_", world);
  const ModelSpec spec = ParseModelSpec(c.spec).value();
  absl::StatusOr<Weights> params = RandomParameters(spec, /*seed=*/5);
  ASSERT_TRUE(params.ok()) << params.status();
  ReferenceModel model = ReferenceOf(c.spec, *params);
  absl::StatusOr<Module> m =
      testing::LoadAndParallelize(*shared, name, c.spec, *params, MeshFor(world), c.plan);
  ASSERT_TRUE(m.ok()) << m.status() << shared->cluster.LogHint();
  testing::ExpectPlacements(*m, c.placements);

  const HostTensor inp = Rand(c.input, /*seed=*/0);
  testing::ExpectForwardMatchesReference(*m, model, inp);
  if (c.rowwise) {
    // dist_module(inp.chunk(world_size, dim=-1)[rank]) on every rank.
    std::vector<HostTensor> locals;
    for (int r = 0; r < world; ++r) locals.push_back(ChunkAt(inp, inp.rank() - 1, world, r));
    absl::StatusOr<client::ModuleOutput> y = m->ForwardLocal(locals);
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_TRUE(y->full.has_value());
    EXPECT_TRUE(TensorsMatch(*y->full, ReferenceForward(model, inp).value(), testing::kFloat32Rtol,
                             testing::kFloat32Atol));
  }
  testing::ExpectStepMatchesReference(*m, model, inp, /*lr=*/0.25);
  EXPECT_TRUE(m->Remove().ok());
  EXPECT_TRUE(testing::TensorsNamed(S(), name + ".").empty());
}

INSTANTIATE_TEST_SUITE_P(ParallelizeApi, CompareModuleTest,
                         ::testing::Combine(::testing::ValuesIn(CompareCases()),
                                            ::testing::Values(2, 4)),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param).name, "_world",
                                               std::get<1>(info.param));
                         });

// ---------------------------------------------------------------------------------------------
// PrepareModuleInput and PrepareModuleOutput on DummyModule.

class PrepareModuleTest : public ::testing::TestWithParam<int> {};

// PrepareModuleInput(input_layouts=Shard(0), desired_input_layouts=Replicate()): every rank's
// [5, 7] input is taken as its Shard(0) piece and gathered, so the output is their concatenation
// on every rank, and its redistribute(Shard(0)).to_local() is each rank's own input.
TEST_P(PrepareModuleTest, PrepareModuleInputGathersTheShards) {
  const int world = GetParam();
  const std::string name = absl::StrCat("prepare_module_input_", world);
  absl::StatusOr<Module> m =
      testing::LoadAndParallelize(*shared, name, kDummySpec, {}, MeshFor(world), kPrepareInputPlan);
  ASSERT_TRUE(m.ok()) << m.status() << shared->cluster.LogHint();
  std::vector<HostTensor> inputs;
  for (int r = 0; r < world; ++r) inputs.push_back(Rand({5, 7}, 100 + r));
  absl::StatusOr<client::ModuleOutput> y = m->ForwardLocal(inputs, client::Outputs::kBoth);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->layout.placement, Placement::Replicate());
  EXPECT_TRUE(y->layout.is_dtensor);
  const HostTensor gathered = Cat0(inputs);
  ASSERT_TRUE(y->full.has_value());
  EXPECT_TRUE(TensorsMatch(*y->full, gathered));
  ASSERT_EQ(static_cast<int>(y->locals.size()), world);
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(TensorsMatch(y->locals[r], gathered)) << "rank " << r;
    EXPECT_TRUE(TensorsMatch(ChunkAt(y->locals[r], 0, world, r), inputs[r])) << "rank " << r;
  }
  EXPECT_TRUE(m->Remove().ok());
}

// PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=Shard(0)): a replicated
// [16, 7] input comes out as rank r's chunk r, a local tensor.
TEST_P(PrepareModuleTest, PrepareModuleOutputChunksTheOutput) {
  const int world = GetParam();
  const std::string name = absl::StrCat("prepare_module_output_", world);
  absl::StatusOr<Module> m = testing::LoadAndParallelize(*shared, name, kDummySpec, {},
                                                         MeshFor(world), kPrepareOutputPlan);
  ASSERT_TRUE(m.ok()) << m.status() << shared->cluster.LogHint();
  const HostTensor inp = Rand({16, 7}, 15);
  absl::StatusOr<client::ModuleOutput> y = m->Forward(inp, client::Outputs::kBoth);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->layout.placement, Placement::Shard(0));
  EXPECT_FALSE(y->layout.is_dtensor);
  ASSERT_EQ(static_cast<int>(y->locals.size()), world);
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(TensorsMatch(y->locals[r], ChunkAt(inp, 0, world, r))) << "rank " << r;
  }
  ASSERT_TRUE(y->full.has_value());
  EXPECT_TRUE(TensorsMatch(*y->full, inp));
  EXPECT_TRUE(m->Remove().ok());
}

INSTANTIATE_TEST_SUITE_P(ParallelizeApi, PrepareModuleTest, ::testing::Values(2, 4),
                         [](const auto& info) { return absl::StrCat("world", info.param); });

}  // namespace
}  // namespace tessera
