#include "server/worker_registry.h"

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

TEST(WorkerRegistry, UnknownWorkerIsNotFound) {
  WorkerRegistry registry(absl::Milliseconds(100), absl::Seconds(10));
  EXPECT_EQ(registry.Get(7).status().code(), absl::StatusCode::kNotFound);
  v1::HeartbeatRequest hb;
  hb.set_worker_id(7);
  EXPECT_EQ(registry.Heartbeat(hb).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera
