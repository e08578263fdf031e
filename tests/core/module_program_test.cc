// CompileParallelize against programs worked out by hand from torch's styles: which parameters are
// sharded how, which collectives run where, and the backward's gradient layouts; and
// CompileDistribute: which parameters are gathered where, and their gradients cut back to shards.
#include "core/modules/module_program.h"

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

DeviceMesh Mesh1D(int64_t n) { return DeviceMesh::Create("cpu", {n}, {"tp"}).value(); }

ModelSpec Parse(const std::string& json) {
  auto spec = ParseModelSpec(json);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// The program, failing the test if it does not compile.
Program Compiled(const absl::StatusOr<Program>& p) {
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : Program{};
}

ParallelizePlan PlanOf(const std::string& json) {
  auto plan = ParsePlanSpec(json);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan->parallelize;
}

// "linear all_gather(1) activation ..." for a step list.
std::string Kinds(const std::vector<ProgramStep>& steps) {
  std::vector<std::string> names;
  for (const ProgramStep& s : steps) {
    std::string name(ProgramOpKindName(s.kind));
    switch (s.kind) {
      case ProgramOpKind::kAllGather:
      case ProgramOpKind::kChunk:
      case ProgramOpKind::kReduceScatter:
        name += "(" + std::to_string(s.dim) + ")";
        break;
      case ProgramOpKind::kAllToAll:
        name += "(" + std::to_string(s.dim) + "->" + std::to_string(s.dim2) + ")";
        break;
      case ProgramOpKind::kGradAllReduce:
        name += "(" + s.module + ")";
        break;
      default:
        break;
    }
    names.push_back(name);
  }
  return absl::StrJoin(names, " ");
}

std::vector<std::string> Placements(const Program& p) {
  std::vector<std::string> out;
  for (const ProgramParameter& param : p.parameters) {
    out.push_back(param.fqn + "=" + PlacementsToString(param.placements));
  }
  return out;
}

constexpr char kLinear16x10[] = R"js({"type": "Linear", "in_features": 16, "out_features": 10})js";
constexpr char kLinear10x16[] = R"js({"type": "Linear", "in_features": 10, "out_features": 16})js";
constexpr char kMlp[] = R"js({"type": "Module", "children": [
    {"name": "net1", "type": "Linear", "in_features": 10, "out_features": 16},
    {"name": "relu", "type": "ReLU"},
    {"name": "net2", "type": "Linear", "in_features": 16, "out_features": 10}]})js";

TEST(CompileParallelize, RowwiseLinear) {
  Program p = Compiled(CompileParallelize(Parse(kLinear16x10),
                                          PlanOf(R"js({"plan": "RowwiseParallel"})js"), Mesh1D(4)));
  EXPECT_THAT(Placements(p), ElementsAre("weight=(S(1))", "bias=(R)"));
  EXPECT_EQ(p.input_layout.placement, Placement::Shard(1));
  EXPECT_FALSE(p.input_layout.is_dtensor);
  EXPECT_EQ(p.output_layout.placement, Placement::Replicate());
  EXPECT_FALSE(p.output_layout.is_dtensor);
  EXPECT_EQ(Kinds(p.forward), "linear all_reduce bias_add");
  // The input needs no gradient; the bias's gradient is whole on every rank.
  EXPECT_EQ(Kinds(p.backward), "bias_add_backward linear_backward");
  EXPECT_TRUE(p.backward[1].outputs.empty());
}

TEST(CompileParallelize, ColwiseLinearWithReplicateOutput) {
  Program p = Compiled(CompileParallelize(Parse(kLinear10x16),
                                          PlanOf(R"js({"plan": {"": {"style": "ColwiseParallel",
                                                   "output_layouts": "Replicate()"
}
}
})js"),
                                          Mesh1D(4)));
  EXPECT_THAT(Placements(p), ElementsAre("weight=(S(0))", "bias=(S(0))"));
  EXPECT_EQ(p.input_layout.placement, Placement::Replicate());
  EXPECT_EQ(Kinds(p.forward), "linear all_gather(1)");
  EXPECT_EQ(Kinds(p.backward), "chunk(1) linear_backward");
}

// The plans "net*", "net?" and "net[1-2]" of torch's test file all land on net1 and net2.
class MlpColwise : public ::testing::TestWithParam<const char*> {};

TEST_P(MlpColwise, GathersAfterEachLayerAndReducesTheInputGradientOnce) {
  const std::string plan = std::string(R"js({"plan": {")js") + GetParam() +
                           R"js(": {"style": "ColwiseParallel", "output_layouts": "Replicate()"
}
}
})js";
  Program p = Compiled(CompileParallelize(Parse(kMlp), PlanOf(plan), Mesh1D(4)));
  EXPECT_THAT(Placements(p), ElementsAre("net1.weight=(S(0))", "net1.bias=(S(0))",
                                         "net2.weight=(S(0))", "net2.bias=(S(0))"));
  EXPECT_TRUE(p.unmatched.empty());
  EXPECT_EQ(Kinds(p.forward), "linear all_gather(1) activation linear all_gather(1)");
  // net2's input gradient is Partial (its output features are split): one all_reduce brings it
  // to relu's Replicate output.
  EXPECT_EQ(Kinds(p.backward),
            "chunk(1) linear_backward all_reduce activation_backward chunk(1) linear_backward");
}

INSTANTIATE_TEST_SUITE_P(Patterns, MlpColwise, ::testing::Values("net*", "net?", "net[1-2]"));

TEST(CompileParallelize, StackedMlpColwiseThenRowwise) {
  const std::string spec = std::string(R"js({"type": "Module", "children": [{"name": "layers",
      "type": "ModuleList", "children": [)js") +
                           kMlp + "," + kMlp + "]}]}";
  Program p = Compiled(CompileParallelize(Parse(spec), PlanOf(R"js({"plan": {
          "layers.*.net[1]": "ColwiseParallel", "layers.*.net[2]": "RowwiseParallel"}})js"),
                                          Mesh1D(2)));
  EXPECT_THAT(Placements(p), ElementsAre("layers.0.net1.weight=(S(0))", "layers.0.net1.bias=(S(0))",
                                         "layers.0.net2.weight=(S(1))", "layers.0.net2.bias=(R)",
                                         "layers.1.net1.weight=(S(0))", "layers.1.net1.bias=(S(0))",
                                         "layers.1.net2.weight=(S(1))", "layers.1.net2.bias=(R)"));
  EXPECT_EQ(Kinds(p.forward),
            "linear activation linear all_reduce bias_add "
            "linear activation linear all_reduce bias_add");
  EXPECT_EQ(Kinds(p.backward),
            "bias_add_backward linear_backward activation_backward linear_backward all_reduce "
            "bias_add_backward linear_backward activation_backward linear_backward");
}

TEST(CompileParallelize, PrepareModuleInputGathersALocalShard) {
  Program p =
      Compiled(CompileParallelize(Parse(R"js({"type": "Module", "input": {"dtype": "float32",
                                                                          "shape": [-1, 7]}})js"),
                                  PlanOf(R"js({"plan": {"": {"style": "PrepareModuleInput",
                                        "input_layouts": "Shard(0)",
                                        "desired_input_layouts": "Replicate()"
}
}
})js"),
                                  Mesh1D(4)));
  EXPECT_EQ(p.input_layout.placement, Placement::Shard(0));
  EXPECT_EQ(Kinds(p.forward), "all_gather(0)");
  EXPECT_EQ(p.output_layout.placement, Placement::Replicate());
  EXPECT_TRUE(p.output_layout.is_dtensor);
}

TEST(CompileParallelize, PrepareModuleOutputChunksAReplicatedOutput) {
  Program p =
      Compiled(CompileParallelize(Parse(R"js({"type": "Module", "input": {"dtype": "float32",
                                                                          "shape": [-1, 7]}})js"),
                                  PlanOf(R"js({"plan": {"": {"style": "PrepareModuleOutput",
                                        "output_layouts": "Replicate()",
                                        "desired_output_layouts": "Shard(0)"
}
}
})js"),
                                  Mesh1D(4)));
  EXPECT_EQ(p.input_layout.placement, Placement::Replicate());
  EXPECT_EQ(Kinds(p.forward), "chunk(0)");
  EXPECT_EQ(p.output_layout.placement, Placement::Shard(0));
  EXPECT_FALSE(p.output_layout.is_dtensor);
}

constexpr char kBlock[] =
    R"js({"type": "Module", "input": {"dtype": "float32", "shape": [-1, -1, 8]},
  "children": [
    {"name": "attn", "type": "Module", "residual": true, "children": [
      {"name": "norm", "type": "LayerNorm", "normalized_shape": 8},
      {"name": "attention", "type": "Attention", "dim": 8, "n_heads": 4, "causal": true}]},
    {"name": "mlp", "type": "Module", "residual": true, "children": [
      {"name": "norm", "type": "RMSNorm", "normalized_shape": 8},
      {"name": "net1", "type": "Linear", "in_features": 8, "out_features": 32},
      {"name": "act", "type": "GELU", "approximate": "tanh"},
      {"name": "net2", "type": "Linear", "in_features": 32, "out_features": 8}]}]})js";

TEST(CompileParallelize, TransformerBlockMegatron) {
  Program p = Compiled(CompileParallelize(Parse(kBlock), PlanOf(R"js({"plan": {
          "attn.attention.[qkv]": "ColwiseParallel", "attn.attention.o": "RowwiseParallel",
          "mlp.net1": "ColwiseParallel", "mlp.net2": "RowwiseParallel"}})js"),
                                          Mesh1D(2)));
  EXPECT_EQ(Kinds(p.forward),
            "layer_norm linear linear linear attention linear all_reduce bias_add add "
            "rms_norm linear activation linear all_reduce bias_add add");
  ASSERT_EQ(p.forward[4].kind, ProgramOpKind::kAttention);
  EXPECT_EQ(p.forward[4].heads, 2);
  // q, k and v's input gradients are summed locally and reduced once per block input.
  EXPECT_THAT(Kinds(p.backward), HasSubstr("linear_backward linear_backward linear_backward "
                                           "accumulate accumulate all_reduce layer_norm_backward"));
}

TEST(CompileParallelize, TransformerBlockSequenceParallel) {
  Program p = Compiled(CompileParallelize(Parse(kBlock), PlanOf(R"js({"plan": {
          "attn.norm": "SequenceParallel",
          "attn.attention.[qkv]": {"style": "ColwiseParallel", "input_layouts": "Shard(1)"},
          "attn.attention.o": {"style": "RowwiseParallel", "output_layouts": "Shard(1)"},
          "mlp.norm": "SequenceParallel",
          "mlp.net1": {"style": "ColwiseParallel", "input_layouts": "Shard(1)"},
          "mlp.net2": {
  "style" : "RowwiseParallel", "output_layouts" : "Shard(1)"
}
}
})js"),
                                          Mesh1D(2)));
  EXPECT_EQ(p.input_layout.placement, Placement::Shard(1));
  EXPECT_EQ(Kinds(p.forward),
            "layer_norm all_gather(1) linear all_gather(1) linear all_gather(1) linear attention "
            "linear reduce_scatter(1) bias_add add "
            "rms_norm all_gather(1) linear activation linear reduce_scatter(1) bias_add add");
  EXPECT_EQ(p.output_layout.placement, Placement::Shard(1));
  // Norm weights and the rowwise biases see sequence shards: their gradients are summed.
  EXPECT_THAT(Kinds(p.backward), HasSubstr("grad_all_reduce(attn.norm.weight)"));
  EXPECT_THAT(Kinds(p.backward), HasSubstr("grad_all_reduce(mlp.net2.bias)"));
}

TEST(CompileParallelize, UnevenHeadsAreRejected) {
  const auto p = CompileParallelize(
      Parse(R"js({"type": "Attention", "dim": 6, "n_heads": 3})js"),
      PlanOf(R"js({"plan": {"[qkv]": "ColwiseParallel", "o": "RowwiseParallel"}})js"), Mesh1D(2));
  EXPECT_TRUE(testing::StatusIs(p.status(), absl::StatusCode::kInvalidArgument, {"3 heads"}));
}

TEST(CompileParallelize, ALocalShardAnnotatedAsReplicateIsRejected) {
  // net1's default output is a local Shard(-1) tensor; net2 colwise says its input is Replicate.
  const auto p = CompileParallelize(
      Parse(kMlp),
      PlanOf(R"js({"plan": {"net1": "ColwiseParallel", "net2": "ColwiseParallel"}})js"), Mesh1D(2));
  EXPECT_TRUE(testing::StatusIs(p.status(), absl::StatusCode::kInvalidArgument, {"net2"}));
}

TEST(CompileParallelize, TwoDimMeshAveragesGradientsOverDp) {
  DeviceMesh mesh = DeviceMesh::Create("cpu", {2, 2}, {"dp", "tp"}).value();
  Program p = Compiled(CompileParallelize(Parse(kMlp), PlanOf(R"js({"mesh_dim": "tp", "plan": {
          "net1": "ColwiseParallel", "net2": "RowwiseParallel"}})js"),
                                          mesh));
  EXPECT_EQ(p.tp_mesh_dim, 1);
  EXPECT_THAT(Placements(p), ElementsAre("net1.weight=(R, S(0))", "net1.bias=(R, S(0))",
                                         "net2.weight=(R, S(1))", "net2.bias=(R, R)"));
  EXPECT_THAT(Kinds(p.backward), HasSubstr("grad_all_reduce(net1.weight) "
                                           "grad_all_reduce(net1.bias) "
                                           "grad_all_reduce(net2.weight) "
                                           "grad_all_reduce(net2.bias)"));
  EXPECT_EQ(p.backward.back().mesh_dim, 0);
  EXPECT_EQ(p.backward.back().reduce_op, ReduceOp::kAvg);
}

DistributePlan PartitionOf(const std::string& json) {
  auto plan = ParsePlanSpec(json);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() && plan->distribute.has_value() ? *plan->distribute : DistributePlan{};
}

// Worked by hand: the MLP distributed on a mesh of 4 with net1.weight Shard(0) and net2.weight
// Shard(1), the biases Replicate. Each sharded weight is gathered whole right before its Linear,
// which reads it from that buffer; backward writes each one's whole gradient to a buffer of its
// own and cuts it to this rank's shard. Activations stay Replicate: no other collective runs and
// no gradient is reduced.
TEST(CompileDistribute, MlpWithShardedWeights) {
  Program p = Compiled(
      CompileDistribute(Parse(kMlp), PartitionOf(R"js({"distribute": {"net1.weight": ["Shard(0)"],
                                         "net2.weight": ["Shard(1)"]}})js"),
                        Mesh1D(4)));
  EXPECT_THAT(Placements(p), ElementsAre("net1.weight=(S(0))", "net1.bias=(R)",
                                         "net2.weight=(S(1))", "net2.bias=(R)"));
  EXPECT_EQ(p.input_layout.placement, Placement::Replicate());
  EXPECT_EQ(p.output_layout.placement, Placement::Replicate());
  EXPECT_TRUE(p.data_parallel_dims.empty());
  EXPECT_EQ(Kinds(p.forward), "gather_parameter linear activation gather_parameter linear");
  EXPECT_EQ(Kinds(p.backward),
            "linear_backward shard_grad activation_backward linear_backward shard_grad");
  // Buffers: 0 input, 1 net1.weight whole, 2 net1's output, 3 relu's, 4 net2.weight whole,
  // 5 the output; 6 its gradient, 7 relu's output's, 8 net2.weight's whole gradient, 9 net1's
  // output's, 10 net1.weight's whole gradient.
  ASSERT_EQ(p.forward.size(), 5u);
  EXPECT_EQ(p.forward[0].weight, 0);
  EXPECT_THAT(p.forward[0].outputs, ElementsAre(1));
  EXPECT_THAT(p.forward[1].inputs, ElementsAre(0));
  EXPECT_THAT(p.forward[1].outputs, ElementsAre(2));
  EXPECT_EQ(p.forward[1].weight, -1);
  EXPECT_EQ(p.forward[1].weight_buffer, 1);
  EXPECT_EQ(p.forward[1].bias, 1);
  EXPECT_EQ(p.forward[1].bias_buffer, -1);
  EXPECT_EQ(p.forward[3].weight, 2);
  EXPECT_THAT(p.forward[3].outputs, ElementsAre(4));
  EXPECT_THAT(p.forward[4].inputs, ElementsAre(3));
  EXPECT_EQ(p.forward[4].weight_buffer, 4);
  EXPECT_EQ(p.forward[4].bias, 3);
  EXPECT_EQ(p.output, 5);
  EXPECT_EQ(p.grad_output, 6);
  ASSERT_EQ(p.backward.size(), 5u);
  EXPECT_THAT(p.backward[0].inputs, ElementsAre(3, 6));
  EXPECT_THAT(p.backward[0].outputs, ElementsAre(7));
  EXPECT_EQ(p.backward[0].weight_buffer, 4);
  EXPECT_EQ(p.backward[0].weight_grad_buffer, 8);
  EXPECT_EQ(p.backward[0].bias, 3);
  EXPECT_EQ(p.backward[0].bias_grad_buffer, -1);
  EXPECT_THAT(p.backward[1].inputs, ElementsAre(8));
  EXPECT_EQ(p.backward[1].weight, 2);
  EXPECT_THAT(p.backward[2].inputs, ElementsAre(2, 7));
  EXPECT_THAT(p.backward[2].outputs, ElementsAre(9));
  // The input needs no gradient.
  EXPECT_THAT(p.backward[3].inputs, ElementsAre(0, 9));
  EXPECT_TRUE(p.backward[3].outputs.empty());
  EXPECT_EQ(p.backward[3].weight_buffer, 1);
  EXPECT_EQ(p.backward[3].weight_grad_buffer, 10);
  EXPECT_EQ(p.backward[3].bias, 1);
  EXPECT_THAT(p.backward[4].inputs, ElementsAre(10));
  EXPECT_EQ(p.backward[4].weight, 0);
  EXPECT_EQ(p.num_buffers, 11);
}

// On a 2-D mesh every mesh dim takes the partition's placements, nested shards included; no mesh
// dim splits the batch or averages gradients (distribute_module replicates the activations).
TEST(CompileDistribute, TwoDimMeshGathersOverEveryShardingDim) {
  DeviceMesh mesh = DeviceMesh::Create("cpu", {2, 2}, {"dp", "tp"}).value();
  Program p = Compiled(CompileDistribute(Parse(kMlp), PartitionOf(R"js({"distribute": {
          "net1.weight": ["Shard(0)", "Shard(-1)"], "net2.*": ["Shard(0)", "Shard(0)"]}})js"),
                                         mesh));
  EXPECT_THAT(Placements(p), ElementsAre("net1.weight=(S(0), S(1))", "net1.bias=(R, R)",
                                         "net2.weight=(S(0), S(0))", "net2.bias=(S(0), S(0))"));
  EXPECT_TRUE(p.data_parallel_dims.empty());
  EXPECT_EQ(Kinds(p.forward),
            "gather_parameter linear activation gather_parameter gather_parameter linear");
  ASSERT_EQ(p.forward[5].kind, ProgramOpKind::kLinear);
  EXPECT_EQ(p.forward[5].weight_buffer, p.forward[3].outputs[0]);
  EXPECT_EQ(p.forward[5].bias_buffer, p.forward[4].outputs[0]);
  EXPECT_EQ(Kinds(p.backward),
            "linear_backward shard_grad shard_grad activation_backward linear_backward "
            "shard_grad");
  EXPECT_EQ(p.backward[1].weight, 2);
  EXPECT_EQ(p.backward[2].weight, 3);
  EXPECT_EQ(p.backward[2].inputs[0], p.backward[0].bias_grad_buffer);
}

// Replicate parameters are read where they are, as without a plan.
TEST(CompileDistribute, ReplicateParametersAreReadInPlace) {
  Program p = Compiled(CompileDistribute(
      Parse(kMlp), PartitionOf(R"js({"distribute": {"*": ["Replicate()"]}})js"), Mesh1D(4)));
  EXPECT_EQ(Kinds(p.forward), "linear activation linear");
  EXPECT_EQ(Kinds(p.backward), "linear_backward activation_backward linear_backward");
  EXPECT_EQ(p.forward[0].weight, 0);
  EXPECT_EQ(p.forward[0].weight_buffer, -1);
}

// Embedding, LayerNorm and RMSNorm take gathered weights too; a Replicate norm bias is read in
// place beside its gathered weight.
TEST(CompileDistribute, EmbeddingAndNormsGatherTheirShardedWeights) {
  Program p = Compiled(CompileDistribute(Parse(R"js({"type": "Module",
      "input": {"dtype": "int64", "shape": [-1, -1]}, "children": [
        {"name": "tok", "type": "Embedding", "num_embeddings": 20, "embedding_dim": 8},
        {"name": "ln", "type": "LayerNorm", "normalized_shape": 8},
        {"name": "rms", "type": "RMSNorm", "normalized_shape": 8}]})js"),
                                         PartitionOf(R"js({"distribute": {
          "tok.weight": ["Shard(1)"], "ln.weight": ["Shard(0)"], "rms.weight": ["Shard(0)"]}})js"),
                                         Mesh1D(3)));
  EXPECT_EQ(Kinds(p.forward),
            "gather_parameter embedding gather_parameter layer_norm gather_parameter rms_norm");
  EXPECT_EQ(p.forward[1].size, 20);
  EXPECT_EQ(p.forward[3].bias, 2);  // ln.bias, Replicate
  EXPECT_EQ(p.forward[3].weight_buffer, p.forward[2].outputs[0]);
  EXPECT_EQ(Kinds(p.backward),
            "rms_norm_backward shard_grad layer_norm_backward shard_grad embedding_backward "
            "shard_grad");
}

TEST(CompileDistribute, APartialOrMisfitPlacementIsRejectedNamingTheParameter) {
  EXPECT_TRUE(testing::StatusIs(
      CompileDistribute(Parse(kMlp), DistributePlan{{{"net1.weight", {Placement::Partial()}}}},
                        Mesh1D(2))
          .status(),
      absl::StatusCode::kInvalidArgument, {"net1.weight", "Partial"}));
  EXPECT_TRUE(testing::StatusIs(
      CompileDistribute(
          Parse(kMlp), PartitionOf(R"js({"distribute": {"net1.bias": ["Shard(1)"]}})js"), Mesh1D(2))
          .status(),
      absl::StatusCode::kInvalidArgument, {"net1.bias"}));
}

}  // namespace
}  // namespace tessera
