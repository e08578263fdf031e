// The Prometheus text format of metrics/: values, escaping and whole families compared with text
// written out by hand; the HTTP server compared with the registry's own rendering.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "metrics/http_client.h"
#include "metrics/http_server.h"
#include "metrics/registry.h"
#include "metrics/text_format.h"

namespace tessera::metrics {
namespace {

struct ValueCase {
  double value;
  std::string text;
};

class FormatValueTest : public ::testing::TestWithParam<ValueCase> {};

TEST_P(FormatValueTest, WritesTheShortestDecimal) {
  EXPECT_EQ(FormatValue(GetParam().value), GetParam().text);
}

INSTANTIATE_TEST_SUITE_P(
    Values, FormatValueTest,
    ::testing::Values(ValueCase{0, "0"}, ValueCase{3, "3"}, ValueCase{-2, "-2"},
                      ValueCase{0.25, "0.25"}, ValueCase{0.1, "0.1"}, ValueCase{1e21, "1e+21"},
                      ValueCase{1073741824, "1073741824"}, ValueCase{0.0001, "0.0001"},
                      ValueCase{std::numeric_limits<double>::infinity(), "+Inf"},
                      ValueCase{-std::numeric_limits<double>::infinity(), "-Inf"},
                      ValueCase{std::nan(""), "NaN"}));

struct EscapeCase {
  std::string raw;
  std::string label_value;  // escaped as a label value
  std::string help;         // escaped as a HELP text
};

class EscapeTest : public ::testing::TestWithParam<EscapeCase> {};

TEST_P(EscapeTest, EscapesBackslashQuoteAndLineFeed) {
  EXPECT_EQ(EscapeLabelValue(GetParam().raw), GetParam().label_value);
  EXPECT_EQ(EscapeHelp(GetParam().raw), GetParam().help);
}

INSTANTIATE_TEST_SUITE_P(Texts, EscapeTest,
                         ::testing::Values(EscapeCase{"plain", "plain", "plain"},
                                           EscapeCase{"", "", ""},
                                           EscapeCase{"a\\b", "a\\\\b", "a\\\\b"},
                                           EscapeCase{"say \"hi\"", "say \\\"hi\\\"", "say \"hi\""},
                                           EscapeCase{"two\nlines", "two\\nlines", "two\\nlines"},
                                           EscapeCase{"\\\"\n", "\\\\\\\"\\n", "\\\\\"\\n"}));

TEST(RegistryTest, RendersCountersAndGaugesInNameAndLabelOrder) {
  Registry r;
  Family<Counter>& rpcs = r.AddCounter("tessera_rpcs_total", "RPCs \"done\"\nby code", {"code"});
  rpcs.With({"OK"}).Increment(3);
  rpcs.With({"NOT_FOUND"}).Increment();
  rpcs.With({"OK"}).Increment(2);
  r.AddGauge("tessera_live_workers", "live workers").With({}).Set(4);
  r.AddGauge("tessera_bytes", "bytes", {"worker", "kind"}).With({"w\"1", "host"}).Add(0.5);
  EXPECT_EQ(r.Render(),
            "# HELP tessera_bytes bytes\n"
            "# TYPE tessera_bytes gauge\n"
            "tessera_bytes{worker=\"w\\\"1\",kind=\"host\"} 0.5\n"
            "# HELP tessera_live_workers live workers\n"
            "# TYPE tessera_live_workers gauge\n"
            "tessera_live_workers 4\n"
            "# HELP tessera_rpcs_total RPCs \"done\"\\nby code\n"
            "# TYPE tessera_rpcs_total counter\n"
            "tessera_rpcs_total{code=\"NOT_FOUND\"} 1\n"
            "tessera_rpcs_total{code=\"OK\"} 5\n");
}

TEST(RegistryTest, UnlabelledMetricShowsZeroAndLabelledFamilyWithoutChildrenShowsNothing) {
  Registry r;
  r.AddCounter("tessera_a_total", "a");
  r.AddCounter("tessera_b_total", "b", {"kind"});
  EXPECT_EQ(r.Render(),
            "# HELP tessera_a_total a\n"
            "# TYPE tessera_a_total counter\n"
            "tessera_a_total 0\n");
}

TEST(RegistryTest, AddingANameAgainGivesTheSameFamily) {
  Registry r;
  r.AddCounter("tessera_x_total", "x", {"k"}).With({"a"}).Increment();
  r.AddCounter("tessera_x_total", "other help", {"k"}).With({"a"}).Increment();
  EXPECT_EQ(r.AddCounter("tessera_x_total", "x", {"k"}).With({"a"}).value(), 2);
}

TEST(RegistryTest, HistogramBucketsAreCumulativeWithInclusiveBounds) {
  Registry r;
  Histogram& h = r.AddHistogram("tessera_wait_seconds", "wait", {"op"}, {0.5, 1, 2}).With({"add"});
  // 0.25 and 0.5 fall in le=0.5; 1 in le=1; 1.5 in le=2; 7 only in +Inf.
  for (double v : {0.25, 0.5, 1.0, 1.5, 7.0}) h.Observe(v);
  EXPECT_EQ(r.Render(),
            "# HELP tessera_wait_seconds wait\n"
            "# TYPE tessera_wait_seconds histogram\n"
            "tessera_wait_seconds_bucket{op=\"add\",le=\"0.5\"} 2\n"
            "tessera_wait_seconds_bucket{op=\"add\",le=\"1\"} 3\n"
            "tessera_wait_seconds_bucket{op=\"add\",le=\"2\"} 4\n"
            "tessera_wait_seconds_bucket{op=\"add\",le=\"+Inf\"} 5\n"
            "tessera_wait_seconds_sum{op=\"add\"} 10.25\n"
            "tessera_wait_seconds_count{op=\"add\"} 5\n");
}

TEST(RegistryTest, CallbackSamplesAreComputedAtEachScrapeAndSorted) {
  Registry r;
  int scrapes = 0;
  r.AddCallback("tessera_memory_used_bytes", "used", {"worker"}, [&scrapes] {
    ++scrapes;
    return std::vector<Sample>{{{"2"}, 20.0 * scrapes}, {{"1"}, 10}};
  });
  r.AddCallback("tessera_empty", "nothing", {}, [] { return std::vector<Sample>{}; });
  r.Render();
  EXPECT_EQ(r.Render(),
            "# HELP tessera_memory_used_bytes used\n"
            "# TYPE tessera_memory_used_bytes gauge\n"
            "tessera_memory_used_bytes{worker=\"1\"} 10\n"
            "tessera_memory_used_bytes{worker=\"2\"} 40\n");
}

TEST(RegistryTest, ConcurrentIncrementsAllCount) {
  Registry r;
  Family<Counter>& f = r.AddCounter("tessera_n_total", "n", {"t"});
  Histogram& h = r.AddHistogram("tessera_h", "h", {}, {1}).With({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&f, &h, t] {
      for (int i = 0; i < 10000; ++i) {
        f.With({t % 2 == 0 ? "even" : "odd"}).Increment();
        h.Observe(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(f.With({"even"}).value(), 20000);
  EXPECT_EQ(f.With({"odd"}).value(), 20000);
  EXPECT_EQ(h.snapshot().count, 40000u);
  EXPECT_EQ(h.snapshot().cumulative[0], 40000u);
}

TEST(HttpServerTest, ServesTheRegistryOnMetricsAndNothingElse) {
  Registry r;
  r.AddCounter("tessera_requests_total", "requests", {"kind"}).With({"x"}).Increment(7);
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start("127.0.0.1", 0, &r);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  const std::string base = "http://127.0.0.1:" + std::to_string((*server)->port());
  absl::StatusOr<HttpResponse> response = HttpGet(base + "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->content_type.rfind("text/plain; version=0.0.4", 0), 0u)
      << response->content_type;
  EXPECT_EQ(response->body,
            "# HELP tessera_requests_total requests\n"
            "# TYPE tessera_requests_total counter\n"
            "tessera_requests_total{kind=\"x\"} 7\n");
  absl::StatusOr<HttpResponse> other = HttpGet(base + "/other");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->status, 404);
}

class ReadinessTest : public ::testing::TestWithParam<bool> {};

// GET /ready answers as the readiness callback says at each request: 200 while ready, 503 not;
// 404 before ServeReadiness is called.
TEST_P(ReadinessTest, AnswersAsTheCallbackSays) {
  Registry r;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start("127.0.0.1", 0, &r);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string ready_url = "http://127.0.0.1:" + std::to_string((*server)->port()) + "/ready";
  absl::StatusOr<HttpResponse> before = HttpGet(ready_url);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->status, 404);
  std::atomic<bool> ready{GetParam()};
  (*server)->ServeReadiness([&ready] { return ready.load(); });
  for (bool now : {GetParam(), !GetParam()}) {
    ready = now;
    absl::StatusOr<HttpResponse> response = HttpGet(ready_url);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->status, now ? 200 : 503);
    EXPECT_EQ(response->body, now ? "ready\n" : "not ready\n");
  }
}

INSTANTIATE_TEST_SUITE_P(StartingReady, ReadinessTest, ::testing::Bool());

// Ten clients each send half a request and hold their connections open (a slow or hostile
// scraper): /ready and /metrics still answer at once, not after the request timeout of each
// (with civetweb's 2 threads and 10 s deadline they waited about 20 s and readiness probes
// failed); the half-sent connections are closed after the header deadline.
TEST(HttpServerTest, HalfSentRequestsDoNotHoldOffReadinessAndMetrics) {
  Registry r;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start("127.0.0.1", 0, &r);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->ServeReadiness([] { return true; });
  const int port = (*server)->port();
  std::vector<int> held;
  for (int i = 0; i < 10; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    const char half[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
    ASSERT_EQ(::send(fd, half, sizeof(half) - 1, MSG_NOSIGNAL),
              static_cast<ssize_t>(sizeof(half) - 1));
    held.push_back(fd);
  }
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  for (const char* path : {"/ready", "/metrics"}) {
    const absl::Time start = absl::Now();
    absl::StatusOr<HttpResponse> response = HttpGet(base + path, absl::Seconds(30));
    ASSERT_TRUE(response.ok()) << path << ": " << response.status();
    EXPECT_EQ(response->status, 200) << path;
    EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << path << " waited behind half-sent requests";
  }
  // Each half-sent connection is closed once its header deadline passes.
  for (int fd : held) {
    timeval wait{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    char buffer[512];
    ssize_t n;
    while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    }
    EXPECT_EQ(n, 0) << "the half-sent connection was not closed";
    ::close(fd);
  }
}

TEST(HttpClientTest, AClosedPortIsUnavailableAndABadUrlInvalid) {
  int closed_port = 0;
  {
    Registry r;
    absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start("127.0.0.1", 0, &r);
    ASSERT_TRUE(server.ok()) << server.status();
    closed_port = (*server)->port();
  }
  const std::string closed = "http://127.0.0.1:" + std::to_string(closed_port) + "/metrics";
  absl::StatusOr<HttpResponse> refused = HttpGet(closed);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_NE(refused.status().message().find(closed), std::string::npos);
  for (const std::string url : {"https://127.0.0.1:80/", "http://127.0.0.1/", "127.0.0.1:80",
                                "http://127.0.0.1:70000/", "http://127.0.0.1:x/"}) {
    absl::StatusOr<HttpResponse> bad = HttpGet(url);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << url;
    EXPECT_NE(bad.status().message().find(url), std::string::npos) << bad.status();
  }
}

struct SumCase {
  std::string name;
  double sum;
  int samples;
};

class SumSamplesTest : public ::testing::TestWithParam<SumCase> {};

// A scrape with labels holding braces, quotes and spaces, names that prefix one another, a
// histogram and a timestamp; the sums worked out by hand.
TEST_P(SumSamplesTest, AddsEverySampleOfTheName) {
  const std::string scrape =
      "# HELP tessera_calls_total calls\n"
      "# TYPE tessera_calls_total counter\n"
      "tessera_calls_total{code=\"OK\",why=\"a } b \\\" c\"} 5\n"
      "tessera_calls_total{code=\"NOT_FOUND\"} 2 1700000000000\n"
      "tessera_calls_total_extra 100\n"
      "tessera_calls 1000\n"
      "tessera_up 1\n"
      "tessera_seconds_bucket{le=\"0.1\"} 3\n"
      "tessera_seconds_bucket{le=\"+Inf\"} 4\n"
      "tessera_seconds_sum 0.75\n"
      "tessera_seconds_count 4\n";
  const SampleSum got = SumSamples(scrape, GetParam().name);
  EXPECT_DOUBLE_EQ(got.sum, GetParam().sum);
  EXPECT_EQ(got.samples, GetParam().samples);
}

INSTANTIATE_TEST_SUITE_P(
    Names, SumSamplesTest,
    ::testing::Values(SumCase{"tessera_calls_total", 7, 2}, SumCase{"tessera_calls", 1000, 1},
                      SumCase{"tessera_up", 1, 1}, SumCase{"tessera_seconds_bucket", 7, 2},
                      SumCase{"tessera_seconds_sum", 0.75, 1},
                      SumCase{"tessera_seconds_count", 4, 1}, SumCase{"tessera_absent", 0, 0}));

TEST(HttpServerTest, APortInUseIsUnavailable) {
  Registry r;
  absl::StatusOr<std::unique_ptr<HttpServer>> first = HttpServer::Start("127.0.0.1", 0, &r);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<HttpServer>> second =
      HttpServer::Start("127.0.0.1", (*first)->port(), &r);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(std::to_string((*first)->port())), std::string::npos);
}

}  // namespace
}  // namespace tessera::metrics
