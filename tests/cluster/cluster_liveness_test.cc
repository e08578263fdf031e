// Liveness across process faults: a coordinator killed with SIGKILL and started again with the same
// flags gets every worker back (each registers again, whatever order their heartbeats arrive in)
// and a mesh over all of them works; a worker that misses heartbeats (SIGSTOP) but is not yet dead
// is not chosen for a new mesh while enough others heartbeat on time.

#include <signal.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/small_integer_tensor.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_fixture.h"

namespace tessera {
namespace {

using ::tessera::client::MeshInfo;
using ::tessera::client::Session;
using ::tessera::client::WorkerInfo;
using ::tessera::testing::TensorsMatch;
using ::tessera::testing::TestCluster;
using ::tessera::testing::TestClusterOptions;

constexpr int kWorkers = 4;
constexpr absl::Duration kHeartbeat = absl::Milliseconds(200);

// Puts a small tensor on every rank of `mesh`, all-reduces it and checks rank 0's result against
// the sum computed here.
::testing::AssertionResult AllReduceWorks(Session& client, const std::string& mesh, int64_t ranks,
                                          uint32_t seed) {
  HostTensor want = SmallIntegerTensor(DType::kFloat32, {5, 3}, seed);
  for (int64_t r = 0; r < ranks; ++r) {
    HostTensor input = SmallIntegerTensor(DType::kFloat32, {5, 3}, seed + static_cast<uint32_t>(r));
    if (r > 0) {
      ReduceInto(ReduceOp::kSum, want.dtype(), want.data(), input.data(), want.num_elements());
    }
    if (absl::Status s = client.PutLocal(mesh, r, "x", input); !s.ok()) {
      return ::testing::AssertionFailure() << "upload to rank " << r << ": " << s;
    }
  }
  absl::StatusOr<client::CollectiveResult> reply =
      client.RunCollective(client::AllReduce({mesh, ""}, "x", "y", ReduceOp::kSum));
  if (!reply.ok()) return ::testing::AssertionFailure() << "all_reduce: " << reply.status();
  absl::StatusOr<HostTensor> got = client.GetLocal(mesh, 0, "y");
  if (!got.ok()) return ::testing::AssertionFailure() << "download: " << got.status();
  return TensorsMatch(*got, want);
}

// The registered workers by pid (alive or not).
std::map<int64_t, WorkerInfo> WorkersByPid(Session& client) {
  std::map<int64_t, WorkerInfo> out;
  absl::StatusOr<std::vector<WorkerInfo>> workers = client.ListWorkers();
  if (workers.ok()) {
    for (const WorkerInfo& w : *workers) out[w.pid] = w;
  }
  return out;
}

std::shared_ptr<Session> Connect(const std::string& address) {
  client::SessionOptions options;
  options.keep_alive = false;
  options.timeout = absl::Seconds(10);
  absl::StatusOr<std::shared_ptr<Session>> session = Session::Connect(address, options);
  return session.ok() ? *session : nullptr;
}

TEST(ClusterLiveness, CoordinatorKilledAndRestartedGetsEveryWorkerBack) {
  TestCluster cluster;
  LocalClusterOptions options = TestClusterOptions(kWorkers);
  options.heartbeat_interval = kHeartbeat;
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.LogHint();
  LocalCluster& local = *cluster.cluster;
  const std::map<int64_t, WorkerInfo> before = WorkersByPid(*cluster.client);
  ASSERT_EQ(before.size(), size_t{kWorkers});

  const std::string address = local.address();
  ASSERT_TRUE(local.KillCoordinator().ok());
  // Long enough for every worker's heartbeat to fail at least once against the dead port.
  absl::SleepFor(3 * kHeartbeat);
  ASSERT_TRUE(local.RestartCoordinator().ok()) << cluster.LogHint();
  ASSERT_EQ(local.address(), address) << "the coordinator came back on another port";

  // Every worker registers again within a few heartbeats (a register retry is 0.5 s).
  std::shared_ptr<Session> client = Connect(address);
  ASSERT_NE(client, nullptr);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  std::map<int64_t, WorkerInfo> after;
  while (absl::Now() < deadline) {
    after = WorkersByPid(*client);
    int alive = 0;
    for (const auto& [pid, w] : after) alive += w.alive ? 1 : 0;
    if (alive == kWorkers) break;
    absl::SleepFor(kHeartbeat / 2);
  }
  std::set<int64_t> ids;
  for (int i = 0; i < kWorkers; ++i) {
    const pid_t pid = local.worker_pid(i);
    ASSERT_TRUE(after.contains(pid))
        << "worker process " << i << " (pid " << pid
        << ") did not register with the new coordinator" << cluster.LogHint();
    EXPECT_TRUE(after[pid].alive) << "pid " << pid;
    EXPECT_NE(after[pid].incarnation, before.at(pid).incarnation) << "pid " << pid;
    ids.insert(after[pid].worker_id);
  }
  EXPECT_EQ(ids.size(), size_t{kWorkers});
  // No worker registered twice (an old registration left behind as a second entry).
  EXPECT_EQ(after.size(), size_t{kWorkers});

  // A mesh over all four works.
  ASSERT_TRUE(client::InitDeviceMesh(*client, "cpu", {kWorkers}, {}, "all").ok());
  EXPECT_TRUE(AllReduceWorks(*client, "all", kWorkers, 7));
  client.reset();
  cluster.Stop();
}

// A worker that misses heartbeats but is not yet dead is chosen for a new mesh only when it must
// be: with `shape` needing fewer workers than the others, never.
TEST(ClusterLiveness, WorkerMissingHeartbeatsIsNotChosenForANewMesh) {
  TestCluster cluster;
  LocalClusterOptions options = TestClusterOptions(kWorkers);
  options.heartbeat_interval = kHeartbeat;
  options.dead_after = absl::Seconds(30);  // paused, it stays alive throughout
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.LogHint();
  LocalCluster& local = *cluster.cluster;
  Session& client = *cluster.client;
  // Pause each worker in turn, the lowest id first (the one an ascending choice takes).
  std::map<int64_t, WorkerInfo> workers = WorkersByPid(client);
  std::vector<std::pair<int64_t, pid_t>> by_id;
  for (const auto& [pid, w] : workers) by_id.push_back({w.worker_id, static_cast<pid_t>(pid)});
  std::sort(by_id.begin(), by_id.end());
  ASSERT_EQ(by_id.size(), size_t{kWorkers});
  for (const auto& [paused_id, paused_pid] : by_id) {
    ASSERT_EQ(kill(paused_pid, SIGSTOP), 0);
    absl::SleepFor(4 * kHeartbeat);
    const std::string name = absl::StrCat("without", paused_id);
    absl::StatusOr<MeshInfo> mesh = client::InitDeviceMesh(client, "cpu", {kWorkers - 1}, {}, name);
    const std::optional<WorkerInfo> paused = [&]() -> std::optional<WorkerInfo> {
      std::map<int64_t, WorkerInfo> now = WorkersByPid(client);
      if (!now.contains(paused_pid)) return std::nullopt;
      return now[paused_pid];
    }();
    kill(paused_pid, SIGCONT);
    ASSERT_TRUE(mesh.ok()) << mesh.status() << cluster.LogHint();
    ASSERT_TRUE(paused.has_value());
    EXPECT_TRUE(paused->alive) << "the paused worker counted as dead: the test shows nothing";
    const std::vector<int64_t> ranks = mesh->mesh.ranks();
    EXPECT_EQ(std::count(ranks.begin(), ranks.end(), paused_id), 0)
        << "worker " << paused_id << " (paused) was chosen for mesh " << name;
    EXPECT_TRUE(std::is_sorted(ranks.begin(), ranks.end()));
    EXPECT_TRUE(AllReduceWorks(client, name, kWorkers - 1, static_cast<uint32_t>(paused_id)));
    EXPECT_TRUE(client.DeleteMesh(name).ok());
    // Back on time, it is chosen again for a mesh over everyone.
    ASSERT_TRUE(local.WaitForAliveWorkers(kWorkers, absl::Seconds(5)).ok());
  }
  absl::SleepFor(2 * kHeartbeat);
  ASSERT_TRUE(client::InitDeviceMesh(client, "cpu", {kWorkers}, {}, "everyone").ok());
  EXPECT_TRUE(AllReduceWorks(client, "everyone", kWorkers, 99));
  cluster.Stop();
}

}  // namespace
}  // namespace tessera
