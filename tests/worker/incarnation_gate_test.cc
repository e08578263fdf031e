// IncarnationGate against outcomes worked out by hand: a call for each incarnation (the one served
// before a registration, the one the registration hands out, one never served) arriving before the
// registration, while it is under way (its answer taken 200 ms later) and after it.

#include "worker/incarnation_gate.h"

#include <string>
#include <thread>
#include <tuple>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

constexpr int64_t kOld = 7, kNew = 8, kOther = 5;
constexpr absl::Duration kAnswerAfter = absl::Milliseconds(200);

enum class When { kBefore, kDuring, kAfter };

class IncarnationGateTest : public ::testing::TestWithParam<std::tuple<int64_t, When>> {};

TEST_P(IncarnationGateTest, AdmitsTheServedIncarnationAndWaitsForARegistration) {
  const auto [incarnation, when] = GetParam();
  IncarnationGate gate;
  gate.Take(kOld);
  if (when == When::kAfter) {
    gate.BeginRegistering();
    gate.Take(kNew);
  }
  std::thread answer;
  if (when == When::kDuring) {
    gate.BeginRegistering();
    answer = std::thread([&gate] {
      absl::SleepFor(kAnswerAfter);
      gate.Take(kNew);
    });
  }
  const absl::Time start = absl::Now();
  const absl::Status status = gate.Admit(incarnation, start + absl::Seconds(10));
  const absl::Duration took = absl::Now() - start;
  if (answer.joinable()) answer.join();

  // Served: the old incarnation until the answer is taken, the new one from then on.
  const bool admitted = when == When::kAfter    ? incarnation == kNew
                        : when == When::kBefore ? incarnation == kOld
                                                : incarnation == kOld || incarnation == kNew;
  if (admitted) {
    EXPECT_TRUE(status.ok()) << status;
  } else {
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("command for incarnation " + std::to_string(incarnation)),
              absl::string_view::npos)
        << status;
  }
  // Only a call for another incarnation than the served one waits, and only for the answer.
  const bool waits = when == When::kDuring && incarnation != kOld;
  if (waits) {
    EXPECT_GE(took, kAnswerAfter - absl::Milliseconds(20));
  } else {
    EXPECT_LT(took, kAnswerAfter / 2);
  }
  EXPECT_LT(took, absl::Seconds(5));
}

INSTANTIATE_TEST_SUITE_P(IncarnationsAndTimes, IncarnationGateTest,
                         ::testing::Combine(::testing::Values(kOld, kNew, kOther),
                                            ::testing::Values(When::kBefore, When::kDuring,
                                                              When::kAfter)),
                         [](const auto& info) {
                           const int64_t incarnation = std::get<0>(info.param);
                           const When when = std::get<1>(info.param);
                           return std::string(incarnation == kOld   ? "old"
                                              : incarnation == kNew ? "new"
                                                                    : "other") +
                                  (when == When::kBefore   ? "_before"
                                   : when == When::kDuring ? "_during"
                                                           : "_after");
                         });

TEST(IncarnationGateTest, ARegistrationWithoutAnAnswerRefusesAtTheDeadline) {
  IncarnationGate gate;
  gate.Take(kOld);
  gate.BeginRegistering();
  const absl::Time start = absl::Now();
  const absl::Status status = gate.Admit(kNew, start + absl::Milliseconds(100));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(90));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("registration was still under way"), absl::string_view::npos)
      << status;
  EXPECT_EQ(gate.current(), kOld);
}

}  // namespace
}  // namespace tessera
