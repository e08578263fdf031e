// Checkpoints on a real local cluster (a coordinator and 4 CPU worker processes): DTensors saved
// from a 2x2 mesh (each worker writing its own blocks) and loaded onto meshes of 2, 3 and 4 workers
// under other placements, compared bit for bit with the original tensor and core's simulated mesh;
// `tessera shard` directories loaded the same way; modules (an MLP and a transformer block) saved
// from one mesh and plan and loaded onto another, every parameter bit for bit and the forward
// agreeing; gradients saved beside them; bad paths and mismatched checkpoints refused with nothing
// lost; and a save whose worker dies half-way leaving the previous checkpoint readable.

#include <signal.h>

#include <cctype>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/files/checkpoint.h"
#include "core/files/file_bytes.h"
#include "core/files/sharded_files.h"
#include "core/sharding/simulated_mesh.h"
#include "kernels/testing/reference.h"
#include "tessera/tessera.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/support/test_models.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ::tessera::client::DTensor;
using ::tessera::client::Session;
using ::tessera::testing::StatusIs;
using ::tessera::testing::TensorsMatch;

// The cluster every test of this file shares: mesh "grid" (2x2, every worker), "pair" (workers 1
// and 3) and "trio" (workers 2, 0, 1: all but the one the last test kills).
struct Shared {
  testing::TestCluster cluster;
  std::shared_ptr<Session> session;
  std::map<std::string, client::Mesh> meshes;
  std::string base;  // the root and a directory outside it
  std::string root;  // checkpoints go under it (the workers' --checkpoint_root)
};
Shared* shared = nullptr;
constexpr int kVictim = 3;  // the worker (by start order) the last test kills

class CheckpointEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    shared = new Shared;
    // The workers' checkpoint root: a directory of this run's own, with a sibling outside it.
    shared->base = (fs::path(::testing::TempDir()) / absl::StrCat("ckpt-", ::getpid())).string();
    shared->root = shared->base + "/root";
    fs::remove_all(shared->base);
    fs::create_directories(shared->root);
    LocalClusterOptions options = testing::TestClusterOptions(4);
    options.memory_budget_bytes = int64_t{256} << 20;
    options.checkpoint_root = shared->root;
    ASSERT_TRUE(shared->cluster.Start(options).ok());
    Session& c = *shared->cluster.client;
    std::vector<int64_t> ids;
    absl::StatusOr<std::vector<client::WorkerInfo>> workers = c.ListWorkers();
    ASSERT_TRUE(workers.ok()) << workers.status();
    for (int i = 0; i < 4; ++i) {
      for (const client::WorkerInfo& w : *workers) {
        if (w.pid == shared->cluster.cluster->worker_pid(i)) ids.push_back(w.worker_id);
      }
    }
    ASSERT_EQ(ids.size(), 4u);
    client::MeshOptions grid, pair, trio;
    grid.worker_ids = ids;
    pair.worker_ids = {ids[1], ids[3]};
    trio.worker_ids = {ids[2], ids[0], ids[1]};
    ASSERT_TRUE(client::InitDeviceMesh(c, "cpu", {2, 2}, {"dp", "tp"}, "grid", grid).ok());
    ASSERT_TRUE(client::InitDeviceMesh(c, "cpu", {2}, {}, "pair", pair).ok());
    ASSERT_TRUE(client::InitDeviceMesh(c, "cpu", {3}, {}, "trio", trio).ok());
    absl::StatusOr<std::shared_ptr<Session>> s =
        Session::Connect(shared->cluster.cluster->address());
    ASSERT_TRUE(s.ok()) << s.status();
    shared->session = *s;
    for (const char* name : {"grid", "pair", "trio"}) {
      absl::StatusOr<client::Mesh> m = client::GetMesh(*shared->session, name);
      ASSERT_TRUE(m.ok()) << m.status();
      shared->meshes.emplace(name, *m);
    }
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(shared->base, ignored);
    shared->session.reset();
    shared->cluster.Stop();
    delete shared;
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new CheckpointEnvironment);

Session& S() { return *shared->session; }
const client::Mesh& M(const std::string& name) { return shared->meshes.at(name); }
std::string PathFor(const std::string& name) { return shared->root + "/" + name; }

// Expects `t` to hold `full` bit for bit, whole and rank by rank as the simulated mesh lays it out.
void ExpectHolds(const DTensor& t, const HostTensor& full) {
  ASSERT_TRUE(t.Synchronize().ok()) << t.Synchronize();
  absl::StatusOr<HostTensor> whole = t.FullTensor();
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(TensorsMatch(*whole, full));
  const std::vector<HostTensor> want =
      SimulatedMesh(t.spec().mesh).Distribute(full, t.spec()).value();
  for (int64_t r = 0; r < t.spec().mesh.size(); ++r) {
    absl::StatusOr<HostTensor> local = t.ToLocal(r);
    ASSERT_TRUE(local.ok()) << local.status();
    EXPECT_TRUE(TensorsMatch(*local, want[r])) << "rank position " << r;
  }
}

// A load target: a mesh and placements on it.
struct Target {
  std::string mesh;
  std::vector<Placement> placements;
};

using Case = std::tuple<std::vector<Placement>, Target, DType>;
class SaveLoadTest : public ::testing::TestWithParam<Case> {};

TEST_P(SaveLoadTest, LoadsOntoAnotherMeshBitExact) {
  const auto& [saved, target, dtype] = GetParam();
  const Shape shape = {7, 6};
  const HostTensor full = kernels::testing::RandomTensor(dtype, shape, 11);
  absl::StatusOr<DTensor> t = client::DistributeTensor(S(), full, M("grid"), saved);
  ASSERT_TRUE(t.ok()) << t.status();
  std::string case_name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  for (char& ch : case_name) ch = ch == '/' ? '-' : ch;
  const std::string path = PathFor(case_name);
  absl::StatusOr<client::SaveInfo> info = t->Save(path);
  ASSERT_TRUE(info.ok()) << info.status();
  // One file per replica group: the Shard mesh dims' sizes multiplied.
  int64_t groups = 1;
  for (int m = 0; m < 2; ++m) groups *= saved[m].is_shard() ? 2 : 1;
  EXPECT_EQ(info->files, groups);
  absl::StatusOr<DTensor> loaded =
      client::LoadTensor(S(), info->path, M(target.mesh), target.placements);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->placements(), target.placements);
  ExpectHolds(*loaded, full);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, SaveLoadTest,
    ::testing::Combine(
        ::testing::Values(std::vector<Placement>{Placement::Shard(0), Placement::Shard(1)},
                          std::vector<Placement>{Placement::Partial(), Placement::Shard(0)},
                          std::vector<Placement>{Placement::Replicate(), Placement::Shard(1)},
                          std::vector<Placement>{Placement::Shard(1), Placement::Replicate()}),
        ::testing::Values(Target{"pair", {Placement::Shard(1)}},
                          Target{"trio", {Placement::Replicate()}},
                          Target{"trio", {Placement::Shard(0)}},
                          Target{"grid", {Placement::Shard(1), Placement::Shard(0)}}),
        ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kInt32)),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Target& target = std::get<1>(info.param);
      std::string name = absl::StrCat(PlacementsToString(std::get<0>(info.param)), "_to_",
                                      target.mesh, PlacementsToString(target.placements), "_",
                                      DTypeName(std::get<2>(info.param)));
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

// A directory `tessera shard` wrote (here by core, on the shared filesystem) loads as well.
TEST(CheckpointTest, LoadsShardedFilesDirectories) {
  const Shape shape = {5, 4};
  const HostTensor full = kernels::testing::RandomTensor(DType::kFloat32, shape, 3);
  const DeviceMesh mesh = DeviceMesh::Create("cpu", {2}, {}, {0, 1}).value();
  const DTensorSpec spec =
      MakeDTensorSpec(mesh, {Placement::Shard(0)}, shape, DType::kFloat32).value();
  const std::string dir = PathFor("sharded");
  ASSERT_TRUE(
      WriteShardedTensor(dir, "w", {spec, SimulatedMesh(mesh).Distribute(full, spec).value()})
          .ok());
  absl::StatusOr<DTensor> loaded = client::LoadTensor(S(), dir, M("trio"), {Placement::Shard(1)});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectHolds(*loaded, full);
}

// Bad paths and targets are refused with the right code, and leave the checkpoint and the tensor
// table as they were.
TEST(CheckpointTest, BadInputIsRefusedAndLosesNothing) {
  const HostTensor full = kernels::testing::RandomTensor(DType::kFloat32, {4, 4}, 5);
  absl::StatusOr<DTensor> t =
      client::DistributeTensor(S(), full, M("grid"), {Placement::Shard(0), Placement::Shard(1)});
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string path = PathFor("kept");
  ASSERT_TRUE(t->Save(path).ok());
  const size_t tensors = S().ListTensors().value().size();

  // A relative path is taken inside the workers' checkpoint root (the test's temporary directory).
  EXPECT_TRUE(StatusIs(t->Save("relative/ckpt").status(), absl::StatusCode::kInvalidArgument,
                       {"not an existing directory"}));
  EXPECT_TRUE(StatusIs(t->Save(PathFor("no/such/parent")).status(),
                       absl::StatusCode::kInvalidArgument, {"not an existing directory"}));
  const std::string file = PathFor("a-file");
  ASSERT_TRUE(WriteFileBytes(file, {}).ok());
  EXPECT_TRUE(
      StatusIs(t->Save(file).status(), absl::StatusCode::kInvalidArgument, {"not a directory"}));
  EXPECT_TRUE(
      StatusIs(client::LoadTensor(S(), "relative", M("pair"), {Placement::Shard(0)}).status(),
               absl::StatusCode::kNotFound));
  EXPECT_TRUE(StatusIs(
      client::LoadTensor(S(), PathFor("missing"), M("pair"), {Placement::Shard(0)}).status(),
      absl::StatusCode::kNotFound));
  EXPECT_TRUE(StatusIs(client::LoadTensor(S(), path, M("pair"), {Placement::Partial()}).status(),
                       absl::StatusCode::kInvalidArgument, {"Partial"}));
  EXPECT_TRUE(StatusIs(client::LoadTensor(S(), path, M("pair"), {Placement::Shard(0)},
                                          client::LoadOptions{"nope", ""})
                           .status(),
                       absl::StatusCode::kNotFound, {"nope"}));
  EXPECT_TRUE(StatusIs(client::LoadTensor(S(), path, M("pair"), {Placement::Shard(5)}).status(),
                       absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(S().ListTensors().value().size(), tensors);

  absl::StatusOr<DTensor> loaded = client::LoadTensor(S(), path, M("trio"), {Placement::Shard(1)});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectHolds(*loaded, full);
}

// Checkpoint paths are the workers' to resolve, inside their --checkpoint_root: a path outside it,
// reached by `..` or through a symlink, is refused PERMISSION_DENIED and nothing is written there;
// a directory inside it that is not a Tessera checkpoint is refused FAILED_PRECONDITION and keeps
// its `data-*` directories; and a save into a checkpoint removes only the data directories saves
// wrote. (Any client could make the workers write into any directory they could write, deleting
// its `data-*` subdirectories and replacing its index.json.)
TEST(CheckpointTest, PathsStayInsideTheRootAndForeignDirectoriesAreNeverCleaned) {
  const HostTensor full = kernels::testing::RandomTensor(DType::kFloat32, {4, 4}, 9);
  absl::StatusOr<DTensor> t =
      client::DistributeTensor(S(), full, M("grid"), {Placement::Shard(0), Placement::Shard(1)});
  ASSERT_TRUE(t.ok()) << t.status();
  // A directory outside the root: beside it.
  const fs::path outside = fs::path(shared->base) / "outside";
  fs::remove_all(outside);
  fs::create_directories(outside / "data-precious");
  ASSERT_TRUE(WriteFileBytes((outside / "data-precious" / "f").string(), {}).ok());
  fs::create_symlink(outside, PathFor("link-out"));
  for (const std::string& path : {(outside / "ckpt").string(), PathFor("../outside/ckpt"),
                                  PathFor("link-out/ckpt"), PathFor("link-out")}) {
    EXPECT_TRUE(StatusIs(t->Save(path).status(), absl::StatusCode::kPermissionDenied,
                         {"not inside this worker's checkpoint root"}))
        << path;
  }
  EXPECT_FALSE(fs::exists(outside / "ckpt"));
  EXPECT_FALSE(fs::exists(outside / "index.json"));
  EXPECT_TRUE(fs::exists(outside / "data-precious" / "f"));

  // Inside the root, a directory of someone else's.
  const std::string foreign = PathFor("foreign");
  fs::create_directories(fs::path(foreign) / "data-theirs");
  ASSERT_TRUE(WriteFileBytes(foreign + "/notes.txt", {}).ok());
  EXPECT_TRUE(StatusIs(t->Save(foreign).status(), absl::StatusCode::kFailedPrecondition,
                       {"not a Tessera checkpoint"}));
  EXPECT_TRUE(fs::exists(fs::path(foreign) / "data-theirs"));
  EXPECT_FALSE(fs::exists(fs::path(foreign) / "index.json"));

  // A checkpoint beside which someone keeps a data-* directory of their own: saves replace only
  // their own data.
  const std::string path = PathFor("shared-dir");
  absl::StatusOr<client::SaveInfo> first = t->Save(path);
  ASSERT_TRUE(first.ok()) << first.status();
  fs::create_directories(fs::path(path) / "data-mine");
  absl::StatusOr<client::SaveInfo> second = t->Save(path);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(fs::exists(fs::path(path) / first->data_dir));
  EXPECT_TRUE(fs::exists(fs::path(path) / second->data_dir));
  EXPECT_TRUE(fs::exists(fs::path(path) / "data-mine"));
  absl::StatusOr<DTensor> back = client::LoadTensor(S(), path, M("trio"), {Placement::Shard(0)});
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectHolds(*back, full);
  // The same checkpoint by its path relative to the root.
  absl::StatusOr<DTensor> relative = client::LoadTensor(
      S(), fs::relative(path, shared->root).string(), M("pair"), {Placement::Shard(0)});
  ASSERT_TRUE(relative.ok()) << relative.status();
  ExpectHolds(*relative, full);
  fs::remove_all(outside);
}

// A float32 MLP on [batch, 16]: Linear(16, 64) -> ReLU -> Linear(64, 16).
constexpr char kMlp[] = R"js({"type": "Module", "input": {"dtype": "float32", "shape": [-1, 16]},
  "children": [
    {"name": "net1", "type": "Linear", "in_features": 16, "out_features": 64},
    {"name": "act", "type": "ReLU"},
    {"name": "net2", "type": "Linear", "in_features": 64, "out_features": 16}]})js";
// The same MLP 32 wide: its net1 and net2 weights differ in shape from kMlp's.
constexpr char kNarrowMlp[] =
    R"js({"type": "Module", "input": {"dtype": "float32", "shape": [-1, 16]},
  "children": [
    {"name": "net1", "type": "Linear", "in_features": 16, "out_features": 32},
    {"name": "act", "type": "ReLU"},
    {"name": "net2", "type": "Linear", "in_features": 32, "out_features": 16}]})js";

// Every tensor of `m`'s state_dict (with `gradients`, the gradients too), by name.
std::map<std::string, HostTensor> StateOf(const client::Module& m, bool gradients = false) {
  std::map<std::string, HostTensor> state;
  absl::StatusOr<std::vector<std::pair<std::string, HostTensor>>> dict = m.StateDict(gradients);
  EXPECT_TRUE(dict.ok()) << dict.status();
  if (!dict.ok()) return state;
  for (auto& [name, t] : *dict) state.emplace(name, std::move(t));
  return state;
}

// Where a module is saved from or loaded onto: a mesh, and Megatron's plan (the MLP's or the
// block's) or none (every parameter Replicate).
struct ModuleLayout {
  std::string mesh;
  bool megatron = false;
};
void PrintTo(const ModuleLayout& layout, std::ostream* out) {
  *out << layout.mesh << (layout.megatron ? " with Megatron's plan" : " without a plan");
}
using ModuleCase = std::tuple<std::string, ModuleLayout, ModuleLayout>;
class ModuleCheckpointTest : public ::testing::TestWithParam<ModuleCase> {};

// A module saved from one mesh and plan (each worker writing its own blocks) loads onto another
// with every parameter bit for bit as saved, and its forward agrees with the original's.
TEST_P(ModuleCheckpointTest, LoadsOntoAnotherMeshAndPlanBitExact) {
  const auto& [spec, from, to] = GetParam();
  static int saves = 0;
  const std::string id = absl::StrCat(++saves);
  const std::string path = PathFor("module-" + id);
  auto plan = [&spec](const ModuleLayout& layout) -> std::string {
    if (!layout.megatron) return "";
    return spec == kMlp ? testing::kMlpPlan : testing::kMegatron;
  };
  absl::StatusOr<client::Module> saved = client::LoadModule(S(), spec, M(from.mesh), "saved-" + id,
                                                            {.seed = 7}, {.plan_json = plan(from)});
  ASSERT_TRUE(saved.ok()) << saved.status();
  absl::StatusOr<client::SaveInfo> info = saved->SaveCheckpoint(path);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->path, path);
  absl::StatusOr<client::Module> loaded = client::LoadModule(
      S(), spec, M(to.mesh), "loaded-" + id, {.checkpoint = path}, {.plan_json = plan(to)});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const std::map<std::string, HostTensor> want = StateOf(*saved), got = StateOf(*loaded);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(want.empty());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.contains(name)) << name;
    EXPECT_TRUE(TensorsMatch(got.at(name), t)) << name;
  }
  // The checkpoint's tensors load one by one as well, under their state_dict names.
  const std::string first = want.begin()->first;
  absl::StatusOr<DTensor> one = client::LoadTensor(S(), path, M("trio"), {Placement::Shard(0)},
                                                   client::LoadOptions{first, ""});
  ASSERT_TRUE(one.ok()) << one.status();
  ExpectHolds(*one, want.at(first));

  const Shape input_shape = spec == kMlp ? Shape{5, 16} : Shape{2, 3, 16};
  const HostTensor x = kernels::testing::RandomTensor(DType::kFloat32, input_shape, 3);
  absl::StatusOr<client::ModuleOutput> y0 = saved->Forward(x), y1 = loaded->Forward(x);
  ASSERT_TRUE(y0.ok()) << y0.status();
  ASSERT_TRUE(y1.ok()) << y1.status();
  // Other layouts sum in another order: float32 rounding only.
  EXPECT_TRUE(TensorsMatch(*y1->full, *y0->full, 1e-5, 1e-6));
  ASSERT_TRUE(saved->Remove().ok());
  ASSERT_TRUE(loaded->Remove().ok());
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ModuleCheckpointTest,
    ::testing::Combine(::testing::Values(std::string(kMlp),
                                         std::string(testing::kBlockDim16Float32)),
                       ::testing::Values(ModuleLayout{"pair", true}, ModuleLayout{"trio", false}),
                       ::testing::Values(ModuleLayout{"trio", false}, ModuleLayout{"pair", true},
                                         ModuleLayout{"pair", false})),
    [](const ::testing::TestParamInfo<ModuleCase>& info) {
      const ModuleLayout& from = std::get<1>(info.param);
      const ModuleLayout& to = std::get<2>(info.param);
      return absl::StrCat(std::get<0>(info.param) == kMlp ? "mlp" : "block", "_", from.mesh,
                          from.megatron ? "_megatron" : "", "_to_", to.mesh,
                          to.megatron ? "_megatron" : "");
    });

// A step's gradients save beside the parameters under "<fqn>.grad" and load as tensors; a
// checkpoint without a parameter, with one of another shape, or at a bad path is refused and
// loads nothing.
TEST(ModuleCheckpointInputTest, GradientsSaveAndBadCheckpointsAreRefused) {
  absl::StatusOr<client::Module> m = client::LoadModule(
      S(), kMlp, M("pair"), "trained", {.seed = 3}, {.plan_json = testing::kMlpPlan});
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string path = PathFor("trained");
  EXPECT_TRUE(StatusIs(m->SaveCheckpoint(path, /*gradients=*/true).status(),
                       absl::StatusCode::kFailedPrecondition, {"no gradients"}));
  ASSERT_TRUE(m->Step(kernels::testing::RandomTensor(DType::kFloat32, {4, 16}, 9)).ok());
  absl::StatusOr<client::SaveInfo> info = m->SaveCheckpoint(path, /*gradients=*/true);
  ASSERT_TRUE(info.ok()) << info.status();
  const std::map<std::string, HostTensor> state = StateOf(*m, /*gradients=*/true);
  ASSERT_EQ(state.size(), 8u);  // net1 and net2, weight and bias, each with its gradient
  for (const auto& [name, t] : state) {
    absl::StatusOr<DTensor> one = client::LoadTensor(S(), path, M("trio"), {Placement::Replicate()},
                                                     client::LoadOptions{name, ""});
    ASSERT_TRUE(one.ok()) << name << ": " << one.status();
    ExpectHolds(*one, t);
  }

  const std::string lone = PathFor("lone");
  absl::StatusOr<DTensor> t =
      client::DistributeTensor(S(), kernels::testing::RandomTensor(DType::kFloat32, {64, 16}, 2),
                               M("pair"), {Placement::Shard(0)});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->Save(lone).ok());
  const size_t modules = client::ListModules(S()).value().size();
  const size_t tensors = S().ListTensors().value().size();
  auto load = [](const char* spec, const std::string& checkpoint) {
    return client::LoadModule(S(), spec, M("pair"), "refused", {.checkpoint = checkpoint}).status();
  };
  EXPECT_TRUE(StatusIs(load(kNarrowMlp, path), absl::StatusCode::kInvalidArgument,
                       {"'net1.", "float32[64", "float32[32"}));
  EXPECT_TRUE(
      StatusIs(load(kMlp, lone), absl::StatusCode::kInvalidArgument, {"has no tensor 'net1."}));
  EXPECT_TRUE(StatusIs(load(kMlp, "relative/ckpt"), absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(StatusIs(load(kMlp, PathFor("missing")), absl::StatusCode::kNotFound));
  EXPECT_TRUE(StatusIs(client::LoadModule(S(), kMlp, M("pair"), "refused",
                                          {.weights_path = lone, .checkpoint = path})
                           .status(),
                       absl::StatusCode::kInvalidArgument, {"not both"}));
  EXPECT_EQ(client::ListModules(S()).value().size(), modules);
  EXPECT_EQ(S().ListTensors().value().size(), tensors);
  ASSERT_TRUE(m->Remove().ok());
}

// A save whose worker dies before writing its block fails, and the previous checkpoint at the
// path still loads, whole and unchanged. Runs last, as it kills a worker: gtest runs the plain
// tests first, then the parameterized suites in the order they are defined.
class KilledSaveTest : public ::testing::TestWithParam<DType> {};

TEST_P(KilledSaveTest, SaveKilledHalfWayLeavesThePreviousCheckpoint) {
  const std::vector<Placement> placements = {Placement::Shard(0), Placement::Shard(1)};
  const HostTensor v1 = kernels::testing::RandomTensor(GetParam(), {8, 6}, 1);
  const HostTensor v2 = kernels::testing::RandomTensor(GetParam(), {8, 6}, 2);
  absl::StatusOr<DTensor> t1 = client::DistributeTensor(S(), v1, M("grid"), placements);
  absl::StatusOr<DTensor> t2 = client::DistributeTensor(S(), v2, M("grid"), placements);
  ASSERT_TRUE(t1.ok() && t2.ok());
  ASSERT_TRUE(t2->Synchronize().ok());
  const std::string path = PathFor("killed");
  ASSERT_TRUE(t1->Save(path).ok());

  // The victim stops before the save reaches it; the others write their blocks meanwhile.
  const pid_t victim = shared->cluster.cluster->worker_pid(kVictim);
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  absl::StatusOr<client::SaveInfo> second;
  std::thread save([&] { second = t2->Save(path); });
  int data_dirs = 0;
  for (int i = 0; i < 100 && data_dirs < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    data_dirs = 0;
    for (const auto& e : fs::directory_iterator(path)) {
      data_dirs += e.path().filename().string().rfind("data-", 0) == 0 ? 1 : 0;
    }
  }
  EXPECT_EQ(data_dirs, 2) << "the second save's data never appeared next to the first's";
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_TRUE(shared->cluster.cluster->KillWorker(kVictim).ok());
  save.join();
  EXPECT_FALSE(second.ok()) << "the save finished although a worker died before writing";

  absl::StatusOr<DTensor> loaded = client::LoadTensor(S(), path, M("trio"), {Placement::Shard(1)});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectHolds(*loaded, v1);
}

// One dtype only: the test kills its worker for good.
INSTANTIATE_TEST_SUITE_P(Once, KilledSaveTest, ::testing::Values(DType::kFloat32));

}  // namespace
}  // namespace tessera
