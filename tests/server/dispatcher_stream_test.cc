// The Dispatcher's command stream to each worker (WorkerStream) against fake workers: one
// long-lived stream per worker carries every batch; a stream that breaks fails its batch in flight
// (never sent again: its sequence is released) and the next batch goes on a new stream; a worker
// that dies mid-batch fails it UNAVAILABLE naming the worker, and its next incarnation gets new
// commands only; large commands still go; posts made under HoldSends leave together.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/cluster/dispatcher.h"
#include "tests/support/fake_worker.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using testing::FakeCluster;
using testing::FakeWorker;
using testing::HasLabel;
using testing::LabeledCommand;
using testing::LabelOf;
using testing::SharedFakeWorkers;
using testing::StatusIs;

// Labels and sequences of the commands `worker` received, in arrival order.
std::vector<std::pair<std::string, int64_t>> Received(const FakeWorker& worker) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const v1::Command& c : worker.commands()) out.emplace_back(LabelOf(c), c.sequence());
  return out;
}

// Whether `worker` was told that `sequence` of `incarnation` will not be used, within 10 s.
bool Released(const FakeWorker& worker, int64_t incarnation, int64_t sequence) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    for (const v1::ReleaseRequest& r : worker.release_requests()) {
      if (r.incarnation() != incarnation) continue;
      for (int64_t s : r.sequences()) {
        if (s == sequence) return true;
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

// Runs the posts of a test to the end: `done` of a post, as a notification and its outcome.
struct Outcome {
  absl::Notification done;
  absl::Status status;
  Dispatcher::Done Callback() {
    return [this](absl::Status s, std::vector<v1::CommandReply>) {
      status = std::move(s);
      done.Notify();
    };
  }
};

// Parameters: workers, Runs.
class OneStreamTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(OneStreamTest, CarriesEveryBatchToItsWorkerInSequenceOrder) {
  const auto [workers, runs] = GetParam();
  FakeCluster cluster(SharedFakeWorkers(static_cast<size_t>(workers)));
  std::vector<int64_t> ids;
  for (int64_t id = 0; id < workers; ++id) ids.push_back(id);
  std::vector<std::pair<std::string, int64_t>> want;
  for (int i = 0; i < runs; ++i) {
    const std::string label = absl::StrCat("run", i);
    auto replies = cluster.dispatcher().Run(ids, LabeledCommand(label), absl::Seconds(10));
    ASSERT_TRUE(replies.ok()) << replies.status();
    want.emplace_back(label, i + 1);
  }
  for (int64_t id = 0; id < workers; ++id) {
    EXPECT_EQ(cluster.worker(id).streams_opened(), 1) << "worker " << id;
    EXPECT_EQ(Received(cluster.worker(id)), want) << "worker " << id;
  }
}

INSTANTIATE_TEST_SUITE_P(WorkersAndRuns, OneStreamTest,
                         ::testing::Combine(::testing::Values(1, 2, 4),
                                            ::testing::Values(1, 5, 40)),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param), "_workers_",
                                               std::get<1>(info.param), "_runs");
                         });

// Parameter: whether a batch is in flight when the worker's side breaks the stream.
class BrokenStreamTest : public ::testing::TestWithParam<bool> {};

TEST_P(BrokenStreamTest, FailsOnlyTheBatchInFlightAndTheNextGoesOnANewStreamOnce) {
  const bool in_flight = GetParam();
  FakeCluster cluster(SharedFakeWorkers(1));
  FakeWorker& w = cluster.worker(0);
  const WorkerHandle handle = cluster.registry().Get(0).value();
  ASSERT_TRUE(cluster.dispatcher().Run({0}, LabeledCommand("before"), absl::Seconds(10)).ok());
  std::vector<std::pair<std::string, int64_t>> want = {{"before", 1}};
  if (in_flight) {
    w.HoldCommands(HasLabel("cut"));
    Outcome cut;
    cluster.dispatcher().Post({handle}, LabeledCommand("cut"), absl::Seconds(10), cut.Callback());
    ASSERT_TRUE(w.WaitForCommands(2));
    w.BreakStreams();
    ASSERT_TRUE(cut.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_FALSE(cut.status.ok());
    EXPECT_NE(cut.status.code(), absl::StatusCode::kDeadlineExceeded) << cut.status;
    EXPECT_TRUE(Released(w, handle.incarnation, 2)) << "the cut batch's sequence was not released";
    want.emplace_back("cut", 2);
  } else {
    w.BreakStreams();
    absl::SleepFor(absl::Milliseconds(300));  // the coordinator sees the stream end
  }
  auto replies = cluster.dispatcher().Run({0}, LabeledCommand("after"), absl::Seconds(10));
  ASSERT_TRUE(replies.ok()) << replies.status();
  want.emplace_back("after", in_flight ? 3 : 2);
  EXPECT_EQ((*replies)[0].sequence(), want.back().second);
  EXPECT_EQ(w.streams_opened(), 2);
  EXPECT_EQ(Received(w), want) << "a command was lost or sent twice";
}

INSTANTIATE_TEST_SUITE_P(Breaks, BrokenStreamTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "batch_in_flight" : "idle"; });

TEST(DispatcherStreamTest, AWorkerStoppedMidBatchFailsItUnavailableNamingIt) {
  std::unique_ptr<FakeWorker> dying = FakeWorker::Start();
  ASSERT_NE(dying, nullptr);
  std::vector<FakeWorker*> workers = SharedFakeWorkers(2);
  workers.insert(workers.begin() + 1, dying.get());
  FakeCluster cluster(workers);
  std::vector<WorkerHandle> handles;
  for (int64_t id = 0; id < 3; ++id) handles.push_back(cluster.registry().Get(id).value());
  dying->HoldCommands(HasLabel("op"));
  Outcome op;
  cluster.dispatcher().Post(handles, LabeledCommand("op"), absl::Seconds(30), op.Callback());
  ASSERT_TRUE(dying->WaitForCommands(1));
  const absl::Time start = absl::Now();
  dying->Stop();
  ASSERT_TRUE(op.done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "waited for a worker that is not there";
  EXPECT_TRUE(StatusIs(op.status, absl::StatusCode::kUnavailable,
                       {absl::StrCat("worker 1 at ", dying->address())}));
  // The others ran it, once; the next command reaches them on their streams.
  ASSERT_TRUE(cluster.dispatcher().Run({0, 2}, LabeledCommand("next"), absl::Seconds(10)).ok());
  for (int64_t id : {0, 2}) {
    EXPECT_EQ(Received(cluster.worker(id)),
              (std::vector<std::pair<std::string, int64_t>>{{"op", 1}, {"next", 2}}));
    EXPECT_EQ(cluster.worker(id).streams_opened(), 1) << "worker " << id;
  }
}

TEST(DispatcherStreamTest, AWorkerDeclaredDeadMidBatchFailsItAndItsNextIncarnationGetsNewOnly) {
  FakeCluster cluster(SharedFakeWorkers(2), /*dead_after=*/absl::Milliseconds(300));
  const WorkerHandle h0 = cluster.registry().Get(0).value();
  const WorkerHandle h1 = cluster.registry().Get(1).value();
  FakeWorker& paused = cluster.worker(1);
  paused.HoldCommands(HasLabel("op"));
  std::atomic<bool> stop_heartbeats{false};
  std::thread heartbeats([&] {  // worker 0 stays alive; worker 1 misses its heartbeats
    v1::HeartbeatRequest hb;
    hb.set_worker_id(0);
    hb.set_incarnation(cluster.incarnation(0));
    while (!stop_heartbeats) {
      EXPECT_TRUE(cluster.registry().Heartbeat(hb).ok());
      absl::SleepFor(absl::Milliseconds(50));
    }
  });
  Outcome op;
  const absl::Time start = absl::Now();
  cluster.dispatcher().Post({h0, h1}, LabeledCommand("op"), absl::Seconds(30), op.Callback());
  ASSERT_TRUE(op.done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "failed at its deadline, not at the death";
  EXPECT_TRUE(StatusIs(op.status, absl::StatusCode::kUnavailable,
                       {absl::StrCat("worker 1 at ", paused.address(), " missed its heartbeats")}));

  // It comes back as a new incarnation: it gets the new command alone, from sequence 1.
  const v1::RegisterReply again = paused.RegisterWith(cluster.registry());
  ASSERT_EQ(again.worker_id(), 1);
  paused.ReleaseHeld();
  auto replies = cluster.dispatcher().Run({0, 1}, LabeledCommand("after"), absl::Seconds(10));
  stop_heartbeats = true;
  heartbeats.join();
  ASSERT_TRUE(replies.ok()) << replies.status();
  const std::vector<v1::Command> got = paused.commands();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(LabelOf(got[0]), "op");
  EXPECT_EQ(got[0].incarnation(), h1.incarnation);
  EXPECT_EQ(LabelOf(got[1]), "after");
  EXPECT_EQ(got[1].incarnation(), again.incarnation());
  EXPECT_EQ(got[1].sequence(), 1);
}

// Parameter: posts made while the sends are held.
class HoldSendsTest : public ::testing::TestWithParam<int> {};

TEST_P(HoldSendsTest, PostsMadeWhileHeldLeaveAsOneBatchPerWorkerWhenTheHoldEnds) {
  const int posts = GetParam();
  FakeCluster cluster(SharedFakeWorkers(2));
  const std::vector<WorkerHandle> handles = {cluster.registry().Get(0).value(),
                                             cluster.registry().Get(1).value()};
  std::atomic<int> done{0};
  {
    Dispatcher::HoldSends hold(cluster.dispatcher());
    for (int i = 0; i < posts; ++i) {
      cluster.dispatcher().Post(handles, LabeledCommand(absl::StrCat("op", i)), absl::Seconds(30),
                                [&done](absl::Status s, std::vector<v1::CommandReply>) {
                                  EXPECT_TRUE(s.ok()) << s;
                                  ++done;
                                });
    }
    if (posts < Dispatcher::kMaxInFlight) {
      absl::SleepFor(absl::Milliseconds(100));
      EXPECT_TRUE(cluster.worker(0).commands().empty()) << "sent while held";
    }
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (done < posts && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ(done, posts);
  for (int64_t id = 0; id < 2; ++id) {
    const auto batches = cluster.worker(id).batches();
    std::vector<std::pair<std::string, int64_t>> want;
    for (int i = 0; i < posts; ++i) want.emplace_back(absl::StrCat("op", i), i + 1);
    EXPECT_EQ(Received(cluster.worker(id)), want) << "worker " << id;
    // Beyond kMaxInFlight the held posts go as room is needed, in more batches.
    if (posts < Dispatcher::kMaxInFlight) {
      EXPECT_EQ(batches.size(), 1u) << "worker " << id;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Posts, HoldSendsTest,
                         ::testing::Values(1, 5, 50, Dispatcher::kMaxInFlight + 44));

// Parameter: bytes of the command (and of its reply).
class LargeBatchTest : public ::testing::TestWithParam<size_t> {};

TEST_P(LargeBatchTest, GoesOnTheStreamBothWays) {
  FakeCluster cluster(SharedFakeWorkers(2));
  const std::string label(GetParam(), 'x');
  auto replies = cluster.dispatcher().Run({0, 1}, LabeledCommand(label), absl::Seconds(30));
  ASSERT_TRUE(replies.ok()) << replies.status();
  for (int64_t id = 0; id < 2; ++id) {
    ASSERT_EQ((*replies)[id].tensors_size(), 1);
    EXPECT_EQ((*replies)[id].tensors(0).name(), cluster.worker(id).ReplyName(label));
    EXPECT_EQ(cluster.worker(id).streams_opened(), 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, LargeBatchTest,
                         ::testing::Values(size_t{1} << 10, size_t{1} << 20, size_t{16} << 20));

}  // namespace
}  // namespace tessera
