// A DTensor freed after a worker of its mesh died (or died and came back) is freed on the workers
// that survived: their shard bytes go back to what they were before it was made, as each reports
// in its heartbeat. (The coordinator used to forget the tensor and free it nowhere, so the
// survivors kept its shards until they restarted.)

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/small_integer_tensor.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_fixture.h"

namespace tessera {
namespace {

using ::tessera::client::Session;
using ::tessera::client::WorkerInfo;
using ::tessera::testing::TestCluster;
using ::tessera::testing::TestClusterOptions;

constexpr int kWorkers = 4;
constexpr int kVictim = 3;

// Shard bytes each worker reported last, by pid.
std::map<int64_t, int64_t> UsedBytesByPid(Session& client) {
  std::map<int64_t, int64_t> out;
  absl::StatusOr<std::vector<WorkerInfo>> workers = client.ListWorkers();
  if (workers.ok()) {
    for (const WorkerInfo& w : *workers) out[w.pid] = w.used_bytes;
  }
  return out;
}

// Waits (a few heartbeats) until every worker but the victim reports bytes for which
// `done(pid, bytes)` holds; the last reports.
template <typename Done>
std::map<int64_t, int64_t> WaitForSurvivors(Session& client, LocalCluster& cluster, Done done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::map<int64_t, int64_t> used;
  while (absl::Now() < deadline) {
    used = UsedBytesByPid(client);
    bool all = true;
    for (int i = 0; i < kWorkers; ++i) {
      if (i == kVictim) continue;
      all = all && done(cluster.worker_pid(i), used[cluster.worker_pid(i)]);
    }
    if (all) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return used;
}

enum class When { kWhileDead, kAfterRestart };
using FreeCase = std::tuple<When, std::string>;
class FreeAfterWorkerLossTest : public ::testing::TestWithParam<FreeCase> {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new TestCluster;
    const absl::Status s = cluster_->Start(TestClusterOptions(kWorkers));
    ASSERT_TRUE(s.ok()) << s << cluster_->LogHint();
  }
  static void TearDownTestSuite() {
    cluster_->Stop();
    delete cluster_;
  }
  static TestCluster* cluster_;
};
TestCluster* FreeAfterWorkerLossTest::cluster_ = nullptr;

TEST_P(FreeAfterWorkerLossTest, SurvivorsFreeTheirShards) {
  const auto& [when, placement] = GetParam();
  LocalCluster& cluster = *cluster_->cluster;
  Session& client = *cluster_->client;
  ASSERT_TRUE(cluster.WaitForAliveWorkers(kWorkers, absl::Seconds(30)).ok());
  const std::string mesh_name = absl::StrCat("m", static_cast<int>(when), placement == "R");
  absl::StatusOr<client::MeshInfo> mesh =
      client::InitDeviceMesh(client, "cpu", {kWorkers}, {}, mesh_name);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  const std::map<int64_t, int64_t> before = UsedBytesByPid(client);

  const HostTensor full = SmallIntegerTensor(DType::kFloat32, {64, 64}, 5);
  absl::StatusOr<std::vector<Placement>> placements = ParsePlacements(placement);
  ASSERT_TRUE(placements.ok());
  absl::StatusOr<client::DTensor> t = client::DistributeTensor(client, full, *mesh, *placements);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->FullTensor().ok());
  // Each survivor holds its shard: the test would show nothing otherwise.
  const std::map<int64_t, int64_t> holding =
      WaitForSurvivors(client, cluster, [&](int64_t pid, int64_t b) { return b > before.at(pid); });
  for (int i = 0; i < kWorkers; ++i) {
    if (i == kVictim) continue;
    ASSERT_GT(holding.at(cluster.worker_pid(i)), before.at(cluster.worker_pid(i)));
  }

  ASSERT_TRUE(cluster.KillWorker(kVictim).ok());
  if (when == When::kAfterRestart) {
    ASSERT_TRUE(cluster.RestartWorker(kVictim).ok());
    ASSERT_TRUE(cluster.WaitForAliveWorkers(kWorkers, absl::Seconds(30)).ok());
  } else {
    absl::SleepFor(absl::Seconds(3));  // past dead_after: the coordinator counts it dead
  }
  EXPECT_TRUE(t->Free().ok());

  const std::map<int64_t, int64_t> after = WaitForSurvivors(
      client, cluster, [&](int64_t pid, int64_t b) { return b == before.at(pid); });
  for (int i = 0; i < kWorkers; ++i) {
    if (i == kVictim) continue;
    const pid_t pid = cluster.worker_pid(i);
    EXPECT_EQ(after.at(pid), before.at(pid)) << "worker process " << i << " kept the shard";
  }
  EXPECT_TRUE(client.DeleteMesh(mesh_name).ok());
  if (when == When::kWhileDead) {
    ASSERT_TRUE(cluster.RestartWorker(kVictim).ok());
    ASSERT_TRUE(cluster.WaitForAliveWorkers(kWorkers, absl::Seconds(30)).ok());
  }
}

INSTANTIATE_TEST_SUITE_P(Cluster, FreeAfterWorkerLossTest,
                         ::testing::Combine(::testing::Values(When::kWhileDead,
                                                              When::kAfterRestart),
                                            ::testing::Values("S(0)", "R")),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param) == When::kWhileDead
                                                   ? "WhileDead"
                                                   : "AfterRestart",
                                               std::get<1>(info.param) == "R" ? "_R" : "_S0");
                         });

}  // namespace
}  // namespace tessera
