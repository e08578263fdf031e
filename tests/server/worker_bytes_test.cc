#include "server/cluster/worker_bytes.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using Holding = WorkerBytes::Holding;

constexpr int64_t kBudget = 100;

// Holdings entered on workers 1 and 2 (budget 100 each) before a Hold, the Hold, and what it must
// do: refuse naming a worker (or accept, -1), and leave the two workers holding these bytes.
struct Case {
  std::string name;
  std::vector<Holding> before;
  std::vector<Holding> hold;
  int64_t refused_worker;
  int64_t held1;
  int64_t held2;
};

Holding On(int64_t worker, const std::string& key, int64_t bytes, int64_t budget = kBudget) {
  return {worker, budget, key, bytes};
}

class WorkerBytesHoldTest : public ::testing::TestWithParam<Case> {};

TEST_P(WorkerBytesHoldTest, ChecksEveryWorkerThenEntersAllOrNothing) {
  const Case& c = GetParam();
  WorkerBytes ledger;
  for (const Holding& h : c.before) ledger.Set(h);
  absl::Status s = ledger.Hold(c.hold, "tensor t");
  if (c.refused_worker < 0) {
    EXPECT_TRUE(s.ok()) << s;
  } else {
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("tensor t needs ")));
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(" bytes on worker ", c.refused_worker, ",")));
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("of its ", kBudget, "-byte budget")));
  }
  EXPECT_EQ(ledger.Held(1), c.held1);
  EXPECT_EQ(ledger.Held(2), c.held2);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, WorkerBytesHoldTest,
    ::testing::Values(
        Case{"fits_exactly", {On(1, "a", 60)}, {On(1, "b", 40)}, -1, 100, 0},
        Case{"one_byte_over", {On(1, "a", 60)}, {On(1, "b", 41)}, 1, 60, 0},
        // Writing a name again replaces its bytes rather than adding to them.
        Case{"replaces_its_key", {On(1, "a", 60)}, {On(1, "a", 100)}, -1, 100, 0},
        Case{"replacement_over", {On(1, "a", 60), On(1, "b", 30)}, {On(1, "a", 71)}, 1, 90, 0},
        // A worker past its budget (bytes entered unchecked) may still shrink, not grow.
        Case{"shrinks_when_over", {On(1, "a", 150)}, {On(1, "a", 120)}, -1, 120, 0},
        Case{"grows_when_over", {On(1, "a", 150)}, {On(1, "b", 1)}, 1, 150, 0},
        // Every worker is checked before anything is entered.
        Case{"all_or_nothing", {On(2, "x", 90)}, {On(1, "t", 50), On(2, "t", 50)}, 2, 0, 90},
        Case{"several_workers", {On(2, "x", 50)}, {On(1, "t", 50), On(2, "t", 50)}, -1, 50, 100},
        // Several holdings on one worker count together.
        Case{"same_worker_twice", {}, {On(1, "t", 60), On(1, "u", 60)}, 1, 0, 0},
        // A budget of 0 is none.
        Case{"no_budget", {On(1, "a", 500, 0)}, {On(1, "b", 500, 0)}, -1, 1000, 0}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// Sizes whose sums pass int64: what is entered unchecked before, the Hold, the code it must give
// and what worker 1 must hold after it (never negative, never wrapped).
struct OverflowCase {
  std::string name;
  std::vector<Holding> before;
  std::vector<Holding> hold;
  absl::StatusCode code;
  int64_t held1;
};

class WorkerBytesOverflowTest : public ::testing::TestWithParam<OverflowCase> {};

TEST_P(WorkerBytesOverflowTest, RefusesSumsPastInt64AndNeverGoesNegative) {
  const OverflowCase& c = GetParam();
  WorkerBytes ledger;
  for (const Holding& h : c.before) ledger.Set(h);
  absl::Status s = ledger.Hold(c.hold, "tensor t");
  EXPECT_EQ(s.code(), c.code) << s;
  EXPECT_EQ(ledger.Held(1), c.held1);
  // The count stays sound afterwards: a TiB still does not pass a 100-byte budget.
  const Holding tib = On(1, "tib", int64_t{1} << 40);
  EXPECT_EQ(ledger.Hold({&tib, 1}, "tib").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ledger.Held(1), c.held1);
}

INSTANTIATE_TEST_SUITE_P(Cases, WorkerBytesOverflowTest,
                         ::testing::Values(OverflowCase{"two_holdings_wrap",
                                                        {},
                                                        {On(1, "a", kMax), On(1, "b", kMax)},
                                                        absl::StatusCode::kResourceExhausted,
                                                        0},
                                           OverflowCase{"held_plus_added_wraps",
                                                        {On(1, "a", 60)},
                                                        {On(1, "b", kMax)},
                                                        absl::StatusCode::kResourceExhausted,
                                                        60},
                                           OverflowCase{"no_budget_still_checked",
                                                        {On(1, "a", kMax, 0)},
                                                        {On(1, "b", 1, 0)},
                                                        absl::StatusCode::kResourceExhausted,
                                                        kMax},
                                           // Set saturates rather than wrapping.
                                           OverflowCase{"set_saturates",
                                                        {On(1, "a", kMax, 0), On(1, "b", kMax, 0)},
                                                        {On(1, "c", 1, 0)},
                                                        absl::StatusCode::kResourceExhausted,
                                                        kMax},
                                           OverflowCase{"negative_bytes",
                                                        {On(1, "a", 60)},
                                                        {On(1, "b", -kMax)},
                                                        absl::StatusCode::kInvalidArgument,
                                                        60}),
                         [](const ::testing::TestParamInfo<OverflowCase>& info) {
                           return info.param.name;
                         });

TEST(WorkerBytesTest, MessageNamesWhatItNeedsAndWhatTheWorkerHolds) {
  WorkerBytes ledger;
  ledger.Set(On(3, "a", 36, 40));
  const Holding h = On(3, "b", 8, 40);
  absl::Status s = ledger.Hold({&h, 1}, "tensor t");
  EXPECT_EQ(s.message(),
            "tensor t needs 8 bytes on worker 3, which holds 36 of its 40-byte budget");
}

TEST(WorkerBytesTest, ReleaseGivesBytesBack) {
  WorkerBytes ledger;
  ledger.Set(On(1, "a", 70));
  ledger.Set(On(1, "b", 20));
  ledger.Release(1, "a");
  ledger.Release(1, "nothing");
  ledger.Release(9, "a");
  EXPECT_EQ(ledger.Held(1), 20);
  const Holding h = On(1, "c", 80);
  EXPECT_TRUE(ledger.Hold({&h, 1}, "c").ok());
  EXPECT_EQ(ledger.Held(1), 100);
  EXPECT_EQ(ledger.Held(9), 0);
}

}  // namespace
}  // namespace tessera
