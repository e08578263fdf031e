// Programs compiled by CompileParallelize or CompileDistribute (a module spec, a plan or partition,
// a mesh) and run by the workers equal the same model compiled without a plan and run by one
// worker: every rank's output, every parameter's gradient and every parameter after an SGD step.
// Models: an MLP (colwise then rowwise, over sizes that do not divide, and with its output
// scattered by rows), a transformer block (LayerNorm, causal attention, RMSNorm, GELU MLP,
// residuals) under Megatron's plan and under sequence parallelism, a vocab-parallel embedding
// feeding a gathered colwise head, and the MLP on a 2-D (dp, tp) mesh; and under
// distribute_module, the MLP, the block and the embedding head with sharded parameters (uneven
// and nested shards) on 1-D and 2-D meshes.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/modules/module_program.h"
#include "core/modules/program_check.h"
#include "core/modules/program_edges.h"
#include "gtest/gtest.h"
#include "tests/cluster/program_cluster.h"
#include "tests/support/test_models.h"

namespace tessera {
namespace {

using ::tessera::testing::kEmbeddingHead;
using ::tessera::testing::kMegatron;
using ::tessera::testing::kSequenceParallel;

using ::tessera::testing::Cluster;
using ::tessera::testing::ExpectOutputs;
using ::tessera::testing::ExpectStored;
using ::tessera::testing::GradName;
using ::tessera::testing::InDType;
using ::tessera::testing::LoadEverywhere;
using ::tessera::testing::NamesFor;
using ::tessera::testing::Outcome;
using ::tessera::testing::Random;
using ::tessera::testing::RunEverywhere;
using ::tessera::testing::ValueName;

// Agreement of two runs summed in another order when sharded: float64 runs whose kernels keep norm
// statistics and attention probabilities in float32, or float32 runs.
double Tolerance(DType dtype) { return dtype == DType::kFloat64 ? 2e-6 : 2e-4; }
constexpr double kLr = 0.25;

constexpr char kMlp[] = R"json({"type": "Module", "input": {"dtype": "float64", "shape": [-1, 10]},
  "children": [
    {"name": "net1", "type": "Linear", "in_features": 10, "out_features": 16},
    {"name": "relu", "type": "ReLU"},
    {"name": "net2", "type": "Linear", "in_features": 16, "out_features": 10}]})json";

constexpr const char* kBlock = testing::kBlockDim8Float64;

struct CompiledCase {
  std::string name;
  const char* model;
  std::string plan;
  Shape mesh;
  std::vector<std::string> mesh_names;
  Shape input;  // full
};

std::vector<CompiledCase> Cases() {
  const std::string mlp_plan =
      R"json({"plan": {"net1": "ColwiseParallel", "net2": "RowwiseParallel"}})json";
  return {
      {"MlpOver2", kMlp, mlp_plan, {2}, {}, {5, 10}},
      {"MlpOver3", kMlp, mlp_plan, {3}, {}, {5, 10}},
      {"MlpOver4", kMlp, mlp_plan, {4}, {}, {5, 10}},
      {"MlpRowsScattered",
       kMlp,
       R"json({"plan": {"net1": "ColwiseParallel",
                        "net2": {"style": "RowwiseParallel", "output_layouts": "Shard(0)"}}})json",
       {3},
       {},
       {5, 10}},
      {"MlpGatheredColwise",
       kMlp,
       R"json({"plan": {"net2": {"style": "ColwiseParallel", "output_layouts": "Replicate()"}}})json",
       {4},
       {},
       {5, 10}},
      {"MegatronBlockOver2", kBlock, kMegatron, {2}, {}, {2, 5, 8}},
      {"MegatronBlockOver4", kBlock, kMegatron, {4}, {}, {2, 5, 8}},
      {"SequenceParallelBlockOver2", kBlock, kSequenceParallel, {2}, {}, {2, 5, 8}},
      {"SequenceParallelBlockOver4", kBlock, kSequenceParallel, {4}, {}, {2, 5, 8}},
      {"EmbeddingHeadOver3",
       kEmbeddingHead,
       R"json({"plan": {"tok": "RowwiseParallel",
                    "head": {"style": "ColwiseParallel", "output_layouts": "Replicate()"}}})json",
       {3},
       {},
       {2, 6}},
      {"MlpDataParallel2x2",
       kMlp,
       R"json({"mesh_dim": "tp", "plan": {
         "net1": "ColwiseParallel", "net2": "RowwiseParallel"}})json",
       {2, 2},
       {"dp", "tp"},
       {6, 10}},
      // distribute_module: sharded parameters gathered where they are used.
      {"DistributedMlpOver4",
       kMlp,
       R"json({"distribute": {"net1.weight": ["Shard(0)"], "net2.weight": ["Shard(1)"],
                              "*.bias": ["Shard(0)"]}})json",
       {4},
       {},
       {5, 10}},
      {"DistributedMlpUnevenOver3",
       kMlp,
       R"json({"distribute": {"net1.weight": ["Shard(1)"], "net2.weight": ["Shard(0)"]}})json",
       {3},
       {},
       {5, 10}},
      {"DistributedMlpNested2x2",
       kMlp,
       R"json({"distribute": {"net1.weight": ["Shard(0)", "Shard(0)"],
                              "net2.weight": ["Shard(1)", "Shard(0)"],
                              "net1.bias": ["Replicate()", "Shard(0)"],
                              "net2.bias": ["Shard(0)", "Shard(0)"]}})json",
       {2, 2},
       {"dp", "tp"},
       {6, 10}},
      {"DistributedMlpNestedUneven2x3",
       kMlp,
       R"json({"distribute": {"net1.weight": ["Shard(1)", "Shard(1)"],
                              "net2.*": ["Shard(0)", "Replicate()"]}})json",
       {2, 3},
       {"dp", "tp"},
       {3, 10}},
      {"DistributedBlockOver3",
       kBlock,
       R"json({"distribute": {"attn.norm.*": ["Shard(0)"],
                              "attn.attention.?.weight": ["Shard(0)"],
                              "attn.attention.?.bias": ["Shard(0)"],
                              "mlp.norm.weight": ["Shard(0)"],
                              "mlp.net*.weight": ["Shard(1)"],
                              "mlp.net*.bias": ["Shard(0)"]}})json",
       {3},
       {},
       {2, 5, 8}},
      {"DistributedBlock2x2",
       kBlock,
       R"json({"distribute": {"attn.attention.[qk].weight": ["Shard(0)", "Shard(1)"],
                              "mlp.net1.weight": ["Shard(0)", "Shard(0)"],
                              "mlp.norm.weight": ["Replicate()", "Shard(0)"]}})json",
       {2, 2},
       {"dp", "tp"},
       {2, 5, 8}},
      {"DistributedEmbeddingHeadOver3",
       kEmbeddingHead,
       R"json({"distribute": {"tok.weight": ["Shard(0)"], "norm.weight": ["Shard(0)"],
                              "head.weight": ["Shard(1)"], "head.bias": ["Shard(0)"]}})json",
       {3},
       {},
       {2, 6}},
  };
}

std::string PrintCase(const ::testing::TestParamInfo<CompiledCase>& info) {
  return info.param.name;
}

// The full input: random values, or random ids below `vocab` for an int64 input.
HostTensor Input(const ModelSpec& model, const Shape& shape, int64_t vocab) {
  if (model.input.dtype != DType::kInt64) return Random(shape, 7);
  std::vector<int64_t> ids(NumElements(shape));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 7 + 3) % vocab;
  return HostTensor::FromValues<int64_t>(DType::kInt64, shape, ids);
}

// The full tensors one worker holds under the program's names `name(...)`.
std::vector<HostTensor> Held(Cluster& cluster, const Program& program,
                             std::string (*name)(const ParameterTensors&)) {
  std::vector<HostTensor> out;
  for (const ParameterTensors& names : NamesFor(program)) {
    out.push_back(cluster.store(0).GetHost(name(names)).value());
  }
  return out;
}

class CompiledProgramTest : public ::testing::TestWithParam<CompiledCase> {};

TEST_P(CompiledProgramTest, ShardedRunEqualsOneWorker) {
  const CompiledCase& c = GetParam();
  const ModelSpec model = ParseModelSpec(c.model).value();
  const PlanSpec plan = ParsePlanSpec(c.plan).value();
  const DeviceMesh mesh = DeviceMesh::Create("cpu", c.mesh, c.mesh_names, {}).value();
  absl::StatusOr<Program> sharded = plan.distribute.has_value()
                                        ? CompileDistribute(model, *plan.distribute, mesh)
                                        : CompileParallelize(model, *plan.parallelize, mesh);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  ASSERT_TRUE(CheckProgram(*sharded).ok()) << CheckProgram(*sharded);
  absl::StatusOr<Program> single =
      CompileParallelize(model, ParallelizePlan{}, DeviceMesh::Create("cpu", {1}).value());
  ASSERT_TRUE(single.ok()) << single.status();
  ASSERT_EQ(single->parameters.size(), sharded->parameters.size());
  // Parameters in the program's output dtype (an embedding model computes in float32).
  const DType dtype = sharded->output_dtype;
  const double tolerance = Tolerance(dtype);
  std::vector<HostTensor> params;
  for (size_t i = 0; i < sharded->parameters.size(); ++i) {
    ASSERT_EQ(single->parameters[i].fqn, sharded->parameters[i].fqn);
    params.push_back(Random(sharded->parameters[i].shape, 100 + static_cast<uint32_t>(i)));
  }
  const HostTensor input = Input(model, c.input, 20);

  // One worker: the output, then a training step with gradient dy (divided by the data-parallel
  // size, as the sharded run averages its groups' gradients) and SGD.
  Cluster one(DeviceMesh::Create("cpu", {1}).value());
  ASSERT_TRUE(LoadEverywhere(one, *single, params, dtype));
  const std::vector<Outcome> forward = RunEverywhere(one, *single, input, {});
  ASSERT_TRUE(forward[0].status.ok());
  const HostTensor output = FromProto(forward[0].reply.output()).value();
  const HostTensor dy = Random(output.shape(), 8);
  const int64_t dp = DataParallelSize(mesh, *sharded);
  HostTensor dy_single = dy.Clone();
  for (int64_t i = 0; i < dy_single.num_elements(); ++i) dy_single.data_as<double>()[i] /= dp;
  RunEverywhere(one, *single, input,
                {.train = true, .dy = InDType(dy_single, dtype), .sgd = SgdOptions{kLr}});
  const std::vector<HostTensor> grads = Held(one, *single, GradName);
  const std::vector<HostTensor> stepped = Held(one, *single, ValueName);

  Cluster cluster(mesh);
  ASSERT_TRUE(LoadEverywhere(cluster, *sharded, params, dtype));
  ExpectOutputs(cluster, *sharded, RunEverywhere(cluster, *sharded, input, {}), output, tolerance);
  const std::vector<Outcome> trained = RunEverywhere(
      cluster, *sharded, input, {.train = true, .dy = InDType(dy, dtype), .sgd = SgdOptions{kLr}});
  ExpectOutputs(cluster, *sharded, trained, output, tolerance);
  ExpectStored(cluster, *sharded, grads, GradName, tolerance);
  ExpectStored(cluster, *sharded, stepped, ValueName, tolerance);
}

INSTANTIATE_TEST_SUITE_P(Models, CompiledProgramTest, ::testing::ValuesIn(Cases()), PrintCase);

}  // namespace
}  // namespace tessera
