// The daemons' listen addresses: a port outside 0..65535 is refused at start (exit 2) naming it,
// rather than wrapped onto another port, and a port another process listens on is refused (exit 1)
// naming the address, rather than shared with it (gRPC's SO_REUSEPORT).

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/cluster/cluster_fixture.h"

namespace tessera {
namespace {

// The exit code and output (stdout and stderr) of `command`, or exit code 124 if it ran past
// `seconds` (a daemon that started serving when it should have refused).
struct ProcessRun {
  int exit_code = -1;
  std::string output;
};

ProcessRun RunFor(const std::string& command, int seconds) {
  ProcessRun run;
  const std::string wrapped =
      absl::StrCat("timeout ", seconds, " ", command, " 2>&1; echo \"exit=$?\"");
  FILE* pipe = popen(wrapped.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) run.output.append(buffer, n);
  pclose(pipe);
  const size_t at = run.output.rfind("exit=");
  if (at != std::string::npos) run.exit_code = std::stoi(run.output.substr(at + 5));
  return run;
}

std::string Coordinator(const std::string& listen) {
  return absl::StrCat(TESSERA_COORDINATOR_BINARY, " --secret=s --listen=", listen);
}

std::string Worker(const std::string& listen) {
  return absl::StrCat(TESSERA_WORKER_BINARY,
                      " --secret=s --coordinator=127.0.0.1:1 --listen=", listen);
}

// A listen address whose port is not one, and the text the refusal must name.
struct BadPort {
  std::string name;
  std::string listen;
  std::string named;
};

class BadPortTest : public ::testing::TestWithParam<std::tuple<bool, BadPort>> {};

TEST_P(BadPortTest, IsRefusedAtStartNamingIt) {
  const auto& [coordinator, bad] = GetParam();
  const ProcessRun run = RunFor(coordinator ? Coordinator(bad.listen) : Worker(bad.listen), 10);
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "0..65535")) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, bad.named)) << run.output;
}

INSTANTIATE_TEST_SUITE_P(
    Ports, BadPortTest,
    ::testing::Combine(::testing::Bool(),
                       ::testing::Values(BadPort{"past_65535", "127.0.0.1:70000", "'70000'"},
                                         BadPort{"far_past", "127.0.0.1:9999999999", "9999999999"},
                                         BadPort{"negative", "127.0.0.1:-1", "'-1'"},
                                         BadPort{"not_a_number", "127.0.0.1:http", "'http'"},
                                         BadPort{"missing", "127.0.0.1", "'127.0.0.1'"})),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) ? "coordinator_" : "worker_") +
             std::get<1>(info.param).name;
    });

// A second coordinator, or a worker, on the port a running coordinator listens on fails to start
// and names the address; the running cluster keeps serving.
TEST(PortInUseTest, IsRefusedNamingTheAddress) {
  testing::TestCluster cluster;
  ASSERT_TRUE(cluster.Start(testing::TestClusterOptions(1)).ok());
  const std::string address = cluster.cluster->address();
  for (const std::string& command : {Coordinator(address), Worker(address)}) {
    SCOPED_TRACE(command);
    const ProcessRun run = RunFor(command, 10);
    EXPECT_EQ(run.exit_code, 1) << run.output;
    EXPECT_TRUE(absl::StrContains(run.output, absl::StrCat("cannot listen on ", address)))
        << run.output;
    EXPECT_TRUE(absl::StrContains(run.output, "in use")) << run.output;
  }
  absl::StatusOr<std::vector<client::WorkerInfo>> workers = cluster.client->ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(workers->size(), 1u);
  cluster.Stop();
}

}  // namespace
}  // namespace tessera
