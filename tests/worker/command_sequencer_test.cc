#include "worker/command_sequencer.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

constexpr absl::Duration kNoStall = absl::Minutes(10);

absl::Time In(absl::Duration d) { return absl::Now() + d; }

TEST(CommandSequencer, RunsCommandsInSequenceOrderWhateverTheArrivalOrder) {
  CommandSequencer sequencer(kNoStall);
  absl::Mutex mu;
  std::vector<int64_t> order;
  std::vector<std::thread> threads;
  for (int64_t seq : {4, 2, 5, 1, 3}) {
    threads.emplace_back([&, seq] {
      ASSERT_TRUE(sequencer.Acquire(seq, In(absl::Seconds(10))).ok());
      {
        absl::MutexLock lock(&mu);
        order.push_back(seq);
      }
      sequencer.Done(seq);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(order, (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

TEST(CommandSequencer, RefusesASequenceThatAlreadyRan) {
  CommandSequencer sequencer(kNoStall);
  ASSERT_TRUE(sequencer.Acquire(1, In(absl::Seconds(1))).ok());
  sequencer.Done(1);
  EXPECT_EQ(sequencer.Acquire(1, In(absl::Seconds(1))).code(),
            absl::StatusCode::kFailedPrecondition);
}

// The old sequencer skipped a gap after a few seconds, then refused the command that had been
// late: here the later command only times out, and the late one still runs in its turn.
TEST(CommandSequencer, AGapIsNeverSkippedOnATimer) {
  CommandSequencer sequencer(kNoStall);
  const absl::Time start = absl::Now();
  EXPECT_EQ(sequencer.Acquire(2, In(absl::Milliseconds(300))).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(290));
  EXPECT_EQ(sequencer.next(), 1);
  ASSERT_TRUE(sequencer.Acquire(1, In(absl::Seconds(1))).ok());
  sequencer.Done(1);
  // 2 was answered (DEADLINE_EXCEEDED), so it counts as released: 3 runs next.
  EXPECT_EQ(sequencer.next(), 3);
  EXPECT_EQ(sequencer.Acquire(2, In(absl::Seconds(1))).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(sequencer.Acquire(3, In(absl::Seconds(1))).ok());
  sequencer.Done(3);
  EXPECT_TRUE(sequencer.broken().ok());
}

TEST(CommandSequencer, ReleaseLetsTheCommandsAfterItRunAtOnce) {
  CommandSequencer sequencer(kNoStall);
  absl::Notification ran;
  absl::Time acquired;
  std::thread next([&] {
    ASSERT_TRUE(sequencer.Acquire(2, In(absl::Seconds(30))).ok());
    acquired = absl::Now();
    sequencer.Done(2);
    ran.Notify();
  });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(ran.HasBeenNotified());
  const absl::Time released = absl::Now();
  sequencer.Release(1);
  ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(5)));
  next.join();
  EXPECT_LT(acquired - released, absl::Seconds(1));
  // The released number never runs.
  EXPECT_EQ(sequencer.Acquire(1, In(absl::Seconds(1))).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(sequencer.next(), 3);
}

TEST(CommandSequencer, ReleasingANumberThatRanOrIsRunningDoesNothing) {
  CommandSequencer sequencer(kNoStall);
  ASSERT_TRUE(sequencer.Acquire(1, In(absl::Seconds(1))).ok());
  sequencer.Done(1);
  sequencer.Release(1);  // already used
  EXPECT_EQ(sequencer.next(), 2);
  ASSERT_TRUE(sequencer.Acquire(2, In(absl::Seconds(1))).ok());
  sequencer.Release(2);  // running: its command still holds the turn
  std::atomic<bool> third_ran{false};
  std::thread third([&] {
    ASSERT_TRUE(sequencer.Acquire(3, In(absl::Seconds(10))).ok());
    third_ran = true;
    sequencer.Done(3);
  });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(third_ran);
  sequencer.Done(2);
  third.join();
  EXPECT_TRUE(third_ran);
  EXPECT_EQ(sequencer.next(), 4);
}

TEST(CommandSequencer, ACommandWaitingForAReleasedNumberFails) {
  CommandSequencer sequencer(kNoStall);
  absl::Status status;
  std::thread waiter([&] { status = sequencer.Acquire(3, In(absl::Seconds(30))); });
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  sequencer.Release(3);
  waiter.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  // 1 and 2 still run, and the order goes on past 3.
  for (int64_t seq : {1, 2}) {
    ASSERT_TRUE(sequencer.Acquire(seq, In(absl::Seconds(1))).ok());
    sequencer.Done(seq);
  }
  EXPECT_EQ(sequencer.next(), 4);
}

TEST(CommandSequencer, ALongCommandIsNeitherSkippedNorAStall) {
  CommandSequencer sequencer(absl::Milliseconds(50));
  ASSERT_TRUE(sequencer.Acquire(1, In(absl::Seconds(1))).ok());
  std::thread next([&] {
    EXPECT_TRUE(sequencer.Acquire(2, In(absl::Seconds(10))).ok());
    sequencer.Done(2);
  });
  absl::SleepFor(absl::Milliseconds(300));  // 1 runs far longer than the stall limit
  sequencer.Done(1);
  next.join();
  EXPECT_TRUE(sequencer.broken().ok());
}

TEST(CommandSequencer, AGapThatHoldsCommandsPastTheStallLimitBreaksTheOrder) {
  CommandSequencer sequencer(absl::Milliseconds(200));
  const absl::Time start = absl::Now();
  const absl::Status waited = sequencer.Acquire(2, In(absl::Seconds(30)));
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable) << waited;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(190));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // Nothing runs, not even the missing number: the order is lost, not skipped.
  EXPECT_EQ(sequencer.broken().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(sequencer.Acquire(1, In(absl::Seconds(1))).code(), absl::StatusCode::kUnavailable);
  // A new incarnation starts whole.
  sequencer.Reset();
  EXPECT_TRUE(sequencer.broken().ok());
  ASSERT_TRUE(sequencer.Acquire(1, In(absl::Seconds(1))).ok());
  sequencer.Done(1);
}

TEST(CommandSequencer, TimeWithNobodyWaitingIsNotAStall) {
  CommandSequencer sequencer(absl::Milliseconds(200));
  ASSERT_TRUE(sequencer.Acquire(1, In(absl::Seconds(1))).ok());
  sequencer.Done(1);
  absl::SleepFor(absl::Milliseconds(400));  // idle: 2 has not been sent yet
  absl::Status status;
  std::thread waiter([&] {
    status = sequencer.Acquire(3, In(absl::Seconds(10)));
    if (status.ok()) sequencer.Done(3);
  });
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(sequencer.Acquire(2, In(absl::Seconds(1))).ok());
  sequencer.Done(2);
  waiter.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(sequencer.broken().ok());
}

// A waiter cut short by a new incarnation fails UNAVAILABLE (a call in flight across a coordinator
// restart), naming its sequence.
TEST(CommandSequencer, ResetStartsAgainAtOneAndFailsTheWaiters) {
  CommandSequencer sequencer(kNoStall);
  ASSERT_TRUE(sequencer.Acquire(1, In(absl::Seconds(1))).ok());
  sequencer.Done(1);
  absl::Status status;
  std::thread waiter([&] { status = sequencer.Acquire(3, In(absl::Seconds(30))); });
  absl::SleepFor(absl::Milliseconds(50));
  sequencer.Reset();
  waiter.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_NE(status.message().find("command sequence 3"), absl::string_view::npos) << status;
  EXPECT_TRUE(sequencer.Acquire(1, In(absl::Seconds(1))).ok());
  sequencer.Done(1);
}

// Numbers 1..3 released in every order, each before or after the command at 4 starts waiting: 4
// runs exactly when the last of them is released, and the head of the order moves only past
// numbers released in a row from it.
class OutOfOrderRelease : public ::testing::TestWithParam<std::tuple<std::vector<int64_t>, bool>> {
};

TEST_P(OutOfOrderRelease, TheNextCommandRunsOnceEveryNumberBeforeItIsReleased) {
  const auto& [order, waiter_first] = GetParam();
  CommandSequencer sequencer(kNoStall);
  std::atomic<bool> ran{false};
  std::thread waiter;
  auto start_waiter = [&] {
    waiter = std::thread([&] {
      ASSERT_TRUE(sequencer.Acquire(4, In(absl::Seconds(30))).ok());
      ran = true;
      sequencer.Done(4);
    });
  };
  if (waiter_first) start_waiter();
  std::vector<int64_t> released;
  for (size_t i = 0; i < order.size(); ++i) {
    if (waiter_first) absl::SleepFor(absl::Milliseconds(20));
    EXPECT_FALSE(ran) << "4 ran before " << order[i] << " was released";
    sequencer.Release(order[i]);
    released.push_back(order[i]);
    int64_t head = 1;
    while (std::find(released.begin(), released.end(), head) != released.end()) ++head;
    if (i + 1 < order.size()) {
      EXPECT_EQ(sequencer.next(), head);
    }
  }
  if (!waiter_first) start_waiter();
  waiter.join();
  EXPECT_TRUE(ran);
  EXPECT_EQ(sequencer.next(), 5);
}

INSTANTIATE_TEST_SUITE_P(EveryOrder, OutOfOrderRelease,
                         ::testing::Combine(::testing::Values(std::vector<int64_t>{1, 2, 3},
                                                              std::vector<int64_t>{1, 3, 2},
                                                              std::vector<int64_t>{2, 1, 3},
                                                              std::vector<int64_t>{2, 3, 1},
                                                              std::vector<int64_t>{3, 1, 2},
                                                              std::vector<int64_t>{3, 2, 1}),
                                            ::testing::Bool()));

}  // namespace
}  // namespace tessera
