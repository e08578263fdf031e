// Coordinator restart with --state_dir keeps modules: for every plan kind (none,
// parallelize_module on a mesh dim, distribute_module) on a 1-D and a 2-D mesh, a module loaded
// before the coordinator is killed with SIGKILL comes back after the restart with the same
// parameters (bit for bit), plan and layouts, and its forward gives bit for bit the output it gave
// before; a model published for KServe answers the same over the v2 gRPC endpoint; removed modules
// and unpublished versions stay gone; a training step runs; and a module whose parameter's only
// copy of a block was on a worker that died during the outage answers DATA_LOSS naming it.

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/small_integer_tensor.h"
#include "core/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "proto/convert.h"
#include "server/cluster/state_store.h"
#include "tessera/tessera.h"
#include "tessera/v1/state.pb.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/cluster/kserve_infer.h"
#include "tests/support/test_models.h"

namespace tessera {
namespace {

using ::tessera::client::Module;
using ::tessera::client::Session;
using ::tessera::testing::InferRaw;
using ::tessera::testing::RetryUnavailable;
using ::tessera::testing::TestCluster;
using ::tessera::testing::TestClusterOptions;

constexpr int kWorkers = 5;
constexpr int64_t kDoomed = 4;  // killed during the outage, with the only copy of a block

// How a case lays out its module: no plan, parallelize_module on the "tp" dim, or
// distribute_module.
enum class PlanKind { kNone, kParallelize, kDistribute };

std::string PlanKindName(PlanKind kind) {
  switch (kind) {
    case PlanKind::kNone:
      return "none";
    case PlanKind::kParallelize:
      return "parallelize";
    case PlanKind::kDistribute:
      return "distribute";
  }
  return "?";
}

// A distribute_module partition for a mesh of `ndim` dims: the MLP's weights sharded on every dim.
std::string Partition(int ndim) {
  return ndim == 1 ? R"json({"distribute": {"mlp.net1.weight": ["Shard(0)"],
                                           "mlp.net2.weight": ["Shard(1)"]}})json"
                   : R"json({"distribute": {"mlp.net1.weight": ["Shard(0)", "Shard(1)"],
                                           "mlp.net2.weight": ["Shard(1)", "Shard(0)"]}})json";
}

// A module of the product (mesh, plan kind) and what it gave before the restart.
struct Loaded {
  std::string mesh;
  PlanKind kind;
  Module module;
  client::ModuleInfo info;
  std::vector<std::pair<std::string, HostTensor>> state;
  HostTensor output;
};

TEST(ClusterModuleRecovery, ModulesPlansAndPublishedModelsSurviveACoordinatorKill) {
  TestCluster cluster;
  LocalClusterOptions options = TestClusterOptions(kWorkers);
  options.keep_state = true;
  options.recovery_wait = absl::Seconds(4);
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.LogHint();
  LocalCluster& local = *cluster.cluster;
  Session& admin = *cluster.client;
  const std::string device = testing::TestDevice();
  client::MeshOptions four;
  four.worker_ids = {0, 1, 2, 3};
  client::MeshOptions doomed_ids;
  doomed_ids.worker_ids = {kDoomed, 0};
  std::map<std::string, client::Mesh> meshes;
  for (const auto& [name, shape, dims, ids] :
       std::vector<std::tuple<std::string, Shape, std::vector<std::string>, client::MeshOptions>>{
           {"line", {4}, {"tp"}, four},
           {"grid", {2, 2}, {"dp", "tp"}, four},
           {"doomed", {2}, {"tp"}, doomed_ids}}) {
    absl::StatusOr<client::MeshInfo> info =
        client::InitDeviceMesh(admin, device, shape, dims, name, ids);
    ASSERT_TRUE(info.ok()) << info.status() << cluster.LogHint();
    meshes.emplace(name, client::Mesh{info->name, info->mesh});
  }
  int doomed_index = -1;
  absl::StatusOr<std::vector<client::WorkerInfo>> workers = admin.ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  for (int i = 0; i < local.num_workers(); ++i) {
    for (const client::WorkerInfo& w : *workers) {
      if (w.pid == local.worker_pid(i) && w.worker_id == kDoomed) doomed_index = i;
    }
  }
  ASSERT_GE(doomed_index, 0);

  const HostTensor x = SmallIntegerTensor(DType::kFloat32, {2, 3, 16}, 5);
  std::vector<Loaded> loaded;
  uint64_t seed = 10;
  for (const std::string mesh : {"line", "grid"}) {
    for (PlanKind kind : {PlanKind::kNone, PlanKind::kParallelize, PlanKind::kDistribute}) {
      SCOPED_TRACE(absl::StrCat(mesh, " ", PlanKindName(kind)));
      const std::string name = absl::StrCat("m_", mesh, "_", PlanKindName(kind));
      absl::StatusOr<Module> m = client::LoadModule(admin, testing::kBlockDim16Float32,
                                                    meshes.at(mesh), name, {.seed = seed++});
      ASSERT_TRUE(m.ok()) << m.status() << cluster.LogHint();
      if (kind == PlanKind::kParallelize)
        m = client::ParallelizeModule(*m, "tp", testing::kMegatron);
      if (kind == PlanKind::kDistribute) {
        m = client::DistributeModule(*m, Partition(meshes.at(mesh).mesh.ndim()));
      }
      ASSERT_TRUE(m.ok()) << m.status() << cluster.LogHint();
      Loaded l{mesh, kind, *m, {}, {}, {}};
      absl::StatusOr<client::ModuleInfo> info = m->Show();
      ASSERT_TRUE(info.ok()) << info.status();
      l.info = *std::move(info);
      absl::StatusOr<std::vector<std::pair<std::string, HostTensor>>> state = m->StateDict();
      ASSERT_TRUE(state.ok()) << state.status();
      l.state = *std::move(state);
      absl::StatusOr<client::ModuleOutput> out = m->Forward(x);
      ASSERT_TRUE(out.ok() && out->full.has_value()) << out.status();
      l.output = *std::move(out->full);
      loaded.push_back(std::move(l));
    }
  }
  // Published: the parallelized module on the line (model "served", versions 1 and 2, then 2
  // unpublished), and one removed module that must stay removed.
  Module& served = loaded[1].module;
  ASSERT_TRUE(served.Publish({.model = "served", .version = "1"}).ok());
  ASSERT_TRUE(served.Publish({.model = "served", .version = "2", .max_batch_size = 4}).ok());
  ASSERT_TRUE(client::Unpublish(admin, "served", "2").ok());
  auto kserve = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(local.address(), grpc::InsecureChannelCredentials()));
  absl::StatusOr<std::string> inferred = InferRaw(*kserve, "served", x);
  ASSERT_TRUE(inferred.ok()) << inferred.status();
  {
    absl::StatusOr<Module> removed = client::LoadModule(admin, testing::kBlockDim16Float32,
                                                        meshes.at("line"), "removed", {.seed = 1});
    ASSERT_TRUE(removed.ok()) << removed.status();
    ASSERT_TRUE(removed->Remove().ok());
  }
  // On the mesh whose worker dies: net1's weight sharded, so one block is only on that worker.
  absl::StatusOr<Module> doomed =
      client::LoadModule(admin, testing::kBlockDim16Float32, meshes.at("doomed"), "doomed_module",
                         {.seed = 3}, {.plan_json = testing::kMegatron});
  ASSERT_TRUE(doomed.ok()) << doomed.status() << cluster.LogHint();

  ASSERT_TRUE(local.KillCoordinator().ok());
  ASSERT_TRUE(local.KillWorker(doomed_index).ok());
  ASSERT_TRUE(local.RestartCoordinator().ok()) << cluster.LogHint();

  for (const Loaded& l : loaded) {
    SCOPED_TRACE(absl::StrCat(l.mesh, " ", PlanKindName(l.kind)));
    absl::StatusOr<Module> m =
        RetryUnavailable([&] { return client::GetModule(admin, l.info.name); });
    ASSERT_TRUE(m.ok()) << m.status() << cluster.LogHint();
    const client::ModuleInfo& info = m->info();
    EXPECT_EQ(info.mesh, l.info.mesh);
    EXPECT_EQ(info.plan_json, l.info.plan_json);
    ASSERT_EQ(info.parameters.size(), l.info.parameters.size());
    for (size_t i = 0; i < info.parameters.size(); ++i) {
      EXPECT_EQ(info.parameters[i].fqn, l.info.parameters[i].fqn);
      EXPECT_EQ(info.parameters[i].spec.placements, l.info.parameters[i].spec.placements)
          << info.parameters[i].fqn;
    }
    absl::StatusOr<std::vector<std::pair<std::string, HostTensor>>> state = m->StateDict();
    ASSERT_TRUE(state.ok()) << state.status();
    ASSERT_EQ(state->size(), l.state.size());
    for (size_t i = 0; i < state->size(); ++i) {
      EXPECT_EQ((*state)[i].first, l.state[i].first);
      EXPECT_TRUE((*state)[i].second.BitEqual(l.state[i].second)) << l.state[i].first;
    }
    absl::StatusOr<client::ModuleOutput> out = m->Forward(x);
    ASSERT_TRUE(out.ok() && out->full.has_value()) << out.status() << cluster.LogHint();
    EXPECT_TRUE(out->full->BitEqual(l.output)) << "the forward differs from before the restart";
  }
  // The published model answers the same; the unpublished version and the removed module stay
  // gone.
  absl::StatusOr<std::string> again =
      RetryUnavailable([&] { return InferRaw(*kserve, "served", x); });
  ASSERT_TRUE(again.ok()) << again.status() << cluster.LogHint();
  EXPECT_EQ(*again, *inferred) << "KServe inference differs from before the restart";
  absl::StatusOr<Module> after = client::GetModule(admin, loaded[1].info.name);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->info().published.size(), 1u);
  EXPECT_EQ(after->info().published[0].version, "1");
  EXPECT_EQ(client::GetModule(admin, "removed").status().code(), absl::StatusCode::kNotFound);
  // A training step, then the parameters moved.
  absl::StatusOr<client::StepResult> step = after->Step(x, {.sgd = client::SgdOptions{.lr = 0.1}});
  ASSERT_TRUE(step.ok()) << step.status() << cluster.LogHint();
  absl::StatusOr<std::vector<std::pair<std::string, HostTensor>>> stepped = after->StateDict();
  ASSERT_TRUE(stepped.ok()) << stepped.status();
  EXPECT_FALSE(stepped->front().second.BitEqual(loaded[1].state.front().second));

  // The module whose worker died: DATA_LOSS naming the module and the parameter; removable.
  absl::StatusOr<Module> lost =
      RetryUnavailable([&] { return client::GetModule(admin, "doomed_module"); });
  absl::Status lost_status = lost.status();
  if (lost.ok()) lost_status = lost->Forward(x).status();
  EXPECT_EQ(lost_status.code(), absl::StatusCode::kDataLoss) << lost_status;
  EXPECT_NE(lost_status.message().find("doomed_module"), std::string::npos) << lost_status;
  EXPECT_NE(lost_status.message().find("weight"), std::string::npos) << lost_status;
  EXPECT_TRUE(client::RemoveModule(admin, "doomed_module").ok());
  EXPECT_EQ(client::GetModule(admin, "doomed_module").status().code(), absl::StatusCode::kNotFound);

  // A second restart brings back the same again (the records follow the changes above).
  ASSERT_TRUE(local.KillCoordinator().ok());
  ASSERT_TRUE(local.RestartCoordinator().ok()) << cluster.LogHint();
  absl::StatusOr<Module> twice =
      RetryUnavailable([&] { return client::GetModule(admin, loaded[0].info.name); });
  ASSERT_TRUE(twice.ok()) << twice.status() << cluster.LogHint();
  absl::StatusOr<client::ModuleOutput> out = twice->Forward(x);
  ASSERT_TRUE(out.ok() && out->full.has_value()) << out.status();
  EXPECT_TRUE(out->full->BitEqual(loaded[0].output));
  EXPECT_EQ(client::GetModule(admin, "doomed_module").status().code(), absl::StatusCode::kNotFound);
  cluster.Stop();
}

// Starts a cluster of 2 workers whose coordinator keeps its state in `dir` (emptied first; a 4 s
// recovery wait) and makes the mesh "pair" over both.
absl::StatusOr<client::Mesh> StartPairKeepingState(TestCluster& cluster, const std::string& dir) {
  std::filesystem::remove_all(dir);
  LocalClusterOptions options = TestClusterOptions(2);
  options.state_dir = dir;
  options.recovery_wait = absl::Seconds(4);
  RETURN_IF_ERROR(cluster.Start(options));
  ASSIGN_OR_RETURN(
      client::MeshInfo info,
      client::InitDeviceMesh(*cluster.client, testing::TestDevice(), {2}, {"tp"}, "pair", {}));
  return client::Mesh{info.name, info.mesh};
}

// A relayout in place (parallelize_module moving a parameter) cut short by the restart leaves an
// intent that differs from the tensor's record: the tensor and its module answer DATA_LOSS naming
// it, after that restart and the next. An intent the record caught up with (the relayout finished
// just before the crash) changes nothing. The intents are written into the store of the killed
// coordinator, as a crash between posting the relayout and recording its end leaves them.
TEST(ClusterModuleRecovery, ARelayoutCutShortByTheRestartAnswersDataLoss) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/relayout_state_", ::getpid());
  TestCluster cluster;
  const absl::StatusOr<client::Mesh> started = StartPairKeepingState(cluster, dir);
  ASSERT_TRUE(started.ok()) << started.status() << cluster.LogHint();
  const client::Mesh& mesh = *started;
  LocalCluster& local = *cluster.cluster;
  Session& admin = *cluster.client;
  absl::StatusOr<Module> m = client::LoadModule(admin, testing::kBlockDim16Float32, mesh, "cut",
                                                {.seed = 4}, {.plan_json = testing::kMegatron});
  ASSERT_TRUE(m.ok()) << m.status() << cluster.LogHint();
  const HostTensor values = SmallIntegerTensor(DType::kFloat32, {6, 4}, 8);
  client::DistributeOptions named;
  named.name = "plain";
  absl::StatusOr<client::DTensor> plain =
      client::DistributeTensor(admin, values, mesh, {Placement::Shard(0)}, named);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(local.KillCoordinator().ok());
  {
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    const std::map<std::string, std::string> tensors = (*store)->Load("tensor").value();
    // net1's weight (Shard(0) under the plan) on its way to Replicate.
    v1::TensorInfo weight;
    ASSERT_TRUE(weight.ParseFromString(tensors.at("cut.mlp.net1.weight")));
    DTensorSpec spec = *FromProto(weight.meta());
    ASSERT_EQ(spec.placements, std::vector<Placement>{Placement::Shard(0)});
    spec.placements = {Placement::Replicate()};
    *weight.mutable_meta() = ToProto(spec);
    ASSERT_TRUE((*store)->Put("relayout", weight.name(), weight.SerializeAsString()).ok());
    // "plain" relaid to the layout its record holds: finished.
    ASSERT_TRUE((*store)->Put("relayout", "plain", tensors.at("plain")).ok());
  }
  for (int restart = 0; restart < 2; ++restart) {
    SCOPED_TRACE(absl::StrCat("restart ", restart));
    if (restart > 0) {
      ASSERT_TRUE(local.KillCoordinator().ok());
    }
    ASSERT_TRUE(local.RestartCoordinator().ok()) << cluster.LogHint();
    absl::StatusOr<client::DTensor> back =
        RetryUnavailable([&] { return client::GetTensor(admin, "plain"); });
    ASSERT_TRUE(back.ok()) << back.status() << cluster.LogHint();
    absl::StatusOr<HostTensor> read = back->FullTensor();
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_TRUE(read->BitEqual(values));
    absl::Status weight =
        RetryUnavailable([&] { return client::GetTensor(admin, "cut.mlp.net1.weight"); }).status();
    if (weight.ok()) {
      weight = client::GetTensor(admin, "cut.mlp.net1.weight")->FullTensor().status();
    }
    EXPECT_EQ(weight.code(), absl::StatusCode::kDataLoss) << weight;
    EXPECT_NE(weight.message().find("relaid out from (S(0)) to (R)"), std::string::npos) << weight;
    absl::Status module =
        RetryUnavailable([&] { return client::GetModule(admin, "cut"); }).status();
    EXPECT_EQ(module.code(), absl::StatusCode::kDataLoss) << module;
    EXPECT_NE(module.message().find("'mlp.net1.weight'"), std::string::npos) << module;
  }
  // Removing the module frees its tensors; the next restart finds neither.
  ASSERT_TRUE(client::RemoveModule(admin, "cut").ok());
  ASSERT_TRUE(local.KillCoordinator().ok());
  ASSERT_TRUE(local.RestartCoordinator().ok()) << cluster.LogHint();
  ASSERT_TRUE(RetryUnavailable([&] { return client::GetTensor(admin, "plain"); }).ok());
  EXPECT_EQ(RetryUnavailable([&] { return client::GetModule(admin, "cut"); }).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(RetryUnavailable([&] { return client::GetTensor(admin, "cut.mlp.net1.weight"); })
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  plain = absl::CancelledError();
  cluster.Stop();
  std::filesystem::remove_all(dir);
}

// A plan recorded as pending (the crash came while parallelize_module moved the parameters):
// after the restart the module takes the pending plan if every parameter is laid out by it (the
// moves finished before the crash), else keeps the plan it had; either way it runs as before.
TEST(ClusterModuleRecovery, APendingPlanIsTakenOnlyIfTheParametersMovedToIt) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/pending_state_", ::getpid());
  TestCluster cluster;
  const absl::StatusOr<client::Mesh> started = StartPairKeepingState(cluster, dir);
  ASSERT_TRUE(started.ok()) << started.status() << cluster.LogHint();
  const client::Mesh& mesh = *started;
  LocalCluster& local = *cluster.cluster;
  Session& admin = *cluster.client;
  const HostTensor x = SmallIntegerTensor(DType::kFloat32, {2, 3, 16}, 5);
  // "moved": loaded without a plan, then parallelized (its parameters moved, recorded); "stayed":
  // loaded with the plan. Each gets the other's situation written as a pending plan below.
  std::map<std::string, std::pair<std::string, HostTensor>> before;  // plan_json, forward
  for (const std::string name : {"moved", "stayed"}) {
    absl::StatusOr<Module> m =
        client::LoadModule(admin, testing::kBlockDim16Float32, mesh, name, {.seed = 6},
                           {.plan_json = name == "stayed" ? testing::kMegatron : ""});
    ASSERT_TRUE(m.ok()) << m.status() << cluster.LogHint();
    if (name == "moved") m = client::ParallelizeModule(*m, "tp", testing::kMegatron);
    ASSERT_TRUE(m.ok()) << m.status();
    absl::StatusOr<client::ModuleOutput> out = m->Forward(x);
    ASSERT_TRUE(out.ok() && out->full.has_value()) << out.status();
    before[name] = {m->info().plan_json, *std::move(out->full)};
    ASSERT_FALSE(before[name].first.empty());
  }
  ASSERT_TRUE(local.KillCoordinator().ok());
  {
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    const std::map<std::string, std::string> modules = (*store)->Load("module").value();
    // "moved" as the crash would leave it after the moves were recorded, before the plan was:
    // the plan it had (none) recorded, the new one pending.
    v1::ModuleRecord moved;
    ASSERT_TRUE(moved.ParseFromString(modules.at("moved")));
    moved.set_has_pending_plan(true);
    moved.set_pending_plan_json(moved.plan_json());
    moved.set_pending_mesh_dim(moved.mesh_dim());
    moved.clear_plan_json();
    moved.clear_mesh_dim();
    ASSERT_TRUE((*store)->Put("module", "moved", moved.SerializeAsString()).ok());
    // "stayed" as a crash before any parameter moved leaves it: no plan pending.
    v1::ModuleRecord stayed;
    ASSERT_TRUE(stayed.ParseFromString(modules.at("stayed")));
    stayed.set_has_pending_plan(true);
    stayed.set_pending_plan_json("");
    ASSERT_TRUE((*store)->Put("module", "stayed", stayed.SerializeAsString()).ok());
  }
  for (int restart = 0; restart < 2; ++restart) {
    SCOPED_TRACE(absl::StrCat("restart ", restart));
    if (restart > 0) {
      ASSERT_TRUE(local.KillCoordinator().ok());
    }
    ASSERT_TRUE(local.RestartCoordinator().ok()) << cluster.LogHint();
    for (const auto& [name, was] : before) {
      SCOPED_TRACE(name);
      absl::StatusOr<Module> m = RetryUnavailable([&] { return client::GetModule(admin, name); });
      ASSERT_TRUE(m.ok()) << m.status() << cluster.LogHint();
      EXPECT_EQ(m->info().plan_json, was.first);
      absl::StatusOr<client::ModuleOutput> out = m->Forward(x);
      ASSERT_TRUE(out.ok() && out->full.has_value()) << out.status();
      EXPECT_TRUE(out->full->BitEqual(was.second));
    }
  }
  cluster.Stop();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
