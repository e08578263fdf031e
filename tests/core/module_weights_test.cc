#include "core/modules/module_weights.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using ::tessera::testing::StatusIs;

// The parameters of MLP(net1 = Linear(10, 16), relu, net2 = Linear(16, 12)).
const std::vector<ParameterInfo> kMlp = {
    {"net1.weight", {16, 10}}, {"net1.bias", {16}}, {"net2.weight", {12, 16}}, {"net2.bias", {12}}};

std::vector<WeightsTensor> Weights(DType dtype = DType::kFloat32) {
  std::vector<WeightsTensor> w;
  for (const ParameterInfo& p : kMlp) w.push_back({p.fqn, dtype, p.shape});
  return w;
}

TEST(ParameterDTypeTest, FloatingInputsSetItIdsDoNot) {
  EXPECT_EQ(ParameterDType({DType::kFloat64, {-1, 4}}), DType::kFloat64);
  EXPECT_EQ(ParameterDType({DType::kFloat32, {-1, 4}}), DType::kFloat32);
  EXPECT_EQ(ParameterDType({DType::kInt64, {-1, -1}}), DType::kFloat32);
}

TEST(CheckWeightsTest, TheSameTensorsInAnyOrderFit) {
  std::vector<WeightsTensor> w = Weights();
  std::swap(w[0], w[3]);
  EXPECT_TRUE(CheckWeights(kMlp, w, DType::kFloat32).ok());
}

TEST(CheckWeightsTest, AMissingParameterIsNamedWithItsShape) {
  std::vector<WeightsTensor> w = Weights();
  w.erase(w.begin() + 1);
  EXPECT_TRUE(StatusIs(CheckWeights(kMlp, w, DType::kFloat32), absl::StatusCode::kInvalidArgument,
                       {"parameter 'net1.bias' [16] is missing"}));
}

TEST(CheckWeightsTest, AnExtraTensorIsNamed) {
  std::vector<WeightsTensor> w = Weights();
  w.push_back({"net3.weight", DType::kFloat32, {2, 2}});
  EXPECT_TRUE(StatusIs(CheckWeights(kMlp, w, DType::kFloat32), absl::StatusCode::kInvalidArgument,
                       {"tensor 'net3.weight' [2, 2] is not a parameter of the model"}));
}

TEST(CheckWeightsTest, AMisShapedParameterNamesBothShapes) {
  std::vector<WeightsTensor> w = Weights();
  w[2].shape = {16, 12};
  EXPECT_TRUE(StatusIs(CheckWeights(kMlp, w, DType::kFloat32), absl::StatusCode::kInvalidArgument,
                       {"parameter 'net2.weight' is [12, 16] in the spec but [16, 12] in the "
                        "weights"}));
}

TEST(CheckWeightsTest, AnotherDtypeAndARepeatedNameAreNamed) {
  std::vector<WeightsTensor> w = Weights(DType::kFloat64);
  EXPECT_TRUE(StatusIs(CheckWeights(kMlp, w, DType::kFloat32), absl::StatusCode::kInvalidArgument,
                       {"'net1.weight' is float64 in the weights", "parameters are float32"}));
  w = Weights();
  w.push_back(w[0]);
  EXPECT_TRUE(StatusIs(CheckWeights(kMlp, w, DType::kFloat32), absl::StatusCode::kInvalidArgument,
                       {"tensor 'net1.weight' is listed twice"}));
}

TEST(CheckWeightsTest, EveryProblemIsListed) {
  std::vector<WeightsTensor> w = Weights();
  w[0].shape = {10, 16};
  w.erase(w.begin() + 3);
  w.push_back({"extra", DType::kFloat32, {1}});
  const absl::Status s = CheckWeights(kMlp, w, DType::kFloat32);
  EXPECT_TRUE(StatusIs(s, absl::StatusCode::kInvalidArgument,
                       {"'net1.weight' is [16, 10] in the spec but [10, 16]",
                        "'net2.bias' [12] is missing", "'extra' [1] is not a parameter"}));
}

TEST(InitOfTest, FollowsTorchResetParameters) {
  ModuleSpec linear;
  linear.type = ModuleType::kLinear;
  linear.in_features = 16;
  linear.out_features = 4;
  for (const char* name : {"weight", "bias"}) {
    const ParameterInit init = InitOf(linear, name);
    EXPECT_EQ(init.kind, ParameterInit::Kind::kUniform) << name;
    EXPECT_DOUBLE_EQ(init.bound, 0.25) << name;
  }
  ModuleSpec embedding;
  embedding.type = ModuleType::kEmbedding;
  EXPECT_EQ(InitOf(embedding, "weight").kind, ParameterInit::Kind::kNormal);
  for (ModuleType norm : {ModuleType::kLayerNorm, ModuleType::kRMSNorm}) {
    ModuleSpec m;
    m.type = norm;
    EXPECT_EQ(InitOf(m, "weight").kind, ParameterInit::Kind::kOnes);
    EXPECT_EQ(InitOf(m, "bias").kind, ParameterInit::Kind::kZeros);
  }
}

}  // namespace
}  // namespace tessera
