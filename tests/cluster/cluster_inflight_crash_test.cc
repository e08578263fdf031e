// A call in flight when the coordinator is killed with SIGKILL (a distribute stream half-sent, an
// op posted but not yet written) fails with UNAVAILABLE within seconds instead of hanging, and
// leaves nothing half-done: after the restart (same flags, same --state_dir) its tensor is either
// absent (NOT_FOUND) with the workers holding no byte of it, or, for an op that finished before
// the kill, whole and equal to the same op run again; every tensor made before reads back bit for
// bit.

#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/small_integer_tensor.h"
#include "gtest/gtest.h"
#include "tessera/tessera.h"
#include "tests/cluster/cluster_fixture.h"

namespace tessera {
namespace {

using ::tessera::client::DTensor;
using ::tessera::client::Session;
using ::tessera::testing::RetryUnavailable;
using ::tessera::testing::TestCluster;
using ::tessera::testing::TestClusterOptions;
using P = Placement;

constexpr int kWorkers = 4;
// How long a call cut by the kill may take to fail: the client must not hang on a dead channel.
constexpr absl::Duration kFailWithin = absl::Seconds(20);

// Bytes of shards each worker reported, by worker id.
std::map<int64_t, int64_t> UsedBytes(Session& session) {
  std::map<int64_t, int64_t> used;
  absl::StatusOr<std::vector<client::WorkerInfo>> workers = session.ListWorkers();
  if (!workers.ok()) return used;
  for (const client::WorkerInfo& w : *workers) used[w.worker_id] = w.used_bytes;
  return used;
}

// What the workers report once it stopped changing (the same for 1.5 s, several heartbeats), or
// after 15 s.
std::map<int64_t, int64_t> SettledUsedBytes(Session& session) {
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  std::map<int64_t, int64_t> used = UsedBytes(session);
  absl::Time since = absl::Now();
  while (absl::Now() < deadline && absl::Now() - since < absl::Milliseconds(1500)) {
    absl::SleepFor(absl::Milliseconds(100));
    std::map<int64_t, int64_t> now = UsedBytes(session);
    if (now != used) {
      used = std::move(now);
      since = absl::Now();
    }
  }
  return used;
}

class InflightCrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalClusterOptions options = TestClusterOptions(kWorkers);
    options.keep_state = true;
    options.recovery_wait = absl::Seconds(4);
    ASSERT_TRUE(cluster_.Start(options).ok()) << cluster_.LogHint();
    client::MeshOptions ids;
    ids.worker_ids = {0, 1, 2, 3};
    absl::StatusOr<client::MeshInfo> line = client::InitDeviceMesh(
        *cluster_.client, testing::TestDevice(), {kWorkers}, {"x"}, "line", ids);
    ASSERT_TRUE(line.ok()) << line.status() << cluster_.LogHint();
    mesh_.emplace(client::Mesh{line->name, line->mesh});
    absl::StatusOr<std::shared_ptr<Session>> user = Session::Connect(cluster_.cluster->address());
    ASSERT_TRUE(user.ok()) << user.status();
    user_ = *user;
    // Tensors made before the crash, which must come back whole.
    uint32_t seed = 1;
    for (const std::vector<Placement>& p :
         std::vector<std::vector<Placement>>{{P::Shard(0)}, {P::Replicate()}, {P::Shard(1)}}) {
      HostTensor values = SmallIntegerTensor(DType::kFloat32, {9, 6}, seed++);
      client::DistributeOptions named;
      named.name = absl::StrCat("before", before_.size());
      absl::StatusOr<DTensor> t = client::DistributeTensor(*user_, values, *mesh_, p, named);
      ASSERT_TRUE(t.ok()) << t.status();
      before_.push_back(*std::move(t));
      before_values_.push_back(std::move(values));
    }
  }
  void TearDown() override {
    before_.clear();
    user_.reset();
    cluster_.Stop();
  }

  // Restarts the killed coordinator and checks that every tensor made before reads back whole.
  void RestartAndCheckBefore() {
    ASSERT_TRUE(cluster_.cluster->RestartCoordinator().ok()) << cluster_.LogHint();
    for (size_t i = 0; i < before_.size(); ++i) {
      absl::StatusOr<DTensor> t =
          RetryUnavailable([&] { return client::GetTensor(*user_, before_[i].name()); });
      ASSERT_TRUE(t.ok()) << t.status() << cluster_.LogHint();
      absl::StatusOr<HostTensor> back = t->FullTensor();
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_TRUE(back->BitEqual(before_values_[i])) << before_[i].name();
    }
  }

  TestCluster cluster_;
  std::optional<client::Mesh> mesh_;
  std::shared_ptr<Session> user_;
  std::vector<DTensor> before_;
  std::vector<HostTensor> before_values_;
};

TEST_F(InflightCrashTest, ADistributeStreamCutByTheKillFailsUnavailableAndLeavesNothing) {
  const std::map<int64_t, int64_t> used_before = SettledUsedBytes(*user_);
  // 32 MiB sharded over the workers: the kill comes a quarter of the way through the stream.
  const HostTensor big = SmallIntegerTensor(DType::kFloat32, {2048, 4096}, 7);
  bool killed = false;
  client::DistributeOptions options;
  options.name = "half";
  options.progress = [&](int64_t sent, int64_t total) {
    if (!killed && sent >= total / 4) {
      killed = true;
      EXPECT_TRUE(cluster_.cluster->KillCoordinator().ok());
    }
  };
  const absl::Time start = absl::Now();
  absl::StatusOr<DTensor> half =
      client::DistributeTensor(*user_, big, *mesh_, {P::Shard(0)}, options);
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(killed) << "the stream ended before a quarter was sent";
  EXPECT_EQ(half.status().code(), absl::StatusCode::kUnavailable) << half.status();
  EXPECT_LT(took, kFailWithin);

  RestartAndCheckBefore();
  EXPECT_EQ(RetryUnavailable([&] { return client::GetTensor(*user_, "half"); }).status().code(),
            absl::StatusCode::kNotFound);
  // The workers dropped what they had received of it when they registered again.
  EXPECT_EQ(SettledUsedBytes(*user_), used_before);
  // The name is free for a whole upload.
  absl::StatusOr<DTensor> again =
      client::DistributeTensor(*user_, big, *mesh_, {P::Shard(0)}, {.name = "half"});
  ASSERT_TRUE(again.ok()) << again.status();
  absl::StatusOr<HostTensor> back = again->FullTensor();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->BitEqual(big));
}

TEST_F(InflightCrashTest, AnOpCutByTheKillFailsUnavailableAndLeavesNothingHalfWritten) {
  // Inputs big enough that the matmul runs for a while on the workers.
  absl::StatusOr<DTensor> a = client::Randn(*user_, *mesh_, {1536, 1536}, {P::Shard(0)}, 1);
  absl::StatusOr<DTensor> b = client::Randn(*user_, *mesh_, {1536, 1536}, {P::Replicate()}, 2);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  ASSERT_TRUE(a->Synchronize().ok() && b->Synchronize().ok());
  // Both are recorded once written: kept by the restart like the others.
  const std::map<int64_t, int64_t> used_before = SettledUsedBytes(*user_);
  absl::StatusOr<DTensor> product = client::Matmul(*a, *b);
  ASSERT_TRUE(cluster_.cluster->KillCoordinator().ok());
  const absl::Time start = absl::Now();
  absl::Status synced = product.ok() ? product->Synchronize(absl::Seconds(60)) : product.status();
  const absl::Duration took = absl::Now() - start;
  // Written before the kill (the machine was fast), or cut by it: nothing else.
  EXPECT_TRUE(synced.ok() || synced.code() == absl::StatusCode::kUnavailable) << synced;
  EXPECT_LT(took, kFailWithin);
  const std::string name = product.ok() ? product->name() : "";
  if (product.ok()) product->Detach();  // its free would go to the new coordinator

  RestartAndCheckBefore();
  absl::StatusOr<DTensor> found =
      name.empty() ? absl::StatusOr<DTensor>(absl::NotFoundError("never named"))
                   : RetryUnavailable([&] { return client::GetTensor(*user_, name); });
  std::cout << "the op was " << (found.ok() ? "written before the kill" : "cut by the kill")
            << " (Synchronize: " << synced << ")" << std::endl;
  if (found.ok()) {
    // Finished and recorded before the kill: whole, as the same op gives now.
    EXPECT_TRUE(synced.ok()) << "a tensor whose op failed came back: " << synced;
    absl::StatusOr<HostTensor> got = found->FullTensor();
    absl::StatusOr<DTensor> redo = client::Matmul(*a, *b);
    ASSERT_TRUE(got.ok() && redo.ok()) << got.status() << redo.status();
    absl::StatusOr<HostTensor> want = redo->FullTensor();
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_TRUE(got->BitEqual(*want));
    EXPECT_TRUE(found->Free().ok());
  } else {
    EXPECT_EQ(found.status().code(), absl::StatusCode::kNotFound) << found.status();
    EXPECT_EQ(SettledUsedBytes(*user_), used_before);
  }
  // The inputs are intact: the op runs on them after the restart.
  absl::StatusOr<DTensor> after = client::Matmul(*a, *b);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(after->Synchronize().ok()) << cluster_.LogHint();
}

}  // namespace
}  // namespace tessera
