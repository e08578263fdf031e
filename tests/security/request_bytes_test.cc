// RequestBytes: requests are admitted while their bytes fit beside those in flight, refused
// RESOURCE_EXHAUSTED naming the bytes and the bound otherwise, and given back when they end.

#include "security/request_bytes.h"

#include <optional>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/registry.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

TEST(RequestBytes, AdmitsWhatFitsRefusesTheRestAndGivesBytesBack) {
  RequestBytes bytes("test", 100, "--max_request_bytes");
  absl::StatusOr<RequestBytes::Ticket> a = bytes.Admit(60, "request a");
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<RequestBytes::Ticket> b = bytes.Admit(40, "request b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(bytes.in_flight(), 100);
  absl::StatusOr<RequestBytes::Ticket> c = bytes.Admit(1, "request c");
  ASSERT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c.status().message(), HasSubstr("request c of 1 bytes refused: 100 bytes"));
  EXPECT_THAT(c.status().message(), HasSubstr("at most 100 (--max_request_bytes)"));
  { RequestBytes::Ticket gone = *std::move(a); }
  EXPECT_EQ(bytes.in_flight(), 40);
  EXPECT_TRUE(bytes.Admit(60, "request d").ok());  // admitted and given back at once
  EXPECT_EQ(bytes.in_flight(), 40);
  EXPECT_THAT(metrics::DefaultRegistry().Render(),
              HasSubstr("tessera_requests_refused_total{service=\"test\"} 1"));
}

TEST(RequestBytes, ARequestLargerThanTheBoundIsRefusedEvenAlone) {
  RequestBytes bytes("test alone", 100, "--max_request_bytes");
  EXPECT_EQ(bytes.Admit(101, "request").status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(bytes.in_flight(), 0);
}

}  // namespace
}  // namespace tessera
