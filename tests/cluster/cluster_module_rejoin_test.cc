// A worker of a 2x2 mesh killed with SIGKILL and started again empty on its address, under
// modules loaded and published on that mesh: once the mesh takes the worker back, every module
// whose parameters have replicas on the live ranks is reinstalled on it (its parameters repaired
// from the replicas), its forward gives bit for bit what it gave before, and its published model
// answers KServe's ModelInfer as before, with no `module rm` and `load`; a module with a
// parameter block only the restarted worker held answers DATA_LOSS naming the parameter and can be
// removed. (Every forward and inference of every module on the mesh used to fail for good, the
// mesh "broken: ... restarted since the mesh was created", while the module list showed them.)

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/small_integer_tensor.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "tessera/tessera.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/cluster/kserve_infer.h"
#include "tests/support/test_models.h"

namespace tessera {
namespace {

using ::tessera::client::Module;
using ::tessera::client::Session;
using ::tessera::testing::InferRaw;
using ::tessera::testing::TestCluster;
using ::tessera::testing::TestClusterOptions;

constexpr int kVictim = 2;  // LocalCluster's index of the worker restarted

// Calls `call` until it succeeds or answers DATA_LOSS, up to 60 s (the mesh answers UNAVAILABLE
// until it took the worker back, and the module moves onto it just after); its last answer.
template <typename F>
auto UntilBack(F call) {
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  auto result = call();
  while (!result.ok() && result.status().code() != absl::StatusCode::kDataLoss &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    result = call();
  }
  return result;
}

TEST(ClusterModuleRejoin, ModulesAreReinstalledWhenTheirMeshTakesARestartedWorkerBack) {
  TestCluster cluster;
  ASSERT_TRUE(cluster.Start(TestClusterOptions(4)).ok()) << cluster.LogHint();
  Session& s = *cluster.client;
  absl::StatusOr<client::MeshInfo> info =
      client::InitDeviceMesh(s, testing::TestDevice(), {2, 2}, {"dp", "tp"}, "grid");
  ASSERT_TRUE(info.ok()) << info.status();
  const client::Mesh grid{info->name, info->mesh};
  const HostTensor x = SmallIntegerTensor(DType::kFloat32, {2, 3, 16}, 5);

  // Replicated along dp whatever the plan on tp: every block of the victim has a replica.
  struct Case {
    std::string name;
    std::string plan_json;  // parallelize_module on tp; empty: no plan (all Replicate)
    HostTensor output;
  };
  std::vector<Case> cases;
  cases.push_back({"megatron", testing::kMegatron, {}});
  cases.push_back({"replicated", "", {}});
  for (Case& c : cases) {
    absl::StatusOr<Module> m =
        client::LoadModule(s, testing::kBlockDim16Float32, grid, c.name, {.seed = 7});
    ASSERT_TRUE(m.ok()) << m.status();
    if (!c.plan_json.empty()) m = client::ParallelizeModule(*m, "tp", c.plan_json);
    ASSERT_TRUE(m.ok()) << m.status();
    absl::StatusOr<client::ModuleOutput> out = m->Forward(x);
    ASSERT_TRUE(out.ok() && out->full.has_value()) << out.status();
    c.output = *std::move(out->full);
  }
  absl::StatusOr<Module> megatron = client::GetModule(s, "megatron");
  ASSERT_TRUE(megatron.ok()) << megatron.status();
  ASSERT_TRUE(megatron->Publish({.model = "served", .version = "1"}).ok());
  ASSERT_TRUE(megatron->Publish({.model = "served", .version = "2", .max_batch_size = 4}).ok());
  auto kserve = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(cluster.cluster->address(), grpc::InsecureChannelCredentials()));
  absl::StatusOr<std::string> inferred = InferRaw(*kserve, "served", x);
  ASSERT_TRUE(inferred.ok()) << inferred.status();
  // net1's weight sharded on both mesh dims: one of its blocks lives on the victim alone.
  absl::StatusOr<Module> sharded =
      client::LoadModule(s, testing::kBlockDim16Float32, grid, "sharded", {.seed = 3});
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  sharded = client::DistributeModule(
      *sharded, R"json({"distribute": {"mlp.net1.weight": ["Shard(0)", "Shard(1)"]}})json");
  ASSERT_TRUE(sharded.ok()) << sharded.status();

  ASSERT_TRUE(cluster.cluster->KillWorker(kVictim).ok());
  ASSERT_TRUE(cluster.cluster->RestartWorker(kVictim).ok()) << cluster.LogHint();

  for (const Case& c : cases) {
    absl::StatusOr<HostTensor> out = UntilBack([&]() -> absl::StatusOr<HostTensor> {
      absl::StatusOr<Module> m = client::GetModule(s, c.name);
      if (!m.ok()) return m.status();
      absl::StatusOr<client::ModuleOutput> o = m->Forward(x);
      if (!o.ok()) return o.status();
      return *std::move(o->full);
    });
    ASSERT_TRUE(out.ok()) << c.name << ": " << out.status() << cluster.LogHint();
    EXPECT_TRUE(out->BitEqual(c.output)) << c.name << ": the forward differs from before";
  }
  absl::StatusOr<std::string> again = UntilBack([&] { return InferRaw(*kserve, "served", x); });
  ASSERT_TRUE(again.ok()) << again.status() << cluster.LogHint();
  EXPECT_EQ(*again, *inferred) << "KServe inference differs from before the restart";
  absl::StatusOr<Module> back = client::GetModule(s, "megatron");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->info().published.size(), 2u);
  absl::StatusOr<client::StepResult> step = back->Step(x, {.sgd = client::SgdOptions{.lr = 0.1}});
  EXPECT_TRUE(step.ok()) << step.status();

  absl::Status lost = UntilBack([&]() -> absl::StatusOr<client::ModuleOutput> {
                        absl::StatusOr<Module> m = client::GetModule(s, "sharded");
                        if (!m.ok()) return m.status();
                        return m->Forward(x);
                      }).status();
  EXPECT_EQ(lost.code(), absl::StatusCode::kDataLoss) << lost;
  EXPECT_NE(lost.message().find("net1.weight"), std::string::npos) << lost;
  EXPECT_EQ(lost.message().find("delete and create"), std::string::npos) << lost;
  EXPECT_TRUE(client::RemoveModule(s, "sharded").ok());
  EXPECT_EQ(client::GetModule(s, "sharded").status().code(), absl::StatusCode::kNotFound);
  cluster.Stop();
}

}  // namespace
}  // namespace tessera
