#include "server/tables/dynamic_batcher.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using ::tessera::testing::StatusIs;

constexpr int64_t kIn = 3;   // input columns, unless a test says otherwise
constexpr int64_t kOut = 2;  // output columns

// y[r, j] = sum_i x[r, i] * (i + 1) * (j + 2) + j for x of [rows, cols]: a row-wise function with
// an output shape of its own, so rows that land in the wrong request or the wrong place show.
HostTensor RowFunction(const HostTensor& x) {
  const int64_t rows = x.shape()[0];
  const int64_t cols = x.shape()[1];
  HostTensor y = HostTensor::ZerosOfValidShape(DType::kFloat32, {rows, kOut});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < kOut; ++j) {
      float sum = static_cast<float>(j);
      for (int64_t i = 0; i < cols; ++i) {
        sum += x.data_as<float>()[r * cols + i] * static_cast<float>((i + 1) * (j + 2));
      }
      y.data_as<float>()[r * kOut + j] = sum;
    }
  }
  return y;
}

// Runs RowFunction, counting runs and the rows of each; fails with `failure` when set, or when a
// batch holds a row whose first value is `poison`.
class CountingRunner final : public ModelRunner {
 public:
  absl::Status failure;
  float poison = -1e9f;
  absl::Duration run_time = absl::ZeroDuration();
  bool wrong_rows = false;  // answer one row fewer than asked

  absl::StatusOr<HostTensor> Run(const HostTensor& input, absl::Time deadline) override {
    {
      absl::MutexLock lock(&mu_);
      batch_rows_.push_back(input.shape()[0]);
      deadlines_.push_back(deadline);
    }
    if (run_time > absl::ZeroDuration()) absl::SleepFor(run_time);
    if (!failure.ok()) return failure;
    for (int64_t r = 0; r < input.shape()[0]; ++r) {
      if (input.data_as<float>()[r * input.shape()[1]] == poison) {
        return absl::InvalidArgumentError(absl::StrCat("row ", r, " is poisoned"));
      }
    }
    HostTensor y = RowFunction(input);
    if (wrong_rows) return SliceAlong(y, 0, 0, input.shape()[0] - 1);
    return y;
  }

  std::vector<int64_t> batch_rows() const {
    absl::MutexLock lock(&mu_);
    return batch_rows_;
  }
  // The deadline each run was given.
  std::vector<absl::Time> deadlines() const {
    absl::MutexLock lock(&mu_);
    return deadlines_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<int64_t> batch_rows_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> deadlines_ ABSL_GUARDED_BY(mu_);
};

// Request `k` of `rows` rows: values unique to the request.
HostTensor RequestInput(int k, int64_t rows, int64_t cols = kIn) {
  HostTensor x = HostTensor::ZerosOfValidShape(DType::kFloat32, {rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i) {
    x.data_as<float>()[i] = static_cast<float>(k * 100 + i) * 0.25f;
  }
  return x;
}

// `n` results not yet filled in.
std::vector<absl::StatusOr<HostTensor>> NotRun(size_t n) {
  std::vector<absl::StatusOr<HostTensor>> results;
  for (size_t k = 0; k < n; ++k) results.emplace_back(absl::UnknownError("not run"));
  return results;
}

// Runs `inputs` through `batcher` concurrently, each on its own thread, released together.
std::vector<absl::StatusOr<HostTensor>> RunConcurrently(DynamicBatcher& batcher,
                                                        const std::vector<HostTensor>& inputs) {
  std::vector<absl::StatusOr<HostTensor>> results = NotRun(inputs.size());
  absl::Notification go;
  std::vector<std::thread> threads;
  for (size_t k = 0; k < inputs.size(); ++k) {
    threads.emplace_back([&, k] {
      go.WaitForNotification();
      results[k] = batcher.Run(inputs[k], absl::InfiniteFuture());
    });
  }
  go.Notify();
  for (std::thread& t : threads) t.join();
  return results;
}

// (requests, rows per request, max_batch_size)
class DynamicBatcherJoinTest : public ::testing::TestWithParam<std::tuple<int, int64_t, int64_t>> {
};

TEST_P(DynamicBatcherJoinTest, JoinsUpToTheMaximumAndGivesEachRequestItsRows) {
  const auto [n, rows, max_batch] = GetParam();
  auto inner = std::make_shared<CountingRunner>();
  // A long delay: only full batches run before it, and every request is queued long before.
  DynamicBatcher batcher("'m' version 1", {max_batch, absl::Milliseconds(500)}, inner);
  std::vector<HostTensor> inputs;
  for (int k = 0; k < n; ++k) inputs.push_back(RequestInput(k, rows));

  const std::vector<absl::StatusOr<HostTensor>> results = RunConcurrently(batcher, inputs);

  for (int k = 0; k < n; ++k) {
    ASSERT_TRUE(results[k].ok()) << "request " << k << ": " << results[k].status();
    EXPECT_TRUE(results[k]->BitEqual(RowFunction(inputs[k]))) << "request " << k;
  }
  const std::vector<int64_t> batches = inner->batch_rows();
  int64_t total = 0;
  for (int64_t b : batches) {
    EXPECT_LE(b, max_batch);
    total += b;
  }
  EXPECT_EQ(total, n * rows);
  const int64_t per_batch = max_batch / rows;
  const int64_t ideal = (n + per_batch - 1) / per_batch;
  EXPECT_LE(static_cast<int64_t>(batches.size()), ideal + 1)
      << n << " requests of " << rows << " rows in batches of " << max_batch;
  EXPECT_EQ(batcher.QueuedRequests(), 0);
}

INSTANTIATE_TEST_SUITE_P(Sizes, DynamicBatcherJoinTest,
                         ::testing::Combine(::testing::Values(1, 7, 16, 40),
                                            ::testing::Values(int64_t{1}, int64_t{2}),
                                            ::testing::Values(int64_t{2}, int64_t{4}, int64_t{8})));

TEST(DynamicBatcherTest, RequestsOfOtherShapesRunInTheirOwnBatches) {
  auto inner = std::make_shared<CountingRunner>();
  DynamicBatcher batcher("'m' version 1", {8, absl::Milliseconds(200)}, inner);
  // Alternating 3 and 5 columns: two groups that cannot be joined with each other.
  std::vector<HostTensor> inputs;
  for (int k = 0; k < 6; ++k) inputs.push_back(RequestInput(k, 1, k % 2 == 0 ? kIn : 5));

  const std::vector<absl::StatusOr<HostTensor>> results = RunConcurrently(batcher, inputs);

  for (int k = 0; k < 6; ++k) {
    ASSERT_TRUE(results[k].ok()) << results[k].status();
    EXPECT_TRUE(results[k]->BitEqual(RowFunction(inputs[k]))) << "request " << k;
  }
  const std::vector<int64_t> batches = inner->batch_rows();
  EXPECT_GE(batches.size(), 2u);
  EXPECT_LE(batches.size(), 4u);
}

TEST(DynamicBatcherTest, RefusesMoreRowsThanTheMaximumNamingBoth) {
  auto inner = std::make_shared<CountingRunner>();
  DynamicBatcher batcher("'mlp' version 3", {4, absl::Milliseconds(1)}, inner);
  EXPECT_TRUE(StatusIs(batcher.Run(RequestInput(0, 5), absl::InfiniteFuture()).status(),
                       absl::StatusCode::kInvalidArgument, {"5 rows", "max_batch_size 4", "mlp"}));
  EXPECT_TRUE(inner->batch_rows().empty());
  // A request of exactly the maximum runs.
  EXPECT_TRUE(batcher.Run(RequestInput(0, 4), absl::InfiniteFuture()).ok());
}

TEST(DynamicBatcherTest, TheOldestRequestWaitsAboutTheDelay) {
  auto inner = std::make_shared<CountingRunner>();
  const absl::Duration delay = absl::Milliseconds(150);
  DynamicBatcher batcher("'m' version 1", {8, delay}, inner);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(batcher.Run(RequestInput(0, 1), absl::InfiniteFuture()).ok());
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, delay - absl::Milliseconds(1));
  EXPECT_LT(took, delay + absl::Seconds(2));
}

TEST(DynamicBatcherTest, AFullBatchDoesNotWaitForTheDelay) {
  auto inner = std::make_shared<CountingRunner>();
  DynamicBatcher batcher("'m' version 1", {4, absl::Seconds(60)}, inner);
  std::vector<HostTensor> inputs;
  for (int k = 0; k < 4; ++k) inputs.push_back(RequestInput(k, 1));
  const absl::Time start = absl::Now();
  const std::vector<absl::StatusOr<HostTensor>> results = RunConcurrently(batcher, inputs);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(inner->batch_rows(), std::vector<int64_t>{4});
}

// A request whose deadline passes while it waits behind a long batch leaves the queue with
// DEADLINE_EXCEEDED at its deadline, and never runs; the batch it waited for is answered.
TEST(DynamicBatcherTest, ARequestWhoseDeadlinePassesInTheQueueLeavesIt) {
  auto inner = std::make_shared<CountingRunner>();
  inner->run_time = absl::Seconds(2);
  DynamicBatcher batcher("'m' version 1", {1, absl::Milliseconds(1)}, inner);
  absl::StatusOr<HostTensor> first = absl::UnknownError("not run");
  std::thread running([&] { first = batcher.Run(RequestInput(0, 1), absl::InfiniteFuture()); });
  while (inner->batch_rows().empty()) absl::SleepFor(absl::Milliseconds(1));
  const absl::Time start = absl::Now();
  const absl::StatusOr<HostTensor> late =
      batcher.Run(RequestInput(1, 1), start + absl::Milliseconds(200));
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(StatusIs(late.status(), absl::StatusCode::kDeadlineExceeded,
                       {"in the queue of model 'm' version 1"}))
      << late.status();
  EXPECT_LT(took, absl::Seconds(1)) << "it waited for the batch ahead of it";
  running.join();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(inner->batch_rows(), std::vector<int64_t>{1});
  EXPECT_EQ(batcher.QueuedRequests(), 0);
}

// A batch runs until the latest deadline of its requests; a request alone, until its own.
TEST(DynamicBatcherTest, ABatchRunsUntilTheLatestDeadlineOfItsRequests) {
  auto inner = std::make_shared<CountingRunner>();
  DynamicBatcher batcher("'m' version 1", {2, absl::Seconds(60)}, inner);
  const absl::Time soon = absl::Now() + absl::Seconds(30);
  const absl::Time later = soon + absl::Seconds(30);
  absl::StatusOr<HostTensor> a = absl::UnknownError("not run");
  absl::StatusOr<HostTensor> b = absl::UnknownError("not run");
  std::thread ta([&] { a = batcher.Run(RequestInput(0, 1), soon); });
  std::thread tb([&] { b = batcher.Run(RequestInput(1, 1), later); });
  ta.join();
  tb.join();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(inner->deadlines(), std::vector<absl::Time>{later});
}

TEST(DynamicBatcherTest, WithoutBatchingEachRequestRunsAlone) {
  auto inner = std::make_shared<CountingRunner>();
  DynamicBatcher batcher("'m' version 1", {0, absl::Seconds(60)}, inner);
  std::vector<HostTensor> inputs;
  for (int k = 0; k < 5; ++k) inputs.push_back(RequestInput(k, 2));
  const std::vector<absl::StatusOr<HostTensor>> results = RunConcurrently(batcher, inputs);
  for (int k = 0; k < 5; ++k) {
    ASSERT_TRUE(results[k].ok()) << results[k].status();
    EXPECT_TRUE(results[k]->BitEqual(RowFunction(inputs[k])));
  }
  EXPECT_EQ(inner->batch_rows(), std::vector<int64_t>(5, 2));
}

// A request the model refuses (INVALID_ARGUMENT for a value it holds) fails alone: its batch runs
// again request by request, and its neighbours get their rows.
TEST(DynamicBatcherTest, ARefusedRequestFailsAloneAndItsNeighboursAreAnswered) {
  auto inner = std::make_shared<CountingRunner>();
  inner->poison = RequestInput(2, 1).data_as<float>()[0];
  // The four requests fill one batch; the long delay keeps them from running apart.
  DynamicBatcher batcher("'m' version 1", {4, absl::Seconds(60)}, inner);
  std::vector<HostTensor> inputs;
  for (int k = 0; k < 4; ++k) inputs.push_back(RequestInput(k, 1));
  const std::vector<absl::StatusOr<HostTensor>> results = RunConcurrently(batcher, inputs);
  for (int k = 0; k < 4; ++k) {
    if (k == 2) {
      // Its own row 0, not the batch's row 2.
      EXPECT_TRUE(
          StatusIs(results[k].status(), absl::StatusCode::kInvalidArgument, {"row 0 is poisoned"}));
      continue;
    }
    ASSERT_TRUE(results[k].ok()) << k << ": " << results[k].status();
    EXPECT_TRUE(results[k]->BitEqual(RowFunction(inputs[k]))) << k;
  }
  EXPECT_EQ(inner->batch_rows(), (std::vector<int64_t>{4, 1, 1, 1, 1}));
  // The batcher goes on serving.
  inner->poison = -1e9f;
  auto again = batcher.Run(RequestInput(7, 4), absl::InfiniteFuture());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->BitEqual(RowFunction(RequestInput(7, 4))));
}

TEST(DynamicBatcherTest, AFailingRunnerFailsEveryRequestWithItsStatus) {
  auto inner = std::make_shared<CountingRunner>();
  inner->failure = absl::UnavailableError("worker 3 is gone");
  DynamicBatcher batcher("'m' version 1", {4, absl::Milliseconds(50)}, inner);
  std::vector<HostTensor> inputs;
  for (int k = 0; k < 10; ++k) inputs.push_back(RequestInput(k, 1));
  for (const auto& r : RunConcurrently(batcher, inputs)) {
    EXPECT_TRUE(StatusIs(r.status(), absl::StatusCode::kUnavailable, {"worker 3 is gone"}));
  }
  EXPECT_LE(inner->batch_rows().size(), 4u);
}

TEST(DynamicBatcherTest, AnOutputOfOtherRowsFailsTheBatchNamingTheShapes) {
  auto inner = std::make_shared<CountingRunner>();
  inner->wrong_rows = true;
  DynamicBatcher batcher("'m' version 1", {4, absl::Seconds(60)}, inner);
  std::vector<HostTensor> inputs;
  for (int k = 0; k < 4; ++k) inputs.push_back(RequestInput(k, 1));
  for (const auto& r : RunConcurrently(batcher, inputs)) {
    EXPECT_TRUE(StatusIs(r.status(), absl::StatusCode::kInternal, {"[3, 2]", "4 rows"}));
  }
}

TEST(DynamicBatcherTest, ShutdownRunsTheQueuedRequests) {
  auto inner = std::make_shared<CountingRunner>();
  auto batcher = std::make_unique<DynamicBatcher>("'m' version 1",
                                                  BatchingOptions{8, absl::Seconds(60)}, inner);
  std::vector<HostTensor> inputs;
  for (int k = 0; k < 3; ++k) inputs.push_back(RequestInput(k, 1));
  std::vector<absl::StatusOr<HostTensor>> results = NotRun(3);
  std::vector<std::thread> threads;
  for (int k = 0; k < 3; ++k) {
    threads.emplace_back([&, k] { results[k] = batcher->Run(inputs[k], absl::InfiniteFuture()); });
  }
  while (batcher->QueuedRequests() < 3) absl::SleepFor(absl::Milliseconds(1));
  const absl::Time start = absl::Now();
  batcher.reset();  // runs the three now rather than after the delay
  for (std::thread& t : threads) t.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE(results[k].ok()) << results[k].status();
    EXPECT_TRUE(results[k]->BitEqual(RowFunction(inputs[k])));
  }
  EXPECT_EQ(inner->batch_rows(), std::vector<int64_t>{3});
}

TEST(DynamicBatcherTest, RequestsArrivingDuringARunJoinTheNextBatch) {
  auto inner = std::make_shared<CountingRunner>();
  inner->run_time = absl::Milliseconds(100);
  DynamicBatcher batcher("'m' version 1", {16, absl::Milliseconds(1)}, inner);
  std::vector<HostTensor> inputs;
  for (int k = 0; k < 12; ++k) inputs.push_back(RequestInput(k, 1));
  const std::vector<absl::StatusOr<HostTensor>> results = RunConcurrently(batcher, inputs);
  for (int k = 0; k < 12; ++k) {
    ASSERT_TRUE(results[k].ok()) << results[k].status();
    EXPECT_TRUE(results[k]->BitEqual(RowFunction(inputs[k])));
  }
  // With a 1 ms delay the first batch may leave with a few; those queued behind its 100 ms run
  // go together.
  EXPECT_LE(inner->batch_rows().size(), 6u);
}

}  // namespace
}  // namespace tessera
