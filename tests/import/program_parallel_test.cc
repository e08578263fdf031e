// import::LayOutProgram with Hugging Face tp_plans (the plan transformers resolves for Llama and
// Qwen2, <model>.tp_plan.json) and with parallelize_module plans (torchtitan-style, for all four
// models; GPT-2's Conv1D layers as the transposed Linears they are): each parameter takes its
// style's placements, each styled module's output its style's layout, and the program run on a
// simulated mesh of 2, 3 and 4 ranks (and 2x2 with tp on dim 1) gives transformers' logits.
// Plans that do not fit are refused naming the pattern, module or style.

#include "import/program_parallel.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/files/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "import/archive_tensors.h"
#include "import/program_plan.h"
#include "import/pt2_archive.h"
#include "import/simulated_run.h"
#include "tests/support/exported_models.h"
#include "tests/support/test_device.h"

namespace tessera::import {
namespace {

using ::testing::HasSubstr;

const std::string kFixtures = TESSERA_EXPORT_FIXTURES;

std::string Fixture(const std::string& model, const std::string& suffix) {
  return absl::StrCat(kFixtures, "/", model, suffix);
}

ExportedProgram ReadProgram(const std::string& model) {
  Pt2Zip zip = Pt2Zip::Open(Fixture(model, ".pt2")).value();
  ArchiveModel m = ReadArchiveModel(zip).value();
  return ParseExportedProgram(m.json, model).value();
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// The placements input `target` was given.
std::vector<Placement> InputPlacements(const ExportedProgram& program, const ProgramLayout& layout,
                                       const std::string& target) {
  for (size_t i = 0; i < program.inputs.size(); ++i) {
    if (program.inputs[i].target == target) return layout.inputs[i];
  }
  ADD_FAILURE() << "no input " << target;
  return {};
}

struct Case {
  std::string model;
  bool hf = false;  // the model's own tp_plan; else TorchPlan
};

class ProgramParallelTest : public ::testing::TestWithParam<Case> {};

absl::StatusOr<ProgramPlan> PlanFor(const Case& c, const DeviceMesh& mesh, int tp_dim) {
  if (c.hf) return ParseHfTpPlan(ReadJson(Fixture(c.model, ".tp_plan.json")), "", tp_dim);
  absl::StatusOr<PlanSpec> spec = ParsePlanSpec(testing::TorchStylePlan(c.model));
  if (!spec.ok()) return spec.status();
  ParallelizePlan plan = *spec->parallelize;
  plan.mesh_dim_index = tp_dim;
  return ProgramPlanOf(plan, mesh);
}

TEST_P(ProgramParallelTest, GivesTransformersLogitsOnEveryMesh) {
  const Case c = GetParam();
  const ExportedProgram program = ReadProgram(c.model);
  const SafetensorsFile io = ReadSafetensorsFile(Fixture(c.model, ".io.safetensors")).value();
  const std::vector<HostTensor> inputs =
      testing::ArchiveProgramInputs(Fixture(c.model, ".pt2"), c.model, program, io);
  const HostTensor& want = io.tensors.at("logits");
  std::unique_ptr<kernels::KernelBackend> backend = testing::TestBackendForRank(0).value();
  for (const Shape& shape : {Shape{2}, Shape{3}, Shape{4}, Shape{2, 2}}) {
    const DeviceMesh mesh = DeviceMesh::Create("cpu", shape).value();
    const int tp = mesh.ndim() - 1;
    const std::string what = absl::StrCat(c.model, c.hf ? " (tp_plan)" : " (parallelize_module)",
                                          " on ", mesh.ToString());
    absl::StatusOr<ProgramPlan> plan = PlanFor(c, mesh, tp);
    ASSERT_TRUE(plan.ok()) << what << ": " << plan.status();
    absl::StatusOr<ProgramLayout> layout = LayOutProgram(program, *plan, mesh);
    ASSERT_TRUE(layout.ok()) << what << ": " << layout.status();
    EXPECT_THAT(layout->unmatched, ::testing::IsEmpty()) << what;
    EXPECT_EQ(layout->assigned.size(), plan->styles.size()) << what;  // one layer each

    // The styles' placements on the tp dim (Replicate on the other).
    auto on_tp = [&](Placement p) {
      std::vector<Placement> v(mesh.ndim(), Placement::Replicate());
      v[tp] = p;
      return v;
    };
    if (c.model == "llama" || c.model == "qwen2") {
      EXPECT_EQ(InputPlacements(program, *layout, "model.layers.0.self_attn.q_proj.weight"),
                on_tp(Placement::Shard(0)));
      EXPECT_EQ(InputPlacements(program, *layout, "model.layers.0.mlp.down_proj.weight"),
                on_tp(Placement::Shard(1)));
      EXPECT_EQ(InputPlacements(program, *layout, "model.embed_tokens.weight"),
                on_tp(Placement::Shard(0)));
      EXPECT_EQ(InputPlacements(program, *layout, "lm_head.weight"), on_tp(Placement::Shard(0)));
      EXPECT_EQ(InputPlacements(program, *layout, "model.norm.weight"),
                on_tp(Placement::Replicate()));
    }
    if (c.model == "qwen2") {  // a colwise bias shards with its rows
      EXPECT_EQ(InputPlacements(program, *layout, "model.layers.0.self_attn.q_proj.bias"),
                on_tp(Placement::Shard(0)));
    }
    if (c.model == "gpt2") {  // Conv1D weights are [in, out]
      EXPECT_EQ(InputPlacements(program, *layout, "transformer.h.0.mlp.c_fc.weight"),
                on_tp(Placement::Shard(1)));
      EXPECT_EQ(InputPlacements(program, *layout, "transformer.h.0.mlp.c_fc.bias"),
                on_tp(Placement::Shard(0)));
      EXPECT_EQ(InputPlacements(program, *layout, "transformer.h.0.mlp.c_proj.weight"),
                on_tp(Placement::Shard(0)));
      EXPECT_EQ(InputPlacements(program, *layout, "transformer.h.0.mlp.c_proj.bias"),
                on_tp(Placement::Replicate()));
    }
    if (c.model == "bert") {
      EXPECT_EQ(InputPlacements(program, *layout, "bert.encoder.layer.0.output.dense.weight"),
                on_tp(Placement::Shard(1)));
    }

    ops::ShardingCache cache;
    absl::StatusOr<PlannedProgram> planned =
        PlanExportedProgram(program, mesh, layout->inputs, cache, layout->pins);
    ASSERT_TRUE(planned.ok()) << what << ": " << planned.status();
    // The logits come out as the last style says: gathered (Replicate).
    EXPECT_EQ(planned->values[program.outputs[0]].placements[tp], Placement::Replicate()) << what;
    int pinned = 0;
    for (size_t v = 0; v < layout->pins.size(); ++v) {
      if (layout->pins[v].empty()) continue;
      ++pinned;
      EXPECT_EQ(planned->values[v].placements[tp], *layout->pins[v][tp])
          << what << ": " << program.value_names[v];
    }
    EXPECT_GE(pinned, 3) << what;

    absl::StatusOr<SimulatedRun> run = RunOnSimulatedMesh(*backend, program, *planned, inputs);
    ASSERT_TRUE(run.ok()) << what << ": " << run.status();
    const HostTensor& got = run->outputs[0];
    ASSERT_EQ(got.shape(), want.shape()) << what;
    const double worst = testing::LogitsError(got, want);
    EXPECT_LE(worst, 1.0) << what << ": the logits differ from transformers' by " << worst
                          << " of the tolerance";
    EXPECT_GT(run->bytes_moved, 0) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Transformers, ProgramParallelTest,
                         ::testing::Values(Case{"llama", true}, Case{"qwen2", true},
                                           Case{"llama", false}, Case{"qwen2", false},
                                           Case{"gpt2", false}, Case{"bert", false}),
                         [](const auto& info) {
                           return info.param.model + (info.param.hf ? "_tp_plan" : "_torch_plan");
                         });

TEST(HfTpPlanTest, StylesAsTransformersReadsThem) {
  const nlohmann::json base = {{"layers.*.mlp.up_proj", "colwise"},
                               {"layers.*.mlp.down_proj", "rowwise"},
                               {"embed_tokens", "embedding_rowwise"}};
  absl::StatusOr<ProgramPlan> plan = ParseHfTpPlan(base, "model", 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::map<std::string, std::string> patterns;
  for (const auto& [pattern, style] : plan->styles) patterns[pattern] = style.name;
  EXPECT_EQ(patterns,
            (std::map<std::string, std::string>{{"model.embed_tokens", "embedding_rowwise"},
                                                {"model.layers.*.mlp.down_proj", "rowwise"},
                                                {"model.layers.*.mlp.up_proj", "colwise"}}));
  // On Llama: the base plan under "model" lays out what the resolved plan does for those modules.
  const ExportedProgram program = ReadProgram("llama");
  const DeviceMesh mesh = DeviceMesh::Create("cpu", {2}).value();
  absl::StatusOr<ProgramLayout> layout = LayOutProgram(program, *plan, mesh);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(InputPlacements(program, *layout, "model.layers.0.mlp.up_proj.weight"),
            std::vector<Placement>{Placement::Shard(0)});
  EXPECT_EQ(InputPlacements(program, *layout, "model.layers.0.mlp.down_proj.weight"),
            std::vector<Placement>{Placement::Shard(1)});
}

// A styled module inside another: where they share an output value, the outer style's layout is
// the one it ends in (torch runs the outer module's output hook last).
TEST(HfTpPlanTest, TheOuterStyleLaysOutASharedOutput) {
  const ExportedProgram program = ReadProgram("llama");
  const DeviceMesh mesh = DeviceMesh::Create("cpu", {2}).value();
  ProgramPlan plan = ParseHfTpPlan({{"model.layers.0.mlp", "sequence_parallel"},
                                    {"model.layers.0.mlp.down_proj", "rowwise"}},
                                   "", 0)
                         .value();
  absl::StatusOr<ProgramLayout> layout = LayOutProgram(program, plan, mesh);
  ASSERT_TRUE(layout.ok()) << layout.status();
  int down_proj_outputs = 0;
  for (size_t k = 0; k < program.nodes.size(); ++k) {
    if (program.nodes[k].module != "model.layers.0.mlp.down_proj") continue;
    for (int v : program.nodes[k].outputs) {
      if (layout->pins[v].empty()) continue;
      ++down_proj_outputs;
      EXPECT_EQ(*layout->pins[v][0], Placement::Shard(1)) << program.value_names[v];
    }
  }
  EXPECT_EQ(down_proj_outputs, 1);
}

TEST(HfTpPlanTest, PlansThatDoNotFitAreRefusedNamingWhy) {
  absl::Status s = ParseHfTpPlan({{"lm_head", "diagonal"}}, "", 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'lm_head': unknown style 'diagonal'"));
  s = ParseHfTpPlan({{"lm_head", 3}}, "", 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = ParseHfTpPlan({{"layers.*.mlp.gate_up_proj", "packed_colwise"}}, "model", 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("packed_colwise"));
  s = ParseHfTpPlan(nlohmann::json::array(), "", 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);

  const ExportedProgram program = ReadProgram("llama");
  const DeviceMesh mesh = DeviceMesh::Create("cpu", {2}).value();
  // A colwise style on a norm.
  ProgramPlan plan = ParseHfTpPlan({{"model.norm", "colwise"}}, "", 0).value();
  s = LayOutProgram(program, plan, mesh).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("module 'model.norm' is a "));
  EXPECT_THAT(s.message(), HasSubstr("LlamaRMSNorm: colwise lays out a Linear"));
  // Two patterns on one module.
  plan = ParseHfTpPlan(
             {{"model.layers.0.mlp.up_proj", "colwise"}, {"model.layers.*.mlp.up_proj", "rowwise"}},
             "", 0)
             .value();
  s = LayOutProgram(program, plan, mesh).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'model.layers.0.mlp.up_proj' is matched by both"));
  // A pattern that matches nothing is reported, not silent.
  plan = ParseHfTpPlan({{"model.layers.*.mlp.up_proj", "colwise"}, {"decoder.*", "rowwise"}}, "", 0)
             .value();
  absl::StatusOr<ProgramLayout> layout = LayOutProgram(program, plan, mesh);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->unmatched, std::vector<std::string>{"decoder.*"});
  // A mesh dim the mesh lacks.
  plan.tp_mesh_dim = 1;
  EXPECT_EQ(LayOutProgram(program, plan, mesh).status().code(), absl::StatusCode::kInvalidArgument);
  // parallelize_module's PrepareModuleInput is not taken yet.
  ParallelizePlan prepare = *ParsePlanSpec(R"json({"plan": {"model": {"style": "PrepareModuleInput",
                      "input_layouts": ["Replicate()"], "desired_input_layouts": ["Shard(1)"]}}})json")
                                 .value()
                                 .parallelize;
  s = ProgramPlanOf(prepare, mesh).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("PrepareModuleInput"));
}

}  // namespace
}  // namespace tessera::import
