#include "server/cluster/worker_registry.h"

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

v1::RegisterRequest Worker(const std::string& address) {
  v1::RegisterRequest r;
  r.set_address(address);
  r.set_device("cpu");
  return r;
}

TEST(WorkerRegistry, SameAddressKeepsItsIdWithANewIncarnation) {
  WorkerRegistry registry(absl::Milliseconds(100), absl::Seconds(10));
  const v1::RegisterReply a = registry.Register(Worker("127.0.0.1:1"));
  const v1::RegisterReply b = registry.Register(Worker("127.0.0.1:2"));
  const v1::RegisterReply a2 = registry.Register(Worker("127.0.0.1:1"));
  EXPECT_NE(a.worker_id(), b.worker_id());
  EXPECT_EQ(a.worker_id(), a2.worker_id());
  EXPECT_NE(a.incarnation(), a2.incarnation());
  v1::HeartbeatRequest stale;
  stale.set_worker_id(a.worker_id());
  stale.set_incarnation(a.incarnation());
  EXPECT_EQ(registry.Heartbeat(stale).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(WorkerRegistry, AWorkerThatMissesHeartbeatsIsDeadAndNamed) {
  WorkerRegistry registry(absl::Milliseconds(10), absl::Milliseconds(50));
  const v1::RegisterReply a = registry.Register(Worker("127.0.0.1:1"));
  EXPECT_TRUE(registry.Get(a.worker_id()).ok());
  absl::SleepFor(absl::Milliseconds(120));
  absl::StatusOr<WorkerHandle> h = registry.Get(a.worker_id());
  EXPECT_EQ(h.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(h.status().message(), ::testing::HasSubstr("127.0.0.1:1"));
  EXPECT_TRUE(registry.LiveWorkers("cpu").empty());
  v1::HeartbeatRequest hb;
  hb.set_worker_id(a.worker_id());
  hb.set_incarnation(a.incarnation());
  ASSERT_TRUE(registry.Heartbeat(hb).ok());
  EXPECT_TRUE(registry.Get(a.worker_id()).ok());
}

TEST(WorkerRegistry, SequencesAreConsecutivePerWorkerAndRestartWithTheIncarnation) {
  WorkerRegistry registry(absl::Milliseconds(100), absl::Seconds(10));
  registry.Register(Worker("127.0.0.1:1"));
  registry.Register(Worker("127.0.0.1:2"));
  std::vector<WorkerHandle> both = {registry.Get(0).value(), registry.Get(1).value()};
  EXPECT_EQ(registry.NextSequences(both), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(registry.NextSequences({both[1]}), (std::vector<int64_t>{2}));
  EXPECT_EQ(registry.NextSequences(both), (std::vector<int64_t>{2, 3}));
  registry.Register(Worker("127.0.0.1:1"));
  EXPECT_EQ(registry.NextSequences({registry.Get(0).value()}), (std::vector<int64_t>{1}));
  EXPECT_EQ(registry.NextSequences({both[0]}), (std::vector<int64_t>{-1}));  // stale handle
}

TEST(WorkerRegistry, ListsEachGpusNameAndTheMemoryItsLastHeartbeatGave) {
  WorkerRegistry registry(absl::Milliseconds(100), absl::Seconds(10));
  v1::RegisterRequest gpu = Worker("127.0.0.1:1");
  gpu.set_device("cuda:0");
  gpu.set_device_name("NVIDIA H100 80GB HBM3");
  const v1::RegisterReply a = registry.Register(gpu);
  registry.Register(Worker("127.0.0.1:2"));
  // Unknown until the first heartbeat.
  EXPECT_EQ(registry.List()[0].device_free_bytes(), -1);
  v1::HeartbeatRequest hb;
  hb.set_worker_id(a.worker_id());
  hb.set_incarnation(a.incarnation());
  hb.set_used_bytes(1000);
  hb.set_device_allocated_bytes(3000);
  hb.set_device_free_bytes(70 << 20);
  hb.set_device_total_bytes(80 << 20);
  ASSERT_TRUE(registry.Heartbeat(hb).ok());
  const std::vector<v1::WorkerInfo> workers = registry.List();
  ASSERT_EQ(workers.size(), 2u);
  EXPECT_EQ(workers[0].device(), "cuda:0");
  EXPECT_EQ(workers[0].device_name(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(workers[0].used_bytes(), 1000);
  EXPECT_EQ(workers[0].device_allocated_bytes(), 3000);
  EXPECT_EQ(workers[0].device_free_bytes(), 70 << 20);
  EXPECT_EQ(workers[0].device_total_bytes(), 80 << 20);
  EXPECT_EQ(workers[1].device_name(), "");
  EXPECT_EQ(workers[1].device_total_bytes(), -1);
  EXPECT_EQ(registry.LiveWorkers("cuda"), std::vector<int64_t>{a.worker_id()});
}

v1::HeartbeatRequest HeartbeatOf(const v1::RegisterReply& reply) {
  v1::HeartbeatRequest hb;
  hb.set_worker_id(reply.worker_id());
  hb.set_incarnation(reply.incarnation());
  return hb;
}

// A coordinator started again (a new registry) with the same flags: workers registered with the old
// process are refused whatever order they come back in, and each registers anew under its own id.
TEST(WorkerRegistry, WorkersOfAnEarlierCoordinatorProcessAreRefusedAndRegisterAgain) {
  constexpr int kWorkers = 4;
  for (int first_back = 0; first_back < kWorkers; ++first_back) {
    WorkerRegistry before(absl::Milliseconds(100), absl::Seconds(10));
    std::vector<v1::RegisterReply> old;
    for (int i = 0; i < kWorkers; ++i) {
      old.push_back(before.Register(Worker(absl::StrCat("127.0.0.1:", 1000 + i))));
    }
    WorkerRegistry after(absl::Milliseconds(100), absl::Seconds(10));
    // One worker's heartbeat comes first, is refused, and it registers again (taking id 0).
    EXPECT_FALSE(after.Heartbeat(HeartbeatOf(old[first_back])).ok());
    after.Register(Worker(absl::StrCat("127.0.0.1:", 1000 + first_back)));
    std::set<int64_t> ids = {0};
    for (int i = 0; i < kWorkers; ++i) {
      if (i == first_back) continue;
      EXPECT_FALSE(after.Heartbeat(HeartbeatOf(old[i])).ok())
          << "worker " << i << " of the earlier process, after worker " << first_back;
      const v1::RegisterReply again = after.Register(Worker(absl::StrCat("127.0.0.1:", 1000 + i)));
      EXPECT_TRUE(after.Heartbeat(HeartbeatOf(again)).ok());
      ids.insert(again.worker_id());
    }
    EXPECT_EQ(ids.size(), size_t{kWorkers});
    EXPECT_EQ(after.LiveWorkers("cpu").size(), size_t{kWorkers});
  }
}

// A worker heard from since a time: only by a heartbeat of its current incarnation sent later.
TEST(WorkerRegistry, HeardFromSinceCountsOnlyLaterHeartbeatsOfTheCurrentIncarnation) {
  WorkerRegistry registry(absl::Milliseconds(100), absl::Seconds(10));
  const v1::RegisterReply a = registry.Register(Worker("127.0.0.1:1"));
  const v1::RegisterReply b = registry.Register(Worker("127.0.0.1:2"));
  EXPECT_FALSE(registry.HeardFromSince(a.worker_id(), absl::InfinitePast()))
      << "registered, no heartbeat yet";
  ASSERT_TRUE(registry.Heartbeat(HeartbeatOf(a)).ok());
  ASSERT_TRUE(registry.Heartbeat(HeartbeatOf(b)).ok());
  EXPECT_TRUE(registry.HeardFromSince(a.worker_id(), registry.RegisteredAt(a.worker_id())));
  absl::SleepFor(absl::Milliseconds(5));
  const v1::RegisterReply b2 = registry.Register(Worker("127.0.0.1:2"));
  const absl::Time b2_registered = registry.RegisteredAt(b.worker_id());
  EXPECT_GT(b2_registered, registry.RegisteredAt(a.worker_id()));
  // `a`'s last heartbeat came before `b` registered again; `b`'s new incarnation sent none yet.
  EXPECT_FALSE(registry.HeardFromSince(a.worker_id(), b2_registered));
  EXPECT_FALSE(registry.HeardFromSince(b.worker_id(), absl::InfinitePast()));
  EXPECT_FALSE(registry.Heartbeat(HeartbeatOf(b)).ok()) << "the stale incarnation";
  EXPECT_FALSE(registry.HeardFromSince(b.worker_id(), absl::InfinitePast()));
  absl::SleepFor(absl::Milliseconds(5));
  ASSERT_TRUE(registry.Heartbeat(HeartbeatOf(a)).ok());
  ASSERT_TRUE(registry.Heartbeat(HeartbeatOf(b2)).ok());
  EXPECT_TRUE(registry.HeardFromSince(a.worker_id(), b2_registered));
  EXPECT_TRUE(registry.HeardFromSince(b.worker_id(), b2_registered));
  EXPECT_FALSE(registry.HeardFromSince(7, absl::InfinitePast())) << "unknown";
  EXPECT_EQ(registry.RegisteredAt(7), absl::InfinitePast());
}

// The tensors a worker kept across a coordinator restart belong to the incarnation that registered
// with them: a later registration (a restart of the worker) starts empty.
TEST(WorkerRegistry, KeptTensorsBelongToTheIncarnationThatRegisteredWithThem) {
  WorkerRegistry registry(absl::Milliseconds(100), absl::Seconds(10));
  registry.Restore({{"127.0.0.1:1", 0}}, [](int64_t) { return std::set<std::string>{"dt/x"}; });
  v1::RegisterRequest back = Worker("127.0.0.1:1");
  back.add_held_tensors("dt/x");
  back.add_held_tensors("dt/stale");
  const v1::RegisterReply kept = registry.Register(back);
  EXPECT_TRUE(kept.keep_tensors());
  EXPECT_THAT(kept.drop_tensors(), ::testing::ElementsAre("dt/stale"));
  EXPECT_EQ(registry.KeptBy(0, kept.incarnation()), (std::set<std::string>{"dt/x", "dt/stale"}));
  EXPECT_EQ(registry.KeptBy(0, kept.incarnation() + 1), std::nullopt) << "not its incarnation";
  const v1::RegisterReply restarted = registry.Register(Worker("127.0.0.1:1"));
  EXPECT_FALSE(restarted.keep_tensors());
  EXPECT_EQ(registry.KeptBy(0, restarted.incarnation()), std::nullopt);
  EXPECT_EQ(registry.KeptBy(0, kept.incarnation()), std::nullopt) << "no longer current";
  // A worker never restored never kept anything.
  const v1::RegisterReply fresh = registry.Register(Worker("127.0.0.1:2"));
  EXPECT_EQ(registry.KeptBy(fresh.worker_id(), fresh.incarnation()), std::nullopt);
}

// Live workers that heartbeat on time come before those that missed heartbeats but are not dead.
TEST(WorkerRegistry, WorkersThatMissedHeartbeatsComeLast) {
  WorkerRegistry registry(absl::Milliseconds(20), absl::Seconds(10));
  std::vector<v1::RegisterReply> w;
  for (int i = 0; i < 4; ++i) w.push_back(registry.Register(Worker(absl::StrCat("h:", i))));
  EXPECT_EQ(registry.LiveWorkers("cpu"), (std::vector<int64_t>{0, 1, 2, 3}));
  absl::SleepFor(absl::Milliseconds(100));
  for (int i : {0, 2, 3}) ASSERT_TRUE(registry.Heartbeat(HeartbeatOf(w[i])).ok());
  EXPECT_EQ(registry.LiveWorkers("cpu"), (std::vector<int64_t>{0, 2, 3, 1}));
  ASSERT_TRUE(registry.Heartbeat(HeartbeatOf(w[1])).ok());
  EXPECT_EQ(registry.LiveWorkers("cpu"), (std::vector<int64_t>{0, 1, 2, 3}));
}

// Registration order across hosts, and the node-major rank order worked out by hand.
struct NodeMajorCase {
  std::vector<std::string> hosts;  // worker i's hostname, in registration (id) order
  std::vector<int64_t> ids;        // asked for
  std::vector<int64_t> want;
};

class NodeMajorTest : public ::testing::TestWithParam<NodeMajorCase> {};

TEST_P(NodeMajorTest, GroupsIdsByHostInOrderOfEachHostsFirstId) {
  WorkerRegistry registry(absl::Milliseconds(100), absl::Seconds(10));
  for (size_t i = 0; i < GetParam().hosts.size(); ++i) {
    v1::RegisterRequest r = Worker(absl::StrCat("h:", i));
    r.set_hostname(GetParam().hosts[i]);
    registry.Register(r);
  }
  EXPECT_EQ(registry.NodeMajor(GetParam().ids), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(
    Hosts, NodeMajorTest,
    ::testing::Values(
        // One host (tessera up): id order.
        NodeMajorCase{{"a", "a", "a", "a"}, {3, 1, 0, 2}, {0, 1, 2, 3}},
        // Two GPU pods whose workers registered interleaved.
        NodeMajorCase{{"pod-0", "pod-1", "pod-1", "pod-0"}, {0, 1, 2, 3}, {0, 3, 1, 2}},
        NodeMajorCase{{"pod-1", "pod-0", "pod-0", "pod-1", "pod-2", "pod-0"},
                      {5, 4, 3, 2, 1, 0},
                      {0, 3, 1, 2, 5, 4}},
        // A subset: groups ordered by their smallest id among those asked for; unknown ids last.
        NodeMajorCase{{"x", "y", "x", "y"}, {1, 2, 3, 9, 7}, {1, 3, 2, 7, 9}}));

TEST(WorkerRegistry, UnknownWorkerIsNotFound) {
  WorkerRegistry registry(absl::Milliseconds(100), absl::Seconds(10));
  EXPECT_EQ(registry.Get(7).status().code(), absl::StatusCode::kNotFound);
  v1::HeartbeatRequest hb;
  hb.set_worker_id(7);
  EXPECT_EQ(registry.Heartbeat(hb).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera
