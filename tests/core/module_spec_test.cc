#include "core/modules/module_spec.h"

#include <cstdio>
#include <limits>
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
constexpr char kMlpModule[] = R"({"type": "Module", "children": [
  {"name": "net1", "type": "Linear", "in_features": 10, "out_features": 16},
  {"name": "relu", "type": "ReLU"},
  {"name": "net2", "type": "Linear", "in_features": 16, "out_features": 10}]})";

// torch's MLPStacked(n_layers=2): layers = ModuleList[MLPModule, MLPModule].
const std::string kMlpStacked = absl::StrCat(
    R"({"type": "Module", "children": [{"name": "layers", "type": "ModuleList", "children": [)",
    kMlpModule, ", ", kMlpModule, "]}]}");

// Every field of a module tree, one module per line, for comparing whole specs.
std::string Describe(const ModuleSpec& m, const std::string& indent = "") {
  std::string out =
      absl::StrCat(indent, ModuleTypeName(m.type), " name=", m.name, " in=", m.in_features,
                   " out=", m.out_features, " bias=", m.bias, " num_emb=", m.num_embeddings,
                   " emb_dim=", m.embedding_dim, " norm=", m.normalized_shape);
  char eps[64];
  std::snprintf(eps, sizeof(eps), " eps=%.17g p=%.17g", m.eps, m.p);
  absl::StrAppend(&out, eps, " affine=", m.elementwise_affine, " approx=", m.approximate,
                  " dim=", m.dim, " heads=", m.n_heads, " causal=", m.causal,
                  " residual=", m.residual, "\n");
  for (const ModuleSpec& child : m.children) absl::StrAppend(&out, Describe(child, indent + "  "));
  return out;
}

std::string Describe(const ModelSpec& spec) {
  return absl::StrCat(Describe(spec.root), "input ", DTypeName(spec.input.dtype), " ",
                      ShapeToString(spec.input.shape));
}

ModelSpec Parse(absl::string_view json) {
  absl::StatusOr<ModelSpec> spec = ParseModelSpec(json);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : ModelSpec{};
}

std::vector<std::string> ModuleNames(const ModuleSpec& root) {
  std::vector<std::string> out;
  for (const auto& [fqn, module] : NamedModules(root)) {
    out.push_back(absl::StrCat(fqn, ":", ModuleTypeName(module->type)));
  }
  return out;
}

std::vector<std::string> ParameterNames(const ModuleSpec& root) {
  std::vector<std::string> out;
  for (const ParameterInfo& p : NamedParameters(root)) {
    out.push_back(absl::StrCat(p.fqn, " ", ShapeToString(p.shape)));
  }
  return out;
}

TEST(ModuleTypeTest, NamesRoundTrip) {
  for (ModuleType type : {ModuleType::kLinear, ModuleType::kEmbedding, ModuleType::kLayerNorm,
                          ModuleType::kRMSNorm, ModuleType::kReLU, ModuleType::kGELU,
                          ModuleType::kSiLU, ModuleType::kDropout, ModuleType::kAttention,
                          ModuleType::kSequential, ModuleType::kModuleList, ModuleType::kModule}) {
    absl::StatusOr<ModuleType> parsed = ParseModuleType(ModuleTypeName(type));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, type);
  }
  EXPECT_EQ(ModuleTypeName(ModuleType::kRMSNorm), "RMSNorm");
  EXPECT_TRUE(StatusIs(ParseModuleType("linear").status(), absl::StatusCode::kInvalidArgument,
                       {"'linear'", "Linear, Embedding"}));
}

TEST(ModuleSpecTest, MlpModuleIsTorchs) {
  const ModelSpec spec = Parse(kMlpModule);
  ASSERT_EQ(spec.root.children.size(), 3u);
  EXPECT_EQ(spec.root.type, ModuleType::kModule);
  EXPECT_FALSE(spec.root.residual);
  const ModuleSpec& net1 = spec.root.children[0];
  EXPECT_EQ(net1.type, ModuleType::kLinear);
  EXPECT_EQ(net1.name, "net1");
  EXPECT_EQ(net1.in_features, 10);
  EXPECT_EQ(net1.out_features, 16);
  EXPECT_TRUE(net1.bias);
  EXPECT_EQ(spec.root.children[1].type, ModuleType::kReLU);
  EXPECT_EQ(spec.root.children[2].name, "net2");
  EXPECT_EQ(spec.input.dtype, DType::kFloat32);
  EXPECT_EQ(spec.input.shape, (Shape{-1, 10}));
  EXPECT_EQ(ModuleNames(spec.root),
            (std::vector<std::string>{":Module", "net1:Linear", "relu:ReLU", "net2:Linear"}));
  EXPECT_EQ(ParameterNames(spec.root),
            (std::vector<std::string>{"net1.weight [16, 10]", "net1.bias [16]",
                                      "net2.weight [10, 16]", "net2.bias [10]"}));
}

TEST(ModuleSpecTest, MlpStackedIsTorchs) {
  const ModelSpec spec = Parse(kMlpStacked);
  EXPECT_EQ(ModuleNames(spec.root),
            (std::vector<std::string>{
                ":Module", "layers:ModuleList", "layers.0:Module", "layers.0.net1:Linear",
                "layers.0.relu:ReLU", "layers.0.net2:Linear", "layers.1:Module",
                "layers.1.net1:Linear", "layers.1.relu:ReLU", "layers.1.net2:Linear"}));
  EXPECT_EQ(ParameterNames(spec.root),
            (std::vector<std::string>{"layers.0.net1.weight [16, 10]", "layers.0.net1.bias [16]",
                                      "layers.0.net2.weight [10, 16]", "layers.0.net2.bias [10]",
                                      "layers.1.net1.weight [16, 10]", "layers.1.net1.bias [16]",
                                      "layers.1.net2.weight [10, 16]", "layers.1.net2.bias [10]"}));
  EXPECT_EQ(spec.input.shape, (Shape{-1, 10}));
}

TEST(ModuleSpecTest, AttentionGetsItsProjections) {
  const ModelSpec spec = Parse(R"({"type": "Sequential", "children": [
      {"type": "Attention", "dim": 8, "n_heads": 2, "causal": true},
      {"type": "Attention", "dim": 4, "n_heads": 4, "bias": false}]})");
  EXPECT_EQ(ModuleNames(spec.root),
            (std::vector<std::string>{":Sequential", "0:Attention", "0.q:Linear", "0.k:Linear",
                                      "0.v:Linear", "0.o:Linear", "1:Attention", "1.q:Linear",
                                      "1.k:Linear", "1.v:Linear", "1.o:Linear"}));
  EXPECT_EQ(
      ParameterNames(spec.root),
      (std::vector<std::string>{"0.q.weight [8, 8]", "0.q.bias [8]", "0.k.weight [8, 8]",
                                "0.k.bias [8]", "0.v.weight [8, 8]", "0.v.bias [8]",
                                "0.o.weight [8, 8]", "0.o.bias [8]", "1.q.weight [4, 4]",
                                "1.k.weight [4, 4]", "1.v.weight [4, 4]", "1.o.weight [4, 4]"}));
  EXPECT_TRUE(spec.root.children[0].causal);
  EXPECT_FALSE(spec.root.children[1].causal);
  EXPECT_EQ(spec.input.shape, (Shape{-1, -1, 8}));
  EXPECT_TRUE(OwnParameters(spec.root.children[0]).empty());
}

// One module type's own parameters, by spec.
struct OwnParametersCase {
  std::string json;
  std::vector<std::string> parameters;  // "name [shape]"
};

class OwnParametersTest : public ::testing::TestWithParam<OwnParametersCase> {};

TEST_P(OwnParametersTest, AreTorchs) {
  const ModelSpec spec = Parse(GetParam().json);
  std::vector<std::string> own;
  for (const ParameterInfo& p : OwnParameters(spec.root)) {
    own.push_back(absl::StrCat(p.fqn, " ", ShapeToString(p.shape)));
  }
  EXPECT_EQ(own, GetParam().parameters);
  EXPECT_EQ(ParameterNames(spec.root), GetParam().parameters);  // the root's FQNs are local
}

INSTANTIATE_TEST_SUITE_P(
    Types, OwnParametersTest,
    ::testing::Values(
        OwnParametersCase{R"({"type": "Linear", "in_features": 3, "out_features": 5})",
                          {"weight [5, 3]", "bias [5]"}},
        OwnParametersCase{
            R"({"type": "Linear", "in_features": 3, "out_features": 5, "bias": false})",
            {"weight [5, 3]"}},
        OwnParametersCase{R"({"type": "Embedding", "num_embeddings": 7, "embedding_dim": 4})",
                          {"weight [7, 4]"}},
        OwnParametersCase{R"({"type": "LayerNorm", "normalized_shape": 6})",
                          {"weight [6]", "bias [6]"}},
        OwnParametersCase{
            R"({"type": "LayerNorm", "normalized_shape": [6], "elementwise_affine": false})", {}},
        OwnParametersCase{R"({"type": "RMSNorm", "normalized_shape": 6})", {"weight [6]"}},
        OwnParametersCase{
            R"({"type": "RMSNorm", "normalized_shape": 6, "elementwise_affine": false})", {}},
        OwnParametersCase{R"({"type": "ReLU", "input": {"dtype": "float32", "shape": [2]}})", {}},
        OwnParametersCase{R"({"type": "GELU", "input": {"dtype": "float32", "shape": [2]}})", {}},
        OwnParametersCase{R"({"type": "SiLU", "input": {"dtype": "float32", "shape": [2]}})", {}},
        OwnParametersCase{R"({"type": "Dropout", "input": {"dtype": "float32", "shape": [2]}})",
                          {}}));

TEST(ModuleSpecTest, Defaults) {
  const ModelSpec spec = Parse(R"({"type": "Sequential", "children": [
      {"type": "LayerNorm", "normalized_shape": 4}, {"type": "RMSNorm", "normalized_shape": 4},
      {"type": "RMSNorm", "normalized_shape": 4, "eps": null},
      {"type": "RMSNorm", "normalized_shape": 4, "eps": 0.001}, {"type": "GELU"},
      {"type": "Dropout"}, {"type": "Module", "children": []}]})");
  const std::vector<ModuleSpec>& c = spec.root.children;
  ASSERT_EQ(c.size(), 7u);
  EXPECT_EQ(c[0].eps, 1e-5);
  EXPECT_TRUE(c[0].elementwise_affine);
  EXPECT_EQ(c[1].eps, 1.1920928955078125e-07);
  EXPECT_EQ(c[1].eps, std::numeric_limits<float>::epsilon());
  EXPECT_EQ(c[2].eps, 1.1920928955078125e-07);
  EXPECT_EQ(c[3].eps, 0.001);
  EXPECT_EQ(c[4].approximate, "none");
  EXPECT_EQ(c[5].p, 0.5);
  EXPECT_FALSE(c[6].residual);
  EXPECT_EQ(c[6].name, "6");
}

TEST(ModuleSpecTest, SequentialChildrenAreNumbered) {
  const ModelSpec spec = Parse(R"({"type": "Sequential", "children": [
      {"type": "Linear", "in_features": 2, "out_features": 3},
      {"name": "1", "type": "GELU", "approximate": "tanh"}]})");
  ASSERT_EQ(spec.root.children.size(), 2u);
  EXPECT_EQ(spec.root.children[0].name, "0");
  EXPECT_EQ(spec.root.children[1].name, "1");
  EXPECT_EQ(spec.root.children[1].approximate, "tanh");
  EXPECT_EQ(ParameterNames(spec.root), (std::vector<std::string>{"0.weight [3, 2]", "0.bias [3]"}));
}

// A spec without "input" and what its input must be inferred as.
struct InferCase {
  std::string json;
  DType dtype;
  Shape shape;
};

class InputInferenceTest : public ::testing::TestWithParam<InferCase> {};

TEST_P(InputInferenceTest, FromTheFirstModuleThatFixesIt) {
  const ModelSpec spec = Parse(GetParam().json);
  EXPECT_EQ(spec.input.dtype, GetParam().dtype);
  EXPECT_EQ(spec.input.shape, GetParam().shape);
}

INSTANTIATE_TEST_SUITE_P(
    Models, InputInferenceTest,
    ::testing::Values(
        InferCase{R"({"type": "Linear", "in_features": 16, "out_features": 10})",
                  DType::kFloat32,
                  {-1, 16}},
        InferCase{R"({"type": "LayerNorm", "normalized_shape": 6})", DType::kFloat32, {-1, 6}},
        InferCase{R"({"type": "RMSNorm", "normalized_shape": 5})", DType::kFloat32, {-1, 5}},
        InferCase{R"({"type": "Embedding", "num_embeddings": 9, "embedding_dim": 4})",
                  DType::kInt64,
                  {-1, -1}},
        InferCase{
            R"({"type": "Attention", "dim": 12, "n_heads": 3})", DType::kFloat32, {-1, -1, 12}},
        InferCase{R"({"type": "Sequential", "children": [{"type": "ReLU"}, {"type": "Dropout"},
                     {"type": "Linear", "in_features": 8, "out_features": 4}]})",
                  DType::kFloat32,
                  {-1, 8}},
        InferCase{R"({"type": "Module", "residual": true, "children": [
                     {"name": "blocks", "type": "ModuleList", "children": [{"type": "Module",
                      "children": [{"name": "emb", "type": "Embedding", "num_embeddings": 9,
                                    "embedding_dim": 4}]}]},
                     {"name": "head", "type": "Linear", "in_features": 4, "out_features": 9}]})",
                  DType::kInt64,
                  {-1, -1}},
        InferCase{R"({"type": "Linear", "in_features": 16, "out_features": 10,
                     "input": {"dtype": "float64", "shape": [4, 3, 16]}})",
                  DType::kFloat64,
                  {4, 3, 16}},
        InferCase{R"({"type": "Embedding", "num_embeddings": 9, "embedding_dim": 4,
                     "input": {"dtype": "int32", "shape": [-1, 0]}})",
                  DType::kInt32,
                  {-1, 0}}));

// Specs whose JSON form must read back to the same spec.
class RoundTripTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RoundTripTest, ToJsonReadsBackEqual) {
  const ModelSpec spec = Parse(GetParam());
  const std::string json = ModelSpecToJson(spec);
  const ModelSpec again = Parse(json);
  EXPECT_EQ(Describe(again), Describe(spec)) << json;
  EXPECT_EQ(ModelSpecToJson(again), json);
}

INSTANTIATE_TEST_SUITE_P(
    Specs, RoundTripTest,
    ::testing::Values(std::string(kMlpModule), kMlpStacked,
                      R"({"type": "Linear", "in_features": 16, "out_features": 10, "bias": false})",
                      R"({"type": "Module", "residual": true, "children": [
            {"name": "emb", "type": "Embedding", "num_embeddings": 11, "embedding_dim": 8},
            {"name": "attn", "type": "Attention", "dim": 8, "n_heads": 4, "causal": true,
             "bias": false},
            {"name": "ln", "type": "LayerNorm", "normalized_shape": 8, "eps": 1e-6,
             "elementwise_affine": false},
            {"name": "rms", "type": "RMSNorm", "normalized_shape": 8},
            {"name": "rms2", "type": "RMSNorm", "normalized_shape": 8, "eps": 0.1},
            {"name": "mlp", "type": "Sequential", "children": [
              {"type": "Linear", "in_features": 8, "out_features": 32},
              {"type": "GELU", "approximate": "tanh"}, {"type": "SiLU"}, {"type": "ReLU"},
              {"type": "Dropout", "p": 0.125},
              {"type": "Linear", "in_features": 32, "out_features": 8}]},
            {"name": "empty", "type": "ModuleList", "children": []}],
           "input": {"dtype": "int64", "shape": [2, -1]}})"));

TEST(ModuleSpecTest, ToJsonWritesEveryArgument) {
  const ModelSpec spec =
      Parse(R"({"type": "Sequential", "children": [{"type": "RMSNorm", "normalized_shape": 4}]})");
  EXPECT_EQ(ModelSpecToJson(spec),
            R"({"type":"Sequential","children":[{"type":"RMSNorm","name":"0",)"
            R"("normalized_shape":4,"eps":1.1920928955078125e-07,"elementwise_affine":true}],)"
            R"("input":{"dtype":"float32","shape":[-1,4]}})");
}

// A malformed spec and what its INVALID_ARGUMENT message must name.
struct BadSpecCase {
  std::string json;
  std::vector<std::string> fragments;
};

class BadSpecTest : public ::testing::TestWithParam<BadSpecCase> {};

TEST_P(BadSpecTest, IsInvalidArgumentNamingPathAndValue) {
  absl::StatusOr<ModelSpec> spec = ParseModelSpec(GetParam().json);
  EXPECT_TRUE(StatusIs(spec.status(), absl::StatusCode::kInvalidArgument, GetParam().fragments));
}

// A Module holding one child given by its JSON.
std::string WithChild(absl::string_view child) {
  return absl::StrCat(R"({"type": "Module", "children": [)", child, "]}");
}

INSTANTIATE_TEST_SUITE_P(
    Json, BadSpecTest,
    ::testing::Values(
        BadSpecCase{"{", {"module spec: JSON"}},
        BadSpecCase{R"({"type": "ReLU", "type": "GELU"})", {"\"type\" appears twice"}},
        BadSpecCase{"[1]", {"the top level = [1]", "expected a module object, found an array"}},
        BadSpecCase{"{}", {"type is missing", "the root module needs a \"type\""}},
        BadSpecCase{R"({"type": 3})", {"type = 3", "expected a string"}},
        BadSpecCase{R"({"type": "Conv2d"})",
                    {"type = \"Conv2d\"", "unknown module type", "Linear, Embedding"}}));

INSTANTIATE_TEST_SUITE_P(
    Keys, BadSpecTest,
    ::testing::Values(
        BadSpecCase{R"({"type": "Linear", "in_features": 2, "out_features": 3, "foo": 1})",
                    {"foo = 1", "unknown key; Linear takes",
                     "Linear takes in_features, out_features, bias"}},
        BadSpecCase{
            R"({"type": "Module", "children": [
                      {"name": "net1", "type": "Linear", "in_features": 10, "out_features": 16},
                      {"name": "relu", "type": "ReLU", "in_features": 4}]})",
            {"children[1].in_features = 4", "unknown key; ReLU takes", "ReLU takes no arguments"}},
        BadSpecCase{R"({"type": "LayerNorm", "normalized_shape": 4, "bias": false})",
                    {"bias = false", "unknown key; LayerNorm takes"}},
        BadSpecCase{R"({"type": "Sequential", "residual": true, "children": []})",
                    {"residual = true", "unknown key; Sequential takes"}},
        BadSpecCase{R"({"type": "ReLU", "name": "x"})",
                    {"name = \"x\"", "the root module has no name"}},
        BadSpecCase{WithChild(R"({"name": "a", "type": "ReLU", "input": {}})"),
                    {"children[0].input = {}", "unknown key; ReLU takes"}},
        BadSpecCase{WithChild(R"({"name": "a", "type": "Linear", "in_features": 2,
                                  "out_features": 2, "children": []})"),
                    {"children[0].children = []", "Linear takes no children"}},
        BadSpecCase{R"({"type": "Attention", "dim": 4, "n_heads": 2, "children": [
                      {"name": "q", "type": "Linear", "in_features": 4, "out_features": 4}]})",
                    {"children = [", "Attention's children q, k, v, o are made from dim and bias"}},
        BadSpecCase{WithChild(R"({"name": "a", "type": "Module", "children": [
                                  {"name": "b", "type": "Dropout", "p": 2}]})"),
                    {"children[0].children[0].p = 2", "between 0 and 1"}}));

INSTANTIATE_TEST_SUITE_P(
    Sizes, BadSpecTest,
    ::testing::Values(
        BadSpecCase{R"({"type": "Linear", "in_features": 2})",
                    {"out_features is missing: Linear needs a positive out_features"}},
        BadSpecCase{WithChild(R"({"name": "e", "type": "Embedding", "embedding_dim": 2})"),
                    {"children[0].num_embeddings is missing: Embedding needs"}},
        BadSpecCase{R"({"type": "Attention", "dim": 4})", {"n_heads is missing"}},
        BadSpecCase{R"({"type": "RMSNorm"})", {"normalized_shape is missing"}},
        BadSpecCase{R"({"type": "Linear", "in_features": 0, "out_features": 3})",
                    {"in_features = 0", "must be a positive integer"}},
        BadSpecCase{R"({"type": "Linear", "in_features": -3, "out_features": 3})",
                    {"in_features = -3", "must be a positive integer"}},
        BadSpecCase{R"({"type": "Linear", "in_features": 2.5, "out_features": 3})",
                    {"in_features = 2.5", "expected an integer"}},
        BadSpecCase{R"({"type": "Linear", "in_features": "10", "out_features": 3})",
                    {"in_features = \"10\"", "expected an integer, found a string"}},
        BadSpecCase{R"({"type": "Embedding", "num_embeddings": 18446744073709551615,
                        "embedding_dim": 2})",
                    {"num_embeddings = 18446744073709551615", "does not fit in int64"}},
        BadSpecCase{R"({"type": "LayerNorm", "normalized_shape": [4, 8]})",
                    {"normalized_shape = [4,8]", "only the last dim can be normalized"}},
        BadSpecCase{R"({"type": "LayerNorm", "normalized_shape": [0]})",
                    {"normalized_shape[0] = 0", "positive"}},
        BadSpecCase{R"({"type": "Attention", "dim": 10, "n_heads": 3})",
                    {"n_heads = 3", "dim 10 does not split into 3 heads evenly"}}));

INSTANTIATE_TEST_SUITE_P(
    Values, BadSpecTest,
    ::testing::Values(
        BadSpecCase{R"({"type": "Linear", "in_features": 2, "out_features": 3, "bias": 1})",
                    {"bias = 1", "expected true or false, found an integer"}},
        BadSpecCase{R"({"type": "Attention", "dim": 4, "n_heads": 2, "causal": "yes"})",
                    {"causal = \"yes\"", "expected true or false"}},
        BadSpecCase{R"({"type": "Module", "residual": null, "children": []})",
                    {"residual = null", "expected true or false, found null"}},
        BadSpecCase{R"({"type": "LayerNorm", "normalized_shape": 4, "eps": null})",
                    {"eps = null", "expected a number, found null"}},
        BadSpecCase{R"({"type": "RMSNorm", "normalized_shape": 4, "eps": -1})",
                    {"eps = -1", "finite number >= 0"}},
        BadSpecCase{R"({"type": "GELU", "approximate": "fast"})",
                    {"approximate = \"fast\"", "expected \"none\" or \"tanh\""}},
        BadSpecCase{R"({"type": "Dropout", "p": -0.5})", {"p = -0.5", "between 0 and 1"}},
        BadSpecCase{R"({"type": "Dropout", "p": "0.5"})", {"p = \"0.5\"", "expected a number"}}));

INSTANTIATE_TEST_SUITE_P(
    Children, BadSpecTest,
    ::testing::Values(
        BadSpecCase{R"({"type": "Module", "children": {}})",
                    {"children = {}", "expected an array of modules, found an object"}},
        BadSpecCase{R"({"type": "Module", "children": [3]})",
                    {"children[0] = 3", "expected a module object, found an integer"}},
        BadSpecCase{WithChild(R"({"type": "ReLU"})"),
                    {"children[0].name is missing", "a Module's children need names"}},
        BadSpecCase{WithChild(R"({"name": 1, "type": "ReLU"})"),
                    {"children[0].name = 1", "expected a string"}},
        BadSpecCase{WithChild(R"({"name": "a.b", "type": "ReLU"})"),
                    {"children[0].name = \"a.b\"", "1 to 64 letters, digits"}},
        BadSpecCase{WithChild(R"({"name": "", "type": "ReLU"})"),
                    {"children[0].name = \"\"", "1 to 64 letters"}},
        BadSpecCase{R"({"type": "Module", "children": [{"name": "a", "type": "ReLU"},
                       {"name": "b", "type": "SiLU"}, {"name": "a", "type": "GELU"}]})",
                    {"children[2].name = \"a\"", "duplicate child name (also children[0])"}},
        BadSpecCase{
            R"({"type": "Sequential", "children": [{"type": "ReLU"},
                       {"name": "x", "type": "ReLU"}]})",
            {"children[1].name = \"x\"", "Sequential children are named by position", "\"1\""}},
        BadSpecCase{R"({"type": "ModuleList", "children": [{"name": "1", "type": "ReLU"}]})",
                    {"children[0].name = \"1\"", "ModuleList children", "\"0\""}},
        BadSpecCase{WithChild(R"({"name": "a", "type": "Frob"})"),
                    {"children[0].type = \"Frob\"", "unknown module type"}},
        BadSpecCase{WithChild(R"({"name": "a"})"),
                    {"children[0].type is missing", "the module at children[0] needs"}}));

INSTANTIATE_TEST_SUITE_P(
    Input, BadSpecTest,
    ::testing::Values(
        BadSpecCase{R"({"type": "Sequential", "children": [{"type": "ReLU"}]})",
                    {"no \"input\" given", "give \"input\""}},
        BadSpecCase{R"({"type": "ReLU", "input": [2]})",
                    {"input = [2]", "expected {\"dtype\": ..., \"shape\": [...]}"}},
        BadSpecCase{R"({"type": "ReLU", "input": {"shape": [2]}})", {"input.dtype is missing"}},
        BadSpecCase{R"({"type": "ReLU", "input": {"dtype": "float32"}})",
                    {"input.shape is missing"}},
        BadSpecCase{R"({"type": "ReLU", "input": {"dtype": "float32", "shape": [2], "x": 1}})",
                    {"input.x = 1", "unknown key"}},
        BadSpecCase{R"({"type": "ReLU", "input": {"dtype": "float7", "shape": [2]}})",
                    {"input.dtype = \"float7\"", "float7"}},
        BadSpecCase{R"({"type": "ReLU", "input": {"dtype": 4, "shape": [2]}})",
                    {"input.dtype = 4", "expected a dtype name"}},
        BadSpecCase{R"({"type": "ReLU", "input": {"dtype": "float32", "shape": []}})",
                    {"input.shape = []", "non-empty array"}},
        BadSpecCase{R"({"type": "ReLU", "input": {"dtype": "float32", "shape": [2, -2]}})",
                    {"input.shape[1] = -2", "-1 where it varies"}},
        BadSpecCase{R"({"type": "ReLU", "input": {"dtype": "float32", "shape": [2, "a"]}})",
                    {"input.shape[1] = \"a\"", "expected an integer"}}));

}  // namespace
}  // namespace tessera
