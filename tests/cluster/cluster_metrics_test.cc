// Metrics of a real local cluster (coordinator and 2 CPU workers serving /metrics): each endpoint
// passes `promtool check metrics`; the counters move by exactly what a known workload did (numbers
// worked out by hand); and a real Prometheus server scraping the cluster reads the same values back
// through its HTTP query API. The promtool and Prometheus tests skip, saying so, where Debian's
// `prometheus` package is not installed (scripts/install-deps.sh installs it).

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "metrics/http_client.h"
#include "nlohmann/json.hpp"
#include "tests/cluster/cluster_fixture.h"

namespace tessera::testing {
namespace {

constexpr int kWorkers = 2;

// OK, or the status as the failure message.
::testing::AssertionResult Ok(const absl::Status& status) {
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << status;
}
constexpr int64_t kElements = 256;  // float32 elements of each rank's tensor: 1024 bytes

// `name` on PATH, or "" if absent.
std::string FindProgram(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path == nullptr ? "" : path, ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// The body of GET `url` (http://127.0.0.1:PORT/PATH), "" on failure.
std::string Fetch(const std::string& url) {
  absl::StatusOr<metrics::HttpResponse> response = metrics::HttpGet(url);
  return response.ok() && response->status == 200 ? response->body : "";
}

// A port free on 127.0.0.1 now (the kernel's pick for port 0).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                     getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  return bound ? ntohs(addr.sin_port) : 0;
}

// The value of the sample `series` (name and labels exactly as rendered) in a scrape, or 0 when
// the scrape has no such line (a counter not yet touched).
double Value(const std::string& scrape, const std::string& series) {
  std::istringstream in(scrape);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return 0;
}

std::string RpcSeries(const std::string& service, const std::string& method,
                      const std::string& code) {
  return absl::StrCat("tessera_rpc_server_handled_total{service=\"tessera.v1.", service,
                      "\",method=\"", method, "\",code=\"", code, "\"}");
}

const std::string kAllReduceCalls =
    "tessera_collectives_total{kind=\"AllReduce\",backend=\"gloo\",code=\"OK\"}";
const std::string kAllReduceBytes =
    "tessera_collective_bytes_total{kind=\"AllReduce\",backend=\"gloo\"}";

class ClusterMetricsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    LocalClusterOptions options = TestClusterOptions(kWorkers);
    options.metrics = true;
    cluster_ = new TestCluster();
    ASSERT_TRUE(Ok(cluster_->Start(options)));
    client::Session& client = *cluster_->client;
    ASSERT_TRUE(Ok(client::InitDeviceMesh(client, "cpu", {kWorkers}, {}, "m").status()));
    std::vector<float> values(kElements);
    for (int64_t i = 0; i < kElements; ++i) values[i] = static_cast<float>(i);
    for (int64_t rank = 0; rank < kWorkers; ++rank) {
      ASSERT_TRUE(Ok(client.PutLocal(
          "m", rank, "x", HostTensor::FromValues(DType::kFloat32, {kElements}, values))));
    }
  }
  static void TearDownTestSuite() {
    if (cluster_ != nullptr) cluster_->Stop();
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (cluster_ == nullptr || cluster_->client == nullptr) GTEST_SKIP() << "no cluster";
  }

  // Every endpoint: the coordinator's first, then each worker's.
  static std::vector<std::string> Urls() {
    std::vector<std::string> urls = {cluster_->cluster->coordinator_metrics_url()};
    for (int i = 0; i < kWorkers; ++i) urls.push_back(cluster_->cluster->worker_metrics_url(i));
    return urls;
  }
  // Calls ListWorkers `n` times and runs `all_reduces` in-place sums of "x" over the mesh.
  static void Workload(int list_workers, int all_reduces) {
    client::Session& client = *cluster_->client;
    for (int i = 0; i < list_workers; ++i) ASSERT_TRUE(Ok(client.ListWorkers().status()));
    for (int i = 0; i < all_reduces; ++i) {
      ASSERT_TRUE(Ok(client.RunCollective(client::AllReduce({"m", ""}, "x")).status()));
    }
  }

  static TestCluster* cluster_;
};

TestCluster* ClusterMetricsTest::cluster_ = nullptr;

TEST_F(ClusterMetricsTest, EveryEndpointServesTheTextFormat) {
  for (const std::string& url : Urls()) {
    ASSERT_FALSE(url.empty());
    const std::string scrape = Fetch(url);
    EXPECT_NE(scrape.find("# TYPE tessera_rpc_server_handled_total counter"), std::string::npos)
        << url << ":\n"
        << scrape;
    EXPECT_GT(Value(scrape, "process_resident_memory_bytes"), 0) << url;
  }
}

TEST_F(ClusterMetricsTest, PromtoolChecksEveryEndpoint) {
  const std::string promtool = FindProgram("promtool");
  if (promtool.empty()) {
    GTEST_SKIP()
        << "promtool is not installed (Debian package prometheus; scripts/install-deps.sh)";
  }
  Workload(1, 1);  // every kind of family has samples
  const std::string dir = cluster_->cluster->log_dir();
  int i = 0;
  for (const std::string& url : Urls()) {
    const std::string file = absl::StrCat(dir, "/scrape-", i, ".txt");
    const std::string out = absl::StrCat(dir, "/promtool-", i++, ".txt");
    std::ofstream(file) << Fetch(url);
    const int rc =
        std::system(absl::StrCat(promtool, " check metrics < ", file, " > ", out, " 2>&1").c_str());
    std::stringstream said;
    said << std::ifstream(out).rdbuf();
    EXPECT_EQ(rc, 0) << "promtool check metrics on " << url << ":\n" << said.str();
    EXPECT_EQ(said.str(), "") << url;
  }
}

TEST_F(ClusterMetricsTest, CountersMoveByWhatTheWorkloadDid) {
  std::vector<std::string> before;
  for (const std::string& url : Urls()) before.push_back(Fetch(url));
  Workload(5, 3);
  // A collective on a tensor no rank holds fails, counted under its code.
  const absl::Status missing =
      cluster_->client->RunCollective(client::AllReduce({"m", ""}, "missing")).status();
  ASSERT_FALSE(missing.ok());
  const std::string code = absl::StatusCodeToString(missing.code());
  std::vector<std::string> after;
  for (const std::string& url : Urls()) after.push_back(Fetch(url));

  auto delta = [&](size_t endpoint, const std::string& series) {
    return Value(after[endpoint], series) - Value(before[endpoint], series);
  };
  EXPECT_EQ(delta(0, RpcSeries("MeshService", "ListWorkers", "OK")), 5);
  EXPECT_EQ(delta(0, RpcSeries("CollectiveService", "RunCollective", "OK")), 3);
  EXPECT_EQ(delta(0, RpcSeries("CollectiveService", "RunCollective", code)), 1);
  EXPECT_EQ(Value(after[0], "tessera_workers{state=\"live\"}"), kWorkers);
  EXPECT_EQ(Value(after[0], "tessera_workers{state=\"dead\"}"), 0);
  // Every post of the workload was answered (its count dropped) before its call returned.
  EXPECT_NE(after[0].find("\ntessera_coordinator_posts_in_flight 0\n"), std::string::npos)
      << after[0];
  EXPECT_NE(after[0].find("\ntessera_coordinator_commands_queued 0\n"), std::string::npos);
  for (size_t w = 1; w <= kWorkers; ++w) {
    SCOPED_TRACE(absl::StrCat("worker endpoint ", w));
    // 3 all-reduces of 256 float32 elements: 3 calls, 3 x 1024 bytes.
    EXPECT_EQ(delta(w, kAllReduceCalls), 3);
    EXPECT_EQ(delta(w, kAllReduceBytes), 3 * 1024);
    EXPECT_EQ(delta(w, "tessera_worker_commands_total{kind=\"collective\",code=\"OK\"}"), 3);
    EXPECT_EQ(delta(w, "tessera_collective_seconds_count{kind=\"AllReduce\",backend=\"gloo\"}"), 3);
    // The worker holds "x" alone: 1024 bytes of a 4 GiB budget.
    EXPECT_EQ(Value(after[w], "tessera_shards{device=\"cpu\"}"), 1);
    EXPECT_EQ(Value(after[w], "tessera_shard_memory_used_bytes{device=\"cpu\"}"), 1024);
    EXPECT_EQ(Value(after[w], "tessera_shard_memory_budget_bytes{device=\"cpu\"}"), 4294967296.0);
    EXPECT_EQ(Value(after[w], "tessera_worker_commands_in_flight"), 0);
    EXPECT_EQ(Value(after[w], "tessera_worker_commands_queued"), 0);
  }
}

// A Prometheus server (Debian's) scraping the cluster every second from a temporary directory,
// on a free port; stopped with the test.
class PrometheusServer {
 public:
  absl::Status Start(const std::string& binary, const std::string& dir,
                     const std::vector<std::string>& targets) {
    port_ = FreePort();
    const std::string config = dir + "/prometheus.yml";
    std::ofstream yml(config);
    yml << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        << "scrape_configs:\n  - job_name: tessera\n    static_configs:\n      - targets: [";
    for (size_t i = 0; i < targets.size(); ++i) yml << (i ? ", " : "") << "'" << targets[i] << "'";
    yml << "]\n";
    yml.close();
    const std::string log = dir + "/prometheus.log";
    std::vector<std::string> args = {
        binary, "--config.file=" + config, "--storage.tsdb.path=" + dir + "/tsdb",
        absl::StrCat("--web.listen-address=127.0.0.1:", port_), "--log.level=warn"};
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      if (!Fetch(Url("/-/ready")).empty()) return absl::OkStatus();
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return absl::UnavailableError("prometheus exited; its log is " + log);
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    return absl::DeadlineExceededError("prometheus not ready within 30s; its log is " + log);
  }
  std::string Url(const std::string& target) const {
    return absl::StrCat("http://127.0.0.1:", port_, target);
  }
  ~PrometheusServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }

  // The value of instant query `promql` summed over its result vector; NaN on an empty result or
  // an error.
  double Query(const std::string& promql) const {
    std::string encoded;
    for (unsigned char c : promql) {
      encoded += std::isalnum(c) ? std::string(1, static_cast<char>(c))
                                 : absl::StrFormat("%%%02X", static_cast<int>(c));
    }
    const std::string body = Fetch(Url("/api/v1/query?query=" + encoded));
    const nlohmann::json reply = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (reply.is_discarded() || reply.value("status", "") != "success") return std::nan("");
    const nlohmann::json& result = reply["data"]["result"];
    if (!result.is_array() || result.empty()) return std::nan("");
    double sum = 0;
    for (const nlohmann::json& sample : result) {
      sum += std::stod(sample["value"][1].get<std::string>());
    }
    return sum;
  }

 private:
  int port_ = 0;
  pid_t pid_ = -1;
};

// The target host:port of a metrics URL.
std::string Target(const std::string& url) {
  const size_t host = url.find("://") + 3;
  return url.substr(host, url.find('/', host) - host);
}

TEST_F(ClusterMetricsTest, PrometheusReadsBackWhatTheWorkloadDid) {
  const std::string binary = FindProgram("prometheus");
  if (binary.empty()) {
    GTEST_SKIP() << "prometheus is not installed (Debian package prometheus; "
                    "scripts/install-deps.sh)";
  }
  std::vector<std::string> targets;
  for (const std::string& url : Urls()) targets.push_back(Target(url));
  const std::string dir = cluster_->cluster->log_dir() + "/prometheus";
  std::filesystem::create_directories(dir);
  PrometheusServer prometheus;
  ASSERT_TRUE(Ok(prometheus.Start(binary, dir, targets)));

  const std::string list_ok = RpcSeries("MeshService", "ListWorkers", "OK");
  const double list_before = Value(Fetch(Urls()[0]), list_ok);
  double all_reduce_before = 0;
  for (int w = 1; w <= kWorkers; ++w) all_reduce_before += Value(Fetch(Urls()[w]), kAllReduceCalls);
  Workload(7, 4);
  // By hand: 7 more ListWorkers on the coordinator; 4 more all-reduces on each of 2 workers.
  const double list_want = list_before + 7;
  const double all_reduce_want = all_reduce_before + 4 * kWorkers;
  ASSERT_EQ(Value(Fetch(Urls()[0]), list_ok), list_want);

  const std::string list_query =
      "tessera_rpc_server_handled_total{service=\"tessera.v1.MeshService\",method=\"ListWorkers\","
      "code=\"OK\"}";
  const std::string all_reduce_query =
      "sum(tessera_collectives_total{job=\"tessera\",kind=\"AllReduce\",code=\"OK\"})";
  double list_seen = 0, all_reduce_seen = 0, up = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    list_seen = prometheus.Query(list_query);
    all_reduce_seen = prometheus.Query(all_reduce_query);
    up = prometheus.Query("sum(up{job=\"tessera\"})");
    if (list_seen == list_want && all_reduce_seen == all_reduce_want && up == 1 + kWorkers) break;
    absl::SleepFor(absl::Milliseconds(250));
  }
  EXPECT_EQ(list_seen, list_want);
  EXPECT_EQ(all_reduce_seen, all_reduce_want);
  EXPECT_EQ(up, 1 + kWorkers);
  // Per worker, as the coordinator sees them: 2 live workers with a 4 GiB budget each.
  EXPECT_EQ(prometheus.Query("sum(tessera_workers{state=\"live\"})"), kWorkers);
  EXPECT_EQ(prometheus.Query("count(tessera_worker_memory_budget_bytes == 4294967296)"), kWorkers);
}

}  // namespace
}  // namespace tessera::testing
