// A worker of a 2x2 mesh killed with SIGKILL and started again empty on its address (it registers
// again under its id): the coordinator sets the mesh up again over it and copies back, worker to
// worker, every block it held that a live rank holds too along a Replicate mesh dim. Those tensors
// read back bit-exact and ops on the mesh use them; a tensor with a block only the worker held
// (a Shard on every mesh dim, or a Partial summand) answers DATA_LOSS naming the tensor and the
// worker, and ListTensors lists it failed with that error. A DeleteMesh before, during (a third
// worker paused holds the rejoin) or after that rejoin deletes the mesh and its tensors for good:
// no rejoin brings them back, and the name can be used again. Workers that died together come back
// together (two diagonal ones repaired each from its own group), and a worker that registers again
// after a coordinator restart's recovery wait keeps its shards.

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/small_integer_tensor.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/testing/reference.h"
#include "tessera/tessera.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using ::tessera::client::DTensor;
using ::tessera::client::Session;
using ::tessera::testing::AllWritten;
using ::tessera::testing::RetryUnavailable;
using ::tessera::testing::StatusIs;
using ::tessera::testing::TensorsMatch;
using ::tessera::testing::TestCluster;
using ::tessera::testing::TestClusterOptions;

constexpr int kWorkers = 4;
constexpr int kVictim = 2;

// A layout on the 2x2 mesh and whether every block the victim holds has a replica elsewhere.
struct Layout {
  std::string placements;
  bool replicated;
};
const Layout kLayouts[] = {
    {"R,S(0)", true}, {"S(0),R", true}, {"R,R", true}, {"P,R", false}, {"S(0),S(1)", false}};

// `t` + `t`, element by element, in double (exact for the small integers of the tests).
HostTensor Doubled(const HostTensor& t) {
  HostTensor out = t.Clone();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    kernels::testing::SetFromDouble(out, i, 2 * kernels::testing::GetDouble(t, i));
  }
  return out;
}

// Starts `fixture` with `options` and creates mesh "grid", 2x2 (dp, tp), over its workers.
absl::StatusOr<client::MeshInfo> StartWithGrid(TestCluster& fixture,
                                               const LocalClusterOptions& options) {
  if (absl::Status s = fixture.Start(options); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(s.message(), fixture.LogHint()));
  }
  return client::InitDeviceMesh(*fixture.client, "cpu", {2, 2}, {"dp", "tp"}, "grid");
}

// `t` + `t` on its mesh (an op over every rank) reads back as `values` doubled.
::testing::AssertionResult AddsUp(const DTensor& t, const HostTensor& values) {
  absl::StatusOr<DTensor> sum = client::Add(t, t);
  if (!sum.ok()) return ::testing::AssertionFailure() << "add: " << sum.status();
  absl::StatusOr<HostTensor> sum_full = sum->FullTensor();
  if (!sum_full.ok()) return ::testing::AssertionFailure() << "read: " << sum_full.status();
  return TensorsMatch(*sum_full, Doubled(values));
}

// Reads `t` until its mesh took the worker back (UNAVAILABLE until then), up to 30 s.
absl::StatusOr<HostTensor> ReadOnceBack(const DTensor& t,
                                        absl::Duration patience = absl::Seconds(30)) {
  const absl::Time deadline = absl::Now() + patience;
  absl::StatusOr<HostTensor> got = t.FullTensor();
  while (!got.ok() && got.status().code() == absl::StatusCode::kUnavailable &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    got = t.FullTensor();
  }
  return got;
}

// Distributes one small-integer tensor "t<i>" for each layout of kLayouts (only those with
// replicas if `replicated_only`) onto `mesh`, reads each back once and waits until every one is
// written; `want` gets each tensor's value. The handles returned hold the tensors (a dropped
// handle frees its tensor).
absl::StatusOr<std::vector<DTensor>> DistributeLayouts(Session& client, const client::Mesh& mesh,
                                                       DType dtype, bool replicated_only,
                                                       std::map<std::string, HostTensor>& want) {
  std::vector<DTensor> tensors;
  for (size_t i = 0; i < std::size(kLayouts); ++i) {
    if (replicated_only && !kLayouts[i].replicated) continue;
    const std::string name = absl::StrCat("t", i);
    want[name] = SmallIntegerTensor(dtype, {8, 6}, static_cast<uint32_t>(i + 1));
    ASSIGN_OR_RETURN(std::vector<Placement> placements, ParsePlacements(kLayouts[i].placements));
    client::DistributeOptions distribute;
    distribute.name = name;
    ASSIGN_OR_RETURN(DTensor t,
                     client::DistributeTensor(client, want[name], mesh, placements, distribute));
    RETURN_IF_ERROR(t.FullTensor().status());
    tensors.push_back(std::move(t));
  }
  if (::testing::AssertionResult written = AllWritten(client, mesh.name); !written) {
    return absl::DeadlineExceededError(written.message());
  }
  return tensors;
}

// Reads each tensor of `want` back by name, retrying up to `wait` while the coordinator is
// unavailable, and compares it with its value; `hint` says where the logs are.
void ExpectReadBack(Session& client, const std::map<std::string, HostTensor>& want,
                    absl::Duration wait, const std::string& hint) {
  for (const auto& [name, values] : want) {
    absl::StatusOr<HostTensor> got = RetryUnavailable(
        [&, name = name]() -> absl::StatusOr<HostTensor> {
          absl::StatusOr<DTensor> t = client::GetTensor(client, name);
          return t.ok() ? t->FullTensor() : absl::StatusOr<HostTensor>(t.status());
        },
        wait);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status() << hint;
    EXPECT_TRUE(TensorsMatch(*got, values)) << name;
  }
}

class ReplicaRepairTest : public ::testing::TestWithParam<DType> {};

TEST_P(ReplicaRepairTest, ReplicasRepairedOthersLost) {
  const DType dtype = GetParam();
  TestCluster fixture;
  absl::StatusOr<client::MeshInfo> mesh = StartWithGrid(fixture, TestClusterOptions(kWorkers));
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  LocalCluster& cluster = *fixture.cluster;
  Session& client = *fixture.client;
  absl::StatusOr<std::vector<client::WorkerInfo>> workers = client.ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  int64_t victim_id = -1;
  for (const client::WorkerInfo& w : *workers) {
    if (w.pid == cluster.worker_pid(kVictim)) victim_id = w.worker_id;
  }
  ASSERT_GE(victim_id, 0);

  std::map<std::string, HostTensor> want;
  absl::StatusOr<std::vector<DTensor>> distributed =
      DistributeLayouts(client, *mesh, dtype, /*replicated_only=*/false, want);
  ASSERT_TRUE(distributed.ok()) << distributed.status();
  std::vector<DTensor>& tensors = *distributed;

  ASSERT_TRUE(cluster.KillWorker(kVictim).ok());
  ASSERT_TRUE(cluster.RestartWorker(kVictim).ok());
  ASSERT_TRUE(cluster.WaitForAliveWorkers(kWorkers, absl::Seconds(30)).ok());

  {
    const std::string when = "after the worker came back";
    for (size_t i = 0; i < std::size(kLayouts); ++i) {
      const DTensor& t = tensors[i];
      SCOPED_TRACE(absl::StrCat(when, ": ", t.name(), " (", kLayouts[i].placements, ")"));
      absl::StatusOr<HostTensor> got = ReadOnceBack(t);
      if (!kLayouts[i].replicated) {
        EXPECT_TRUE(
            StatusIs(got.status(), absl::StatusCode::kDataLoss,
                     {absl::StrCat("'", t.name(), "'"), absl::StrCat("worker ", victim_id)}));
        // An op on it fails the same way (on the op stream, when its output is used).
        absl::StatusOr<DTensor> sum = client::Add(t, t);
        const absl::Status used = sum.ok() ? sum->FullTensor().status() : sum.status();
        EXPECT_TRUE(
            StatusIs(used, absl::StatusCode::kDataLoss,
                     {absl::StrCat("'", t.name(), "'"), absl::StrCat("worker ", victim_id)}));
        continue;
      }
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_TRUE(TensorsMatch(*got, want[t.name()]));
      // An op on the mesh, and a redistribute whose collectives run through the worker.
      EXPECT_TRUE(AddsUp(t, want[t.name()]));
      absl::StatusOr<DTensor> gathered =
          t.Redistribute({Placement::Replicate(), Placement::Replicate()});
      ASSERT_TRUE(gathered.ok()) << gathered.status();
      absl::StatusOr<HostTensor> gathered_full = gathered->FullTensor();
      ASSERT_TRUE(gathered_full.ok()) << gathered_full.status();
      EXPECT_TRUE(TensorsMatch(*gathered_full, want[t.name()]));
    }
    absl::StatusOr<std::vector<client::DTensorInfo>> listed = client.ListTensors("grid");
    ASSERT_TRUE(listed.ok()) << listed.status();
    for (size_t i = 0; i < std::size(kLayouts); ++i) {
      const std::string name = absl::StrCat("t", i);
      auto info = std::find_if(listed->begin(), listed->end(),
                               [&](const client::DTensorInfo& t) { return t.name == name; });
      ASSERT_NE(info, listed->end()) << when << ": " << name << " not listed";
      if (kLayouts[i].replicated) {
        EXPECT_EQ(info->state, client::TensorState::kReady) << when << ": " << name;
      } else {
        EXPECT_EQ(info->state, client::TensorState::kFailed) << when << ": " << name;
        EXPECT_NE(info->error.find(absl::StrCat("worker ", victim_id)), std::string::npos)
            << when << ": " << info->error;
      }
    }
  }
  fixture.Stop();
}

// A coordinator restarted from its --state_dir after a repair (as `tessera up` restarts it)
// serves the repaired mesh's tensors again, bit for bit, well within its recovery wait: the
// workers' re-registration and the mesh's set-up again do not wait for anything the repair left.
TEST(ReplicaRepairRestartTest, RepairedTensorsSurviveACoordinatorRestart) {
  TestCluster fixture;
  LocalClusterOptions options = TestClusterOptions(kWorkers);
  // `tessera up`'s liveness and recovery wait.
  options.keep_state = true;
  options.heartbeat_interval = LocalClusterOptions().heartbeat_interval;
  options.dead_after = LocalClusterOptions().dead_after;
  options.recovery_wait = LocalClusterOptions().recovery_wait;
  absl::StatusOr<client::MeshInfo> mesh = StartWithGrid(fixture, options);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  LocalCluster& cluster = *fixture.cluster;
  Session& client = *fixture.client;
  std::map<std::string, HostTensor> want;
  absl::StatusOr<std::vector<DTensor>> distributed =
      DistributeLayouts(client, *mesh, DType::kFloat32, /*replicated_only=*/true, want);
  ASSERT_TRUE(distributed.ok()) << distributed.status();
  std::vector<DTensor>& tensors = *distributed;
  ASSERT_TRUE(cluster.KillWorker(kVictim).ok());
  ASSERT_TRUE(cluster.RestartWorker(kVictim).ok());
  ASSERT_TRUE(cluster.WaitForAliveWorkers(kWorkers, absl::Seconds(30)).ok());
  for (const DTensor& t : tensors) {
    absl::StatusOr<HostTensor> got = ReadOnceBack(t);
    ASSERT_TRUE(got.ok()) << t.name() << ": " << got.status();
    EXPECT_TRUE(TensorsMatch(*got, want[t.name()])) << t.name();
  }

  ASSERT_TRUE(cluster.KillCoordinator().ok());
  ASSERT_TRUE(cluster.RestartCoordinator().ok()) << fixture.LogHint();
  const absl::Time restarted = absl::Now();
  ExpectReadBack(client, want, absl::Seconds(40), fixture.LogHint());
  EXPECT_LT(absl::Now() - restarted, absl::Seconds(15))
      << "the tensors came back only " << (absl::Now() - restarted) << " after the restart"
      << fixture.LogHint();
  tensors.clear();
  fixture.Stop();
}

// The worker ids by the launcher's index of their process.
std::map<int64_t, int> IndexById(Session& client, LocalCluster& cluster) {
  std::map<int64_t, int> out;
  absl::StatusOr<std::vector<client::WorkerInfo>> workers = client.ListWorkers();
  if (!workers.ok()) return out;
  for (int i = 0; i < cluster.num_workers(); ++i) {
    for (const client::WorkerInfo& w : *workers) {
      if (w.pid == cluster.worker_pid(i)) out[w.worker_id] = i;
    }
  }
  return out;
}

// Distributes one small-integer tensor "t<i>" of `dtype` for each of `layouts` onto `mesh`
// (values seeded from `seed` on), reads each back once and waits until all are written; `want`
// gets each value. The handles returned hold the tensors.
absl::StatusOr<std::vector<DTensor>> DistributeEach(Session& client, const client::Mesh& mesh,
                                                    DType dtype,
                                                    const std::vector<std::string>& layouts,
                                                    uint32_t seed,
                                                    std::map<std::string, HostTensor>& want) {
  std::vector<DTensor> tensors;
  for (const std::string& placements : layouts) {
    const std::string name = absl::StrCat("t", tensors.size());
    want[name] = SmallIntegerTensor(dtype, {8, 6}, seed + static_cast<uint32_t>(tensors.size()));
    ASSIGN_OR_RETURN(std::vector<Placement> p, ParsePlacements(placements));
    client::DistributeOptions distribute;
    distribute.name = name;
    ASSIGN_OR_RETURN(DTensor t, client::DistributeTensor(client, want[name], mesh, p, distribute));
    RETURN_IF_ERROR(t.FullTensor().status());
    tensors.push_back(std::move(t));
  }
  if (::testing::AssertionResult written = AllWritten(client, mesh.name); !written) {
    return absl::DeadlineExceededError(written.message());
  }
  return tensors;
}

// Each of `tensors` reads back (once its mesh took the restarted workers back) as in `want`.
void ExpectReadBackOnceBack(const std::vector<DTensor>& tensors,
                            const std::map<std::string, HostTensor>& want,
                            const std::string& hint) {
  for (const DTensor& t : tensors) {
    absl::StatusOr<HostTensor> got = ReadOnceBack(t);
    ASSERT_TRUE(got.ok()) << t.name() << ": " << got.status() << hint;
    EXPECT_TRUE(TensorsMatch(*got, want.at(t.name()))) << t.name();
  }
}

// Two workers of one dp row of the 2x2 mesh die together (as a pod's do) and come back one after
// the other, the second well before the first's predecessor would count dead: the mesh takes both
// back once both run again (not the first alone while the second still counts alive under its old
// incarnation), and the tensors replicated along dp read back bit for bit.
TEST(ReplicaRepairPodTest, WorkersThatDiedTogetherAreTakenBackTogether) {
  TestCluster fixture;
  LocalClusterOptions options = TestClusterOptions(kWorkers);
  // The second worker's predecessor counts alive throughout.
  options.dead_after = absl::Seconds(10);
  absl::StatusOr<client::MeshInfo> mesh = StartWithGrid(fixture, options);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  LocalCluster& cluster = *fixture.cluster;
  Session& client = *fixture.client;
  const std::map<int64_t, int> index = IndexById(client, cluster);
  ASSERT_EQ(index.size(), size_t{kWorkers});
  // The mesh's ranks at (1, 0) and (1, 1).
  const int first = index.at(mesh->mesh.ranks()[2]), second = index.at(mesh->mesh.ranks()[3]);
  std::map<std::string, HostTensor> want;
  absl::StatusOr<std::vector<DTensor>> distributed =
      DistributeEach(client, *mesh, DType::kFloat32, {"R,R", "R,S(0)", "R,S(1)"}, 7, want);
  ASSERT_TRUE(distributed.ok()) << distributed.status();
  std::vector<DTensor>& tensors = *distributed;

  ASSERT_TRUE(cluster.KillWorker(first).ok());
  ASSERT_TRUE(cluster.KillWorker(second).ok());
  ASSERT_TRUE(cluster.RestartWorker(first).ok()) << fixture.LogHint();
  // Several rounds of the repair's look at the meshes with the first back alone.
  absl::SleepFor(absl::Seconds(2));
  ASSERT_TRUE(cluster.RestartWorker(second).ok()) << fixture.LogHint();
  ASSERT_TRUE(cluster.WaitForAliveWorkers(kWorkers, absl::Seconds(30)).ok()) << fixture.LogHint();
  ExpectReadBackOnceBack(tensors, want, fixture.LogHint());
  // The mesh runs again: an op over both restarted workers.
  EXPECT_TRUE(AddsUp(tensors[1], want["t1"]));
  tensors.clear();
  fixture.Stop();
}

// The two workers on a diagonal of the 2x2 mesh, (0, 0) and (1, 1), die and come back together: no
// one index along a dim is live in every group, so each group along a Replicate dim broadcasts
// from a rank of its own, and every tensor replicated along some dim reads back bit for bit.
TEST(ReplicaRepairPodTest, DiagonalWorkersRepairedFromTheOtherDiagonal) {
  TestCluster fixture;
  absl::StatusOr<client::MeshInfo> mesh = StartWithGrid(fixture, TestClusterOptions(kWorkers));
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  LocalCluster& cluster = *fixture.cluster;
  Session& client = *fixture.client;
  const std::map<int64_t, int> index = IndexById(client, cluster);
  ASSERT_EQ(index.size(), size_t{kWorkers});
  const int first = index.at(mesh->mesh.ranks()[0]), second = index.at(mesh->mesh.ranks()[3]);
  std::map<std::string, HostTensor> want;
  absl::StatusOr<std::vector<DTensor>> distributed =
      DistributeEach(client, *mesh, DType::kInt32, {"R,R", "R,S(0)", "S(1),R"}, 11, want);
  ASSERT_TRUE(distributed.ok()) << distributed.status();
  std::vector<DTensor>& tensors = *distributed;

  ASSERT_TRUE(cluster.KillWorker(first).ok());
  ASSERT_TRUE(cluster.KillWorker(second).ok());
  ASSERT_TRUE(cluster.RestartWorker(first).ok()) << fixture.LogHint();
  ASSERT_TRUE(cluster.RestartWorker(second).ok()) << fixture.LogHint();
  ASSERT_TRUE(cluster.WaitForAliveWorkers(kWorkers, absl::Seconds(30)).ok()) << fixture.LogHint();
  ExpectReadBackOnceBack(tensors, want, fixture.LogHint());
  for (const DTensor& t : tensors) EXPECT_TRUE(AddsUp(t, want[t.name()])) << t.name();
  tensors.clear();
  fixture.Stop();
}

// A worker that registers with a restarted coordinator only after its recovery wait (it was
// paused meanwhile) kept its shards: once the mesh takes it back, the tensors whose only copy of a
// block it holds read back bit for bit, not DATA_LOSS as if it had restarted empty.
TEST(ReplicaRepairRestartTest, WorkerBackAfterTheRecoveryWaitKeepsItsShards) {
  TestCluster fixture;
  LocalClusterOptions options = TestClusterOptions(kWorkers);
  options.keep_state = true;
  options.recovery_wait = absl::Seconds(2);
  absl::StatusOr<client::MeshInfo> mesh = StartWithGrid(fixture, options);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  LocalCluster& cluster = *fixture.cluster;
  Session& client = *fixture.client;
  std::map<std::string, HostTensor> want;
  absl::StatusOr<std::vector<DTensor>> held =  // a dropped handle frees its tensor
      DistributeLayouts(client, *mesh, DType::kFloat32, /*replicated_only=*/false, want);
  ASSERT_TRUE(held.ok()) << held.status();

  const pid_t late = cluster.worker_pid(kVictim);
  ASSERT_EQ(::kill(late, SIGSTOP), 0);
  ASSERT_TRUE(cluster.KillCoordinator().ok());
  if (!cluster.RestartCoordinator().ok()) {
    ::kill(late, SIGCONT);
    FAIL() << "the coordinator did not start again" << fixture.LogHint();
  }
  // Past the recovery wait: the mesh is recovered without the paused worker.
  absl::SleepFor(options.recovery_wait + absl::Seconds(2));
  ASSERT_EQ(::kill(late, SIGCONT), 0);
  ExpectReadBack(client, want, absl::Seconds(30), fixture.LogHint());
  // It kept every block: its tensors' writes on the mesh set up again are done, not pending.
  EXPECT_TRUE(testing::AllWritten(client)) << fixture.LogHint();
  held->clear();
  fixture.Stop();
}

// When the DeleteMesh comes: while the worker is dead, while the mesh waits to take it back (a
// paused third worker of the mesh sends no heartbeat, so the rejoin waits for it), or once it took
// it back.
enum class DeleteWhen { kBeforeRestart, kDuringRejoin, kAfterRejoin };

class DeleteDuringRepairTest : public ::testing::TestWithParam<DeleteWhen> {};

TEST_P(DeleteDuringRepairTest, DeletedMeshStaysDeleted) {
  const DeleteWhen when = GetParam();
  constexpr int kPaused = 0;  // LocalCluster's index of the worker paused during the rejoin
  TestCluster fixture;
  LocalClusterOptions options = TestClusterOptions(kWorkers);
  // The paused worker stays alive throughout.
  if (when == DeleteWhen::kDuringRejoin) options.dead_after = absl::Seconds(10);
  absl::StatusOr<client::MeshInfo> mesh = StartWithGrid(fixture, options);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  LocalCluster& cluster = *fixture.cluster;
  Session& client = *fixture.client;
  const HostTensor values = SmallIntegerTensor(DType::kFloat32, {8, 6}, 5);
  client::DistributeOptions named;
  named.name = "kept";
  // Replicated everywhere: the rejoin would repair it.
  absl::StatusOr<DTensor> t = client::DistributeTensor(
      client, values, *mesh, {Placement::Replicate(), Placement::Replicate()}, named);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->FullTensor().ok());
  ASSERT_TRUE(AllWritten(client, "grid"));

  const pid_t victim_pid = cluster.worker_pid(kVictim);
  ASSERT_TRUE(cluster.KillWorker(kVictim).ok());
  absl::Status deleted = absl::UnknownError("not deleted");
  if (when == DeleteWhen::kBeforeRestart) {
    // Once the coordinator counts it dead (the teardown does not wait for it then).
    const absl::Time deadline = absl::Now() + absl::Seconds(15);
    bool dead = false;
    while (!dead && absl::Now() < deadline) {
      absl::StatusOr<std::vector<client::WorkerInfo>> workers = client.ListWorkers();
      ASSERT_TRUE(workers.ok()) << workers.status();
      for (const client::WorkerInfo& w : *workers) dead = dead || (w.pid == victim_pid && !w.alive);
      absl::SleepFor(absl::Milliseconds(100));
    }
    ASSERT_TRUE(dead) << "the killed worker still counts alive";
    deleted = client.DeleteMesh("grid");
  }
  if (when == DeleteWhen::kDuringRejoin) {
    ASSERT_EQ(::kill(cluster.worker_pid(kPaused), SIGSTOP), 0);
  }
  // Resumes the paused worker 1 s after the DeleteMesh is sent (or at once if the test stops).
  std::thread resume;
  auto resume_later = [&](absl::Duration after) {
    if (when != DeleteWhen::kDuringRejoin) return;
    resume = std::thread([pid = cluster.worker_pid(kPaused), after] {
      absl::SleepFor(after);
      ::kill(pid, SIGCONT);
    });
  };
  if (!cluster.RestartWorker(kVictim).ok() ||
      !cluster.WaitForAliveWorkers(kWorkers, absl::Seconds(30)).ok()) {
    resume_later(absl::ZeroDuration());
    resume.join();
    FAIL() << "the worker did not come back" << fixture.LogHint();
  }
  // A few rounds of the repair's look at the meshes: the rejoin is due (and waits for the paused
  // worker).
  absl::SleepFor(absl::Seconds(1));
  if (when == DeleteWhen::kAfterRejoin) {
    absl::StatusOr<HostTensor> got = ReadOnceBack(*t);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(TensorsMatch(*got, values));
  }
  if (when != DeleteWhen::kBeforeRestart) {
    resume_later(absl::Seconds(1));
    deleted = client.DeleteMesh("grid");
    if (resume.joinable()) resume.join();
  }
  ASSERT_TRUE(deleted.ok()) << deleted << fixture.LogHint();

  // Gone, and no later rejoin brings the mesh or its tensor back.
  absl::SleepFor(absl::Seconds(1));
  EXPECT_TRUE(StatusIs(client::GetMesh(client, "grid").status(), absl::StatusCode::kNotFound));
  EXPECT_TRUE(StatusIs(client::GetTensor(client, "kept").status(), absl::StatusCode::kNotFound));
  absl::StatusOr<std::vector<client::DTensorInfo>> listed = client.ListTensors();
  ASSERT_TRUE(listed.ok()) << listed.status();
  for (const client::DTensorInfo& info : *listed) EXPECT_NE(info.name, "kept") << info.mesh;
  // The names can be used again, over the same workers.
  mesh = client::InitDeviceMesh(client, "cpu", {2, 2}, {"dp", "tp"}, "grid");
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  absl::StatusOr<DTensor> again = client::DistributeTensor(
      client, Doubled(values), *mesh, {Placement::Shard(0), Placement::Shard(1)}, named);
  ASSERT_TRUE(again.ok()) << again.status();
  absl::StatusOr<HostTensor> got = again->FullTensor();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(TensorsMatch(*got, Doubled(values)));
  fixture.Stop();
}

INSTANTIATE_TEST_SUITE_P(Cluster, DeleteDuringRepairTest,
                         ::testing::Values(DeleteWhen::kBeforeRestart, DeleteWhen::kDuringRejoin,
                                           DeleteWhen::kAfterRejoin),
                         [](const auto& info) {
                           switch (info.param) {
                             case DeleteWhen::kBeforeRestart:
                               return std::string("before_restart");
                             case DeleteWhen::kDuringRejoin:
                               return std::string("during_rejoin");
                             case DeleteWhen::kAfterRejoin:
                               return std::string("after_rejoin");
                           }
                           return std::string();
                         });

// The rejoin's set-up fails with every worker alive: the survivor is busy with a long product on
// another mesh past the connect timeout, so the restarted worker gives up waiting for it. The
// coordinator forms the communicators again before the repairs run (not the repairs on a mesh
// without communicators, which would lose the tensors), and the replicated tensor reads back.
TEST(ReplicaRepairBusyTest, ASetUpThatFailsIsFormedAgainBeforeTheRepairs) {
  constexpr int kRestarted = 0;  // LocalCluster's index; the other worker is the busy one
  TestCluster fixture;
  LocalClusterOptions options = TestClusterOptions(2);
  options.dead_after = absl::Seconds(10);  // the busy worker counts alive throughout
  ASSERT_TRUE(fixture.Start(options).ok()) << fixture.LogHint();
  LocalCluster& cluster = *fixture.cluster;
  Session& client = *fixture.client;
  const std::map<int64_t, int> index = IndexById(client, cluster);
  ASSERT_EQ(index.size(), 2u);
  int64_t restarted_id = -1, busy_id = -1;
  for (const auto& [id, i] : index) (i == kRestarted ? restarted_id : busy_id) = id;
  // The pair's connect timeout is 2 s; the busy worker's own mesh has all the time its product
  // needs.
  absl::StatusOr<client::MeshInfo> pair = client::InitDeviceMesh(
      client, "cpu", {2}, {"tp"}, "pair",
      {.worker_ids = {restarted_id, busy_id}, .collective_timeout = absl::Seconds(2)});
  ASSERT_TRUE(pair.ok()) << pair.status();
  absl::StatusOr<client::MeshInfo> solo =
      client::InitDeviceMesh(client, "cpu", {1}, {"x"}, "solo",
                             {.worker_ids = {busy_id}, .collective_timeout = absl::Seconds(120)});
  ASSERT_TRUE(solo.ok()) << solo.status();
  const HostTensor values = SmallIntegerTensor(DType::kFloat32, {8, 6}, 3);
  client::DistributeOptions named;
  named.name = "kept";
  absl::StatusOr<DTensor> kept =
      client::DistributeTensor(client, values, *pair, {Placement::Replicate()}, named);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_TRUE(kept->FullTensor().ok());
  ASSERT_TRUE(AllWritten(client, "pair"));

  // ~0.7 TFLOP on the busy worker's one thread: seconds, however fast the machine.
  absl::StatusOr<DTensor> big = client::Ones(client, *solo, {7168, 7168}, {Placement::Replicate()});
  ASSERT_TRUE(big.ok()) << big.status();
  const absl::Time busy_from = absl::Now();
  absl::StatusOr<DTensor> product = client::Matmul(*big, *big);
  ASSERT_TRUE(product.ok()) << product.status();
  ASSERT_TRUE(cluster.KillWorker(kRestarted).ok());
  ASSERT_TRUE(cluster.RestartWorker(kRestarted).ok()) << fixture.LogHint();

  // The read waits for the product, which takes a minute where OpenBLAS runs its generic kernels
  // (a CPU it does not recognize).
  absl::StatusOr<HostTensor> got = ReadOnceBack(*kept, absl::Minutes(4));
  ASSERT_TRUE(got.ok()) << got.status() << fixture.LogHint();
  EXPECT_TRUE(TensorsMatch(*got, values));
  // The product ran all along (it is what kept the worker busy), and is right.
  absl::StatusOr<HostTensor> corner = product->FullTensor();
  ASSERT_TRUE(corner.ok()) << corner.status();
  EXPECT_EQ(corner->data_as<float>()[0], 7168.0f);
  std::printf("the busy worker's product and the rejoin took %.1f s\n",
              absl::ToDoubleSeconds(absl::Now() - busy_from));
  // The pair runs again: an op over both workers.
  EXPECT_TRUE(AddsUp(*kept, values));
  fixture.Stop();
}

// The survivor is held longer than a set-up's rendezvous and its first retry wait together (2 s,
// then 10 s): it runs an all_reduce on another mesh with a third worker that is stopped
// (SIGSTOP), which lasts that mesh's collective timeout, 20 s; the stopped worker runs again just
// after. The survivor's commands run one at a time, so the rejoin (its Ping, then its set-up)
// reaches it only then; the communicators form over both workers and the replicated tensor reads
// back.
TEST(ReplicaRepairBusyTest, ASurvivorBusyPastEveryRendezvousIsWaitedFor) {
  constexpr int kRestarted = 0, kBusy = 1, kStopped = 2;  // LocalCluster's indices
  constexpr absl::Duration kHold = absl::Seconds(20);
  TestCluster fixture;
  LocalClusterOptions options = TestClusterOptions(3);
  options.dead_after = absl::Seconds(90);  // the stopped worker counts alive throughout
  ASSERT_TRUE(fixture.Start(options).ok()) << fixture.LogHint();
  LocalCluster& cluster = *fixture.cluster;
  Session& client = *fixture.client;
  const std::map<int64_t, int> index = IndexById(client, cluster);
  ASSERT_EQ(index.size(), 3u);
  std::map<int, int64_t> id;
  for (const auto& [worker_id, i] : index) id[i] = worker_id;
  absl::StatusOr<client::MeshInfo> pair = client::InitDeviceMesh(
      client, "cpu", {2}, {"tp"}, "pair",
      {.worker_ids = {id[kRestarted], id[kBusy]}, .collective_timeout = absl::Seconds(2)});
  ASSERT_TRUE(pair.ok()) << pair.status();
  absl::StatusOr<client::MeshInfo> hold = client::InitDeviceMesh(
      client, "cpu", {2}, {"x"}, "hold",
      {.worker_ids = {id[kBusy], id[kStopped]}, .collective_timeout = kHold});
  ASSERT_TRUE(hold.ok()) << hold.status();
  const HostTensor values = SmallIntegerTensor(DType::kFloat32, {8, 6}, 5);
  client::DistributeOptions named;
  named.name = "kept";
  absl::StatusOr<DTensor> kept =
      client::DistributeTensor(client, values, *pair, {Placement::Replicate()}, named);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_TRUE(kept->FullTensor().ok());
  ASSERT_TRUE(AllWritten(client, "pair"));
  const HostTensor small = SmallIntegerTensor(DType::kFloat32, {4}, 1);
  for (int64_t r = 0; r < 2; ++r) ASSERT_TRUE(client.PutLocal("hold", r, "x", small).ok());

  const pid_t stopped = cluster.worker_pid(kStopped);
  ASSERT_EQ(kill(stopped, SIGSTOP), 0);
  const absl::Time held_from = absl::Now();
  absl::StatusOr<client::Work> held =
      client.StartCollective(client::AllReduce({"hold", ""}, "x", "y", ReduceOp::kSum));
  const absl::Status restarted = [&]() -> absl::Status {
    RETURN_IF_ERROR(cluster.KillWorker(kRestarted));
    return cluster.RestartWorker(kRestarted);
  }();
  // Once the held collective timed out the stopped worker runs again (else the survivor would
  // wait for it once more, in the re-forming of the other mesh's communicators).
  absl::SleepFor(held_from + kHold + absl::Seconds(1) - absl::Now());
  ASSERT_EQ(kill(stopped, SIGCONT), 0);
  absl::StatusOr<HostTensor> got =
      restarted.ok() ? ReadOnceBack(*kept, absl::Minutes(2)) : restarted;
  const absl::Duration waited = absl::Now() - held_from;
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_TRUE(restarted.ok()) << restarted << fixture.LogHint();
  ASSERT_TRUE(got.ok()) << got.status() << fixture.LogHint();
  EXPECT_TRUE(TensorsMatch(*got, values));
  std::printf("the held collective and the rejoin took %.1f s\n", absl::ToDoubleSeconds(waited));
  // The held collective timed out on the survivor (its peer never joined).
  EXPECT_FALSE(held->Wait(absl::Minutes(1)).ok());
  // The pair runs again: an op over both workers.
  EXPECT_TRUE(AddsUp(*kept, values));
  fixture.Stop();
}

INSTANTIATE_TEST_SUITE_P(Cluster, ReplicaRepairTest,
                         ::testing::Values(DType::kFloat32, DType::kInt32, DType::kFloat64),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace tessera
