// A worker paused with SIGSTOP (a hung process, a node frozen under memory pressure): the
// coordinator declares it dead after --dead_after, a collective that needs it fails within the
// mesh's collective timeout (its command to the paused worker is cancelled once the worker is
// declared dead, not left to its deadline), a DTensor with a block only it holds answers
// UNAVAILABLE naming it as not responding (not DATA_LOSS: its blocks are intact), and resumed
// with SIGCONT it is alive again under the same worker id, the DTensor reads back bit for bit, and
// a mesh over everyone runs.

#include <signal.h>

#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/small_integer_tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_fixture.h"

namespace tessera {
namespace {

using ::tessera::client::Session;
using ::tessera::client::WorkerInfo;
using ::tessera::testing::TensorsMatch;
using ::tessera::testing::TestCluster;
using ::tessera::testing::TestClusterOptions;

constexpr int kWorkers = 3;
constexpr absl::Duration kDeadAfter = absl::Seconds(2);
constexpr absl::Duration kCollectiveTimeout = absl::Seconds(5);

// Puts a small tensor on every rank of `mesh` as "x"; returns their sum, what an all-reduce of
// them gives.
absl::StatusOr<HostTensor> PutInputs(Session& client, const std::string& mesh, uint32_t seed) {
  HostTensor sum = SmallIntegerTensor(DType::kFloat32, {4, 3}, seed);
  for (int64_t r = 0; r < kWorkers; ++r) {
    HostTensor input = SmallIntegerTensor(DType::kFloat32, {4, 3}, seed + static_cast<uint32_t>(r));
    if (r > 0) {
      ReduceInto(ReduceOp::kSum, sum.dtype(), sum.data(), input.data(), sum.num_elements());
    }
    if (absl::Status s = client.PutLocal(mesh, r, "x", input); !s.ok()) return s;
  }
  return sum;
}

// All-reduces "x" of `mesh` into "y" and checks rank 0's result against `want`.
absl::Status AllReduce(Session& client, const std::string& mesh, const HostTensor& want) {
  absl::StatusOr<client::CollectiveResult> reply =
      client.RunCollective(client::AllReduce({mesh, ""}, "x", "y", ReduceOp::kSum));
  if (!reply.ok()) return reply.status();
  absl::StatusOr<HostTensor> got = client.GetLocal(mesh, 0, "y");
  if (!got.ok()) return got.status();
  if (!TensorsMatch(*got, want)) return absl::InternalError("all_reduce gave a wrong sum");
  return absl::OkStatus();
}

// PutInputs, then AllReduce.
absl::Status PutAndAllReduce(Session& client, const std::string& mesh, uint32_t seed) {
  absl::StatusOr<HostTensor> want = PutInputs(client, mesh, seed);
  if (!want.ok()) return want.status();
  return AllReduce(client, mesh, *want);
}

// Whether process `pid` shows as stopped (state T in /proc) within a second.
bool WaitUntilStopped(pid_t pid) {
  const absl::Time deadline = absl::Now() + absl::Seconds(1);
  while (absl::Now() < deadline) {
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string line;
    std::getline(stat, line);
    const size_t paren = line.rfind(')');
    if (paren != std::string::npos && line.substr(paren + 1, 3) == " T ") return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return false;
}

// The registered worker whose process is `pid`.
std::optional<WorkerInfo> WorkerWithPid(Session& client, pid_t pid) {
  absl::StatusOr<std::vector<WorkerInfo>> workers = client.ListWorkers();
  if (!workers.ok()) return std::nullopt;
  for (const WorkerInfo& w : *workers) {
    if (w.pid == pid) return w;
  }
  return std::nullopt;
}

class PausedWorker : public ::testing::TestWithParam<int> {};  // the local worker paused

TEST_P(PausedWorker, IsDeclaredDeadFailsItsCollectivesAndRejoins) {
  TestCluster cluster;
  LocalClusterOptions options = TestClusterOptions(kWorkers);
  options.dead_after = kDeadAfter;
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.LogHint();
  Session& client = *cluster.client;
  client::MeshOptions mesh_options;
  mesh_options.collective_timeout = kCollectiveTimeout;
  ASSERT_TRUE(client::InitDeviceMesh(client, "cpu", {kWorkers}, {}, "all", mesh_options).ok());
  ASSERT_TRUE(PutAndAllReduce(client, "all", 1).ok());
  absl::StatusOr<HostTensor> want = PutInputs(client, "all", 2);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(client::InitDeviceMesh(client, "cpu", {kWorkers}, {}, "dt").ok());
  const client::Mesh dt_mesh = client::GetMesh(client, "dt").value();
  const HostTensor sharded_values = SmallIntegerTensor(DType::kFloat32, {6, 4}, 9);
  absl::StatusOr<client::DTensor> sharded =
      client::DistributeTensor(client, sharded_values, dt_mesh, {Placement::Shard(0)});
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  ASSERT_TRUE(testing::AllWritten(client));

  const pid_t paused = cluster.cluster->worker_pid(GetParam());
  const std::optional<WorkerInfo> before = WorkerWithPid(client, paused);
  ASSERT_TRUE(before.has_value());
  ASSERT_EQ(kill(paused, SIGSTOP), 0);
  // kill() returns before every thread of the worker has stopped.
  ASSERT_TRUE(WaitUntilStopped(paused)) << "worker process " << paused << " did not stop";
  const absl::Time start = absl::Now();
  // A collective that needs the paused worker fails within the collective timeout (and some
  // slack), not never.
  const absl::Status during = AllReduce(client, "all", *want);
  const absl::Duration failed_after = absl::Now() - start;
  EXPECT_FALSE(during.ok());
  EXPECT_THAT(during.message(), ::testing::HasSubstr(absl::StrCat("worker ", before->worker_id)));
  EXPECT_LT(failed_after, kCollectiveTimeout + absl::Seconds(2)) << during;
  // Declared dead after --dead_after (and a heartbeat period of slack) from the pause.
  std::optional<WorkerInfo> seen;
  const absl::Time deadline = absl::Now() + kDeadAfter + absl::Seconds(5);
  while (absl::Now() < deadline) {
    seen = WorkerWithPid(client, paused);
    if (seen.has_value() && !seen->alive) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(seen.has_value());
  EXPECT_FALSE(seen->alive) << "a worker paused for " << absl::FormatDuration(absl::Now() - start)
                            << " still counts alive";
  EXPECT_GE(absl::Now() - start, kDeadAfter);
  // Its block is intact in the paused process: not lost, only out of reach.
  const absl::Status unreachable = sharded->FullTensor().status();
  EXPECT_EQ(unreachable.code(), absl::StatusCode::kUnavailable) << unreachable;
  EXPECT_THAT(unreachable.message(), ::testing::HasSubstr("is not responding")) << unreachable;

  // Resumed, it is alive again under its worker id (its process lost nothing, and it keeps its
  // incarnation), and serves.
  ASSERT_EQ(kill(paused, SIGCONT), 0);
  ASSERT_TRUE(cluster.cluster->WaitForAliveWorkers(kWorkers, absl::Seconds(15)).ok())
      << cluster.LogHint();
  const std::optional<WorkerInfo> after = WorkerWithPid(client, paused);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->worker_id, before->worker_id);
  EXPECT_TRUE(after->alive);
  absl::StatusOr<HostTensor> back = sharded->FullTensor();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(TensorsMatch(*back, sharded_values));
  ASSERT_TRUE(sharded->Free().ok());
  ASSERT_TRUE(client.DeleteMesh("dt").ok());
  // The mesh whose collective failed is deleted; a mesh over everyone runs.
  ASSERT_TRUE(client.DeleteMesh("all").ok());
  ASSERT_TRUE(client::InitDeviceMesh(client, "cpu", {kWorkers}, {}, "again", mesh_options).ok())
      << cluster.LogHint();
  EXPECT_TRUE(PutAndAllReduce(client, "again", 4).ok()) << cluster.LogHint();
  cluster.Stop();
}

INSTANTIATE_TEST_SUITE_P(Ranks, PausedWorker, ::testing::Values(0, kWorkers - 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("Worker", info.param);
                         });

}  // namespace
}  // namespace tessera
