// Coordinator restart with --state_dir: a coordinator killed with SIGKILL and started again with
// the same flags gets back every mesh and DTensor it had acknowledged. Every tensor reads back bit
// for bit as uploaded (placements and dtypes of every kind), new ops run on old tensors, new meshes
// can be made, and a tensor whose only copy of a block was on a worker that died during the outage
// (and stayed dead, or came back empty) answers DATA_LOSS.

#include <signal.h>
#include <sqlite3.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/small_integer_tensor.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_fixture.h"

namespace tessera {
namespace {

using ::tessera::client::DTensor;
using ::tessera::client::Session;
using ::tessera::client::WorkerInfo;
using ::tessera::testing::RetryUnavailable;
using ::tessera::testing::TensorsMatch;
using ::tessera::testing::TestCluster;
using ::tessera::testing::TestClusterOptions;

constexpr int kWorkers = 6;
constexpr int64_t kDoomed = 4;  // killed during the outage
constexpr int64_t kReborn = 5;  // killed during the outage and started again, empty

// A tensor uploaded before the restart.
struct Uploaded {
  std::string name;
  std::string mesh;
  std::vector<Placement> placements;
  HostTensor values;
};

// The worker ids by the launcher's index of their process.
std::map<int, int64_t> IdsByIndex(Session& client, LocalCluster& local) {
  std::map<int, int64_t> out;
  absl::StatusOr<std::vector<WorkerInfo>> workers = client.ListWorkers();
  if (!workers.ok()) return out;
  for (int i = 0; i < local.num_workers(); ++i) {
    for (const WorkerInfo& w : *workers) {
      if (w.pid == local.worker_pid(i)) out[i] = w.worker_id;
    }
  }
  return out;
}

TEST(ClusterRecovery, CoordinatorKilledAndRestartedKeepsMeshesAndTensors) {
  TestCluster cluster;
  LocalClusterOptions options = TestClusterOptions(kWorkers);
  options.keep_state = true;
  options.recovery_wait = absl::Seconds(4);
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.LogHint();
  LocalCluster& local = *cluster.cluster;
  Session& admin = *cluster.client;
  const std::map<int, int64_t> ids = IdsByIndex(admin, local);
  ASSERT_EQ(ids.size(), size_t{kWorkers});
  // The workers that die during the outage, each on a mesh of its own with worker 0.
  int doomed_index = 0, reborn_index = 0;
  for (const auto& [index, id] : ids) {
    if (id == kDoomed) doomed_index = index;
    if (id == kReborn) reborn_index = index;
  }
  const std::string device = testing::TestDevice();
  client::MeshOptions line_ids, pair_ids, doomed_ids, reborn_ids;
  line_ids.worker_ids = {0, 1, 2, 3};
  pair_ids.worker_ids = {3, 2};
  doomed_ids.worker_ids = {kDoomed, 0};
  reborn_ids.worker_ids = {kReborn, 0};
  ASSERT_TRUE(client::InitDeviceMesh(admin, device, {4}, {"x"}, "line", line_ids).ok());
  ASSERT_TRUE(client::InitDeviceMesh(admin, device, {2, 2}, {"dp", "tp"}, "grid", line_ids).ok());
  ASSERT_TRUE(client::InitDeviceMesh(admin, device, {2}, {}, "pair", pair_ids).ok());
  ASSERT_TRUE(client::InitDeviceMesh(admin, device, {2}, {}, "doomed", doomed_ids).ok());
  ASSERT_TRUE(client::InitDeviceMesh(admin, device, {2}, {}, "reborn", reborn_ids).ok());

  // A client with a lease, as a program's: its tensors outlive the outage too.
  absl::StatusOr<std::shared_ptr<Session>> connected = Session::Connect(local.address());
  ASSERT_TRUE(connected.ok()) << connected.status();
  std::shared_ptr<Session> user = *connected;
  using P = Placement;
  const std::vector<std::pair<std::string, std::vector<Placement>>> layouts = {
      {"line", {P::Shard(0)}},
      {"line", {P::Replicate()}},
      {"line", {P::Shard(1)}},
      {"line", {P::Partial()}},
      {"grid", {P::Shard(0), P::Shard(1)}},
      {"grid", {P::Replicate(), P::Shard(0)}},
      {"grid", {P::Shard(1), P::Replicate()}},
      {"grid", {P::Partial(), P::Shard(0)}},
      {"pair", {P::Shard(0)}},
      {"pair", {P::Replicate()}},
  };
  std::vector<Uploaded> uploaded;
  std::vector<DTensor> held;  // a dropped handle frees its tensor
  uint32_t seed = 1;
  for (const auto& [mesh_name, placements] : layouts) {
    absl::StatusOr<client::MeshInfo> mesh = client::GetMesh(*user, mesh_name);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64, DType::kUInt8}) {
      if (placements[0].is_partial() && dtype == DType::kUInt8) continue;
      Uploaded u{absl::StrCat("t", uploaded.size()), mesh_name, placements,
                 SmallIntegerTensor(dtype, {7, 5}, seed++)};
      client::DistributeOptions named;
      named.name = u.name;
      absl::StatusOr<DTensor> t =
          client::DistributeTensor(*user, u.values, *mesh, placements, named);
      ASSERT_TRUE(t.ok()) << u.name << " on " << mesh_name << ": " << t.status();
      held.push_back(*std::move(t));
      uploaded.push_back(std::move(u));
    }
  }
  absl::StatusOr<client::MeshInfo> doomed = client::GetMesh(*user, "doomed");
  ASSERT_TRUE(doomed.ok()) << doomed.status();
  client::DistributeOptions lost_name;
  lost_name.name = "lost";
  absl::StatusOr<DTensor> will_be_lost = client::DistributeTensor(
      *user, SmallIntegerTensor(DType::kFloat32, {6, 3}, 99), *doomed, {P::Shard(0)}, lost_name);
  ASSERT_TRUE(will_be_lost.ok()) << will_be_lost.status();
  absl::StatusOr<client::MeshInfo> reborn = client::GetMesh(*user, "reborn");
  ASSERT_TRUE(reborn.ok()) << reborn.status();
  lost_name.name = "emptied";
  absl::StatusOr<DTensor> will_be_emptied = client::DistributeTensor(
      *user, SmallIntegerTensor(DType::kFloat32, {6, 3}, 98), *reborn, {P::Shard(0)}, lost_name);
  ASSERT_TRUE(will_be_emptied.ok()) << will_be_emptied.status();
  // Replicated on the reborn worker and worker 0: copied back to the reborn worker from worker 0.
  const HostTensor regrown_values = SmallIntegerTensor(DType::kFloat32, {6, 3}, 97);
  lost_name.name = "regrown";
  absl::StatusOr<DTensor> will_be_regrown =
      client::DistributeTensor(*user, regrown_values, *reborn, {P::Replicate()}, lost_name);
  ASSERT_TRUE(will_be_regrown.ok()) << will_be_regrown.status();
  ASSERT_TRUE(will_be_regrown->FullTensor().ok());

  // Every write done, so recorded: a Replicate distribute returns once its broadcast is posted
  // (`tessera tensor put --async` shows it pending), and a tensor whose first write is still
  // running when the coordinator dies is not recorded (docs/recovery.md).
  ASSERT_TRUE(testing::AllWritten(admin));
  const std::string address = local.address();
  ASSERT_TRUE(local.KillCoordinator().ok());
  ASSERT_TRUE(local.KillWorker(doomed_index).ok());
  ASSERT_TRUE(local.KillWorker(reborn_index).ok());
  absl::SleepFor(absl::Seconds(1));
  ASSERT_TRUE(local.RestartCoordinator().ok()) << cluster.LogHint();
  ASSERT_TRUE(local.RestartWorker(reborn_index).ok()) << cluster.LogHint();
  ASSERT_EQ(local.address(), address);

  // The same session reconnects by itself; names answer UNAVAILABLE while they are recovered.
  for (const Uploaded& u : uploaded) {
    absl::StatusOr<DTensor> t =
        RetryUnavailable([&] { return client::GetTensor(*user, u.name); }, absl::Seconds(30));
    ASSERT_TRUE(t.ok()) << u.name << ": " << t.status() << cluster.LogHint();
    EXPECT_EQ(t->placements(), u.placements) << u.name;
    absl::StatusOr<HostTensor> back =
        RetryUnavailable([&] { return t->FullTensor(); }, absl::Seconds(10));
    ASSERT_TRUE(back.ok()) << u.name << ": " << back.status() << cluster.LogHint();
    EXPECT_TRUE(TensorsMatch(*back, u.values))
        << u.name << " on " << u.mesh << " " << PlacementsToString(u.placements);
  }

  // New ops on old tensors: t0 (float32, S(0) on 'line') plus itself, and a redistribute.
  {
    absl::StatusOr<DTensor> t0 = client::GetTensor(*user, "t0");
    ASSERT_TRUE(t0.ok()) << t0.status();
    absl::StatusOr<DTensor> doubled = client::Add(*t0, *t0);
    ASSERT_TRUE(doubled.ok()) << doubled.status() << cluster.LogHint();
    HostTensor want = SmallIntegerTensor(DType::kFloat32, {7, 5}, 1);  // t0's values
    for (int64_t i = 0; i < want.num_elements(); ++i) want.data_as<float>()[i] *= 2;
    absl::StatusOr<HostTensor> got = doubled->FullTensor();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(TensorsMatch(*got, want));
    absl::StatusOr<DTensor> replicated = t0->Redistribute({P::Replicate()});
    ASSERT_TRUE(replicated.ok()) << replicated.status() << cluster.LogHint();
    got = replicated->FullTensor();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(TensorsMatch(*got, uploaded[0].values));
  }  // the handles free their tensors while the cluster runs
  // A new mesh over the workers that came back.
  client::MeshOptions fresh_ids;
  fresh_ids.worker_ids = {1, 0};
  EXPECT_TRUE(client::InitDeviceMesh(admin, device, {2}, {}, "fresh", fresh_ids).ok());

  // The tensors whose block 0 was only on a worker that died during the outage.
  for (const std::string name : {"lost", "emptied"}) {
    absl::StatusOr<DTensor> lost =
        RetryUnavailable([&] { return client::GetTensor(*user, name); }, absl::Seconds(30));
    absl::Status lost_status = lost.status();
    if (lost.ok()) lost_status = lost->FullTensor().status();
    EXPECT_EQ(lost_status.code(), absl::StatusCode::kDataLoss) << name << ": " << lost_status;
    EXPECT_NE(lost_status.message().find(name), std::string::npos) << lost_status;
  }
  // The replicated tensor on the reborn worker's mesh: repaired, read from the reborn worker (the
  // mesh's rank 0) and used in an op over both.
  {
    absl::StatusOr<DTensor> regrown =
        RetryUnavailable([&] { return client::GetTensor(*user, "regrown"); }, absl::Seconds(30));
    ASSERT_TRUE(regrown.ok()) << regrown.status();
    absl::StatusOr<HostTensor> back =
        RetryUnavailable([&] { return regrown->FullTensor(); }, absl::Seconds(10));
    ASSERT_TRUE(back.ok()) << back.status() << cluster.LogHint();
    EXPECT_TRUE(TensorsMatch(*back, regrown_values));
    absl::StatusOr<DTensor> doubled = client::Add(*regrown, *regrown);
    ASSERT_TRUE(doubled.ok()) << doubled.status();
    absl::StatusOr<HostTensor> got = doubled->FullTensor();
    ASSERT_TRUE(got.ok()) << got.status() << cluster.LogHint();
    HostTensor want = regrown_values.Clone();
    for (int64_t i = 0; i < want.num_elements(); ++i) want.data_as<float>()[i] *= 2;
    EXPECT_TRUE(TensorsMatch(*got, want));
  }
  EXPECT_EQ(client::GetTensor(*user, "t0")->placements(), uploaded[0].placements)
      << "the redistribute to a new tensor changed its source";
  held.clear();
  will_be_lost = absl::CancelledError();
  will_be_emptied = absl::CancelledError();
  will_be_regrown = absl::CancelledError();
  user.reset();
  cluster.Stop();
}

// Holds the write lock of a coordinator's state database from another connection, as a slow disk
// or a backup would, for `hold`: the coordinator's commits wait (it allows 5 s).
class StateLock {
 public:
  StateLock(const std::string& state_dir, absl::Duration hold) {
    const std::string path = state_dir + "/state.db";
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK) << path;
    EXPECT_EQ(sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db_);
    releaser_ = std::thread([this, hold] {
      absl::SleepFor(hold);
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    });
  }
  ~StateLock() {
    releaser_.join();
    sqlite3_close(db_);
  }

 private:
  sqlite3* db_ = nullptr;
  std::thread releaser_;
};

// A tensor a client has read back is acknowledged: killed at once after the read, the coordinator
// comes back with it, whichever way the read went (relayed whole, one rank relayed, or straight
// from the workers). Each read is of an op's output, whose record is queued once the workers have
// written it; its commit is held back, so a read that did not wait for it would lose the tensor.
TEST(ClusterRecovery, WhatAClientReadSurvivesACoordinatorKilledRightAfter) {
  TestCluster cluster;
  LocalClusterOptions options = TestClusterOptions(2);
  options.keep_state = true;
  options.recovery_wait = absl::Seconds(4);
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.LogHint();
  LocalCluster& local = *cluster.cluster;
  client::MeshOptions ids;
  ids.worker_ids = {0, 1};
  ASSERT_TRUE(
      client::InitDeviceMesh(*cluster.client, testing::TestDevice(), {2}, {}, "pair", ids).ok());
  enum class Read { kFullRelayed, kToLocalRelayed, kFullDirect };
  for (Read read : {Read::kFullRelayed, Read::kToLocalRelayed, Read::kFullDirect}) {
    SCOPED_TRACE(static_cast<int>(read));
    client::SessionOptions session_options;
    session_options.direct_data =
        read == Read::kFullDirect ? client::DirectData::kOn : client::DirectData::kOff;
    absl::StatusOr<std::shared_ptr<Session>> user =
        Session::Connect(local.address(), session_options);
    ASSERT_TRUE(user.ok()) << user.status();
    absl::StatusOr<client::MeshInfo> mesh = client::GetMesh(**user, "pair");
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    const HostTensor values = SmallIntegerTensor(DType::kFloat32, {6, 4}, 5);
    absl::StatusOr<DTensor> a =
        client::DistributeTensor(**user, values, *mesh, {Placement::Shard(0)});
    ASSERT_TRUE(a.ok()) << a.status();
    HostTensor doubled = values.Clone();
    for (int64_t i = 0; i < doubled.num_elements(); ++i) doubled.data_as<float>()[i] *= 2;
    std::optional<DTensor> out;
    {
      StateLock lock(local.state_dir(), absl::Milliseconds(1500));
      absl::StatusOr<DTensor> made = client::Add(*a, *a);
      ASSERT_TRUE(made.ok()) << made.status();
      absl::StatusOr<HostTensor> got =
          read == Read::kToLocalRelayed ? made->ToLocal(1) : made->FullTensor();
      ASSERT_TRUE(got.ok()) << got.status();
      out = *std::move(made);
      ASSERT_TRUE(local.KillCoordinator().ok());
    }
    ASSERT_TRUE(local.RestartCoordinator().ok()) << cluster.LogHint();
    absl::StatusOr<DTensor> back =
        RetryUnavailable([&] { return client::GetTensor(**user, out->name()); }, absl::Seconds(30));
    ASSERT_TRUE(back.ok()) << out->name() << ": " << back.status() << cluster.LogHint();
    absl::StatusOr<HostTensor> got =
        RetryUnavailable([&] { return back->FullTensor(); }, absl::Seconds(10));
    ASSERT_TRUE(got.ok()) << out->name() << ": " << got.status();
    EXPECT_TRUE(TensorsMatch(*got, doubled)) << out->name();
  }
  cluster.Stop();
}

}  // namespace
}  // namespace tessera
