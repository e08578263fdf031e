// The single-process reference (module_reference.h): forwards against numbers worked out by hand,
// every gradient against central finite differences in double, and SGD against hand numbers.
#include "reference/module_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::Pointwise;
using testing::StatusIs;

// --- Specs and tensors by hand ---

ModuleSpec Leaf(ModuleType type, std::string name) {
  ModuleSpec m;
  m.type = type;
  m.name = std::move(name);
  return m;
}

ModuleSpec Linear(std::string name, int64_t in, int64_t out, bool bias = true) {
  ModuleSpec m = Leaf(ModuleType::kLinear, std::move(name));
  m.in_features = in;
  m.out_features = out;
  m.bias = bias;
  return m;
}

ModuleSpec Norm(ModuleType type, std::string name, int64_t n, double eps = 1e-5,
                bool affine = true) {
  ModuleSpec m = Leaf(type, std::move(name));
  m.normalized_shape = n;
  m.eps = eps;
  m.elementwise_affine = affine;
  return m;
}

ModuleSpec Gelu(std::string name, std::string approximate) {
  ModuleSpec m = Leaf(ModuleType::kGELU, std::move(name));
  m.approximate = std::move(approximate);
  return m;
}

ModuleSpec Embedding(std::string name, int64_t num, int64_t dim) {
  ModuleSpec m = Leaf(ModuleType::kEmbedding, std::move(name));
  m.num_embeddings = num;
  m.embedding_dim = dim;
  return m;
}

// Attention with its q, k, v, o children as the parser makes them.
ModuleSpec Attention(std::string name, int64_t dim, int64_t heads, bool causal) {
  ModuleSpec m = Leaf(ModuleType::kAttention, std::move(name));
  m.dim = dim;
  m.n_heads = heads;
  m.causal = causal;
  for (const char* child : {"q", "k", "v", "o"}) m.children.push_back(Linear(child, dim, dim));
  return m;
}

ModuleSpec Container(ModuleType type, std::string name, std::vector<ModuleSpec> children,
                     bool residual = false) {
  ModuleSpec m = Leaf(type, std::move(name));
  m.children = std::move(children);
  m.residual = residual;
  return m;
}

// Sequential or ModuleList children named "0", "1", ...
ModuleSpec Numbered(ModuleType type, std::string name, std::vector<ModuleSpec> children) {
  for (size_t i = 0; i < children.size(); ++i) children[i].name = std::to_string(i);
  return Container(type, std::move(name), std::move(children));
}

ModelSpec Model(ModuleSpec root) { return ModelSpec{std::move(root), {}}; }

HostTensor F64(Shape shape, const std::vector<double>& values) {
  return HostTensor::FromValues(DType::kFloat64, std::move(shape), values);
}

HostTensor F32(Shape shape, const std::vector<float>& values) {
  return HostTensor::FromValues(DType::kFloat32, std::move(shape), values);
}

HostTensor Ids(Shape shape, const std::vector<int64_t>& values) {
  return HostTensor::FromValues(DType::kInt64, std::move(shape), values);
}

std::vector<double> Values(const HostTensor& t) {
  std::vector<double> out(t.num_elements());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = t.dtype() == DType::kFloat32 ? t.data_as<float>()[i] : t.data_as<double>()[i];
  }
  return out;
}

// The forward's output values, or a failed assertion.
std::vector<double> ForwardValues(const ReferenceModel& model, const HostTensor& input) {
  absl::StatusOr<HostTensor> out = ReferenceForward(model, input);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? Values(*out) : std::vector<double>{};
}

// --- Forwards by hand ---

TEST(ReferenceForwardTest, LinearTwoByThree) {
  ReferenceModel model{Model(Linear("", 3, 2)), {}};
  model.params.emplace("weight", F64({2, 3}, {1, 2, 3, -1, 0, 0.5}));
  model.params.emplace("bias", F64({2}, {0.25, -1}));
  // x = [1, 1, 1]: [1+2+3+0.25, -1+0.5-1]; x = [2, 0, -2]: [2-6+0.25, -2-1-1].
  const HostTensor x = F64({2, 3}, {1, 1, 1, 2, 0, -2});
  EXPECT_THAT(ForwardValues(model, x), ElementsAre(6.25, -1.5, -3.75, -4));
  absl::StatusOr<HostTensor> out = ReferenceForward(model, x);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->shape(), (Shape{2, 2}));
  EXPECT_EQ(out->dtype(), DType::kFloat64);
}

TEST(ReferenceForwardTest, LinearWithoutBiasOnLeadingDims) {
  ReferenceModel model{Model(Linear("", 3, 2, /*bias=*/false)), {}};
  model.params.emplace("weight", F32({2, 3}, {1, 2, 3, -1, 0, 0.5}));
  const HostTensor x = F32({2, 1, 3}, {1, 1, 1, 2, 0, -2});
  absl::StatusOr<HostTensor> out = ReferenceForward(model, x);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(out->dtype(), DType::kFloat32);
  EXPECT_THAT(Values(*out), ElementsAre(6, -0.5, -4, -3));
}

TEST(ReferenceForwardTest, LayerNormOfOneTwoThree) {
  // mean 2, biased var 2/3; eps 1/3 makes var + eps = 1, so x - mean = [-1, 0, 1] is normalized.
  ReferenceModel model{Model(Norm(ModuleType::kLayerNorm, "", 3, 1.0 / 3)), {}};
  model.params.emplace("weight", F64({3}, {2, 1, 0.5}));
  model.params.emplace("bias", F64({3}, {0.5, 0, -1}));
  EXPECT_THAT(ForwardValues(model, F64({1, 3}, {1, 2, 3})),
              Pointwise(DoubleNear(1e-15), std::vector<double>{-1.5, 0, -0.5}));
}

TEST(ReferenceForwardTest, LayerNormWithoutAffineAndTorchsEps) {
  // 1 / sqrt(2/3 + 1e-5) = 1.2247356859083902.
  ReferenceModel model{Model(Norm(ModuleType::kLayerNorm, "", 3, 1e-5, /*affine=*/false)), {}};
  EXPECT_THAT(ForwardValues(model, F64({3}, {1, 2, 3})),
              Pointwise(DoubleNear(1e-15),
                        std::vector<double>{-1.2247356859083902, 0, 1.2247356859083902}));
}

TEST(ReferenceForwardTest, RmsNorm) {
  // mean(x^2) = (1 + 9) / 2 = 5; eps 4 gives rstd 1/3.
  ReferenceModel model{Model(Norm(ModuleType::kRMSNorm, "", 2, 4)), {}};
  model.params.emplace("weight", F64({2}, {3, -1}));
  EXPECT_THAT(ForwardValues(model, F64({2, 2}, {1, 3, 0, 0})),
              Pointwise(DoubleNear(1e-15), std::vector<double>{1, -1, 0, 0}));
}

// (activation, its values at x = [-1, 0, 1, 2], its derivatives there); relu'(0) = 0 as torch.
using ActivationCase = std::tuple<ModuleSpec, std::vector<double>, std::vector<double>>;
class ReferenceActivationTest : public ::testing::TestWithParam<ActivationCase> {};

TEST_P(ReferenceActivationTest, MatchesTorch) {
  const auto& [spec, values, derivatives] = GetParam();
  ReferenceModel model{Model(spec), {}};
  const HostTensor x = F64({4}, {-1, 0, 1, 2});
  EXPECT_THAT(ForwardValues(model, x), Pointwise(DoubleNear(1e-15), values));
  absl::StatusOr<ReferenceStep> step = ReferenceBackward(model, x, nullptr);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_TRUE(step->grad_input.has_value());
  EXPECT_THAT(Values(*step->grad_input), Pointwise(DoubleNear(1e-15), derivatives));
}

INSTANTIATE_TEST_SUITE_P(
    Activations, ReferenceActivationTest,
    ::testing::Values(
        ActivationCase{Leaf(ModuleType::kReLU, ""), {0, 0, 1, 2}, {0, 0, 1, 1}},
        // x Phi(x); Phi(x) + x phi(x).
        ActivationCase{Gelu("", "none"),
                       {-0.15865525393145707, 0, 0.8413447460685429, 1.9544997361036416},
                       {-0.08331547058768629, 0.5, 1.0833154705876864, 1.085231801078197}},
        ActivationCase{Gelu("", "tanh"),
                       {-0.15880800939172324, 0, 0.8411919906082768, 1.954597694087775},
                       {-0.08296408384578255, 0.5, 1.0829640838457826, 1.0860992566236183}},
        // x s(x); s(x) (1 + x (1 - s(x))).
        ActivationCase{Leaf(ModuleType::kSiLU, ""),
                       {-0.2689414213699951, 0, 0.7310585786300049, 1.7615941559557646},
                       {0.07232948812851325, 0.5, 0.9276705118714869, 1.0907842487848955}},
        ActivationCase{Leaf(ModuleType::kDropout, ""), {-1, 0, 1, 2}, {1, 1, 1, 1}}));

TEST(ReferenceForwardTest, EmbeddingRowsAndOutOfRangeIds) {
  ReferenceModel model{Model(Embedding("", 3, 2)), {}};
  model.params.emplace("weight", F32({3, 2}, {1, 2, 3, 4, 5, 6}));
  absl::StatusOr<HostTensor> out = ReferenceForward(model, Ids({1, 3}, {2, 0, 2}));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape(), (Shape{1, 3, 2}));
  EXPECT_THAT(Values(*out), ElementsAre(5, 6, 1, 2, 5, 6));
  for (int64_t bad : {3, -1}) {
    EXPECT_TRUE(StatusIs(ReferenceForward(model, Ids({2}, {0, bad})).status(),
                         absl::StatusCode::kInvalidArgument,
                         {"id " + std::to_string(bad), "position 1"}));
  }
}

TEST(ReferenceForwardTest, ResidualAddsTheInputToTheChildren) {
  // x + (relu(x W^T)) with W = [[1, 0], [0, -1]]: x = [2, 3] -> [2, 3] + [2, 0].
  ReferenceModel model{
      Model(Container(ModuleType::kModule, "",
                      {Linear("proj", 2, 2, false), Leaf(ModuleType::kReLU, "act")}, true)),
      {}};
  model.params.emplace("proj.weight", F64({2, 2}, {1, 0, 0, -1}));
  EXPECT_THAT(ForwardValues(model, F64({1, 2}, {2, 3})), ElementsAre(4, 3));
}

// Attention by hand: (dim, heads, q weight, x [1, 2, dim], output without and with the mask).
// k and v are the identity, o is 2 x + 1; every bias 0 but o's.
struct AttentionCase {
  int64_t dim, heads;
  std::vector<double> q_weight, x, unmasked, causal;
};
class ReferenceAttentionTest : public ::testing::TestWithParam<std::tuple<AttentionCase, bool>> {};

TEST_P(ReferenceAttentionTest, MatchesTheHandComputation) {
  const auto& [c, causal] = GetParam();
  ReferenceModel model{Model(Attention("", c.dim, c.heads, causal)), {}};
  std::vector<double> identity(c.dim * c.dim, 0.0), twice(c.dim * c.dim, 0.0);
  for (int64_t i = 0; i < c.dim; ++i) identity[i * c.dim + i] = 1, twice[i * c.dim + i] = 2;
  model.params.emplace("q.weight", F64({c.dim, c.dim}, c.q_weight));
  model.params.emplace("k.weight", F64({c.dim, c.dim}, identity));
  model.params.emplace("v.weight", F64({c.dim, c.dim}, identity));
  model.params.emplace("o.weight", F64({c.dim, c.dim}, twice));
  for (const char* p : {"q.bias", "k.bias", "v.bias"}) {
    model.params.emplace(p, F64({c.dim}, std::vector<double>(c.dim, 0.0)));
  }
  model.params.emplace("o.bias", F64({c.dim}, std::vector<double>(c.dim, 1.0)));
  EXPECT_THAT(ForwardValues(model, F64({1, 2, c.dim}, c.x)),
              Pointwise(DoubleNear(1e-14), causal ? c.causal : c.unmasked));
}

const double kLn3 = std::log(3.0);

// Position 0's query is 0, so it attends uniformly (or, masked, to itself only); position 1's
// scores are [0, ln 3], so it weighs the values 1/4, 3/4.
INSTANTIATE_TEST_SUITE_P(
    OneAndTwoHeads, ReferenceAttentionTest,
    ::testing::Combine(
        ::testing::Values(
            // One head, D = 1: x = [0, 1], q = ln3 x. Values [0, 1]: 0.5 and 0.75 (masked 0).
            AttentionCase{1, 1, {kLn3}, {0, 1}, {2, 2.5}, {1, 2.5}},
            // One head, D = 2: the scale 1/sqrt(2) cancels q's sqrt(2); feature 1 is zero.
            AttentionCase{2,
                          1,
                          {std::sqrt(2.0) * kLn3, 0, 0, 0},
                          {0, 0, 1, 0},
                          {2, 1, 2.5, 1},
                          {1, 1, 2.5, 1}},
            // Two heads, D = 1: head 0 as the first case; head 1's query is 0, so it averages its
            // values [2, 4] to 3 (masked: 2 at position 0).
            AttentionCase{2, 2, {kLn3, 0, 0, 0}, {0, 2, 1, 4}, {2, 7, 2.5, 7}, {1, 5, 2.5, 7}}),
        ::testing::Bool()));

// --- Bad input ---

TEST(ReferenceErrorsTest, NamesTheModuleAndTheValue) {
  ReferenceModel model{
      Model(Container(ModuleType::kModule, "", {Linear("net1", 3, 4), Linear("net2", 5, 2)})), {}};
  absl::StatusOr<std::map<std::string, HostTensor>> params = RandomParameters(model.spec, 1);
  ASSERT_TRUE(params.ok()) << params.status();
  model.params = std::move(*params);
  const HostTensor x = F32({1, 3}, {1, 2, 3});
  EXPECT_TRUE(StatusIs(ReferenceForward(model, x).status(), absl::StatusCode::kInvalidArgument,
                       {"net2", "last dim 5", "[1, 4]"}));
  model.spec.root.children[1].in_features = 4;
  model.params.erase("net2.weight");
  model.params.emplace("net2.weight", F32({2, 4}, std::vector<float>(8, 1.0f)));
  EXPECT_TRUE(ReferenceForward(model, x).ok());

  EXPECT_TRUE(StatusIs(ReferenceForward(model, F32({1, 2}, {1, 2})).status(),
                       absl::StatusCode::kInvalidArgument, {"net1", "last dim 3", "[1, 2]"}));
  EXPECT_TRUE(StatusIs(ReferenceForward(model, F64({1, 3}, {1, 2, 3})).status(),
                       absl::StatusCode::kInvalidArgument, {"net1.weight", "float32", "float64"}));
  EXPECT_TRUE(StatusIs(ReferenceForward(model, Ids({1}, {0})).status(),
                       absl::StatusCode::kInvalidArgument, {"net1", "int64"}));

  const HostTensor wrong_grad = F32({1, 3}, {1, 1, 1});
  EXPECT_TRUE(StatusIs(ReferenceBackward(model, x, &wrong_grad).status(),
                       absl::StatusCode::kInvalidArgument, {"grad_output", "[1, 3]", "[1, 2]"}));

  HostTensor bias = std::move(model.params.at("net2.bias"));
  model.params.erase("net2.bias");
  EXPECT_TRUE(StatusIs(ReferenceForward(model, x).status(), absl::StatusCode::kInvalidArgument,
                       {"net2.bias", "missing"}));
  model.params.emplace("net2.bias", F32({3}, {0, 0, 0}));
  EXPECT_TRUE(StatusIs(ReferenceForward(model, x).status(), absl::StatusCode::kInvalidArgument,
                       {"net2.bias", "[3]", "[2]"}));
  model.params.at("net2.bias") = std::move(bias);
  model.params.emplace("net3.weight", F32({1}, {0}));
  EXPECT_TRUE(StatusIs(ReferenceForward(model, x).status(), absl::StatusCode::kInvalidArgument,
                       {"net3.weight", "not one of"}));
}

TEST(ReferenceErrorsTest, RejectsMalformedTrees) {
  const auto rejects = [](ModuleSpec root, std::vector<std::string> fragments) {
    return StatusIs(ListReferenceParameters(root).status(), absl::StatusCode::kInvalidArgument,
                    fragments);
  };
  EXPECT_TRUE(rejects(Linear("", 0, 2), {"in_features 0"}));
  EXPECT_TRUE(rejects(Gelu("", "erf"), {"'erf'"}));
  EXPECT_TRUE(rejects(Attention("", 6, 4, false), {"dim 6", "n_heads 4"}));
  ModuleSpec attention = Attention("attn", 4, 2, false);
  attention.children.pop_back();
  EXPECT_TRUE(rejects(Container(ModuleType::kModule, "", {attention}), {"'attn'", "3 children"}));
  attention = Attention("attn", 4, 2, false);
  attention.children[1].out_features = 8;
  EXPECT_TRUE(rejects(attention, {"'k'", "4 -> 8"}));
  EXPECT_TRUE(
      rejects(Container(ModuleType::kModule, "", {Linear("a", 2, 2), Linear("a", 2, 2)}), {"'a'"}));
  ModuleSpec leaf = Linear("", 2, 2);
  leaf.children.push_back(Linear("x", 2, 2));
  EXPECT_TRUE(rejects(leaf, {"leaf"}));
}

// --- Parameters ---

TEST(ReferenceParametersTest, ListsInStateDictOrder) {
  const ModuleSpec root = Container(
      ModuleType::kModule, "",
      {Embedding("tok", 5, 4),
       Numbered(ModuleType::kModuleList, "layers",
                {Container(ModuleType::kModule, "",
                           {Norm(ModuleType::kLayerNorm, "norm", 4), Attention("attn", 4, 2, true),
                            Norm(ModuleType::kRMSNorm, "rms", 4),
                            Norm(ModuleType::kLayerNorm, "plain", 4, 1e-5, false),
                            Linear("out", 4, 3, false)},
                           true)})});
  absl::StatusOr<std::vector<ReferenceParameter>> params = ListReferenceParameters(root);
  ASSERT_TRUE(params.ok()) << params.status();
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  for (const ReferenceParameter& p : *params) names.push_back(p.fqn), shapes.push_back(p.shape);
  EXPECT_THAT(
      names, ElementsAre("tok.weight", "layers.0.norm.weight", "layers.0.norm.bias",
                         "layers.0.attn.q.weight", "layers.0.attn.q.bias", "layers.0.attn.k.weight",
                         "layers.0.attn.k.bias", "layers.0.attn.v.weight", "layers.0.attn.v.bias",
                         "layers.0.attn.o.weight", "layers.0.attn.o.bias", "layers.0.rms.weight",
                         "layers.0.out.weight"));
  EXPECT_EQ(shapes[0], (Shape{5, 4}));
  EXPECT_EQ(shapes[3], (Shape{4, 4}));
  EXPECT_EQ(shapes[4], (Shape{4}));
  EXPECT_EQ(shapes.back(), (Shape{3, 4}));
}

TEST(ReferenceParametersTest, RandomParametersAreDeterministicAndTorchLike) {
  const ModelSpec spec = Model(
      Container(ModuleType::kModule, "",
                {Embedding("tok", 50, 8), Linear("net", 16, 40),
                 Norm(ModuleType::kLayerNorm, "norm", 40), Norm(ModuleType::kRMSNorm, "rms", 40)}));
  absl::StatusOr<std::map<std::string, HostTensor>> a = RandomParameters(spec, 7);
  absl::StatusOr<std::map<std::string, HostTensor>> b = RandomParameters(spec, 7);
  absl::StatusOr<std::map<std::string, HostTensor>> c = RandomParameters(spec, 8);
  absl::StatusOr<std::map<std::string, HostTensor>> d = RandomParameters(spec, 7, DType::kFloat64);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  EXPECT_EQ(a->size(), 6u);
  for (const auto& [name, t] : *a) {
    EXPECT_TRUE(t.BitEqual(b->at(name))) << name;
    EXPECT_EQ(t.dtype(), DType::kFloat32);
    EXPECT_EQ(d->at(name).dtype(), DType::kFloat64);
    EXPECT_THAT(Values(t), Pointwise(DoubleNear(1e-6), Values(d->at(name)))) << name;
  }
  EXPECT_FALSE(a->at("net.weight").BitEqual(c->at("net.weight")));
  for (const char* name : {"net.weight", "net.bias"}) {
    const std::vector<double> v = Values(a->at(name));
    for (double x : v) EXPECT_LE(std::abs(x), 0.25) << name;  // 1 / sqrt(16)
    EXPECT_GT(*std::max_element(v.begin(), v.end()), 0.15) << name;
    EXPECT_LT(*std::min_element(v.begin(), v.end()), -0.15) << name;
  }
  const std::vector<double> tok = Values(a->at("tok.weight"));
  double mean = 0, square = 0;
  for (double x : tok) mean += x / tok.size(), square += x * x / tok.size();
  EXPECT_NEAR(mean, 0, 0.15);
  EXPECT_NEAR(square, 1, 0.2);
  EXPECT_THAT(Values(a->at("norm.weight")), ::testing::Each(1.0));
  EXPECT_THAT(Values(a->at("norm.bias")), ::testing::Each(0.0));
  EXPECT_THAT(Values(a->at("rms.weight")), ::testing::Each(1.0));
}

// --- Gradients against central finite differences ---

enum class TestModel { kMlp, kStackedMlp, kAttentionBlock, kEmbeddingFirst };
enum class Loss { kSum, kGivenGradient };

// x + attention(layernorm(x)), then x + mlp(rmsnorm(x)).
ModuleSpec TransformerBlock(std::string name, int64_t dim, int64_t heads, bool causal) {
  return Container(
      ModuleType::kModule, std::move(name),
      {Container(ModuleType::kModule, "attn_block",
                 {Norm(ModuleType::kLayerNorm, "norm", dim), Attention("attn", dim, heads, causal)},
                 true),
       Container(ModuleType::kModule, "mlp_block",
                 {Norm(ModuleType::kRMSNorm, "norm", dim), Linear("net1", dim, 2 * dim),
                  Gelu("gelu", "none"), Linear("net2", 2 * dim, dim)},
                 true)});
}

// The model's spec and an input for it.
std::pair<ModelSpec, HostTensor> MakeModel(TestModel kind, bool causal, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> uniform(-1, 1);
  const auto random = [&](Shape shape) {
    std::vector<double> v(NumElements(shape));
    for (double& x : v) x = uniform(rng);
    return F64(std::move(shape), v);
  };
  switch (kind) {
    case TestModel::kMlp:
      return {Model(Container(
                  ModuleType::kModule, "",
                  {Linear("net1", 5, 6), Leaf(ModuleType::kReLU, "relu"), Linear("net2", 6, 4)})),
              random({2, 3, 5})};
    case TestModel::kStackedMlp: {
      std::vector<ModuleSpec> layers;
      for (ModuleSpec act : {Gelu("act", "tanh"), Leaf(ModuleType::kSiLU, "act")}) {
        layers.push_back(
            Container(ModuleType::kModule, "",
                      {Norm(ModuleType::kRMSNorm, "norm", 5), Linear("net1", 5, 7), act,
                       Linear("net2", 7, 5, false), Leaf(ModuleType::kDropout, "drop")},
                      true));
      }
      return {Model(Container(
                  ModuleType::kModule, "",
                  {Numbered(ModuleType::kModuleList, "layers", layers), Gelu("act", "none")})),
              random({3, 5})};
    }
    case TestModel::kAttentionBlock:
      return {Model(TransformerBlock("", 4, 2, causal)), random({2, 3, 4})};
    case TestModel::kEmbeddingFirst:
      return {Model(Numbered(ModuleType::kSequential, "",
                             {Embedding("", 6, 4), Leaf(ModuleType::kDropout, ""),
                              TransformerBlock("", 4, 1, causal),
                              Norm(ModuleType::kLayerNorm, "", 4, 1e-5, false), Linear("", 4, 6)})),
              Ids({2, 3}, {5, 0, 5, 2, 3, 0})};
  }
  return {};
}

// Every parameter of `model` moved off torch's initial values (norm weights of 1 and biases of 0
// would hide mistakes).
void Jitter(std::map<std::string, HostTensor>& params, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> uniform(-0.4, 0.4);
  for (auto& [name, t] : params) {
    double* v = t.data_as<double>();
    for (int64_t i = 0; i < t.num_elements(); ++i) v[i] += uniform(rng);
  }
}

// sum(output * weights) (weights null: sum(output)).
double LossOf(const ReferenceModel& model, const HostTensor& input, const HostTensor* weights) {
  absl::StatusOr<HostTensor> out = ReferenceForward(model, input);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return 0;
  double loss = 0;
  for (int64_t i = 0; i < out->num_elements(); ++i) {
    loss += out->data_as<double>()[i] * (weights ? weights->data_as<double>()[i] : 1.0);
  }
  return loss;
}

// The central difference of the loss in element i of `t` (which the model or the input holds).
double FiniteDifference(const ReferenceModel& model, const HostTensor& input,
                        const HostTensor* weights, HostTensor& t, int64_t i) {
  constexpr double kStep = 1e-6;
  double* v = t.data_as<double>() + i;
  const double saved = *v;
  *v = saved + kStep;
  const double plus = LossOf(model, input, weights);
  *v = saved - kStep;
  const double minus = LossOf(model, input, weights);
  *v = saved;
  return (plus - minus) / (2 * kStep);
}

// Each analytic gradient within 1e-6 + 1e-5 relative of its finite difference.
void ExpectMatchesFiniteDifferences(const std::string& what, const std::vector<double>& analytic,
                                    const ReferenceModel& model, const HostTensor& input,
                                    const HostTensor* weights, HostTensor& t) {
  ASSERT_EQ(analytic.size(), static_cast<size_t>(t.num_elements())) << what;
  double largest = 0;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const double numeric = FiniteDifference(model, input, weights, t, i);
    EXPECT_NEAR(analytic[i], numeric, 1e-6 + 1e-5 * std::abs(numeric)) << what << "[" << i << "]";
    largest = std::max(largest, std::abs(analytic[i]));
  }
  // Attention's k bias adds q . bias to every score of a row, which the softmax ignores: its
  // gradient is 0 (and the finite differences agree). Every other gradient must carry something.
  if (!what.ends_with("attn.k.bias")) {
    EXPECT_GT(largest, 1e-3) << what << ": every gradient is 0, so the check proves little";
  }
}

std::string GradientCaseName(
    const ::testing::TestParamInfo<std::tuple<TestModel, bool, Loss>>& info) {
  static constexpr const char* kModels[] = {"Mlp", "StackedMlp", "AttentionBlock",
                                            "EmbeddingFirst"};
  const auto [model, causal, loss] = info.param;
  return std::string(kModels[static_cast<int>(model)]) + (causal ? "Causal" : "Full") +
         (loss == Loss::kSum ? "SumLoss" : "GivenGradient");
}

class ReferenceGradientTest : public ::testing::TestWithParam<std::tuple<TestModel, bool, Loss>> {};

TEST_P(ReferenceGradientTest, EveryGradientMatchesFiniteDifferences) {
  const auto [kind, causal, loss] = GetParam();
  std::mt19937_64 rng(1234 + static_cast<int>(kind));
  auto [spec, input] = MakeModel(kind, causal, rng);
  ReferenceModel model{std::move(spec), {}};
  absl::StatusOr<std::map<std::string, HostTensor>> params =
      RandomParameters(model.spec, 99, DType::kFloat64);
  ASSERT_TRUE(params.ok()) << params.status();
  model.params = std::move(*params);
  Jitter(model.params, rng);

  std::optional<HostTensor> grad_output;
  if (loss == Loss::kGivenGradient) {
    absl::StatusOr<HostTensor> out = ReferenceForward(model, input);
    ASSERT_TRUE(out.ok()) << out.status();
    std::uniform_real_distribution<double> uniform(-1, 1);
    std::vector<double> g(out->num_elements());
    for (double& x : g) x = uniform(rng);
    grad_output = F64(out->shape(), g);
  }
  const HostTensor* weights = grad_output ? &*grad_output : nullptr;
  absl::StatusOr<ReferenceStep> step = ReferenceBackward(model, input, weights);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(step->output.BitEqual(*ReferenceForward(model, input)));

  ASSERT_EQ(step->grads.size(), model.params.size());
  for (auto& [name, param] : model.params) {
    ASSERT_TRUE(step->grads.contains(name)) << name;
    ASSERT_EQ(step->grads.at(name).shape(), param.shape()) << name;
    ExpectMatchesFiniteDifferences(name, Values(step->grads.at(name)), model, input, weights,
                                   param);
  }
  if (kind == TestModel::kEmbeddingFirst) {
    EXPECT_FALSE(step->grad_input.has_value());
  } else {
    ASSERT_TRUE(step->grad_input.has_value());
    ASSERT_EQ(step->grad_input->shape(), input.shape());
    ExpectMatchesFiniteDifferences("input", Values(*step->grad_input), model, input, weights,
                                   input);
  }
}

INSTANTIATE_TEST_SUITE_P(
    ModelsCausalLosses, ReferenceGradientTest,
    ::testing::Combine(::testing::Values(TestModel::kMlp, TestModel::kStackedMlp,
                                         TestModel::kAttentionBlock, TestModel::kEmbeddingFirst),
                       ::testing::Bool(), ::testing::Values(Loss::kSum, Loss::kGivenGradient)),
    GradientCaseName);

// float32 parameters and input run the same double computation, rounded once at the end: equal
// to the float64 run on the same (rounded) values, rounded to float32.
TEST(ReferenceGradientTest, Float32RoundsTheDoubleComputation) {
  std::mt19937_64 rng(5);
  auto [spec, input64] = MakeModel(TestModel::kAttentionBlock, true, rng);
  absl::StatusOr<std::map<std::string, HostTensor>> params = RandomParameters(spec, 3);
  ASSERT_TRUE(params.ok()) << params.status();
  ReferenceModel model32{spec, std::move(*params)};
  ReferenceModel model64{spec, {}};
  for (const auto& [name, t] : model32.params) {
    model64.params.emplace(name, F64(t.shape(), Values(t)));
  }
  std::vector<float> x32;
  for (double v : Values(input64)) x32.push_back(static_cast<float>(v));
  const HostTensor input32 = F32(input64.shape(), x32);
  const HostTensor input_rounded = F64(input64.shape(), Values(input32));

  absl::StatusOr<ReferenceStep> step32 = ReferenceBackward(model32, input32, nullptr);
  absl::StatusOr<ReferenceStep> step64 = ReferenceBackward(model64, input_rounded, nullptr);
  ASSERT_TRUE(step32.ok() && step64.ok());
  const auto rounded = [](const HostTensor& t) {
    std::vector<double> out;
    for (double v : Values(t)) out.push_back(static_cast<float>(v));
    return out;
  };
  EXPECT_EQ(step32->output.dtype(), DType::kFloat32);
  EXPECT_EQ(Values(step32->output), rounded(step64->output));
  EXPECT_NE(Values(step32->output), Values(step64->output));
  for (const auto& [name, g] : step32->grads) {
    EXPECT_EQ(g.dtype(), DType::kFloat32) << name;
    EXPECT_EQ(Values(g), rounded(step64->grads.at(name))) << name;
  }
  ASSERT_TRUE(step32->grad_input.has_value());
  EXPECT_EQ(Values(*step32->grad_input), rounded(*step64->grad_input));
}

// --- SGD against hand numbers ---

// (momentum, weight decay, param after two steps of lr 0.25 from p = [1, -2], grad [0.5, 1]).
using SgdCase = std::tuple<double, double, std::vector<double>>;
class ReferenceSgdTest : public ::testing::TestWithParam<SgdCase> {};

TEST_P(ReferenceSgdTest, TwoStepsMatchTorch) {
  const auto& [momentum, weight_decay, expected] = GetParam();
  ReferenceModel model{Model(Linear("", 2, 1, false)), {}};
  model.params.emplace("weight", F32({1, 2}, {1, -2}));
  std::map<std::string, HostTensor> grads;
  grads.emplace("weight", F32({1, 2}, {0.5, 1}));
  std::map<std::string, HostTensor> buffers;
  const ReferenceSgdOptions options{0.25, momentum, weight_decay};
  ASSERT_TRUE(ReferenceSgd(model, grads, options, buffers).ok());
  ASSERT_TRUE(ReferenceSgd(model, grads, options, buffers).ok());
  EXPECT_THAT(Values(model.params.at("weight")), Pointwise(DoubleNear(1e-6), expected));
  EXPECT_EQ(buffers.size(), momentum != 0 ? 1u : 0u);
}

// Plain: p -= 0.25 g twice. Momentum: buf = g, then 1.9 g. Weight decay 0.1: g + 0.1 p.
// Both: step 1 g' = [0.6, 0.8] = buf, p = [0.85, -2.2]; step 2 g' = [0.585, 0.78], buf = 0.9 buf +
// g' = [1.125, 1.5], p = [0.56875, -2.575].
INSTANTIATE_TEST_SUITE_P(HandNumbers, ReferenceSgdTest,
                         ::testing::Values(SgdCase{0, 0, {0.75, -2.5}},
                                           SgdCase{0.9, 0, {0.6375, -2.725}},
                                           SgdCase{0, 0.1, {0.70375, -2.395}},
                                           SgdCase{0.9, 0.1, {0.56875, -2.575}}));

TEST(ReferenceSgdErrorsTest, ChangesNothingOnBadInput) {
  ReferenceModel model{Model(Container(ModuleType::kModule, "",
                                       {Linear("a", 2, 1, false), Linear("b", 1, 1, false)})),
                       {}};
  model.params.emplace("a.weight", F32({1, 2}, {1, -2}));
  model.params.emplace("b.weight", F32({1, 1}, {3}));
  std::map<std::string, HostTensor> grads;
  grads.emplace("a.weight", F32({1, 2}, {0.5, 1}));
  std::map<std::string, HostTensor> buffers;
  const ReferenceSgdOptions options{0.25, 0.9, 0};
  EXPECT_TRUE(StatusIs(ReferenceSgd(model, grads, options, buffers),
                       absl::StatusCode::kInvalidArgument, {"b.weight", "no gradient"}));
  grads.emplace("b.weight", F32({1}, {1}));
  EXPECT_TRUE(StatusIs(ReferenceSgd(model, grads, options, buffers),
                       absl::StatusCode::kInvalidArgument, {"b.weight", "[1]", "[1, 1]"}));
  EXPECT_THAT(Values(model.params.at("a.weight")), ElementsAre(1, -2));
  EXPECT_TRUE(buffers.empty());
  grads.at("b.weight") = F32({1, 1}, {1});
  grads.emplace("c.weight", F32({1}, {1}));
  EXPECT_TRUE(StatusIs(ReferenceSgd(model, grads, options, buffers),
                       absl::StatusCode::kInvalidArgument, {"c.weight"}));
  grads.erase("c.weight");
  ASSERT_TRUE(ReferenceSgd(model, grads, options, buffers).ok());
  EXPECT_THAT(Values(model.params.at("a.weight")), ElementsAre(0.875, -2.25));
  EXPECT_THAT(Values(buffers.at("b.weight")), ElementsAre(1));
}

}  // namespace
}  // namespace tessera
