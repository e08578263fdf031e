// Modules on a real local cluster (a coordinator and 4 CPU worker processes; meshes 1-D of 4 and
// 2 dp x 2 tp), through the client library: an MLP loaded from a safetensors file written here,
// parallelized by plans, its layouts (Show) against layouts worked out by hand, its forward and
// training step against a plain single-process MLP, saving, seeds, publishing, and malformed
// specs, weights, plans and inputs refused with their codes and messages, leaving every module and
// tensor as it was.

#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/files/safetensors.h"
#include "core/modules/module_spec.h"
#include "grpcpp/grpcpp.h"
#include "kernels/testing/reference.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "tessera/tessera.h"
#include "tessera/v1/module.grpc.pb.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/cluster/module_cluster.h"
#include "tests/support/test_models.h"

namespace tessera {
namespace {

using ::tessera::testing::kEmbeddingHead;
using ::tessera::testing::kMegatron;
using ::tessera::testing::kMlpPlan;
using ::tessera::testing::kSequenceParallel;

using ::tessera::client::Module;
using ::tessera::client::Session;
using ::tessera::testing::StatusIs;
using ::tessera::testing::TensorsMatch;

// MLP(net1 = Linear(10, 16), relu, net2 = Linear(16, 12)), as the seed's MLPModule.
constexpr char kMlpSpec[] = R"({"type": "Module", "children": [
  {"name": "net1", "type": "Linear", "in_features": 10, "out_features": 16},
  {"name": "relu", "type": "ReLU"},
  {"name": "net2", "type": "Linear", "in_features": 16, "out_features": 12}]})";
testing::ModuleCluster* shared = nullptr;
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment([] {
  LocalClusterOptions options = testing::TestClusterOptions(4);
  options.memory_budget_bytes = int64_t{256} << 20;
  return new testing::ModuleClusterEnvironment(
      options, {{"line", {4}, {"tp"}}, {"grid", {2, 2}, {"dp", "tp"}}}, &shared);
}());

Session& S() { return *shared->session; }
const client::Mesh& M(const std::string& name) { return shared->meshes.at(name); }
std::string PathOf(const std::string& file) { return shared->dir + "/" + file; }

// ---------------------------------------------------------------------------------------------
// The single-process reference: the MLP's parameters, forward and backward, in float64.

using ::tessera::testing::Weights;

Weights MlpWeights(uint64_t seed) {
  Weights w;
  w.emplace("net1.weight", kernels::testing::RandomTensor(DType::kFloat32, {16, 10}, seed));
  w.emplace("net1.bias", kernels::testing::RandomTensor(DType::kFloat32, {16}, seed + 1));
  w.emplace("net2.weight", kernels::testing::RandomTensor(DType::kFloat32, {12, 16}, seed + 2));
  w.emplace("net2.bias", kernels::testing::RandomTensor(DType::kFloat32, {12}, seed + 3));
  return w;
}

std::string WriteWeights(const std::string& file, const Weights& weights) {
  return testing::WriteWeightsFile(PathOf(file), weights);
}

double At(const HostTensor& t, int64_t i) { return kernels::testing::GetDouble(t, i); }

// y = x @ W^T + b for x [rows, in], W [out, in].
std::vector<double> Linear(const std::vector<double>& x, int64_t rows, const HostTensor& w,
                           const HostTensor& b) {
  const int64_t out = w.shape()[0], in = w.shape()[1];
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = At(b, o);
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * At(w, o * in + i);
      y[r * out + o] = acc;
    }
  }
  return y;
}

HostTensor Float32(const std::vector<double>& values, Shape shape) {
  std::vector<float> f(values.begin(), values.end());
  return HostTensor::FromValues(DType::kFloat32, std::move(shape), f);
}

// The MLP's forward on x [rows, 10]; `hidden` gets net1's output before the ReLU.
HostTensor MlpForward(const Weights& w, const HostTensor& x,
                      std::vector<double>* hidden = nullptr) {
  const int64_t rows = x.shape()[0];
  std::vector<double> in(static_cast<size_t>(x.num_elements()));
  for (int64_t i = 0; i < x.num_elements(); ++i) in[i] = At(x, i);
  std::vector<double> z = Linear(in, rows, w.at("net1.weight"), w.at("net1.bias"));
  if (hidden != nullptr) *hidden = z;
  for (double& v : z) v = std::max(v, 0.0);
  return Float32(Linear(z, rows, w.at("net2.weight"), w.at("net2.bias")), {rows, 12});
}

// The gradients of output.sum() with respect to every parameter.
Weights MlpGradients(const Weights& w, const HostTensor& x) {
  const int64_t rows = x.shape()[0];
  std::vector<double> z;
  MlpForward(w, x, &z);
  std::vector<double> dw1(160, 0), db1(16, 0), dw2(192, 0), db2(12, 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < 12; ++o) {
      db2[o] += 1;
      for (int64_t h = 0; h < 16; ++h) dw2[o * 16 + h] += std::max(z[r * 16 + h], 0.0);
    }
    for (int64_t h = 0; h < 16; ++h) {
      if (z[r * 16 + h] <= 0) continue;
      double dh = 0;
      for (int64_t o = 0; o < 12; ++o) dh += At(w.at("net2.weight"), o * 16 + h);
      db1[h] += dh;
      for (int64_t i = 0; i < 10; ++i) dw1[h * 10 + i] += dh * At(x, r * 10 + i);
    }
  }
  Weights g;
  g.emplace("net1.weight", Float32(dw1, {16, 10}));
  g.emplace("net1.bias", Float32(db1, {16}));
  g.emplace("net2.weight", Float32(dw2, {12, 16}));
  g.emplace("net2.bias", Float32(db2, {12}));
  return g;
}

// `w` after torch.optim.SGD(lr).step() with gradients `g`.
Weights SgdStep(const Weights& w, const Weights& g, double lr) {
  Weights out;
  for (const auto& [name, t] : w) {
    std::vector<double> v(static_cast<size_t>(t.num_elements()));
    for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = At(t, i) - lr * At(g.at(name), i);
    out.emplace(name, Float32(v, t.shape()));
  }
  return out;
}

// float32 sums taken in another order (sharded, then reduced) against float64.
constexpr double kTolerance = 1e-4;

absl::StatusOr<Module> LoadMlp(const std::string& name, const std::string& mesh,
                               const std::string& weights_path, const std::string& plan = "") {
  return client::LoadModule(S(), kMlpSpec, M(mesh), name, {.weights_path = weights_path},
                            {.plan_json = plan});
}

const client::ModuleParameter* Find(const client::ModuleInfo& info, const std::string& fqn) {
  for (const auto& p : info.parameters) {
    if (p.fqn == fqn) return &p;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Loading from a file, parallelizing, and the forward against the reference.

// (mesh, plan given at load, plan applied after, input rows).
using ForwardCase = std::tuple<std::string, std::string, std::string, int64_t>;
class MlpForwardTest : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(MlpForwardTest, MatchesTheSingleProcessMlp) {
  const auto& [mesh, load_plan, plan, rows] = GetParam();
  const Weights w = MlpWeights(11);
  const std::string name = absl::StrCat("fwd_", mesh, load_plan.empty() ? "" : "_loadplan",
                                        plan.empty() ? "" : "_parallelized", "_", rows);
  absl::StatusOr<Module> m = LoadMlp(name, mesh, WriteWeights(name + ".safetensors", w), load_plan);
  ASSERT_TRUE(m.ok()) << m.status() << shared->cluster.LogHint();
  if (!plan.empty()) {
    absl::StatusOr<Module> p = client::ParallelizeModule(*m, mesh, plan);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(p->info().unmatched.empty());
  }
  const HostTensor x = kernels::testing::RandomTensor(DType::kFloat32, {rows, 10}, 5);
  absl::StatusOr<client::ModuleOutput> y = m->Forward(x, client::Outputs::kBoth);
  ASSERT_TRUE(y.ok()) << y.status() << shared->cluster.LogHint();
  ASSERT_TRUE(y->full.has_value());
  EXPECT_TRUE(TensorsMatch(*y->full, MlpForward(w, x), kTolerance));
  EXPECT_EQ(static_cast<int64_t>(y->locals.size()), M(mesh).mesh.size());
  // The full output alone (put together from the replicas the service asks back for) is the same.
  absl::StatusOr<client::ModuleOutput> full = m->Forward(x);
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_TRUE(full->full.has_value());
  EXPECT_TRUE(TensorsMatch(*full->full, MlpForward(w, x), kTolerance));
  EXPECT_TRUE(full->locals.empty());
  // The parameters are the file's, whatever their layout.
  const Weights saved = testing::StateDictOf(*m);
  for (const auto& [fqn, t] : w) EXPECT_TRUE(TensorsMatch(saved.at(fqn), t)) << fqn;
  EXPECT_TRUE(m->Remove().ok());
  EXPECT_TRUE(testing::TensorsNamed(S(), name + ".").empty());
}

INSTANTIATE_TEST_SUITE_P(
    Cluster, MlpForwardTest,
    ::testing::Combine(::testing::Values("line", "grid"), ::testing::Values("", kMlpPlan),
                       ::testing::Values("", kMlpPlan), ::testing::Values(int64_t{8}, int64_t{5})),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param), std::get<1>(info.param)[0] ? "_loadplan" : "",
                          std::get<2>(info.param)[0] ? "_parallelized" : "", "_rows",
                          std::get<3>(info.param));
    });

// Worked by hand: the MLP plan on the 1-D mesh of 4: net1 colwise (weight [16, 10] and bias [16]
// S(0): 4 rows each), net2 rowwise (weight [12, 16] S(1): 4 columns each; bias [12] R).
TEST(ModuleTest, ShowGivesThePlansPlacementsAndLocalShapes) {
  const Weights w = MlpWeights(3);
  absl::StatusOr<Module> m = LoadMlp("shown", "line", WriteWeights("shown.safetensors", w));
  ASSERT_TRUE(m.ok()) << m.status() << shared->cluster.LogHint();
  absl::StatusOr<Module> p = client::ParallelizeModule(*m, "tp", kMlpPlan);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<client::ModuleInfo> info = p->Show();
  ASSERT_TRUE(info.ok()) << info.status();
  struct Want {
    std::string fqn;
    Placement placement;
    std::vector<LocalShard> shards;
  };
  const std::vector<Want> want = {
      {"net1.weight",
       Placement::Shard(0),
       {{{4, 10}, {0, 0}}, {{4, 10}, {4, 0}}, {{4, 10}, {8, 0}}, {{4, 10}, {12, 0}}}},
      {"net1.bias", Placement::Shard(0), {{{4}, {0}}, {{4}, {4}}, {{4}, {8}}, {{4}, {12}}}},
      {"net2.weight",
       Placement::Shard(1),
       {{{12, 4}, {0, 0}}, {{12, 4}, {0, 4}}, {{12, 4}, {0, 8}}, {{12, 4}, {0, 12}}}},
      {"net2.bias", Placement::Replicate(), {{{12}, {0}}, {{12}, {0}}, {{12}, {0}}, {{12}, {0}}}},
  };
  ASSERT_EQ(info->parameters.size(), want.size());
  for (const Want& x : want) {
    const client::ModuleParameter* got = Find(*info, x.fqn);
    ASSERT_NE(got, nullptr) << x.fqn;
    EXPECT_EQ(got->tensor, "shown." + x.fqn);
    EXPECT_EQ(got->spec.placements, std::vector<Placement>{x.placement}) << x.fqn;
    EXPECT_EQ(got->shards, x.shards) << x.fqn;
  }
  // torch's defaults at the edges: Replicate in (colwise), Replicate out (rowwise), local tensors.
  EXPECT_EQ(info->input_layout.placement, Placement::Replicate());
  EXPECT_EQ(info->output_layout.placement, Placement::Replicate());
  EXPECT_FALSE(info->output_layout.is_dtensor);
  EXPECT_EQ(info->input_shape, (std::vector<int64_t>{-1, 10}));
  EXPECT_EQ(info->output_features, 12);
  // The parameters are DTensors any client can read.
  absl::StatusOr<client::DTensor> t = client::GetTensor(S(), "shown.net2.weight");
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<HostTensor> full = t->FullTensor();
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(TensorsMatch(*full, w.at("net2.weight")));
  absl::StatusOr<std::string> plan = p->ExportPlan();
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(absl::StrContains(*plan, "ColwiseParallel")) << *plan;
  EXPECT_TRUE(p->Remove().ok());
}

// A module without parameters (torch's DummyModule) loads from a safetensors file without tensors;
// its forward gives back its input.
TEST(ModuleTest, AModuleWithoutParametersLoadsFromAnEmptyWeightsFile) {
  constexpr char kIdentity[] = R"js({"type": "Module", "input": {"dtype": "float32",
                                                                 "shape": [-1, 7]}})js";
  absl::StatusOr<Module> m =
      client::LoadModule(S(), kIdentity, M("line"), "identity",
                         {.weights_path = WriteWeights("empty.safetensors", {})});
  ASSERT_TRUE(m.ok()) << m.status() << shared->cluster.LogHint();
  EXPECT_TRUE(m->info().parameters.empty());
  const HostTensor x = kernels::testing::RandomTensor(DType::kFloat32, {3, 7}, 14);
  absl::StatusOr<client::ModuleOutput> y = m->Forward(x);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(TensorsMatch(*y->full, x));
  EXPECT_TRUE(m->Remove().ok());
}

TEST(ModuleTest, UnmatchedPlanKeysAreReported) {
  absl::StatusOr<Module> m =
      LoadMlp("unmatched", "line", WriteWeights("unmatched.safetensors", MlpWeights(4)));
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<Module> p = client::ParallelizeModule(
      *m, "line", R"({"plan": {"net1": "ColwiseParallel", "net9": "RowwiseParallel"}})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->info().unmatched, std::vector<std::string>{"net9"});
  EXPECT_TRUE(p->Remove().ok());
}

TEST(ModuleTest, SaveWritesTheStateDictAsSafetensors) {
  const Weights w = MlpWeights(21);
  absl::StatusOr<Module> m =
      LoadMlp("saved", "grid", WriteWeights("saved_in.safetensors", w), kMlpPlan);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string out = PathOf("saved_out.safetensors");
  ASSERT_TRUE(m->Save(out).ok());
  absl::StatusOr<SafetensorsFile> back = ReadSafetensorsFile(out);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->tensors.size(), w.size());
  for (const auto& [fqn, t] : w) EXPECT_TRUE(TensorsMatch(back->tensors.at(fqn), t)) << fqn;
  // And it loads again as it is.
  absl::StatusOr<Module> again = LoadMlp("saved_again", "line", out);
  ASSERT_TRUE(again.ok()) << again.status();
  const HostTensor x = kernels::testing::RandomTensor(DType::kFloat32, {3, 10}, 8);
  absl::StatusOr<client::ModuleOutput> a = m->Forward(x), b = again->Forward(x);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(TensorsMatch(*a->full, *b->full, kTolerance));
  EXPECT_TRUE(m->Remove().ok());
  EXPECT_TRUE(again->Remove().ok());
}

// A training step (output.sum().backward(); SGD(lr=0.25).step()) as the seed's TP tests check
// it: gradients and parameters after equal the single process's.
TEST(ModuleTest, AStepMatchesTheSingleProcessGradientsAndUpdate) {
  const Weights w = MlpWeights(31);
  absl::StatusOr<Module> m = LoadMlp("trained", "line", WriteWeights("trained.safetensors", w));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(client::ParallelizeModule(*m, "line", kMlpPlan).ok());
  const HostTensor x = kernels::testing::RandomTensor(DType::kFloat32, {6, 10}, 9);
  absl::StatusOr<client::StepResult> step = m->Step(x, {.sgd = client::SgdOptions{.lr = 0.25}});
  ASSERT_TRUE(step.ok()) << step.status() << shared->cluster.LogHint();
  ASSERT_TRUE(step->output.full.has_value());
  EXPECT_TRUE(TensorsMatch(*step->output.full, MlpForward(w, x), kTolerance));
  const Weights grads = MlpGradients(w, x);
  for (const auto& g : step->gradients) {
    EXPECT_EQ(g.grad, "trained." + g.fqn + ".grad");
    absl::StatusOr<client::DTensor> t = client::GetTensor(S(), g.grad);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->placements(), g.spec.placements) << g.fqn;  // laid out as its parameter
    absl::StatusOr<HostTensor> full = t->FullTensor();
    ASSERT_TRUE(full.ok()) << full.status();
    EXPECT_TRUE(TensorsMatch(*full, grads.at(g.fqn), kTolerance)) << g.fqn;
  }
  const Weights after = testing::StateDictOf(*m);
  const Weights want = SgdStep(w, grads, 0.25);
  for (const auto& [fqn, t] : want) EXPECT_TRUE(TensorsMatch(after.at(fqn), t, kTolerance)) << fqn;
  EXPECT_TRUE(m->Remove().ok());
  EXPECT_TRUE(testing::TensorsNamed(S(), "trained.").empty());
}

// On the 2-D mesh the batch is split over dp and the gradients averaged over it; the step is
// still the whole batch's, as one process takes it.
TEST(ModuleTest, AStepOnADataParallelMeshMatchesTheSingleProcess) {
  const Weights w = MlpWeights(33);
  absl::StatusOr<Module> m =
      LoadMlp("trained2d", "grid", WriteWeights("trained2d.safetensors", w), kMlpPlan);
  ASSERT_TRUE(m.ok()) << m.status();
  const HostTensor x = kernels::testing::RandomTensor(DType::kFloat32, {5, 10}, 10);
  absl::StatusOr<client::StepResult> step = m->Step(x, {.sgd = client::SgdOptions{.lr = 0.25}});
  ASSERT_TRUE(step.ok()) << step.status() << shared->cluster.LogHint();
  const Weights grads = MlpGradients(w, x);
  const Weights got = testing::StateDictOf(*m, /*gradients=*/true);
  for (const auto& [fqn, g] : grads) {
    EXPECT_TRUE(TensorsMatch(got.at(fqn + ".grad"), g, kTolerance)) << fqn;
  }
  const Weights want = SgdStep(w, grads, 0.25);
  for (const auto& [fqn, t] : want) EXPECT_TRUE(TensorsMatch(got.at(fqn), t, kTolerance)) << fqn;
  EXPECT_TRUE(m->Remove().ok());
}

// A step from a given output gradient: the gradients are its vector-Jacobian product; twice the
// sum's gradient gives twice its parameter gradients. Without SGD the parameters stay.
TEST(ModuleTest, AStepFromAGivenOutputGradient) {
  const Weights w = MlpWeights(34);
  absl::StatusOr<Module> m = LoadMlp("vjp", "line", WriteWeights("vjp.safetensors", w), kMlpPlan);
  ASSERT_TRUE(m.ok()) << m.status();
  const HostTensor x = kernels::testing::RandomTensor(DType::kFloat32, {4, 10}, 11);
  std::vector<float> twos(4 * 12, 2.0f);
  absl::StatusOr<client::StepResult> step =
      m->Step(x, {.grad_output = HostTensor::FromValues(DType::kFloat32, {4, 12}, twos)});
  ASSERT_TRUE(step.ok()) << step.status();
  const Weights got = testing::StateDictOf(*m, /*gradients=*/true);
  for (const auto& [fqn, g] : MlpGradients(w, x)) {
    std::vector<double> doubled(static_cast<size_t>(g.num_elements()));
    for (int64_t i = 0; i < g.num_elements(); ++i) doubled[i] = 2 * At(g, i);
    EXPECT_TRUE(TensorsMatch(got.at(fqn + ".grad"), Float32(doubled, g.shape()), kTolerance))
        << fqn;
    EXPECT_TRUE(TensorsMatch(got.at(fqn), w.at(fqn))) << fqn;
  }
  EXPECT_TRUE(m->Remove().ok());
}

// Every rank's own input gives what the full input does (the MLP's input is Replicate on tp: each
// rank takes the whole batch on the 1-D mesh), and forwards from many threads at once all come
// back right.
TEST(ModuleTest, LocalInputsAndConcurrentForwards) {
  const Weights w = MlpWeights(35);
  absl::StatusOr<Module> m =
      LoadMlp("concurrent", "line", WriteWeights("concurrent.safetensors", w), kMlpPlan);
  ASSERT_TRUE(m.ok()) << m.status();
  const HostTensor x = kernels::testing::RandomTensor(DType::kFloat32, {3, 10}, 12);
  std::vector<HostTensor> locals;
  for (int r = 0; r < 4; ++r) locals.push_back(x.Clone());
  absl::StatusOr<client::ModuleOutput> local = m->ForwardLocal(locals, client::Outputs::kBoth);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_TRUE(TensorsMatch(*local->full, MlpForward(w, x), kTolerance));
  ASSERT_EQ(local->locals.size(), 4u);

  std::vector<std::thread> threads;
  std::atomic<int> right{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        const HostTensor in =
            kernels::testing::RandomTensor(DType::kFloat32, {2 + t, 10}, 100 + 10 * t + i);
        absl::StatusOr<client::ModuleOutput> y = m->Forward(in);
        if (y.ok() && TensorsMatch(*y->full, MlpForward(w, in), kTolerance)) ++right;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(right.load(), 20);
  EXPECT_TRUE(m->Remove().ok());
}

// distribute_module with every parameter Replicate: each rank holds the whole module.
TEST(ModuleTest, DistributeModulePlacesEveryParameter) {
  const Weights w = MlpWeights(36);
  absl::StatusOr<Module> m =
      LoadMlp("distributed", "grid", WriteWeights("distributed.safetensors", w), kMlpPlan);
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<Module> d =
      client::DistributeModule(*m, R"json({"distribute": {"*": ["R", "R"]}})json");
  ASSERT_TRUE(d.ok()) << d.status();
  for (const client::ModuleParameter& p : d->info().parameters) {
    EXPECT_EQ(p.spec.placements,
              (std::vector<Placement>{Placement::Replicate(), Placement::Replicate()}))
        << p.fqn;
  }
  const HostTensor x = kernels::testing::RandomTensor(DType::kFloat32, {6, 10}, 13);
  absl::StatusOr<client::ModuleOutput> y = d->Forward(x);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(TensorsMatch(*y->full, MlpForward(w, x), kTolerance));
  const Weights saved = testing::StateDictOf(*d);
  for (const auto& [fqn, t] : w) EXPECT_TRUE(TensorsMatch(saved.at(fqn), t)) << fqn;
  EXPECT_TRUE(d->Remove().ok());
}

// distribute_module with sharded parameters: (mesh, partition, every parameter's placements as
// Show must give them). The MLP is parallelized first, so distributing moves its parameters from
// the plan's layout to the partition's.
struct DistributeCase {
  std::string name;
  std::string mesh;
  std::string partition;
  std::map<std::string, std::string> placements;  // fqn -> PlacementsToString
};

class DistributeModuleTest : public ::testing::TestWithParam<DistributeCase> {};

// As torch computes a distributed module with replicated activations: the forward, a training
// step's output and gradients (each laid out as its parameter), and the parameters after SGD
// equal one process's; every rank computes the whole batch.
TEST_P(DistributeModuleTest, ComputesAsOneProcess) {
  const DistributeCase& c = GetParam();
  const Weights w = MlpWeights(37);
  const std::string name = "dist_" + c.name;
  absl::StatusOr<Module> m =
      LoadMlp(name, c.mesh, WriteWeights(name + ".safetensors", w), kMlpPlan);
  ASSERT_TRUE(m.ok()) << m.status() << shared->cluster.LogHint();
  absl::StatusOr<Module> d = client::DistributeModule(*m, c.partition);
  ASSERT_TRUE(d.ok()) << d.status();
  absl::StatusOr<client::ModuleInfo> info = d->Show();
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->parameters.size(), c.placements.size());
  for (const client::ModuleParameter& p : info->parameters) {
    EXPECT_EQ(PlacementsToString(p.spec.placements), c.placements.at(p.fqn)) << p.fqn;
  }
  EXPECT_EQ(info->input_layout.placement, Placement::Replicate());
  EXPECT_EQ(info->output_layout.placement, Placement::Replicate());
  EXPECT_TRUE(absl::StrContains(info->plan_json, "distribute")) << info->plan_json;

  ReferenceModel reference = testing::ReferenceOf(kMlpSpec, w);
  const HostTensor x = kernels::testing::RandomTensor(DType::kFloat32, {5, 10}, 15);
  testing::ExpectForwardMatchesReference(*d, reference, x);
  // The batch is not split: every rank's local output is the whole output.
  absl::StatusOr<client::ModuleOutput> y = d->Forward(x, client::Outputs::kBoth);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(static_cast<int64_t>(y->locals.size()), M(c.mesh).mesh.size());
  for (const HostTensor& local : y->locals) EXPECT_TRUE(TensorsMatch(local, *y->full));

  testing::ExpectStepMatchesReference(*d, reference, x, 0.25);
  absl::StatusOr<client::ModuleInfo> stepped = d->Show();
  ASSERT_TRUE(stepped.ok()) << stepped.status();
  for (const client::ModuleParameter& p : stepped->parameters) {
    absl::StatusOr<client::DTensor> g = client::GetTensor(S(), p.grad);
    ASSERT_TRUE(g.ok()) << p.fqn << ": " << g.status();
    EXPECT_EQ(PlacementsToString(g->placements()), c.placements.at(p.fqn)) << p.fqn << ".grad";
  }
  EXPECT_TRUE(d->Remove().ok());
  EXPECT_TRUE(testing::TensorsNamed(S(), name + ".").empty());
}

INSTANTIATE_TEST_SUITE_P(
    Cluster, DistributeModuleTest,
    ::testing::Values(DistributeCase{"line_rows_and_columns",
                                     "line",
                                     R"json({"distribute": {"net1.weight": ["Shard(0)"],
                                              "net2.weight": ["Shard(1)"]}})json",
                                     {{"net1.weight", "(S(0))"},
                                      {"net1.bias", "(R)"},
                                      {"net2.weight", "(S(1))"},
                                      {"net2.bias", "(R)"}}},
                      // 10 columns over 4 ranks: 3, 3, 3, 1.
                      DistributeCase{"line_uneven",
                                     "line",
                                     R"json({"distribute": {"net1.weight": ["Shard(-1)"],
                                              "*.bias": ["Shard(0)"]}})json",
                                     {{"net1.weight", "(S(1))"},
                                      {"net1.bias", "(S(0))"},
                                      {"net2.weight", "(R)"},
                                      {"net2.bias", "(S(0))"}}},
                      DistributeCase{"grid_two_dims",
                                     "grid",
                                     R"json({"distribute": {"net1.weight": ["Shard(0)", "Shard(1)"],
                                              "net2.weight": ["Shard(1)", "Shard(0)"]}})json",
                                     {{"net1.weight", "(S(0), S(1))"},
                                      {"net1.bias", "(R, R)"},
                                      {"net2.weight", "(S(1), S(0))"},
                                      {"net2.bias", "(R, R)"}}},
                      // Nested shards: net1.weight's 10 columns are 5 per dp row, then 3 and 2.
                      DistributeCase{"grid_nested",
                                     "grid",
                                     R"json({"distribute": {"net1.weight": ["Shard(1)", "Shard(1)"],
                                              "*.bias": ["Shard(0)", "Shard(0)"],
                                              "net2.weight": ["Replicate()", "Shard(0)"]}})json",
                                     {{"net1.weight", "(S(1), S(1))"},
                                      {"net1.bias", "(S(0), S(0))"},
                                      {"net2.weight", "(R, S(0))"},
                                      {"net2.bias", "(S(0), S(0))"}}}),
    [](const auto& info) { return info.param.name; });

// Worked by hand: Show gives a distributed parameter's nested uneven shards on the 2 x 2 mesh.
// net1.weight [16, 10] (Shard(1), Shard(1)): 5 columns per dp row, split 3 and 2 over tp.
TEST(ModuleTest, ShowGivesADistributedParametersNestedShards) {
  absl::StatusOr<Module> m =
      LoadMlp("shown_dist", "grid", WriteWeights("shown_dist.safetensors", MlpWeights(38)));
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<Module> d = client::DistributeModule(
      *m, R"json({"distribute": {"net1.weight": ["Shard(1)", "Shard(1)"]}})json");
  ASSERT_TRUE(d.ok()) << d.status();
  const client::ModuleParameter* p = Find(d->info(), "net1.weight");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->spec.placements, (std::vector<Placement>{Placement::Shard(1), Placement::Shard(1)}));
  EXPECT_EQ(p->shards,
            (std::vector<LocalShard>{
                {{16, 3}, {0, 0}}, {{16, 2}, {0, 3}}, {{16, 3}, {0, 5}}, {{16, 2}, {0, 8}}}));
  const client::ModuleParameter* bias = Find(d->info(), "net1.bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->spec.placements,
            (std::vector<Placement>{Placement::Replicate(), Placement::Replicate()}));
  EXPECT_TRUE(d->Remove().ok());
}

// Seeded parameters follow torch's Linear init (uniform within 1/sqrt(in_features)), and the same
// seed gives the same values whatever the layout.
TEST(ModuleTest, SeededParametersAreTorchsInitAndIndependentOfTheLayout) {
  absl::StatusOr<Module> a = client::LoadModule(S(), kMlpSpec, M("line"), "seeded_a", {.seed = 7});
  absl::StatusOr<Module> b = client::LoadModule(S(), kMlpSpec, M("grid"), "seeded_b", {.seed = 7},
                                                {.plan_json = kMlpPlan});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  const Weights wa = testing::StateDictOf(*a), wb = testing::StateDictOf(*b);
  ASSERT_EQ(wa.size(), 4u);
  for (const auto& [fqn, t] : wa) {
    const double bound = 1 / std::sqrt(absl::StartsWith(fqn, "net1") ? 10.0 : 16.0);
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      ASSERT_LT(std::abs(At(t, i)), bound) << fqn << "[" << i << "]";
    }
    EXPECT_TRUE(TensorsMatch(wb.at(fqn), t)) << fqn;
  }
  EXPECT_FALSE(TensorsMatch(wa.at("net1.weight").Clone(), wa.at("net2.weight").Clone()));
  EXPECT_TRUE(a->Remove().ok());
  EXPECT_TRUE(b->Remove().ok());
}

TEST(ModuleTest, PublishServesTheModuleUntilUnpublished) {
  absl::StatusOr<Module> m =
      LoadMlp("served", "line", WriteWeights("served.safetensors", MlpWeights(41)), kMlpPlan);
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<client::PublishedVersion> v = m->Publish({.version = "2", .max_batch_size = 8});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->model, "served");
  EXPECT_EQ(v->version, "2");
  EXPECT_TRUE(StatusIs(m->Publish({.version = "2"}).status(), absl::StatusCode::kAlreadyExists));
  absl::StatusOr<client::ModuleInfo> info = m->Show();
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->published.size(), 1u);
  EXPECT_EQ(info->published[0].max_batch_size, 8);
  EXPECT_TRUE(client::Unpublish(S(), "served").ok());
  EXPECT_TRUE(StatusIs(client::Unpublish(S(), "served"), absl::StatusCode::kNotFound));
  EXPECT_TRUE(m->Remove().ok());
}

// ---------------------------------------------------------------------------------------------
// Models beyond the MLP (norms, causal attention, GELU, residuals, an embedding) under torch's
// plans, on both meshes, against the single-process reference (reference/module_reference.h): the
// forward, and two training steps with momentum (gradients and parameters after).

constexpr const char* kBlock = testing::kBlockDim8Float64;

constexpr char kEmbeddingPlan[] = R"json({"plan": {"tok": "RowwiseParallel",
  "head": {"style": "ColwiseParallel", "output_layouts": "Replicate()"}}})json";

struct ModelCase {
  std::string name;
  const char* spec;
  const char* plan;
  Shape input;  // full
};

// (model, mesh)
using ReferenceCase = std::tuple<ModelCase, std::string>;
class ReferenceModelTest : public ::testing::TestWithParam<ReferenceCase> {};

// As torch.testing.assert_close: every element within atol + rtol * |want| (gradients that are 0
// in exact arithmetic, such as a key bias's, come out as rounding noise).
::testing::AssertionResult AllClose(const HostTensor& got, const HostTensor& want, double rtol,
                                    double atol) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) {
    return ::testing::AssertionFailure()
           << "got " << DTypeName(got.dtype()) << ShapeToString(got.shape()) << ", want "
           << DTypeName(want.dtype()) << ShapeToString(want.shape());
  }
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    const double a = At(got, i), b = At(want, i);
    if (std::abs(a - b) > atol + rtol * std::abs(b)) {
      return ::testing::AssertionFailure()
             << "differs at flat index " << i << ": got " << a << ", want " << b;
    }
  }
  return ::testing::AssertionSuccess();
}

// float64 models, whose kernels keep norm statistics and attention probabilities in float32, and
// float32 ones (the embedding model), against the float64 reference.
::testing::AssertionResult Close(const HostTensor& got, const HostTensor& want) {
  return got.dtype() == DType::kFloat64 ? AllClose(got, want, 1e-4, 1e-6)
                                        : AllClose(got, want, 1e-4, 1e-5);
}

TEST_P(ReferenceModelTest, ForwardAndStepsMatchTheSingleProcess) {
  const auto& [c, mesh] = GetParam();
  absl::StatusOr<ModelSpec> spec = ParseModelSpec(c.spec);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const DType dtype = spec->input.dtype == DType::kInt64 ? DType::kFloat32 : spec->input.dtype;
  absl::StatusOr<std::map<std::string, HostTensor>> params = RandomParameters(*spec, 5, dtype);
  ASSERT_TRUE(params.ok()) << params.status();
  ReferenceModel reference{*spec, {}};
  for (const auto& [fqn, t] : *params) reference.params.emplace(fqn, t.Clone());
  const std::string name = absl::StrCat(c.name, "_", mesh);
  absl::StatusOr<Module> loaded = client::LoadModule(
      S(), c.spec, M(mesh), name, {.weights_path = WriteWeights(name + ".safetensors", *params)});
  ASSERT_TRUE(loaded.ok()) << loaded.status() << shared->cluster.LogHint();
  absl::StatusOr<Module> m = client::ParallelizeModule(*loaded, "tp", c.plan);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->info().unmatched.empty());

  const HostTensor input = spec->input.dtype == DType::kInt64
                               ? kernels::testing::RandomTensor(DType::kInt64, c.input, 3, 0, 19)
                               : kernels::testing::RandomTensor(dtype, c.input, 3);
  absl::StatusOr<HostTensor> want = ReferenceForward(reference, input);
  ASSERT_TRUE(want.ok()) << want.status();
  absl::StatusOr<client::ModuleOutput> y = m->Forward(input);
  ASSERT_TRUE(y.ok()) << y.status() << shared->cluster.LogHint();
  EXPECT_TRUE(Close(*y->full, *want));

  const client::SgdOptions sgd{.lr = 0.25, .momentum = 0.9, .weight_decay = 0.01};
  std::map<std::string, HostTensor> buffers;
  std::map<std::string, HostTensor> grads;
  for (int step = 0; step < 2; ++step) {
    absl::StatusOr<ReferenceStep> ref = ReferenceBackward(reference, input, nullptr);
    ASSERT_TRUE(ref.ok()) << ref.status();
    absl::StatusOr<client::StepResult> got = m->Step(input, {.sgd = sgd});
    ASSERT_TRUE(got.ok()) << got.status() << shared->cluster.LogHint();
    EXPECT_TRUE(Close(*got->output.full, ref->output)) << "step " << step;
    ASSERT_TRUE(
        ReferenceSgd(reference, ref->grads, {sgd.lr, sgd.momentum, sgd.weight_decay}, buffers)
            .ok());
    grads = std::move(ref->grads);
  }
  const Weights after = testing::StateDictOf(*m, /*gradients=*/true);
  for (const auto& [fqn, t] : reference.params) {
    EXPECT_TRUE(Close(after.at(fqn + ".grad"), grads.at(fqn))) << fqn;
    EXPECT_TRUE(Close(after.at(fqn), t)) << fqn;
  }
  EXPECT_TRUE(m->Remove().ok());
}

INSTANTIATE_TEST_SUITE_P(
    Cluster, ReferenceModelTest,
    ::testing::Combine(
        ::testing::Values(ModelCase{"megatron", kBlock, kMegatron, {2, 5, 8}},
                          ModelCase{"sequence", kBlock, kSequenceParallel, {2, 5, 8}},
                          ModelCase{"embedding", kEmbeddingHead, kEmbeddingPlan, {2, 6}}),
        ::testing::Values("line", "grid")),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param).name, "_", std::get<1>(info.param));
    });

// ---------------------------------------------------------------------------------------------
// Bad input: refused with its code and a message naming the value; everything else intact.

// A module every bad-input test checks is still whole afterwards.
class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    weights_ = MlpWeights(51);
    absl::StatusOr<Module> m =
        LoadMlp("intact", "line", WriteWeights("intact.safetensors", weights_), kMlpPlan);
    ASSERT_TRUE(m.ok()) << m.status() << shared->cluster.LogHint();
    intact_ = *m;
    absl::StatusOr<client::ModuleInfo> info = intact_.Show();
    ASSERT_TRUE(info.ok());
    layout_before_ = *info;
  }
  void TearDown() override {
    // The module answers as before, with its layout and its parameters.
    absl::StatusOr<client::ModuleInfo> info = intact_.Show();
    ASSERT_TRUE(info.ok()) << info.status();
    ASSERT_EQ(info->parameters.size(), layout_before_.parameters.size());
    for (size_t i = 0; i < info->parameters.size(); ++i) {
      EXPECT_EQ(info->parameters[i].spec.placements, layout_before_.parameters[i].spec.placements);
    }
    EXPECT_EQ(info->plan_json, layout_before_.plan_json);
    const HostTensor x = kernels::testing::RandomTensor(DType::kFloat32, {4, 10}, 6);
    absl::StatusOr<client::ModuleOutput> y = intact_.Forward(x);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(TensorsMatch(*y->full, MlpForward(weights_, x), kTolerance));
    // Nothing of the refused module is on the service.
    EXPECT_TRUE(testing::TensorsNamed(S(), "bad.").empty());
    absl::StatusOr<std::vector<client::ModuleInfo>> modules = client::ListModules(S());
    ASSERT_TRUE(modules.ok());
    for (const client::ModuleInfo& m : *modules) EXPECT_NE(m.name, "bad");
    EXPECT_TRUE(intact_.Remove().ok());
  }

  // Loads the MLP as "bad" from `weights`, expecting `code` and every fragment.
  void ExpectLoadRefused(const Weights& weights, absl::StatusCode code,
                         const std::vector<std::string>& fragments) {
    const std::string path = WriteWeights("bad.safetensors", weights);
    EXPECT_TRUE(StatusIs(LoadMlp("bad", "line", path).status(), code, fragments));
  }

  Weights weights_;
  Module intact_;
  client::ModuleInfo layout_before_;
};

TEST_F(BadInputTest, AMalformedSpecIsNamed) {
  EXPECT_TRUE(StatusIs(
      client::LoadModule(S(), R"({"type": "Linearr"})", M("line"), "bad", {.seed = 1}).status(),
      absl::StatusCode::kInvalidArgument, {"Linearr"}));
  EXPECT_TRUE(StatusIs(client::LoadModule(S(), "{not json", M("line"), "bad", {.seed = 1}).status(),
                       absl::StatusCode::kInvalidArgument, {"module spec"}));
}

TEST_F(BadInputTest, WeightsMissingAParameterAreRefusedNamingIt) {
  Weights w = MlpWeights(1);
  w.erase("net2.bias");
  ExpectLoadRefused(w, absl::StatusCode::kInvalidArgument, {"'net2.bias' [12] is missing"});
}

TEST_F(BadInputTest, WeightsWithAnExtraTensorAreRefusedNamingIt) {
  Weights w = MlpWeights(1);
  w.emplace("net3.weight", kernels::testing::RandomTensor(DType::kFloat32, {2, 2}, 1));
  ExpectLoadRefused(w, absl::StatusCode::kInvalidArgument, {"'net3.weight' [2, 2]"});
}

TEST_F(BadInputTest, AMisShapedWeightIsRefusedNamingBothShapes) {
  Weights w = MlpWeights(1);
  w.erase("net1.weight");
  w.emplace("net1.weight", kernels::testing::RandomTensor(DType::kFloat32, {10, 16}, 1));
  ExpectLoadRefused(w, absl::StatusCode::kInvalidArgument,
                    {"'net1.weight' is [16, 10] in the spec but [10, 16] in the weights"});
}

TEST_F(BadInputTest, AnotherDtypeIsRefusedNamingIt) {
  Weights w = MlpWeights(1);
  w.erase("net1.bias");
  w.emplace("net1.bias", kernels::testing::RandomTensor(DType::kFloat64, {16}, 1));
  ExpectLoadRefused(w, absl::StatusCode::kInvalidArgument, {"'net1.bias' is float64"});
}

// A stream that ends part way through the weights: the parameters already routed to their shards
// are freed with the rest.
TEST_F(BadInputTest, AWeightsStreamCutShortLeavesNothing) {
  auto stub = v1::ModuleService::NewStub(
      grpc::CreateChannel(shared->cluster.cluster->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(absl::Seconds(30)));
  v1::ModuleInfo info;
  auto writer = stub->LoadModule(&context, &info);
  v1::LoadModuleChunk chunk;
  v1::LoadModuleHeader* h = chunk.mutable_header();
  h->set_name("bad");
  h->set_mesh("line");
  h->set_spec_json(kMlpSpec);
  h->set_weights_follow(true);
  const Weights w = MlpWeights(2);
  for (const auto& [name, t] : w) {
    v1::WeightsEntry* e = chunk.mutable_weights()->add_tensors();
    e->set_name(name);
    e->set_dtype(ToProto(t.dtype()));
    *e->mutable_shape() = ToProto(t.shape());
  }
  ASSERT_TRUE(writer->Write(chunk));
  // The first two tensors whole, then half of the third.
  auto it = w.begin();
  for (int i = 0; i < 2; ++i, ++it) {
    v1::LoadModuleChunk data;
    data.set_data(reinterpret_cast<const char*>(it->second.data()), it->second.nbytes());
    ASSERT_TRUE(writer->Write(data));
  }
  v1::LoadModuleChunk half;
  half.set_data(reinterpret_cast<const char*>(it->second.data()), it->second.nbytes() / 2);
  ASSERT_TRUE(writer->Write(half));
  writer->WritesDone();
  EXPECT_TRUE(StatusIs(FromGrpcStatus(writer->Finish()), absl::StatusCode::kInvalidArgument,
                       {"the stream ended in the bytes of weights tensor", it->first}));
}

// Parameters past the workers' budget (256 MiB each): the second Linear's weight does not fit
// beside the first's; the first is freed again.
TEST_F(BadInputTest, ParametersPastTheBudgetLeaveNothing) {
  constexpr char kHuge[] = R"({"type": "Sequential", "children": [
    {"type": "Linear", "in_features": 10, "out_features": 10},
    {"type": "Linear", "in_features": 10, "out_features": 8388608}]})";
  EXPECT_TRUE(StatusIs(client::LoadModule(S(), kHuge, M("line"), "bad", {.seed = 1}).status(),
                       absl::StatusCode::kResourceExhausted, {"worker"}));
}

TEST_F(BadInputTest, ANameInUseIsRefused) {
  EXPECT_TRUE(StatusIs(client::LoadModule(S(), kMlpSpec, M("line"), "intact", {.seed = 1}).status(),
                       absl::StatusCode::kAlreadyExists, {"'intact'"}));
  EXPECT_TRUE(StatusIs(client::LoadModule(S(), kMlpSpec, M("line"), "a.b", {.seed = 1}).status(),
                       absl::StatusCode::kInvalidArgument, {"'a.b'"}));
}

TEST_F(BadInputTest, AnUnknownMeshOrModuleIsNotFound) {
  client::Mesh nowhere{"nowhere", M("line").mesh};
  EXPECT_TRUE(StatusIs(client::LoadModule(S(), kMlpSpec, nowhere, "bad", {.seed = 1}).status(),
                       absl::StatusCode::kNotFound, {"'nowhere'"}));
  EXPECT_TRUE(
      StatusIs(client::GetModule(S(), "ghost").status(), absl::StatusCode::kNotFound, {"'ghost'"}));
  EXPECT_TRUE(
      StatusIs(client::RemoveModule(S(), "ghost"), absl::StatusCode::kNotFound, {"'ghost'"}));
}

TEST_F(BadInputTest, ABadPlanChangesNothing) {
  EXPECT_TRUE(
      StatusIs(client::ParallelizeModule(intact_, "line", R"({"plan": {"net1": "ColumnParallel"}})")
                   .status(),
               absl::StatusCode::kInvalidArgument, {"ColumnParallel"}));
  // A style that cannot apply to the module it lands on.
  EXPECT_TRUE(StatusIs(
      client::ParallelizeModule(intact_, "line", R"({"plan": {"relu": "ColwiseParallel"}})")
          .status(),
      absl::StatusCode::kInvalidArgument, {"relu"}));
  EXPECT_TRUE(StatusIs(client::ParallelizeModule(intact_, "nodim", kMlpPlan).status(),
                       absl::StatusCode::kInvalidArgument, {"'nodim'"}));
  EXPECT_TRUE(StatusIs(client::DistributeModule(intact_, kMlpPlan).status(),
                       absl::StatusCode::kInvalidArgument, {"ParallelizeModule"}));
}

TEST_F(BadInputTest, ABadInputIsNamed) {
  const HostTensor wrong = kernels::testing::RandomTensor(DType::kFloat32, {4, 9}, 1);
  EXPECT_TRUE(StatusIs(intact_.Forward(wrong).status(), absl::StatusCode::kInvalidArgument,
                       {"float32[4, 9]", "[-1, 10]"}));
  const HostTensor ints = HostTensor::ZerosOfValidShape(DType::kInt32, {4, 10});
  EXPECT_TRUE(StatusIs(intact_.Forward(ints).status(), absl::StatusCode::kInvalidArgument,
                       {"int32[4, 10]"}));
  std::vector<HostTensor> three;
  for (int i = 0; i < 3; ++i)
    three.push_back(HostTensor::ZerosOfValidShape(DType::kFloat32, {2, 10}));
  EXPECT_TRUE(StatusIs(intact_.ForwardLocal(three).status(), absl::StatusCode::kInvalidArgument,
                       {"3 local inputs", "4 ranks"}));
  const HostTensor x = kernels::testing::RandomTensor(DType::kFloat32, {4, 10}, 1);
  const HostTensor bad_grad = HostTensor::ZerosOfValidShape(DType::kFloat32, {4, 11});
  EXPECT_TRUE(StatusIs(intact_.Step(x, {.grad_output = bad_grad.Clone()}).status(),
                       absl::StatusCode::kInvalidArgument, {"grad_output", "[4, 11]", "[4, 12]"}));
}

}  // namespace
}  // namespace tessera
