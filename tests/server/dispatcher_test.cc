// The coordinator's Dispatcher against fake workers (fake_worker.h) registered with a real
// WorkerRegistry: what each worker receives (commands, batches, sequences, incarnations, the
// secret), replies in worker order, batching of what queues up behind a busy worker, back-pressure,
// and which error a failed command reports, naming the worker.

#include "server/cluster/dispatcher.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/cluster/worker_registry.h"
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

// Sequences of the commands `worker` received, in arrival order.
std::vector<int64_t> SequencesOf(const FakeWorker& worker) {
  std::vector<int64_t> out;
  for (const v1::Command& c : worker.commands()) out.push_back(c.sequence());
  return out;
}

// Labels of the commands `worker` received, in arrival order.
std::vector<std::string> LabelsOf(const FakeWorker& worker) {
  std::vector<std::string> out;
  for (const v1::Command& c : worker.commands()) out.push_back(LabelOf(c));
  return out;
}

// 1, 2, ..., n.
std::vector<int64_t> OneTo(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 1; i <= n; ++i) out.push_back(i);
  return out;
}

// The outcomes of posts, in the order their `done` ran.
class Outcomes {
 public:
  struct Outcome {
    std::string label;
    absl::Status status;
    std::vector<v1::CommandReply> replies;
  };

  Dispatcher::Done For(std::string label) {
    return [this, label = std::move(label)](absl::Status s, std::vector<v1::CommandReply> r) {
      absl::MutexLock lock(&mu_);
      done_.push_back({label, std::move(s), std::move(r)});
    };
  }
  // Waits until `n` posts are done; false if `timeout` passes first.
  bool WaitFor(size_t n, absl::Duration timeout = absl::Seconds(30)) const {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }
  size_t count() const {
    absl::MutexLock lock(&mu_);
    return done_.size();
  }
  // The outcome of the post labelled `label`.
  std::optional<Outcome> Of(const std::string& label) const {
    absl::MutexLock lock(&mu_);
    for (const Outcome& o : done_) {
      if (o.label == label) return o;
    }
    return std::nullopt;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<Outcome> done_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------------------------------------
// Run: every worker of the list, replies in its order

class RunTest : public ::testing::TestWithParam<std::vector<int64_t>> {};

TEST_P(RunTest, ReachesExactlyTheListedWorkersAndRepliesInTheirOrder) {
  const std::vector<int64_t>& ids = GetParam();
  FakeCluster cluster(SharedFakeWorkers(4));
  absl::StatusOr<std::vector<v1::CommandReply>> replies =
      cluster.dispatcher().Run(ids, LabeledCommand("op"), absl::Seconds(10));
  ASSERT_TRUE(replies.ok()) << replies.status();
  ASSERT_EQ(replies->size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ((*replies)[i].tensors_size(), 1);
    EXPECT_EQ((*replies)[i].tensors(0).name(), cluster.worker(ids[i]).ReplyName("op"))
        << "reply " << i;
    EXPECT_EQ((*replies)[i].sequence(), 1) << "reply " << i;
  }
  for (int64_t id = 0; id < 4; ++id) {
    const FakeWorker& w = cluster.worker(id);
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) {
      EXPECT_TRUE(w.batches().empty()) << "worker " << id << " is not in the list";
      continue;
    }
    const auto batches = w.batches();
    ASSERT_EQ(batches.size(), 1u) << "worker " << id;
    ASSERT_EQ(batches[0].size(), 1u) << "worker " << id;
    const v1::Command& got = batches[0][0];
    EXPECT_EQ(LabelOf(got), "op");
    EXPECT_EQ(got.sequence(), 1);
    EXPECT_EQ(got.incarnation(), cluster.incarnation(id));
    EXPECT_EQ(w.secrets(), std::vector<std::string>{testing::kFakeSecret});
  }
}

INSTANTIATE_TEST_SUITE_P(
    WorkerLists, RunTest,
    ::testing::Values(std::vector<int64_t>{0}, std::vector<int64_t>{2}, std::vector<int64_t>{1, 3},
                      std::vector<int64_t>{3, 1}, std::vector<int64_t>{2, 0, 3},
                      std::vector<int64_t>{0, 1, 2, 3}, std::vector<int64_t>{3, 2, 1, 0}),
    [](const auto& info) { return absl::StrCat("workers_", absl::StrJoin(info.param, "_")); });

TEST(DispatcherTest, SequencesAreConsecutivePerWorkerAndRestartWithANewIncarnation) {
  FakeCluster cluster(SharedFakeWorkers(3));
  const std::vector<std::vector<int64_t>> runs = {{0, 1}, {1}, {0, 1, 2}, {2, 0}};
  for (size_t i = 0; i < runs.size(); ++i) {
    auto replies = cluster.dispatcher().Run(runs[i], LabeledCommand(absl::StrCat("run", i)),
                                            absl::Seconds(10));
    ASSERT_TRUE(replies.ok()) << replies.status();
  }
  EXPECT_EQ(SequencesOf(cluster.worker(0)), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(SequencesOf(cluster.worker(1)), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(SequencesOf(cluster.worker(2)), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(LabelsOf(cluster.worker(0)), (std::vector<std::string>{"run0", "run2", "run3"}));
  EXPECT_EQ(LabelsOf(cluster.worker(2)), (std::vector<std::string>{"run2", "run3"}));

  // The worker restarts: a new incarnation, whose sequence starts again at 1.
  const v1::RegisterReply again = cluster.worker(1).RegisterWith(cluster.registry());
  ASSERT_EQ(again.worker_id(), 1);
  ASSERT_NE(again.incarnation(), cluster.incarnation(1));
  auto replies = cluster.dispatcher().Run({1}, LabeledCommand("restarted"), absl::Seconds(10));
  ASSERT_TRUE(replies.ok()) << replies.status();
  EXPECT_EQ((*replies)[0].sequence(), 1);
  const v1::Command last = cluster.worker(1).commands().back();
  EXPECT_EQ(LabelOf(last), "restarted");
  EXPECT_EQ(last.sequence(), 1);
  EXPECT_EQ(last.incarnation(), again.incarnation());
}

TEST(DispatcherTest, PostToNoWorkersIsDoneAtOnce) {
  FakeCluster cluster(SharedFakeWorkers(1));
  bool called = false;
  cluster.dispatcher().Post({}, LabeledCommand("nothing"), absl::Seconds(1),
                            [&](absl::Status s, std::vector<v1::CommandReply> r) {
                              EXPECT_TRUE(s.ok()) << s;
                              EXPECT_TRUE(r.empty());
                              called = true;
                            });
  EXPECT_TRUE(called);
  EXPECT_TRUE(cluster.worker(0).batches().empty());
}

TEST(DispatcherTest, PostEachGivesEveryWorkerItsOwnCommandInOneOrder) {
  FakeCluster cluster(SharedFakeWorkers(3));
  std::vector<WorkerHandle> workers;
  for (int64_t id : {2, 0, 1}) workers.push_back(*cluster.registry().Get(id));
  Outcomes outcomes;
  cluster.dispatcher().Post({workers[0], workers[1]}, LabeledCommand("before"), absl::Seconds(10),
                            outcomes.For("before"));
  cluster.dispatcher().PostEach(
      workers, {LabeledCommand("to2"), LabeledCommand("to0"), LabeledCommand("to1")},
      absl::Seconds(10), outcomes.For("each"));
  ASSERT_TRUE(outcomes.WaitFor(2));
  const std::optional<Outcomes::Outcome> each = outcomes.Of("each");
  ASSERT_TRUE(each.has_value());
  ASSERT_TRUE(each->status.ok()) << each->status;
  ASSERT_EQ(each->replies.size(), 3u);
  EXPECT_EQ(each->replies[0].tensors(0).name(), cluster.worker(2).ReplyName("to2"));
  EXPECT_EQ(LabelsOf(cluster.worker(2)), (std::vector<std::string>{"before", "to2"}));
  EXPECT_EQ(LabelsOf(cluster.worker(0)), (std::vector<std::string>{"before", "to0"}));
  EXPECT_EQ(LabelsOf(cluster.worker(1)), (std::vector<std::string>{"to1"}));
  EXPECT_EQ(SequencesOf(cluster.worker(0)), OneTo(2));
  EXPECT_EQ(SequencesOf(cluster.worker(1)), OneTo(1));

  // A command short is refused before anything is sent.
  cluster.dispatcher().PostEach(workers, {LabeledCommand("one")}, absl::Seconds(10),
                                outcomes.For("short"));
  ASSERT_TRUE(outcomes.WaitFor(3));
  EXPECT_TRUE(StatusIs(outcomes.Of("short")->status, absl::StatusCode::kInternal,
                       {"1 commands for 3 workers"}));
  EXPECT_EQ(cluster.worker(1).commands().size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// Batching and ordering

TEST(DispatcherTest, PostsQueuedBehindABusyWorkerGoAsOneBatchInSequenceOrder) {
  FakeCluster cluster(SharedFakeWorkers(2));
  FakeWorker& busy = cluster.worker(0);
  FakeWorker& idle = cluster.worker(1);
  const WorkerHandle h0 = cluster.registry().Get(0).value();
  const WorkerHandle h1 = cluster.registry().Get(1).value();
  busy.HoldCommands(HasLabel("first"));
  Outcomes outcomes;
  cluster.dispatcher().Post({h0}, LabeledCommand("first"), absl::Seconds(30),
                            outcomes.For("first"));
  ASSERT_TRUE(busy.WaitForCommands(1));
  constexpr int kQueued = 5;
  for (int k = 1; k <= kQueued; ++k) {
    const std::string label = absl::StrCat("p", k);
    cluster.dispatcher().Post({h0, h1}, LabeledCommand(label), absl::Seconds(30),
                              outcomes.For(label));
  }
  // The idle worker is not held up by the busy one.
  ASSERT_TRUE(idle.WaitForCommands(kQueued));
  EXPECT_EQ(SequencesOf(idle), OneTo(kQueued));
  EXPECT_EQ(outcomes.count(), 0u) << "a post finished before its busy worker replied";
  busy.ReleaseHeld();
  ASSERT_TRUE(outcomes.WaitFor(kQueued + 1));

  const auto batches = busy.batches();
  ASSERT_EQ(batches.size(), 2u);
  ASSERT_EQ(batches[0].size(), 1u);
  EXPECT_EQ(LabelOf(batches[0][0]), "first");
  ASSERT_EQ(batches[1].size(), static_cast<size_t>(kQueued)) << "what queued went as one batch";
  for (int k = 0; k < kQueued; ++k) {
    EXPECT_EQ(LabelOf(batches[1][k]), absl::StrCat("p", k + 1));
    EXPECT_EQ(batches[1][k].sequence(), k + 2);
  }
  for (int k = 1; k <= kQueued; ++k) {
    const auto o = outcomes.Of(absl::StrCat("p", k));
    ASSERT_TRUE(o.has_value());
    EXPECT_TRUE(o->status.ok()) << o->status;
    ASSERT_EQ(o->replies.size(), 2u);
    EXPECT_EQ(o->replies[0].tensors(0).name(), busy.ReplyName(o->label));
    EXPECT_EQ(o->replies[1].tensors(0).name(), idle.ReplyName(o->label));
    EXPECT_EQ(o->replies[0].sequence(), k + 1);
    EXPECT_EQ(o->replies[1].sequence(), k);
  }
}

TEST(DispatcherTest, AFailedCommandOfABatchFailsOnlyItsOwnPost) {
  FakeCluster cluster(SharedFakeWorkers(1));
  FakeWorker& w = cluster.worker(0);
  const WorkerHandle h = cluster.registry().Get(0).value();
  w.HoldCommands(HasLabel("first"));
  w.FailCommands(HasLabel("b"), absl::InvalidArgumentError("tensor 'b' has no such dim"));
  Outcomes outcomes;
  cluster.dispatcher().Post({h}, LabeledCommand("first"), absl::Seconds(30), outcomes.For("first"));
  ASSERT_TRUE(w.WaitForCommands(1));
  for (const char* label : {"a", "b", "c"}) {
    cluster.dispatcher().Post({h}, LabeledCommand(label), absl::Seconds(30), outcomes.For(label));
  }
  w.ReleaseHeld();
  ASSERT_TRUE(outcomes.WaitFor(4));
  ASSERT_EQ(w.batches().size(), 2u);
  EXPECT_EQ(w.batches()[1].size(), 3u);
  EXPECT_TRUE(outcomes.Of("a")->status.ok()) << outcomes.Of("a")->status;
  EXPECT_TRUE(outcomes.Of("c")->status.ok()) << outcomes.Of("c")->status;
  EXPECT_TRUE(StatusIs(outcomes.Of("b")->status, absl::StatusCode::kInvalidArgument,
                       {absl::StrCat("worker 0 at ", w.address(), ": "), "no such dim"}));
}

// A worker that refuses a command before its turn (its caller or incarnation not accepted) has not
// spent its sequence: the post fails with the worker's refusal, and the sequence is released so
// that the worker's later commands do not wait for it. (Counted as spent, it stalled the worker's
// order until the worker counted itself broken and dropped its shards.)
TEST(DispatcherTest, ACommandRefusedBeforeItsTurnFailsAndItsSequenceIsReleased) {
  FakeCluster cluster(SharedFakeWorkers(1));
  FakeWorker& w = cluster.worker(0);
  const WorkerHandle h = cluster.registry().Get(0).value();
  w.RefuseCommands(HasLabel("refused"), absl::PermissionDeniedError(
                                            "this worker accepts commands from its coordinator"));
  Outcomes outcomes;
  cluster.dispatcher().Post({h}, LabeledCommand("refused"), absl::Seconds(10),
                            outcomes.For("refused"));
  cluster.dispatcher().Post({h}, LabeledCommand("spent"), absl::Seconds(10), outcomes.For("spent"));
  ASSERT_TRUE(outcomes.WaitFor(2));
  EXPECT_TRUE(StatusIs(outcomes.Of("refused")->status, absl::StatusCode::kPermissionDenied,
                       {absl::StrCat("worker 0 at ", w.address(), ": "), "coordinator"}));
  EXPECT_TRUE(outcomes.Of("spent")->status.ok()) << outcomes.Of("spent")->status;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::vector<int64_t> released;
  while (released.empty() && absl::Now() < deadline) {
    for (const v1::ReleaseRequest& r : w.release_requests()) {
      released.insert(released.end(), r.sequences().begin(), r.sequences().end());
    }
    if (released.empty()) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(released, std::vector<int64_t>{1}) << "the refused command's sequence 1";
}

// Many threads post to overlapping sets of workers, some of whose commands are slow: every worker
// gets each of its commands once, in sequence order with no gap, and every reply is its own.
TEST(DispatcherTest, ConcurrentPostsReachEveryWorkerInSequenceOrder) {
  constexpr int kWorkers = 4, kThreads = 4, kPostsPerThread = 60;
  FakeCluster cluster(SharedFakeWorkers(kWorkers));
  std::vector<WorkerHandle> handles;
  for (int id = 0; id < kWorkers; ++id) {
    handles.push_back(cluster.registry().Get(id).value());
    cluster.worker(id).DelayCommands(
        [id](const v1::Command& c) { return (c.sequence() + id) % 7 == 0; }, absl::Milliseconds(3));
  }
  Outcomes outcomes;
  std::vector<std::set<std::string>> sent(kWorkers);
  absl::Mutex sent_mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      for (int i = 0; i < kPostsPerThread; ++i) {
        std::vector<WorkerHandle> to;
        for (int id = 0; id < kWorkers; ++id) {
          if (rng() % 2 == 0) to.push_back(handles[id]);
        }
        std::shuffle(to.begin(), to.end(), rng);
        const std::string label = absl::StrCat("t", t, "-", i);
        {
          absl::MutexLock lock(&sent_mu);
          for (const WorkerHandle& w : to) sent[w.id].insert(label);
        }
        auto check = outcomes.For(label);
        cluster.dispatcher().Post(
            to, LabeledCommand(label), absl::Seconds(30),
            [&cluster, to, label, check](absl::Status s, std::vector<v1::CommandReply> r) {
              EXPECT_TRUE(s.ok()) << label << ": " << s;
              EXPECT_EQ(r.size(), to.size()) << label;
              for (size_t i = 0; i < r.size() && i < to.size(); ++i) {
                EXPECT_EQ(r[i].tensors(0).name(), cluster.worker(to[i].id).ReplyName(label));
              }
              check(std::move(s), std::move(r));
            },
            /*send_here=*/i % 3 == 0);
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(outcomes.WaitFor(kThreads * kPostsPerThread));
  for (int id = 0; id < kWorkers; ++id) {
    const FakeWorker& w = cluster.worker(id);
    const std::vector<std::string> labels = LabelsOf(w);
    EXPECT_EQ(SequencesOf(w), OneTo(static_cast<int64_t>(labels.size()))) << "worker " << id;
    EXPECT_EQ(std::set<std::string>(labels.begin(), labels.end()), sent[id]) << "worker " << id;
    EXPECT_EQ(labels.size(), sent[id].size()) << "worker " << id << " got a command twice";
  }
}

// ---------------------------------------------------------------------------------------------
// Back-pressure

TEST(DispatcherTest, PostBlocksWhileTheMostPostsAreOutstanding) {
  FakeCluster cluster(SharedFakeWorkers(1));
  FakeWorker& w = cluster.worker(0);
  const WorkerHandle h = cluster.registry().Get(0).value();
  w.HoldCommands(testing::AnyCommand());
  Outcomes outcomes;
  for (int i = 0; i < Dispatcher::kMaxInFlight; ++i) {
    const std::string label = absl::StrCat("p", i);
    cluster.dispatcher().Post({h}, LabeledCommand(label), absl::Seconds(60), outcomes.For(label));
  }
  absl::Notification returned;
  std::thread over([&] {
    cluster.dispatcher().Post({h}, LabeledCommand("over"), absl::Seconds(60), outcomes.For("over"));
    returned.Notify();
  });
  EXPECT_FALSE(returned.WaitForNotificationWithTimeout(absl::Milliseconds(300)))
      << "Post returned with " << Dispatcher::kMaxInFlight << " posts outstanding";
  w.ReleaseHeld();
  EXPECT_TRUE(returned.WaitForNotificationWithTimeout(absl::Seconds(30)));
  over.join();
  ASSERT_TRUE(outcomes.WaitFor(Dispatcher::kMaxInFlight + 1));
  EXPECT_TRUE(outcomes.Of("over")->status.ok());
  EXPECT_EQ(SequencesOf(w), OneTo(Dispatcher::kMaxInFlight + 1));
}

// A done that posts must not wait for room: the room is made by completions like its own.
TEST(DispatcherTest, APostFromADoneNeverBlocks) {
  FakeCluster cluster(SharedFakeWorkers(2));
  FakeWorker& held = cluster.worker(0);
  FakeWorker& trigger = cluster.worker(1);
  const WorkerHandle h0 = cluster.registry().Get(0).value();
  const WorkerHandle h1 = cluster.registry().Get(1).value();
  held.HoldCommands(HasLabel("block"));
  trigger.HoldCommands(HasLabel("trigger"));
  Outcomes outcomes;
  absl::Notification nested_returned;
  cluster.dispatcher().Post({h1}, LabeledCommand("trigger"), absl::Seconds(60),
                            [&](absl::Status s, std::vector<v1::CommandReply>) {
                              EXPECT_TRUE(s.ok()) << s;
                              // The trigger's own slot is free again: the first fills it, the
                              // second would wait for a slot no one can free.
                              for (const char* label : {"nested1", "nested2"}) {
                                cluster.dispatcher().Post({h0}, LabeledCommand(label),
                                                          absl::Seconds(60), outcomes.For(label));
                              }
                              nested_returned.Notify();
                            });
  ASSERT_TRUE(trigger.WaitForCommands(1));
  for (int i = 1; i < Dispatcher::kMaxInFlight; ++i) {
    const std::string label = absl::StrCat("block", i);
    cluster.dispatcher().Post({h0}, LabeledCommand("block"), absl::Seconds(60),
                              outcomes.For(label));
  }
  trigger.ReleaseHeld();
  EXPECT_TRUE(nested_returned.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "a Post from a done waited for room";
  held.ReleaseHeld();
  ASSERT_TRUE(outcomes.WaitFor(Dispatcher::kMaxInFlight - 1 + 2));
  EXPECT_TRUE(outcomes.Of("nested2")->status.ok());
}

// ---------------------------------------------------------------------------------------------
// Errors

// What the fake workers answer, most telling first, as the dispatcher ranks them: out of memory,
// then bad input, then missing and refused state, then any other failure, a timeout (usually a
// peer's failure seen from the waiting side); last an I/O error from a worker that is still there
// (a peer's failure that broke its collectives: the failure that caused it is the answer). A
// worker that is gone wins over all (AFailureWhileAPeerDiedNamesTheDeadPeer).
constexpr absl::StatusCode kMostTellingFirst[] = {
    absl::StatusCode::kResourceExhausted, absl::StatusCode::kInvalidArgument,
    absl::StatusCode::kNotFound,          absl::StatusCode::kFailedPrecondition,
    absl::StatusCode::kInternal,          absl::StatusCode::kDeadlineExceeded,
    absl::StatusCode::kUnavailable};

int Rank(absl::StatusCode code) {
  return static_cast<int>(
      std::find(std::begin(kMostTellingFirst), std::end(kMostTellingFirst), code) -
      std::begin(kMostTellingFirst));
}

class CombinedErrorTest
    : public ::testing::TestWithParam<std::tuple<absl::StatusCode, absl::StatusCode>> {};

// Workers 1 and 3 fail, 0 and 2 succeed: the more telling failure wins (the earlier worker on a
// tie), with the worker's id, address and its own message.
TEST_P(CombinedErrorTest, MostTellingFailureWinsNamingItsWorker) {
  const auto [code1, code3] = GetParam();
  FakeCluster cluster(SharedFakeWorkers(4));
  cluster.worker(1).FailCommands(HasLabel("op"), absl::Status(code1, "first failure"));
  cluster.worker(3).FailCommands(HasLabel("op"), absl::Status(code3, "second failure"));
  auto replies = cluster.dispatcher().Run({0, 1, 2, 3}, LabeledCommand("op"), absl::Seconds(10));
  const int64_t want_worker = Rank(code3) < Rank(code1) ? 3 : 1;
  const absl::StatusCode want_code = want_worker == 3 ? code3 : code1;
  const std::string want_message = want_worker == 3 ? "second failure" : "first failure";
  EXPECT_TRUE(StatusIs(replies.status(), want_code,
                       {absl::StrCat("worker ", want_worker, " at ",
                                     cluster.worker(want_worker).address(), ": ", want_message)}));
  for (int64_t id = 0; id < 4; ++id) {
    EXPECT_EQ(cluster.worker(id).commands().size(), 1u) << "worker " << id;
  }
}

INSTANTIATE_TEST_SUITE_P(CodePairs, CombinedErrorTest,
                         ::testing::Combine(::testing::ValuesIn(kMostTellingFirst),
                                            ::testing::ValuesIn(kMostTellingFirst)),
                         [](const auto& info) {
                           return absl::StrCat(absl::StatusCodeToString(std::get<0>(info.param)),
                                               "_then_",
                                               absl::StatusCodeToString(std::get<1>(info.param)));
                         });

TEST(DispatcherTest, OneFailingWorkerAmongHealthyOnesIsTheError) {
  FakeCluster cluster(SharedFakeWorkers(3));
  cluster.worker(2).FailCommands(HasLabel("op"),
                                 absl::ResourceExhaustedError("needs 4096 bytes over the budget"));
  auto replies = cluster.dispatcher().Run({2, 0, 1}, LabeledCommand("op"), absl::Seconds(10));
  EXPECT_TRUE(StatusIs(replies.status(), absl::StatusCode::kResourceExhausted,
                       {absl::StrCat("worker 2 at ", cluster.worker(2).address(),
                                     ": needs 4096 bytes over the budget")}));
}

TEST(DispatcherTest, AHungCommandTimesOutNamingItsWorker) {
  FakeCluster cluster(SharedFakeWorkers(2));
  cluster.worker(1).HoldCommands(HasLabel("slow"));
  const absl::Duration timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  auto replies = cluster.dispatcher().Run({0, 1}, LabeledCommand("slow"), timeout);
  EXPECT_LT(absl::Now() - start, timeout + absl::Seconds(5));
  EXPECT_TRUE(StatusIs(replies.status(), absl::StatusCode::kDeadlineExceeded,
                       {absl::StrCat("worker 1 at ", cluster.worker(1).address())}));
  cluster.worker(1).ReleaseHeld();

  // A worker's own failure is more telling than a peer's timeout.
  cluster.worker(1).HoldCommands(HasLabel("slow-again"));
  cluster.worker(0).FailCommands(HasLabel("slow-again"), absl::InternalError("gloo: peer reset"));
  replies = cluster.dispatcher().Run({0, 1}, LabeledCommand("slow-again"), timeout);
  EXPECT_TRUE(
      StatusIs(replies.status(), absl::StatusCode::kInternal,
               {absl::StrCat("worker 0 at ", cluster.worker(0).address(), ": gloo: peer reset")}));
  cluster.worker(1).ReleaseHeld();
}

TEST(DispatcherTest, AnUnreachableWorkerIsUnavailableNamingIt) {
  std::unique_ptr<FakeWorker> gone = FakeWorker::Start();
  ASSERT_NE(gone, nullptr);
  std::vector<FakeWorker*> workers = SharedFakeWorkers(2);
  workers.insert(workers.begin() + 1, gone.get());
  FakeCluster cluster(workers);
  gone->Stop();
  const absl::Time start = absl::Now();
  auto replies = cluster.dispatcher().Run({0, 1, 2}, LabeledCommand("op"), absl::Seconds(20));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "waited for a worker that is not there";
  EXPECT_TRUE(StatusIs(replies.status(), absl::StatusCode::kUnavailable,
                       {absl::StrCat("worker 1 at ", gone->address())}));
  // The others still ran the command.
  EXPECT_EQ(LabelsOf(cluster.worker(0)), std::vector<std::string>{"op"});
  EXPECT_EQ(LabelsOf(cluster.worker(2)), std::vector<std::string>{"op"});
}

TEST(DispatcherTest, RunToADeadOrUnknownWorkerSendsNothing) {
  // Long enough that worker 1, heartbeating just before the Run, is alive during it.
  FakeCluster cluster(SharedFakeWorkers(2), /*dead_after=*/absl::Seconds(1));
  absl::SleepFor(absl::Milliseconds(1300));
  v1::HeartbeatRequest alive;
  alive.set_worker_id(1);
  alive.set_incarnation(cluster.incarnation(1));
  ASSERT_TRUE(cluster.registry().Heartbeat(alive).ok());
  auto dead = cluster.dispatcher().Run({1, 0}, LabeledCommand("op"), absl::Seconds(5));
  EXPECT_TRUE(StatusIs(dead.status(), absl::StatusCode::kUnavailable,
                       {absl::StrCat("worker 0 at ", cluster.worker(0).address()), "heartbeats"}));
  auto unknown = cluster.dispatcher().Run({1, 7}, LabeledCommand("op"), absl::Seconds(5));
  EXPECT_TRUE(StatusIs(unknown.status(), absl::StatusCode::kNotFound, {"worker 7"}));
  EXPECT_TRUE(cluster.worker(0).batches().empty());
  EXPECT_TRUE(cluster.worker(1).batches().empty());
}

// A peer's death shows on the survivors as I/O errors: the error names the worker that is gone,
// alone.
TEST(DispatcherTest, AFailureWhileAPeerDiedNamesTheDeadPeer) {
  FakeCluster cluster(SharedFakeWorkers(2), /*dead_after=*/absl::Milliseconds(300));
  const WorkerHandle h0 = cluster.registry().Get(0).value();
  const WorkerHandle h1 = cluster.registry().Get(1).value();
  cluster.worker(0).FailCommands(HasLabel("op"),
                                 absl::InternalError("gloo: connection reset by peer"));
  cluster.worker(1).DelayCommands(HasLabel("op"), absl::Milliseconds(700));
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
  Outcomes outcomes;
  cluster.dispatcher().Post({h0, h1}, LabeledCommand("op"), absl::Seconds(10), outcomes.For("op"));
  ASSERT_TRUE(outcomes.WaitFor(1));
  stop_heartbeats = true;
  heartbeats.join();
  const absl::Status status = outcomes.Of("op")->status;  // Of returns a copy
  EXPECT_TRUE(StatusIs(
      status, absl::StatusCode::kUnavailable,
      {absl::StrCat("worker 1 at ", cluster.worker(1).address(), " missed its heartbeats")}));
  EXPECT_EQ(status.message().find("connection reset"), absl::string_view::npos) << status;
}

// A worker restarted (registered again) while a batch of its old incarnation was in flight; a post
// for the new incarnation and then one made with a handle of the old queued behind it, so the next
// batch goes with the old handle. That batch fails (its deadline passes): the new incarnation's
// unused sequence must be released under the new incarnation, which the worker serves. Released
// under the batch's old handle, the worker refused it as stale and the new order stalled at it.
TEST(DispatcherTest, AFailedBatchReleasesEachSequenceUnderItsOwnIncarnation) {
  FakeCluster cluster(SharedFakeWorkers(1));
  FakeWorker& w = cluster.worker(0);
  const WorkerHandle old = cluster.registry().Get(0).value();
  w.HoldCommands(HasLabel("first"));
  Outcomes outcomes;
  cluster.dispatcher().Post({old}, LabeledCommand("first"), absl::Seconds(10),
                            outcomes.For("first"));
  ASSERT_TRUE(w.WaitForCommands(1));
  w.RegisterWith(cluster.registry());
  const WorkerHandle now = cluster.registry().Get(0).value();
  ASSERT_NE(now.incarnation, old.incarnation);
  w.DelayCommands(HasLabel("second"), absl::Seconds(3));
  cluster.dispatcher().Post({now}, LabeledCommand("second"), absl::Seconds(1),
                            outcomes.For("second"));
  cluster.dispatcher().Post({old}, LabeledCommand("stale"), absl::Seconds(1),
                            outcomes.For("stale"));
  w.ReleaseHeld();
  ASSERT_TRUE(outcomes.WaitFor(3));
  EXPECT_EQ(outcomes.Of("second")->status.code(), absl::StatusCode::kDeadlineExceeded)
      << outcomes.Of("second")->status;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  bool released_as_new = false, released_as_old = false;
  while (!released_as_new && absl::Now() < deadline) {
    for (const v1::ReleaseRequest& r : w.release_requests()) {
      const bool has_one = std::count(r.sequences().begin(), r.sequences().end(), 1) > 0;
      released_as_new = released_as_new || (has_one && r.incarnation() == now.incarnation);
      released_as_old = released_as_old || (has_one && r.incarnation() == old.incarnation);
    }
    if (!released_as_new) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(released_as_new) << "sequence 1 of incarnation " << now.incarnation
                               << " was not released under it";
  EXPECT_FALSE(released_as_old) << "sequence 1 of incarnation " << now.incarnation
                                << " was released under the old incarnation " << old.incarnation;
}

// Every post fails UNAVAILABLE on live workers (a survivor's I/O error), so each post's completion
// probes its workers before it answers. Those completions arrive at once on gRPC's callback threads
// (two on a 2-core machine, at most 16), the same threads the probes' replies need: a completion
// that waited there for its probe took one of them, and once all of them waited no reply could
// ever arrive; every later batch completion queued behind them, so commands already given their
// sequence were never sent, and each worker's order stalled at them. Probing never blocks a
// callback thread now. Parameter: workers per post.
class ProbingCompletionsTest : public ::testing::TestWithParam<int> {};

TEST_P(ProbingCompletionsTest, ManyAtOnceAllFinish) {
  constexpr int kWorkers = 16;  // one post each: more posts than callback threads anywhere
  const int per_post = GetParam();
  FakeCluster cluster(SharedFakeWorkers(kWorkers));
  std::vector<WorkerHandle> handles;
  for (int64_t id = 0; id < kWorkers; ++id) {
    handles.push_back(cluster.registry().Get(id).value());
    cluster.worker(id).FailCommands(testing::AnyCommand(),
                                    absl::UnavailableError("gloo: connection reset by peer"));
  }
  Outcomes outcomes;
  for (int i = 0; i < kWorkers; ++i) {
    std::vector<WorkerHandle> workers;
    for (int k = 0; k < per_post; ++k) workers.push_back(handles[(i + k) % kWorkers]);
    cluster.dispatcher().Post(workers, LabeledCommand(absl::StrCat("op", i)), absl::Seconds(10),
                              outcomes.For(absl::StrCat("op", i)));
  }
  ASSERT_TRUE(outcomes.WaitFor(kWorkers, absl::Seconds(20)))
      << outcomes.count() << " of " << kWorkers << " posts finished";
  for (int i = 0; i < kWorkers; ++i) {
    const absl::Status status = outcomes.Of(absl::StrCat("op", i))->status;
    EXPECT_TRUE(StatusIs(status, absl::StatusCode::kUnavailable,
                         {absl::StrCat("worker ", i, " at "), "connection reset"}))
        << "op" << i;
  }
  // The dispatcher still works: the next commands reach every worker.
  for (int64_t id = 0; id < kWorkers; ++id) cluster.worker(id).Reset();
  std::vector<int64_t> ids;
  for (int64_t id = 0; id < kWorkers; ++id) ids.push_back(id);
  EXPECT_TRUE(cluster.dispatcher().Run(ids, LabeledCommand("after"), absl::Seconds(10)).ok());
}

INSTANTIATE_TEST_SUITE_P(WorkersPerPost, ProbingCompletionsTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace tessera
