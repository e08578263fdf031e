// StreamLimits: streams are admitted while their peer and the daemon have room, refused
// RESOURCE_EXHAUSTED naming the peer and the limit otherwise (counted by peer on /metrics), and
// give their place back when their ticket goes; one peer's streams never take another's share.

#include "security/stream_limits.h"

#include <optional>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/registry.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

TEST(StreamLimits, APeerTakesAtMostItsShareAndOthersStillGetIn) {
  StreamLimits limits("test share", /*max_streams=*/5, /*max_per_peer=*/3);
  std::vector<StreamLimits::Ticket> held;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<StreamLimits::Ticket> t = limits.Admit("10.0.0.1", "OpStream");
    ASSERT_TRUE(t.ok()) << t.status();
    held.push_back(*std::move(t));
  }
  absl::StatusOr<StreamLimits::Ticket> more = limits.Admit("10.0.0.1", "OpStream");
  ASSERT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(more.status().message(), HasSubstr("10.0.0.1 has 3 streams open"));
  EXPECT_THAT(more.status().message(), HasSubstr("--max_streams_per_peer"));
  absl::StatusOr<StreamLimits::Ticket> other = limits.Admit("10.0.0.2", "Upload");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(limits.open("10.0.0.1"), 3);
  EXPECT_EQ(limits.open(), 4);
  EXPECT_THAT(
      metrics::DefaultRegistry().Render(),
      HasSubstr("tessera_streams_refused_total{service=\"test share\",peer=\"10.0.0.1\"} 1"));
}

TEST(StreamLimits, TheDaemonsBoundHoldsAcrossPeersAndTicketsGiveTheirPlaceBack) {
  StreamLimits limits("test total", /*max_streams=*/2, /*max_per_peer=*/2);
  std::optional<StreamLimits::Ticket> a(limits.Admit("a", "x").value());
  StreamLimits::Ticket b = limits.Admit("b", "x").value();
  absl::StatusOr<StreamLimits::Ticket> c = limits.Admit("c", "x");
  ASSERT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c.status().message(), HasSubstr("serves 2 streams already"));
  a.reset();
  EXPECT_EQ(limits.open(), 1);
  EXPECT_EQ(limits.open("a"), 0);
  EXPECT_TRUE(limits.Admit("c", "x").ok());  // admitted, and given back at once
  StreamLimits::Ticket moved = std::move(b);
  EXPECT_EQ(limits.open(), 1);
}

TEST(StreamLimits, NoLimitsAdmitEverything) {
  grpc::ServerContext context;
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(AdmitStream(nullptr, context, "x").ok());
}

}  // namespace
}  // namespace tessera
