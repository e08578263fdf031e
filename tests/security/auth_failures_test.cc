// AuthFailures on a clock of the test's own: failures refill without truncation (a caller that
// calls more often than the refill period still earns its tokens back), past the burst they are
// answered RESOURCE_EXHAUSTED, each caller has its own bucket, and every failure is counted on
// /metrics by service and peer.

#include "security/auth_failures.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/registry.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

struct FakeClock {
  absl::Time now = absl::UnixEpoch();
};

absl::Status Refuse(AuthFailures& failures, const std::string& caller) {
  return failures.Refuse(caller, "tessera.v1.Test/Call", absl::UnauthenticatedError("bad secret"));
}

TEST(AuthFailures, TheBurstIsAnsweredWithTheRefusalItsExcessWithResourceExhausted) {
  FakeClock clock;
  AuthFailures failures("test burst", 5, absl::Milliseconds(500), [&] { return clock.now; });
  for (int i = 0; i < 5; ++i) {
    const absl::Status s = Refuse(failures, "10.0.0.1");
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << i;
    EXPECT_EQ(s.message(), "bad secret");
  }
  const absl::Status limited = Refuse(failures, "10.0.0.1");
  EXPECT_EQ(limited.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(limited.message(), HasSubstr("too many failed authentications from 10.0.0.1"));
  EXPECT_THAT(limited.message(), HasSubstr("bad secret"));
  // Another caller has its own bucket.
  EXPECT_EQ(Refuse(failures, "10.0.0.2").code(), absl::StatusCode::kUnauthenticated);
}

// The refill used to truncate elapsed time to whole periods and restart its clock on every call:
// calls every 100 ms of a 500 ms period never earned a token back. Fractions now add up.
TEST(AuthFailures, CallsMoreFrequentThanTheRefillPeriodStillRefill) {
  FakeClock clock;
  AuthFailures failures("test refill", 2, absl::Milliseconds(500), [&] { return clock.now; });
  EXPECT_EQ(Refuse(failures, "h").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Refuse(failures, "h").code(), absl::StatusCode::kUnauthenticated);
  int answered = 0;
  for (int i = 0; i < 50; ++i) {  // 5 s of calls, one each 100 ms: ten tokens' worth
    clock.now += absl::Milliseconds(100);
    if (Refuse(failures, "h").code() == absl::StatusCode::kUnauthenticated) ++answered;
  }
  EXPECT_EQ(answered, 10);
}

TEST(AuthFailures, TokensStopAtTheBurst) {
  FakeClock clock;
  AuthFailures failures("test cap", 3, absl::Milliseconds(100), [&] { return clock.now; });
  EXPECT_EQ(Refuse(failures, "h").code(), absl::StatusCode::kUnauthenticated);
  clock.now += absl::Hours(1);
  int answered = 0;
  for (int i = 0; i < 10; ++i) {
    if (Refuse(failures, "h").code() == absl::StatusCode::kUnauthenticated) ++answered;
  }
  EXPECT_EQ(answered, 3);
}

TEST(AuthFailures, FailuresAreCountedOnMetricsByServiceAndPeer) {
  FakeClock clock;
  AuthFailures failures("test metrics", 1, absl::Seconds(1), [&] { return clock.now; });
  for (int i = 0; i < 3; ++i) Refuse(failures, "192.0.2.7").IgnoreError();
  const std::string text = metrics::DefaultRegistry().Render();
  EXPECT_THAT(
      text,
      HasSubstr("tessera_auth_failures_total{service=\"test metrics\",peer=\"192.0.2.7\"} 3"));
}

TEST(AuthFailures, PeersPastTheLabelLimitAreCountedAsOther) {
  FakeClock clock;
  AuthFailures failures("test labels", 1, absl::Seconds(1), [&] { return clock.now; });
  for (int i = 0; i < 70; ++i) Refuse(failures, absl::StrCat("peer-", i)).IgnoreError();
  const std::string text = metrics::DefaultRegistry().Render();
  EXPECT_THAT(text, HasSubstr("service=\"test labels\",peer=\"peer-63\"} 1"));
  EXPECT_THAT(text, HasSubstr("service=\"test labels\",peer=\"other\"} 6"));
}

TEST(AuthFailures, PeerHostDropsSchemeAndPort) {
  EXPECT_EQ(AuthFailures::PeerHost("ipv4:10.0.0.1:5678"), "10.0.0.1");
  EXPECT_EQ(AuthFailures::PeerHost("ipv6:[::1]:5678"), "[::1]");
  EXPECT_EQ(AuthFailures::PeerHost("unix:/tmp/socket"), "unix:/tmp/socket");
}

}  // namespace
}  // namespace tessera
