// The graph program the coordinator compiles for an imported module (server/modules/
// graph_modules.h), checked on the fixture models (tests/fixtures/export) laid out by a
// torchtitan-style plan on meshes of 1, 2 and 4 ranks: every step reads only what is there when
// it runs (a parameter, an input, or a value written before and not yet freed), every temporary
// a run writes is freed exactly once after its last use, no parameter is ever freed, the outputs
// stay for the run to read, and the steps are the program's nodes (a decomposition's nodes each)
// plus one redistribution per styled output that needs one.

#include "server/modules/graph_modules.h"

#include <map>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/json.h"
#include "gtest/gtest.h"
#include "import/program_parallel.h"
#include "import/program_weights.h"
#include "tests/support/exported_models.h"

namespace tessera {
namespace {

const std::string kFixtures = TESSERA_EXPORT_FIXTURES;

struct Case {
  std::string model;
  int ranks;
};

class GraphProgramTest : public ::testing::TestWithParam<Case> {};

TEST_P(GraphProgramTest, StepsReadWhatIsThereAndFreeEveryTemporaryOnce) {
  const Case c = GetParam();
  const import::ProgramWeights weights =
      import::ProgramWeights::Open(absl::StrCat(kFixtures, "/", c.model, ".pt2")).value();
  v1::ImportedProgram source;
  source.set_program_json(weights.model().json.dump());
  source.set_mesh_dim(-1);
  source.set_source(c.model + ".pt2");
  const DeviceMesh mesh = DeviceMesh::Create("cpu", {c.ranks}).value();
  absl::StatusOr<std::shared_ptr<const ModuleGraph>> built =
      BuildModuleGraph(source, testing::TorchStylePlan(c.model), mesh, /*mesh_id=*/7, "m",
                       /*program_id=*/3);
  ASSERT_TRUE(built.ok()) << built.status();
  const ModuleGraph& g = **built;
  const v1::GraphProgram& p = g.compiled;

  std::set<std::string> parameters;
  for (const ProgramParameter& param : GraphParameters(g)) {
    parameters.insert(absl::StrCat("dt/m.", param.fqn));
  }
  EXPECT_EQ(parameters.size(), g.weights.size());
  std::set<std::string> live(p.inputs().begin(), p.inputs().end());
  std::set<std::string> freed;
  const std::set<std::string> outputs(p.outputs().begin(), p.outputs().end());
  int calls = 0, moves = 0;
  const auto readable = [&](const std::string& name) {
    return parameters.contains(name) || live.contains(name);
  };
  for (int k = 0; k < p.steps_size(); ++k) {
    const v1::GraphStep& step = p.steps(k);
    const std::string what = absl::StrCat(c.model, " on ", c.ranks, ", step ", k);
    if (step.has_run_op()) {
      ++calls;
      EXPECT_EQ(step.run_op().mesh_id(), 7) << what;
      for (const v1::OpInput& in : step.run_op().inputs()) {
        EXPECT_TRUE(readable(in.tensor())) << what << " reads " << in.tensor();
      }
      EXPECT_TRUE(absl::StartsWith(step.run_op().output(), "graph/3/")) << what;
      live.insert(step.run_op().output());
      live.insert(step.run_op().more_outputs().begin(), step.run_op().more_outputs().end());
    } else if (step.has_redistribute()) {
      ++moves;
      EXPECT_TRUE(readable(step.redistribute().input())) << what;
      EXPECT_EQ(step.redistribute().input(), step.redistribute().output()) << what;
    } else {
      ASSERT_TRUE(step.has_delete_tensors()) << what;
      for (const std::string& name : step.delete_tensors().names()) {
        EXPECT_FALSE(parameters.contains(name)) << what << " frees parameter " << name;
        EXPECT_FALSE(outputs.contains(name)) << what << " frees output " << name;
        EXPECT_TRUE(live.erase(name) == 1) << what << " frees " << name << ", not live";
        EXPECT_TRUE(freed.insert(name).second) << what << " frees " << name << " twice";
      }
    }
  }
  // What is left: the outputs (and user inputs no step reads, freed by the worker at the end).
  for (const std::string& name : live) {
    EXPECT_TRUE(outputs.contains(name) || absl::StrContains(name, "/in"))
        << name << " is never freed";
  }
  for (const std::string& out : outputs) EXPECT_TRUE(readable(out)) << out;
  int nodes = 0;
  for (const import::PlannedNode& node : g.planned.nodes) {
    nodes += node.call.has_value() ? 1 : static_cast<int>(node.decomposition->planned.nodes.size());
  }
  EXPECT_EQ(calls, nodes);
  if (c.ranks > 1) {
    EXPECT_GT(moves, 0) << c.model;  // the LM head's output gathered
    EXPECT_GT(g.collectives, 0) << c.model;
  }
  // The parameters' placements are the plan's: the styled projections sharded.
  int sharded = 0;
  for (const ProgramParameter& param : GraphParameters(g)) {
    sharded += param.placements[0].is_shard() ? 1 : 0;
  }
  EXPECT_GT(sharded, 0) << c.model;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GraphProgramTest,
                         ::testing::Values(Case{"llama", 1}, Case{"llama", 2}, Case{"llama", 4},
                                           Case{"qwen2", 2}, Case{"gpt2", 2}, Case{"gpt2", 4},
                                           Case{"bert", 2}, Case{"bert", 4}),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           return absl::StrCat(p.param.model, "_", p.param.ranks);
                         });

// An op the registry lacks is UNIMPLEMENTED, listed by name and node count, before the plan is
// read; a plan that does not parse is INVALID_ARGUMENT naming it.
TEST(GraphProgramErrorsTest, UnregisteredOpsAndBadPlans) {
  const import::ProgramWeights weights =
      import::ProgramWeights::Open(kFixtures + "/llama.pt2").value();
  std::string json = weights.model().json.dump();
  v1::ImportedProgram source;
  source.set_mesh_dim(-1);
  source.set_source("llama.pt2");
  source.set_program_json(json);
  source.set_tp_plan_json("{not json");
  const DeviceMesh mesh = DeviceMesh::Create("cpu", {2}).value();
  absl::Status s = BuildModuleGraph(source, "", mesh, 1, "m", 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "tp_plan")) << s;
  size_t at = 0;
  int replaced = 0;
  while ((at = json.find("torch.ops.aten.linear.default", at)) != std::string::npos) {
    json.replace(at, 29, "torch.ops.aten.frobnicate.default");
    ++replaced;
  }
  source.set_program_json(json);
  s = BuildModuleGraph(source, "", mesh, 1, "m", 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_TRUE(
      absl::StrContains(s.message(), absl::StrCat("aten::frobnicate (", replaced, " nodes)")))
      << s;
  source.set_program_json(std::string(kMaxProgramJsonBytes + 1, ' '));
  s = BuildModuleGraph(source, "", mesh, 1, "m", 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "at most")) << s;
}

}  // namespace
}  // namespace tessera
