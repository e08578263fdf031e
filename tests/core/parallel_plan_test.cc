#include "core/modules/parallel_plan.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using ::tessera::testing::StatusIs;

// torch's MLPModule: net1 = Linear(10, 16), relu = ReLU, net2 = Linear(16, 10).
constexpr char kMlpModule[] = R"j({"type": "Module", "children": [
  {"name": "net1", "type": "Linear", "in_features": 10, "out_features": 16},
  {"name": "relu", "type": "ReLU"},
  {"name": "net2", "type": "Linear", "in_features": 16, "out_features": 10}]})j";

// torch's MLPStacked(n_layers=2): layers = ModuleList[MLPModule, MLPModule].
const std::string kMlpStacked = absl::StrCat(
    R"j({"type": "Module", "children": [{"name": "layers", "type": "ModuleList", "children": [)j",
    kMlpModule, ", ", kMlpModule, "]}]}");

// A transformer-ish block: every module type a style may land on.
constexpr char kBlock[] = R"j({"type": "Module", "children": [
  {"name": "emb", "type": "Embedding", "num_embeddings": 32, "embedding_dim": 8},
  {"name": "norm", "type": "RMSNorm", "normalized_shape": 8},
  {"name": "attn", "type": "Attention", "dim": 8, "n_heads": 2},
  {"name": "ln", "type": "LayerNorm", "normalized_shape": 8},
  {"name": "drop", "type": "Dropout"},
  {"name": "act", "type": "Sequential", "children": [{"type": "GELU"}, {"type": "SiLU"}]},
  {"name": "out", "type": "Linear", "in_features": 8, "out_features": 32}]})j";

ModuleSpec Model(absl::string_view json) {
  absl::StatusOr<ModelSpec> spec = ParseModelSpec(json);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? spec->root : ModuleSpec{};
}

std::string Describe(const std::vector<Layout>& layouts) {
  return absl::StrCat("[",
                      absl::StrJoin(layouts, ", ",
                                    [](std::string* out, const Layout& l) {
                                      out->append(l ? PlacementToString(*l) : "None");
                                    }),
                      "]");
}

// Every field of a style, for comparing whole styles.
std::string Describe(const ParallelStyle& s) {
  return absl::StrCat(StyleKindName(s.kind), " in=", Describe(s.input_layouts),
                      " desired_in=", Describe(s.desired_input_layouts),
                      " out=", Describe(s.output_layouts),
                      " desired_out=", Describe(s.desired_output_layouts),
                      " local=", s.use_local_output, " seq=", s.sequence_dim);
}

std::string Describe(const PlanSpec& plan) {
  std::string out;
  if (plan.parallelize) {
    absl::StrAppend(&out, "mesh_dim=", plan.parallelize->mesh_dim_name, "/",
                    plan.parallelize->mesh_dim_index, "\n");
    for (const auto& [pattern, style] : plan.parallelize->styles) {
      absl::StrAppend(&out, "'", pattern, "': ", Describe(style), "\n");
    }
  }
  if (plan.distribute) {
    for (const auto& [pattern, placements] : plan.distribute->placements) {
      absl::StrAppend(&out, "distribute '", pattern, "': ", PlacementsToString(placements), "\n");
    }
  }
  return out;
}

ParallelStyle Style(StyleKind kind, std::vector<Layout> in, std::vector<Layout> desired_in,
                    std::vector<Layout> out, std::vector<Layout> desired_out, bool local,
                    int sequence_dim = 1) {
  return {kind,  std::move(in), std::move(desired_in), std::move(out), std::move(desired_out),
          local, sequence_dim};
}

const Placement R = Placement::Replicate();
Placement S(int dim) { return Placement::Shard(dim); }

// --- MakeStyle -------------------------------------------------------------------------------

struct DefaultsCase {
  StyleKind kind;
  std::string name;
  ParallelStyle expected;
};

class MakeStyleTest : public ::testing::TestWithParam<DefaultsCase> {};

TEST_P(MakeStyleTest, HasTorchsDefaults) {
  EXPECT_EQ(StyleKindName(GetParam().kind), GetParam().name);
  EXPECT_EQ(Describe(MakeStyle(GetParam().kind)), Describe(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, MakeStyleTest,
    ::testing::Values(DefaultsCase{StyleKind::kColwise, "ColwiseParallel",
                                   Style(StyleKind::kColwise, {R}, {R}, {S(-1)}, {}, true)},
                      DefaultsCase{StyleKind::kRowwise, "RowwiseParallel",
                                   Style(StyleKind::kRowwise, {S(-1)}, {S(-1)}, {R}, {}, true)},
                      DefaultsCase{StyleKind::kSequenceParallel, "SequenceParallel",
                                   Style(StyleKind::kSequenceParallel, {S(1)}, {S(1)}, {S(1)}, {},
                                         false, 1)},
                      DefaultsCase{StyleKind::kPrepareModuleInput, "PrepareModuleInput",
                                   Style(StyleKind::kPrepareModuleInput, {}, {}, {}, {}, false)},
                      DefaultsCase{StyleKind::kPrepareModuleOutput, "PrepareModuleOutput",
                                   Style(StyleKind::kPrepareModuleOutput, {}, {}, {}, {}, true)}));

// --- FnMatch ---------------------------------------------------------------------------------

struct FnMatchCase {
  std::string pattern;
  std::string name;
  bool matches;  // Python 3.11's fnmatch.fnmatchcase(name, pattern)
};

class FnMatchTest : public ::testing::TestWithParam<FnMatchCase> {};

TEST_P(FnMatchTest, IsPythonsFnmatchcase) {
  EXPECT_EQ(FnMatch(GetParam().pattern, GetParam().name), GetParam().matches)
      << "pattern '" << GetParam().pattern << "', name '" << GetParam().name << "'";
}

INSTANTIATE_TEST_SUITE_P(
    Wildcards, FnMatchTest,
    ::testing::Values(FnMatchCase{"net*", "net1", true}, FnMatchCase{"net*", "net", true},
                      FnMatchCase{"net*", "relu", false}, FnMatchCase{"net?", "net1", true},
                      FnMatchCase{"net?", "net12", false}, FnMatchCase{"net?", "net", false},
                      FnMatchCase{"*", "", true}, FnMatchCase{"**", "x", true},
                      FnMatchCase{"", "", true}, FnMatchCase{"", "a", false},
                      FnMatchCase{"*1", "net1", true}, FnMatchCase{"a*b*c", "axxbyyc", true},
                      FnMatchCase{"a*b*c", "axxbyy", false}, FnMatchCase{"NET1", "net1", false},
                      FnMatchCase{"?", "\xc3\xa9", true},  // one code point, two bytes
                      FnMatchCase{"??", "\xc3\xa9", false},
                      FnMatchCase{"a\\b", "a\\b", true},  // no escapes
                      FnMatchCase{"\\*", "\\x", true}));

INSTANTIATE_TEST_SUITE_P(
    Classes, FnMatchTest,
    ::testing::Values(FnMatchCase{"net[1-2]", "net1", true}, FnMatchCase{"net[1-2]", "net2", true},
                      FnMatchCase{"net[1-2]", "net3", false}, FnMatchCase{"net[!1]", "net1", false},
                      FnMatchCase{"net[!1]", "net2", true}, FnMatchCase{"[1]", "1", true},
                      FnMatchCase{"[1]", "2", false}, FnMatchCase{"[1]", "[1]", false},
                      FnMatchCase{"[]]", "]", true}, FnMatchCase{"[!]]", "]", false},
                      FnMatchCase{"[!]]", "a", true}, FnMatchCase{"[!]", "!", false},
                      FnMatchCase{"[!]", "[!]", true}, FnMatchCase{"[", "[", true},
                      FnMatchCase{"[a", "[a", true}, FnMatchCase{"[a-]", "-", true},
                      FnMatchCase{"[a-]", "b", false}, FnMatchCase{"[z-a]", "z", false},
                      FnMatchCase{"[z-a]", "a", false}, FnMatchCase{"[z-a]", "-", false},
                      FnMatchCase{"[!z-a]", "q", true}, FnMatchCase{"[a-c-e]", "b", true},
                      FnMatchCase{"[a-c-e]", "-", true}, FnMatchCase{"[a-c-e]", "e", true},
                      FnMatchCase{"[a-c-e]", "d", false}, FnMatchCase{"[b-a-c]", "-", true},
                      FnMatchCase{"[b-a-c]", "c", true}, FnMatchCase{"[b-a-c]", "b", false},
                      FnMatchCase{"[!a-c]", "b", false}, FnMatchCase{"[!a-c]", "d", true},
                      FnMatchCase{"[--/]", ".", true}, FnMatchCase{"[^a]", "^", true},
                      FnMatchCase{"[^a]", "b", false},
                      FnMatchCase{"[\xc3\xa9]", "\xc3\xa9", true}));

// --- MatchPlan -------------------------------------------------------------------------------

// A model, a plan (pattern -> style kind) and where torch's parallelize_module puts each style.
struct MatchCase {
  std::string name;
  std::string model;
  std::vector<std::pair<std::string, StyleKind>> plan;
  std::vector<std::pair<std::string, int>> assigned;
  std::vector<std::string> unmatched;
};

ParallelizePlan PlanOf(const std::vector<std::pair<std::string, StyleKind>>& styles) {
  ParallelizePlan plan;
  for (const auto& [pattern, kind] : styles) plan.styles.emplace_back(pattern, MakeStyle(kind));
  return plan;
}

class MatchPlanTest : public ::testing::TestWithParam<MatchCase> {};

TEST_P(MatchPlanTest, LandsWhereParallelizeModuleDoes) {
  absl::StatusOr<PlanMatch> match = MatchPlan(Model(GetParam().model), PlanOf(GetParam().plan));
  ASSERT_TRUE(match.ok()) << match.status();
  EXPECT_EQ(match->assigned, GetParam().assigned);
  EXPECT_EQ(match->unmatched, GetParam().unmatched);
}

constexpr StyleKind kColwise = StyleKind::kColwise;
constexpr StyleKind kRowwise = StyleKind::kRowwise;
constexpr StyleKind kSequence = StyleKind::kSequenceParallel;
constexpr StyleKind kPrepareInput = StyleKind::kPrepareModuleInput;
constexpr StyleKind kPrepareOutput = StyleKind::kPrepareModuleOutput;

INSTANTIATE_TEST_SUITE_P(
    Seeds, MatchPlanTest,
    ::testing::Values(
        // test_parallelize_module_with_star / _with_question / _with_digit
        MatchCase{"Star", kMlpModule, {{"net*", kColwise}}, {{"net1", 0}, {"net2", 0}}, {}},
        MatchCase{"Question", kMlpModule, {{"net?", kColwise}}, {{"net1", 0}, {"net2", 0}}, {}},
        MatchCase{"Digit", kMlpModule, {{"net[1-2]", kColwise}}, {{"net1", 0}, {"net2", 0}}, {}},
        // test_parallelize_module_multi_wildcard
        MatchCase{"MultiWildcard",
                  kMlpStacked,
                  {{"layers.*.net[1]", kColwise}, {"layers.*.net[2]", kRowwise}},
                  {{"layers.0.net1", 0},
                   {"layers.0.net2", 1},
                   {"layers.1.net1", 0},
                   {"layers.1.net2", 1}},
                  {}},
        // test_linear_row_wise_parallel / _col_wise_parallel: a style for the root Linear
        MatchCase{"RootLinear",
                  R"j({"type": "Linear", "in_features": 16, "out_features": 10})j",
                  {{"", kRowwise}},
                  {{"", 0}},
                  {}},
        // test_prepare_module_input / _output on a module of its own
        MatchCase{"RootPrepare", kMlpModule, {{"", kPrepareInput}}, {{"", 0}}, {}}),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Walks, MatchPlanTest,
    ::testing::Values(
        MatchCase{"Unmatched",
                  kMlpModule,
                  {{"net3", kColwise}, {"net1", kColwise}, {"net1.weight", kRowwise}},
                  {{"net1", 1}},
                  {"net3", "net1.weight"}},
        MatchCase{"StarStaysOnOneLevel",
                  kMlpStacked,
                  {{"*", kPrepareInput}, {"layers.*", kPrepareOutput}},
                  {{"layers", 0}, {"layers.0", 1}, {"layers.1", 1}},
                  {}},
        MatchCase{"BlockAndItsChildren",
                  kMlpStacked,
                  {{"layers.1.net2", kRowwise}, {"layers.[1]", kPrepareInput}},
                  {{"layers.1", 1}, {"layers.1.net2", 0}},
                  {}},
        MatchCase{"DigitIsAClass",
                  kMlpStacked,
                  {{"layers.[!0].net1", kColwise}},
                  {{"layers.1.net1", 0}},
                  {}},
        MatchCase{"TooDeepOrShallow",
                  kMlpStacked,
                  {{"layers.0.net1.x", kColwise}, {"net1", kColwise}, {"*.*.*.*", kColwise}},
                  {},
                  {"layers.0.net1.x", "net1", "*.*.*.*"}},
        MatchCase{"EveryTypeItsStyle",
                  kBlock,
                  {{"emb", kRowwise},
                   {"attn.[qkv]", kColwise},
                   {"attn.o", kRowwise},
                   {"norm", kSequence},
                   {"ln", kSequence},
                   {"drop", kSequence},
                   {"act", kSequence},
                   {"act.*", kPrepareOutput},
                   {"out", kColwise},
                   {"attn", kPrepareInput}},
                  {{"emb", 0},
                   {"norm", 3},
                   {"attn", 9},
                   {"attn.q", 1},
                   {"attn.k", 1},
                   {"attn.v", 1},
                   {"attn.o", 2},
                   {"ln", 4},
                   {"drop", 5},
                   {"act", 6},
                   {"act.0", 7},
                   {"act.1", 7},
                   {"out", 8}},
                  {}}),
    [](const auto& info) { return info.param.name; });

// A plan that cannot apply and what its INVALID_ARGUMENT message must name.
struct BadMatchCase {
  std::string name;
  std::string model;
  std::vector<std::pair<std::string, StyleKind>> plan;
  std::vector<std::string> fragments;
};

class BadMatchTest : public ::testing::TestWithParam<BadMatchCase> {};

TEST_P(BadMatchTest, IsInvalidArgumentNamingModuleAndStyle) {
  EXPECT_TRUE(StatusIs(MatchPlan(Model(GetParam().model), PlanOf(GetParam().plan)).status(),
                       absl::StatusCode::kInvalidArgument, GetParam().fragments));
}

INSTANTIATE_TEST_SUITE_P(
    Plans, BadMatchTest,
    ::testing::Values(
        BadMatchCase{"TwoKeysOneModule",
                     kMlpModule,
                     {{"net*", kColwise}, {"net1", kRowwise}},
                     {"module 'net1' is matched by both 'net*' and 'net1'"}},
        BadMatchCase{"TwoKeysOneRoot",
                     kMlpModule,
                     {{"", kPrepareInput}, {"", kPrepareOutput}},
                     {"the root module is matched by both '' and ''"}},
        BadMatchCase{"ColwiseOnReLU",
                     kMlpModule,
                     {{"relu", kColwise}},
                     {"module 'relu' is of type ReLU", "ColwiseParallel (pattern 'relu')",
                      "applies only to Linear and Embedding"}},
        BadMatchCase{"StarTakesReLU",
                     kMlpModule,
                     {{"*", kColwise}},
                     {"module 'relu' is of type ReLU", "ColwiseParallel (pattern '*')"}},
        BadMatchCase{"RowwiseOnRoot",
                     kMlpModule,
                     {{"", kRowwise}},
                     {"the root module is of type Module", "RowwiseParallel"}},
        BadMatchCase{"RowwiseOnAttention",
                     kBlock,
                     {{"attn", kRowwise}},
                     {"module 'attn' is of type Attention", "RowwiseParallel"}},
        BadMatchCase{
            "SequenceOnLinear",
            kMlpStacked,
            {{"layers.*.net2", kSequence}},
            {"module 'layers.0.net2' is of type Linear", "SequenceParallel",
             "applies only to LayerNorm, RMSNorm, Dropout and modules without parameters"}},
        BadMatchCase{"SequenceOnABlockWithParameters",
                     kMlpStacked,
                     {{"layers.0", kSequence}},
                     {"module 'layers.0' is of type Module", "SequenceParallel"}},
        BadMatchCase{"SequenceOnEmbedding",
                     kBlock,
                     {{"emb", kSequence}},
                     {"module 'emb' is of type Embedding", "SequenceParallel"}}),
    [](const auto& info) { return info.param.name; });

// --- ParsePlanSpec ---------------------------------------------------------------------------

PlanSpec ParsePlan(absl::string_view json) {
  absl::StatusOr<PlanSpec> plan = ParsePlanSpec(json);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : PlanSpec{};
}

// A plan file and the plan it must read as.
struct PlanCase {
  std::string name;
  std::string json;
  PlanSpec expected;
};

PlanSpec Parallelize(std::vector<std::pair<std::string, ParallelStyle>> styles,
                     std::string mesh_dim_name = "", int mesh_dim_index = 0) {
  PlanSpec spec;
  spec.parallelize = ParallelizePlan{std::move(mesh_dim_name), mesh_dim_index, std::move(styles)};
  return spec;
}

PlanSpec Distribute(std::vector<std::pair<std::string, std::vector<Placement>>> placements) {
  PlanSpec spec;
  spec.distribute = DistributePlan{std::move(placements)};
  return spec;
}

ParallelStyle Colwise(Placement in, Placement out, bool local = true) {
  return Style(StyleKind::kColwise, {in}, {R}, {out}, {}, local);
}

ParallelStyle Rowwise(Placement in, Placement out, bool local = true) {
  return Style(StyleKind::kRowwise, {in}, {S(-1)}, {out}, {}, local);
}

class ParsePlanTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(ParsePlanTest, ReadsAsExpectedAndRoundTrips) {
  const PlanSpec plan = ParsePlan(GetParam().json);
  EXPECT_EQ(Describe(plan), Describe(GetParam().expected));
  const std::string json = PlanSpecToJson(plan);
  const PlanSpec again = ParsePlan(json);
  EXPECT_EQ(Describe(again), Describe(plan)) << json;
  EXPECT_EQ(PlanSpecToJson(again), json);
}

INSTANTIATE_TEST_SUITE_P(
    Styles, ParsePlanTest,
    ::testing::Values(
        PlanCase{"SeedStar",
                 R"j({"plan": {"net*": {"style": "ColwiseParallel",
                                        "output_layouts": "Replicate()"}}})j",
                 Parallelize({{"net*", Colwise(R, R)}})},
        PlanCase{"RootStyleByName", R"j({"mesh_dim": "tp", "plan": "RowwiseParallel"})j",
                 Parallelize({{"", MakeStyle(StyleKind::kRowwise)}}, "tp")},
        PlanCase{"MeshDimIndex", R"j({"mesh_dim": 1, "plan": {"": "ColwiseParallel"}})j",
                 Parallelize({{"", MakeStyle(StyleKind::kColwise)}}, "", 1)},
        PlanCase{"OrderAsGiven",
                 R"j({"plan": {"z": "ColwiseParallel", "a": "RowwiseParallel",
                               "m.*": "SequenceParallel"}})j",
                 Parallelize({{"z", MakeStyle(StyleKind::kColwise)},
                              {"a", MakeStyle(StyleKind::kRowwise)},
                              {"m.*", MakeStyle(StyleKind::kSequenceParallel)}})},
        PlanCase{"ColwiseArguments",
                 R"j({"plan": {"a": {"style": "ColwiseParallel", "input_layouts": "Shard(0)",
                                     "output_layouts": ["S(1)"], "use_local_output": false}}})j",
                 Parallelize({{"a", Colwise(S(0), S(1), false)}})},
        PlanCase{"NullKeepsTorchsDefault",
                 R"j({"plan": {"a": {"style": "RowwiseParallel", "input_layouts": null,
                                     "output_layouts": "Shard(dim=-1)"}}})j",
                 Parallelize({{"a", Rowwise(S(-1), S(-1))}})},
        PlanCase{"RowwiseReplicateInput",
                 R"j({"plan": {"tok": {"style": "RowwiseParallel", "input_layouts": "R",
                                       "output_layouts": "S(1)"}}})j",
                 Parallelize({{"tok", Rowwise(R, S(1))}})},
        PlanCase{"SequenceDim",
                 R"j({"plan": {"norm": {"style": "SequenceParallel", "sequence_dim": 0,
                                        "use_local_output": true}}})j",
                 Parallelize({{"norm", Style(StyleKind::kSequenceParallel, {S(0)}, {S(0)}, {S(0)},
                                             {}, true, 0)}})},
        PlanCase{"PrepareModuleInput",
                 R"j({"plan": {"attn": {"style": "PrepareModuleInput",
                                        "input_layouts": ["Shard(1)", null],
                                        "desired_input_layouts": ["Replicate()", null]}}})j",
                 Parallelize({{"attn", Style(StyleKind::kPrepareModuleInput, {S(1), std::nullopt},
                                             {R, std::nullopt}, {}, {}, false)}})},
        PlanCase{"PrepareModuleInputSeed",
                 R"j({"plan": {"": {"style": "PrepareModuleInput", "input_layouts": "Shard(0)",
                                    "desired_input_layouts": "Replicate()",
                                    "use_local_output": true}}})j",
                 Parallelize({{"",
                               Style(StyleKind::kPrepareModuleInput, {S(0)}, {R}, {}, {}, true)}})},
        PlanCase{"PrepareModuleOutputSeed",
                 R"j({"plan": {"": {"style": "PrepareModuleOutput", "output_layouts": "R",
                                    "desired_output_layouts": "S(0)"}}})j",
                 Parallelize({{"", Style(StyleKind::kPrepareModuleOutput, {}, {}, {R}, {S(0)},
                                         true)}})},
        PlanCase{"PrepareNone",
                 R"j({"plan": {"x": {"style": "PrepareModuleOutput", "output_layouts": null,
                                     "desired_output_layouts": null}}})j",
                 Parallelize({{"x", Style(StyleKind::kPrepareModuleOutput, {}, {}, {std::nullopt},
                                          {std::nullopt}, true)}})},
        PlanCase{"EmptyPlan", R"j({"plan": {}})j", Parallelize({})}),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Distribute, ParsePlanTest,
    ::testing::Values(
        PlanCase{"Mixed",
                 R"j({"distribute": {"net1.weight": ["Shard(0)"], "*.bias": "Replicate()",
                                     "net2.weight": "S(1),R",
                                     "layers.*.net1.weight": ["R", "Shard(dim=-1)"]}})j",
                 Distribute({{"net1.weight", {S(0)}},
                             {"*.bias", {R}},
                             {"net2.weight", {S(1), R}},
                             {"layers.*.net1.weight", {R, S(-1)}}})},
        PlanCase{"Empty", R"j({"distribute": {}})j", Distribute({})}),
    [](const auto& info) { return info.param.name; });

// The placement spellings a layout argument takes.
struct LayoutCase {
  std::string text;
  Placement placement;
};

class LayoutSpellingTest : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(LayoutSpellingTest, ReadsInEveryLayoutArgument) {
  const std::string layout = absl::StrCat("\"", GetParam().text, "\"");
  const std::string expected = Describe(std::vector<Layout>{GetParam().placement});
  for (const std::string& argument : {layout, absl::StrCat("[", layout, "]")}) {
    const PlanSpec plan =
        ParsePlan(absl::StrCat(R"j({"plan": {"a": {"style": "ColwiseParallel", "input_layouts": )j",
                               argument, R"j(, "output_layouts": )j", argument,
                               R"j(}, "b": {"style": "PrepareModuleInput", "input_layouts": )j",
                               argument, R"j(, "desired_input_layouts": )j", argument, "}}}"));
    ASSERT_TRUE(plan.parallelize.has_value());
    const ParallelStyle& colwise = plan.parallelize->styles[0].second;
    const ParallelStyle& prepare = plan.parallelize->styles[1].second;
    EXPECT_EQ(Describe(colwise.input_layouts), expected) << argument;
    EXPECT_EQ(Describe(colwise.output_layouts), expected) << argument;
    EXPECT_EQ(Describe(prepare.input_layouts), expected) << argument;
    EXPECT_EQ(Describe(prepare.desired_input_layouts), expected) << argument;
  }
}

INSTANTIATE_TEST_SUITE_P(Spellings, LayoutSpellingTest,
                         ::testing::Values(LayoutCase{"Replicate()", R}, LayoutCase{"R", R},
                                           LayoutCase{"Shard(-1)", S(-1)}, LayoutCase{"S(0)", S(0)},
                                           LayoutCase{"Shard(dim=2)", S(2)}, LayoutCase{"S1", S(1)},
                                           LayoutCase{"Partial()", Placement::Partial()},
                                           LayoutCase{"P(max)",
                                                      Placement::Partial(ReduceOp::kMax)}));

TEST(PlanSpecToJsonTest, WritesEveryArgument) {
  EXPECT_EQ(
      PlanSpecToJson(Parallelize(
          {{"net1", MakeStyle(StyleKind::kColwise)}, {"", MakeStyle(StyleKind::kSequenceParallel)}},
          "tp")),
      R"j({"mesh_dim":"tp","plan":{"net1":{"style":"ColwiseParallel","input_layouts":["R"],)j"
      R"j("output_layouts":["S(-1)"],"use_local_output":true},"":{"style":"SequenceParallel",)j"
      R"j("sequence_dim":1,"use_local_output":false}}})j");
  EXPECT_EQ(PlanSpecToJson(Distribute({{"*.weight", {S(0), R}}})),
            R"j({"distribute":{"*.weight":["S(0)","R"]}})j");
}

// A malformed plan file and what its INVALID_ARGUMENT message must name.
struct BadPlanCase {
  std::string json;
  std::vector<std::string> fragments;
};

class BadPlanTest : public ::testing::TestWithParam<BadPlanCase> {};

TEST_P(BadPlanTest, IsInvalidArgumentNamingKeyAndValue) {
  EXPECT_TRUE(StatusIs(ParsePlanSpec(GetParam().json).status(), absl::StatusCode::kInvalidArgument,
                       GetParam().fragments));
}

INSTANTIATE_TEST_SUITE_P(
    File, BadPlanTest,
    ::testing::Values(
        BadPlanCase{"{", {"plan spec: JSON"}},
        BadPlanCase{R"j({"plan": {"a": "ColwiseParallel", "a": "RowwiseParallel"}})j",
                    {"\"a\" appears twice"}},
        BadPlanCase{"[]", {"the top level = []", "found an array"}},
        BadPlanCase{"{}", {"exactly one of \"plan\" and \"distribute\", found neither"}},
        BadPlanCase{R"j({"plan": {}, "distribute": {}})j", {"found both"}},
        BadPlanCase{R"j({"plans": {}})j", {"plans = {}", "unknown key"}},
        BadPlanCase{R"j({"plan": 3})j", {"plan = 3", "expected a style name or {pattern: style"}},
        BadPlanCase{R"j({"mesh_dim": -1, "plan": {}})j", {"mesh_dim = -1"}},
        BadPlanCase{R"j({"mesh_dim": 1.5, "plan": {}})j", {"mesh_dim = 1.5"}},
        BadPlanCase{R"j({"mesh_dim": "", "plan": {}})j", {"mesh_dim = \"\""}},
        BadPlanCase{R"j({"mesh_dim": true, "plan": {}})j", {"mesh_dim = true"}},
        BadPlanCase{R"j({"mesh_dim": 0, "distribute": {}})j", {"mesh_dim = 0", "give no mesh_dim"}},
        BadPlanCase{R"j({"plan": {"a..b": "ColwiseParallel"}})j",
                    {"plan[\"a..b\"]", "empty name between dots"}},
        BadPlanCase{R"j({"plan": {"a.": "ColwiseParallel"}})j", {"plan[\"a.\"]"}}));

INSTANTIATE_TEST_SUITE_P(
    Styles, BadPlanTest,
    ::testing::Values(
        BadPlanCase{R"j({"plan": {"net1": "ColumnParallel"}})j",
                    {"plan[\"net1\"] = \"ColumnParallel\"", "unknown style",
                     "ColwiseParallel, RowwiseParallel"}},
        BadPlanCase{R"j({"plan": "Colwise"})j", {"plan = \"Colwise\"", "unknown style"}},
        BadPlanCase{R"j({"plan": {"net1": 3}})j", {"plan[\"net1\"] = 3", "expected a style name"}},
        BadPlanCase{R"j({"plan": {"net1": {"output_layouts": "R"}}})j",
                    {"plan[\"net1\"] = {\"output_layouts\":\"R\"}", "no \"style\""}},
        BadPlanCase{R"j({"plan": {"net1": {"style": 1}}})j",
                    {"plan[\"net1\"].style = 1", "unknown style"}},
        BadPlanCase{R"j({"plan": {"net1": {"style": "ColwiseParallel",
                                           "output_layouts": "Shard(x)"}}})j",
                    {"plan[\"net1\"].output_layouts = \"Shard(x)\"", "placement 'Shard(x)'"}},
        BadPlanCase{R"j({"plan": {"net1": {"style": "ColwiseParallel", "input_layouts": 0}}})j",
                    {"plan[\"net1\"].input_layouts = 0", "expected a placement"}},
        BadPlanCase{R"j({"plan": {"net1": {"style": "ColwiseParallel",
                                           "input_layouts": ["R", "S(0)"]}}})j",
                    {"plan[\"net1\"].input_layouts = [\"R\",\"S(0)\"]", "takes one layout"}},
        BadPlanCase{R"j({"plan": {"net1": {"style": "RowwiseParallel",
                                           "output_layouts": [null]}}})j",
                    {"plan[\"net1\"].output_layouts[0] = null", "expected a placement"}},
        BadPlanCase{
            R"j({"plan": {"net1": {"style": "ColwiseParallel",
                                           "desired_input_layouts": "R"}}})j",
            {"plan[\"net1\"].desired_input_layouts = \"R\"", "not an argument of ColwiseParallel",
             "input_layouts, output_layouts, use_local_output"}},
        BadPlanCase{R"j({"plan": {"net1": {"style": "RowwiseParallel", "sequence_dim": 1}}})j",
                    {"plan[\"net1\"].sequence_dim = 1", "not an argument of RowwiseParallel"}},
        BadPlanCase{R"j({"plan": {"n": {"style": "SequenceParallel", "input_layouts": "R"}}})j",
                    {"plan[\"n\"].input_layouts", "not an argument of SequenceParallel",
                     "(it takes sequence_dim, use_local_output)"}},
        BadPlanCase{R"j({"plan": {"n": {"style": "SequenceParallel", "sequence_dim": "1"}}})j",
                    {"plan[\"n\"].sequence_dim = \"1\"", "expected an integer"}},
        BadPlanCase{R"j({"plan": {"n": {"style": "SequenceParallel", "sequence_dim": 99}}})j",
                    {"plan[\"n\"].sequence_dim = 99", "not a tensor dim"}},
        BadPlanCase{R"j({"plan": {"n": {"style": "ColwiseParallel", "use_local_output": 1}}})j",
                    {"plan[\"n\"].use_local_output = 1", "expected true or false"}},
        BadPlanCase{R"j({"plan": {"n": {"style": "PrepareModuleOutput", "output_layouts": "R",
                                        "desired_input_layouts": "R"}}})j",
                    {"plan[\"n\"].desired_input_layouts", "not an argument of PrepareModuleOutput",
                     "output_layouts, desired_output_layouts, use_local_output"}}));

INSTANTIATE_TEST_SUITE_P(
    PrepareStyles, BadPlanTest,
    ::testing::Values(
        BadPlanCase{R"j({"plan": {"a": {"style": "PrepareModuleInput", "input_layouts": "R",
                                        "desired_input_layouts": "R",
                                        "input_kwarg_layouts": {"x": "R"}}}})j",
                    {"plan[\"a\"].input_kwarg_layouts = {\"x\":\"R\"}",
                     "keyword-argument layouts are not supported"}},
        BadPlanCase{R"j({"plan": {"a": {"style": "PrepareModuleInput",
                                        "desired_input_kwarg_layouts": {}}}})j",
                    {"desired_input_kwarg_layouts", "not supported"}},
        BadPlanCase{R"j({"plan": {"a": {"style": "PrepareModuleInput",
                                        "input_layouts": ["S(0)", "R"],
                                        "desired_input_layouts": ["R"]}}})j",
                    {"plan[\"a\"]", "input_layouts has 2 layouts but desired_input_layouts has 1"}},
        BadPlanCase{
            R"j({"plan": {"a": {"style": "PrepareModuleOutput", "output_layouts": "R"}}})j",
            {"plan[\"a\"]", "PrepareModuleOutput needs output_layouts and desired_output_layouts"}},
        BadPlanCase{
            R"j({"plan": {"a": "PrepareModuleInput"}})j",
            {"plan[\"a\"]", "PrepareModuleInput needs input_layouts and desired_input_layouts"}},
        BadPlanCase{R"j({"plan": {"a": {"style": "PrepareModuleInput", "input_layouts": [],
                                        "desired_input_layouts": []}}})j",
                    {"plan[\"a\"].input_layouts = []", "at least one layout"}},
        BadPlanCase{R"j({"plan": {"a": {"style": "PrepareModuleInput",
                                        "input_layouts": ["R", 2],
                                        "desired_input_layouts": ["R", "R"]}}})j",
                    {"plan[\"a\"].input_layouts[1] = 2", "expected a placement"}}));

INSTANTIATE_TEST_SUITE_P(
    Distribute, BadPlanTest,
    ::testing::Values(
        BadPlanCase{R"j({"distribute": []})j", {"distribute = []", "found an array"}},
        BadPlanCase{R"j({"distribute": {"": ["R"]}})j",
                    {"distribute[\"\"] = [\"R\"]", "an empty pattern names no parameter"}},
        BadPlanCase{R"j({"distribute": {"a..b": ["R"]}})j",
                    {"distribute[\"a..b\"]", "empty name between dots"}},
        BadPlanCase{R"j({"distribute": {"w": 3}})j", {"distribute[\"w\"] = 3", "one per mesh dim"}},
        BadPlanCase{R"j({"distribute": {"w": []}})j", {"distribute[\"w\"] = []"}},
        BadPlanCase{R"j({"distribute": {"w": ["S(0)", null]}})j",
                    {"distribute[\"w\"][1] = null", "expected a placement"}},
        BadPlanCase{R"j({"distribute": {"w": "S(0),X"}})j",
                    {"distribute[\"w\"] = \"S(0),X\"", "unknown placement 'X'"}},
        BadPlanCase{R"j({"distribute": {"w": ["Partial(sum)"]}})j",
                    {"distribute[\"w\"] = [\"Partial(sum)\"]", "not Partial"}}));

// --- DistributePlacements --------------------------------------------------------------------

struct DistributeCase {
  std::string name;
  std::string model;
  std::vector<std::pair<std::string, std::vector<Placement>>> plan;
  int mesh_ndim;
  std::vector<std::string> expected;  // "fqn (placements)" in state_dict order
};

class DistributePlacementsTest : public ::testing::TestWithParam<DistributeCase> {};

TEST_P(DistributePlacementsTest, FirstMatchWinsElseReplicate) {
  auto placements = DistributePlacements(Model(GetParam().model), DistributePlan{GetParam().plan},
                                         GetParam().mesh_ndim);
  ASSERT_TRUE(placements.ok()) << placements.status();
  std::vector<std::string> got;
  for (const auto& [fqn, p] : *placements) {
    got.push_back(absl::StrCat(fqn, " ", PlacementsToString(p)));
  }
  EXPECT_EQ(got, GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    Plans, DistributePlacementsTest,
    ::testing::Values(
        DistributeCase{
            "Mlp",
            kMlpModule,
            {{"net1.weight", {S(0)}}, {"*.bias", {R}}, {"net2.weight", {S(-1)}}},
            1,
            {"net1.weight (S(0))", "net1.bias (R)", "net2.weight (S(1))", "net2.bias (R)"}},
        DistributeCase{
            "FirstMatchWins",
            kMlpModule,
            {{"net1.*", {S(0)}}, {"net1.weight", {S(1)}}, {"*.bias", {S(-1)}}},
            1,
            {"net1.weight (S(0))", "net1.bias (S(0))", "net2.weight (R)", "net2.bias (S(0))"}},
        DistributeCase{"TwoDimMeshUnmatchedIsReplicate",
                       kMlpStacked,
                       {{"layers.*.net1.weight", {R, S(0)}}, {"layers.1.*.bias", {S(0), S(0)}}},
                       2,
                       {"layers.0.net1.weight (R, S(0))", "layers.0.net1.bias (R, R)",
                        "layers.0.net2.weight (R, R)", "layers.0.net2.bias (R, R)",
                        "layers.1.net1.weight (R, S(0))", "layers.1.net1.bias (S(0), S(0))",
                        "layers.1.net2.weight (R, R)", "layers.1.net2.bias (S(0), S(0))"}},
        DistributeCase{
            "StarIsOneToken",
            kMlpStacked,
            {{"*.bias", {S(0)}}, {"*", {S(0)}}},
            1,
            {"layers.0.net1.weight (R)", "layers.0.net1.bias (R)", "layers.0.net2.weight (R)",
             "layers.0.net2.bias (R)", "layers.1.net1.weight (R)", "layers.1.net1.bias (R)",
             "layers.1.net2.weight (R)", "layers.1.net2.bias (R)"}},
        DistributeCase{"RootLinear",
                       R"j({"type": "Linear", "in_features": 4, "out_features": 6})j",
                       {{"weight", {S(-2)}}, {"b*", {S(0)}}},
                       1,
                       {"weight (S(0))", "bias (S(0))"}}),
    [](const auto& info) { return info.param.name; });

// A partition that cannot apply to MLPModule and what its INVALID_ARGUMENT message must name.
struct BadDistributeCase {
  std::string name;
  std::vector<std::pair<std::string, std::vector<Placement>>> plan;
  int mesh_ndim;
  std::vector<std::string> fragments;
};

class BadDistributeTest : public ::testing::TestWithParam<BadDistributeCase> {};

TEST_P(BadDistributeTest, IsInvalidArgumentNamingTheParameter) {
  EXPECT_TRUE(StatusIs(
      DistributePlacements(Model(kMlpModule), DistributePlan{GetParam().plan}, GetParam().mesh_ndim)
          .status(),
      absl::StatusCode::kInvalidArgument, GetParam().fragments));
}

INSTANTIATE_TEST_SUITE_P(
    Plans, BadDistributeTest,
    ::testing::Values(
        BadDistributeCase{"WrongLength",
                          {{"net1.weight", {S(0)}}},
                          2,
                          {"parameter 'net1.weight' (shape [16, 10]) matched by 'net1.weight'",
                           "1 placements for a mesh with 2 dims"}},
        BadDistributeCase{"DimTheParameterLacks",
                          {{"*.bias", {S(1)}}},
                          1,
                          {"parameter 'net1.bias' (shape [16])", "S(1) shards a dim"}},
        BadDistributeCase{"NegativeDimTheParameterLacks",
                          {{"net2.weight", {S(-3)}}},
                          1,
                          {"parameter 'net2.weight'", "S(-3) shards a dim"}},
        BadDistributeCase{"Partial",
                          {{"net2.*", {Placement::Partial()}}},
                          1,
                          {"parameter 'net2.weight'", "not Partial"}},
        BadDistributeCase{"NoMeshDims", {}, 0, {"at least 1 dim, not 0"}}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace tessera
