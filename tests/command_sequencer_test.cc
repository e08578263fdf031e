#include "worker/command_sequencer.h"

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(CommandSequencer, RunsCommandsInSequenceOrderWhateverTheArrivalOrder) {
  CommandSequencer sequencer(absl::Seconds(30));
  absl::Mutex mu;
  std::vector<int64_t> order;
  std::vector<std::thread> threads;
  for (int64_t seq : {4, 2, 5, 1, 3}) {
    threads.emplace_back([&, seq] {
      ASSERT_TRUE(sequencer.Acquire(seq, absl::Now() + absl::Seconds(10)).ok());
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
  CommandSequencer sequencer(absl::Seconds(30));
  ASSERT_TRUE(sequencer.Acquire(1, absl::Now() + absl::Seconds(1)).ok());
  sequencer.Done(1);
  EXPECT_EQ(sequencer.Acquire(1, absl::Now() + absl::Seconds(1)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CommandSequencer, WaitingPastTheDeadlineIsDeadlineExceeded) {
  CommandSequencer sequencer(absl::Seconds(30));
  const absl::Time start = absl::Now();
  EXPECT_EQ(sequencer.Acquire(2, absl::Now() + absl::Milliseconds(100)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(CommandSequencer, ALostCommandIsSkippedAfterTheGapTimeout) {
  CommandSequencer sequencer(absl::Milliseconds(100));
  // Sequence 1 never arrives; 2 runs once the gap has been open for 100 ms.
  const absl::Time start = absl::Now();
  ASSERT_TRUE(sequencer.Acquire(2, absl::Now() + absl::Seconds(10)).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(90));
  sequencer.Done(2);
  EXPECT_EQ(sequencer.Acquire(1, absl::Now() + absl::Seconds(1)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CommandSequencer, ALongCommandIsNotSkipped) {
  CommandSequencer sequencer(absl::Milliseconds(50));
  ASSERT_TRUE(sequencer.Acquire(1, absl::Now() + absl::Seconds(1)).ok());
  std::thread next([&] {
    EXPECT_TRUE(sequencer.Acquire(2, absl::Now() + absl::Seconds(10)).ok());
    sequencer.Done(2);
  });
  absl::SleepFor(absl::Milliseconds(300));  // 1 runs far longer than the gap timeout
  sequencer.Done(1);
  next.join();
}

TEST(CommandSequencer, ResetStartsAgainAtOne) {
  CommandSequencer sequencer(absl::Seconds(30));
  ASSERT_TRUE(sequencer.Acquire(1, absl::Now() + absl::Seconds(1)).ok());
  sequencer.Done(1);
  sequencer.Reset();
  EXPECT_TRUE(sequencer.Acquire(1, absl::Now() + absl::Seconds(1)).ok());
  sequencer.Done(1);
}

}  // namespace
}  // namespace tessera
