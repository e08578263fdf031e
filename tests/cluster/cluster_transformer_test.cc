// A transformer block and a vocab-parallel embedding model on a real local cluster, on meshes of 2
// and 4 workers, against the single-process float64 reference (reference/module_reference.h), each
// loaded from a safetensors file of the reference's parameters: the block (LayerNorm + causal
// Attention, RMSNorm + Linear -> GELU(tanh) -> Linear, both residual) under Megatron's plan and
// under sequence parallelism, forward and one training step (output.sum() backward, SGD); and an
// Embedding sharded by vocabulary (RowwiseParallel(input_layouts=Replicate())) feeding a
// colwise/rowwise MLP on int64 ids, forward and one training step; and one rank of four failing
// its step alone.

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/host_tensor.h"
#include "core/sharding/placement.h"
#include "kernels/testing/reference.h"
#include "tessera/tessera.h"
#include "tests/cluster/module_cluster.h"
#include "tests/support/status_assertions.h"
#include "tests/support/test_models.h"

namespace tessera {
namespace {

using ::tessera::testing::kMegatron;
using ::tessera::testing::kSequenceParallel;
using ::tessera::testing::kVocabParallel;

using ::tessera::client::Module;
using ::tessera::testing::ReferenceOf;
using ::tessera::testing::StatusIs;
using ::tessera::testing::Weights;

testing::ModuleCluster* shared = nullptr;
const auto* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new testing::ModuleClusterEnvironment(
        testing::TestClusterOptions(4),
        {{"tp2", {2}, {"tp"}, {0, 1}}, {"tp4", {4}, {"tp"}, {0, 1, 2, 3}}}, &shared));

client::Session& S() { return *shared->session; }
std::string MeshFor(int world) { return absl::StrCat("tp", world); }

constexpr double kLr = 0.25;

constexpr const char* kBlock = testing::kBlockDim16Float32;

// Token ids [batch, seq] -> an Embedding of 30 tokens -> an MLP.
constexpr int64_t kVocab = 30;
constexpr char kEmbeddingMlp[] =
    R"js({"type": "Module", "input": {"dtype": "int64", "shape": [-1, -1]},
  "children": [
    {"name": "tok", "type": "Embedding", "num_embeddings": 30, "embedding_dim": 16},
    {"name": "net1", "type": "Linear", "in_features": 16, "out_features": 32},
    {"name": "relu", "type": "ReLU"},
    {"name": "net2", "type": "Linear", "in_features": 32, "out_features": 16}]})js";

const Placement kR = Placement::Replicate(), kS0 = Placement::Shard(0), kS1 = Placement::Shard(1);

// The block's parameters under either plan: q, k, v and net1 split by rows (output features), o
// and net2 by columns with their biases whole, the norms whole.
const std::map<std::string, Placement> kBlockPlacements = {{"attn.norm.weight", kR},
                                                           {"attn.norm.bias", kR},
                                                           {"attn.attention.q.weight", kS0},
                                                           {"attn.attention.q.bias", kS0},
                                                           {"attn.attention.k.weight", kS0},
                                                           {"attn.attention.k.bias", kS0},
                                                           {"attn.attention.v.weight", kS0},
                                                           {"attn.attention.v.bias", kS0},
                                                           {"attn.attention.o.weight", kS1},
                                                           {"attn.attention.o.bias", kR},
                                                           {"mlp.norm.weight", kR},
                                                           {"mlp.net1.weight", kS0},
                                                           {"mlp.net1.bias", kS0},
                                                           {"mlp.net2.weight", kS1},
                                                           {"mlp.net2.bias", kR}};

// The embedding split by vocabulary rows.
const std::map<std::string, Placement> kVocabPlacements = {{"tok.weight", kS0},
                                                           {"net1.weight", kS0},
                                                           {"net1.bias", kS0},
                                                           {"net2.weight", kS1},
                                                           {"net2.bias", kR}};

struct BlockPlan {
  std::string name;
  const char* plan;
};

void PrintTo(const BlockPlan& p, std::ostream* os) { *os << p.name; }

class TransformerBlockTest : public ::testing::TestWithParam<std::tuple<BlockPlan, int>> {};

// The block's forward, then a training step: output, gradients and parameters after SGD equal
// the single process's. The sequence (6) does not divide over 4 ranks: the last sequence shard is
// empty under sequence parallelism.
TEST_P(TransformerBlockTest, ForwardAndStepMatchTheSingleProcess) {
  const auto& [plan, world] = GetParam();
  const std::string name = absl::StrCat("block_", plan.name, "_", world);
  absl::StatusOr<Weights> params = RandomParameters(ParseModelSpec(kBlock).value(), /*seed=*/17);
  ASSERT_TRUE(params.ok()) << params.status();
  ReferenceModel model = ReferenceOf(kBlock, *params);
  absl::StatusOr<Module> m =
      testing::LoadAndParallelize(*shared, name, kBlock, *params, MeshFor(world), plan.plan);
  ASSERT_TRUE(m.ok()) << m.status() << shared->cluster.LogHint();
  testing::ExpectPlacements(*m, kBlockPlacements);
  const HostTensor x = kernels::testing::RandomTensor(DType::kFloat32, {2, 6, 16}, 23, -1, 1);
  testing::ExpectForwardMatchesReference(*m, model, x);
  testing::ExpectStepMatchesReference(*m, model, x, kLr);
  EXPECT_TRUE(m->Remove().ok());
  EXPECT_TRUE(testing::TensorsNamed(S(), name + ".").empty());
}

INSTANTIATE_TEST_SUITE_P(
    Cluster, TransformerBlockTest,
    ::testing::Combine(::testing::Values(BlockPlan{"megatron", kMegatron},
                                         BlockPlan{"sequence_parallel", kSequenceParallel}),
                       ::testing::Values(2, 4)),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param).name, "_world", std::get<1>(info.param));
    });

class VocabParallelEmbeddingTest : public ::testing::TestWithParam<int> {};

// 30 tokens over 2 ranks (15 each) and over 4 (8, 8, 8, 6): every id is looked up by the one rank
// whose range holds it.
TEST_P(VocabParallelEmbeddingTest, ForwardAndStepMatchTheSingleProcess) {
  const int world = GetParam();
  const std::string name = absl::StrCat("vocab_", world);
  absl::StatusOr<Weights> params =
      RandomParameters(ParseModelSpec(kEmbeddingMlp).value(), /*seed=*/29);
  ASSERT_TRUE(params.ok()) << params.status();
  ReferenceModel model = ReferenceOf(kEmbeddingMlp, *params);
  absl::StatusOr<Module> m = testing::LoadAndParallelize(*shared, name, kEmbeddingMlp, *params,
                                                         MeshFor(world), kVocabParallel);
  ASSERT_TRUE(m.ok()) << m.status() << shared->cluster.LogHint();
  testing::ExpectPlacements(*m, kVocabPlacements);
  const HostTensor ids = kernels::testing::RandomTensor(DType::kInt64, {3, 7}, 31, 0, kVocab - 1);
  testing::ExpectForwardMatchesReference(*m, model, ids);
  testing::ExpectStepMatchesReference(*m, model, ids, kLr);
  EXPECT_TRUE(m->Remove().ok());
  EXPECT_TRUE(testing::TensorsNamed(S(), name + ".").empty());
}

INSTANTIATE_TEST_SUITE_P(Cluster, VocabParallelEmbeddingTest, ::testing::Values(2, 4),
                         [](const auto& info) { return absl::StrCat("world", info.param); });

// One rank given an id past the vocabulary (a local input of its own) fails its embedding step;
// its three peers stop before the all_reduce instead of waiting in it for the collective timeout,
// so the call fails within a second or two with that rank's error, the same error every time, and
// the mesh serves the next forward rightly.
TEST(OneRankFailsTest, ItsErrorComesBackAtOnceAndTheMeshServesOn) {
  absl::StatusOr<Weights> params =
      RandomParameters(ParseModelSpec(kEmbeddingMlp).value(), /*seed=*/37);
  ASSERT_TRUE(params.ok()) << params.status();
  ReferenceModel model = ReferenceOf(kEmbeddingMlp, *params);
  absl::StatusOr<Module> m = testing::LoadAndParallelize(*shared, "one_fails", kEmbeddingMlp,
                                                         *params, "tp4", kVocabParallel);
  ASSERT_TRUE(m.ok()) << m.status() << shared->cluster.LogHint();
  const HostTensor ids = kernels::testing::RandomTensor(DType::kInt64, {3, 7}, 41, 0, kVocab - 1);
  std::vector<HostTensor> locals;
  for (int r = 0; r < 4; ++r) locals.push_back(ids.Clone());
  locals[2].data_as<int64_t>()[5] = kVocab;  // rank 2 alone looks up id 30
  std::string first;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const absl::Time start = absl::Now();
    const absl::Status failed = m->ForwardLocal(locals).status();
    EXPECT_LT(absl::Now() - start, absl::Seconds(3)) << "the peers waited in the all_reduce";
    EXPECT_TRUE(StatusIs(failed, absl::StatusCode::kInvalidArgument,
                         {"forward step 0 (embedding, module \"tok\")", "30"}))
        << failed;
    if (attempt == 0) first = std::string(failed.message());
    EXPECT_EQ(failed.message(), first) << "attempt " << attempt;
  }
  testing::ExpectForwardMatchesReference(*m, model, ids);
  EXPECT_TRUE(m->Remove().ok());
}

}  // namespace
}  // namespace tessera
