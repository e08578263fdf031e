// What the cluster tests share: a real local cluster (tessera-coordinator and workers as child
// processes, on TestDevice(): cpu, or one GPU each with $TESSERA_TEST_DEVICE=cuda) started once per
// test suite, and comparisons of downloaded tensors with a reference.
#ifndef TESSERA_TESTS_CLUSTER_FIXTURE_H_
#define TESSERA_TESTS_CLUSTER_FIXTURE_H_

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/local_cluster/local_cluster.h"
#include "core/dtype.h"
#include "core/host_tensor.h"
#include "core/shape.h"
#include "gtest/gtest.h"
#include "kernels/testing/reference.h"
#include "tessera/tessera.h"
#include "tests/support/status_assertions.h"
#include "tests/support/test_device.h"

namespace tessera::testing {

// A cluster of `workers` workers on TestDevice() (cpu, or cuda: worker i on cuda:i) running the
// daemons built with these tests, or those $TESSERA_COORDINATOR_BINARY and $TESSERA_WORKER_BINARY
// name (the binaries moved elsewhere, as scripts/run-gpu-checks.sh carries them).
inline LocalClusterOptions TestClusterOptions(int workers) {
  LocalClusterOptions options;
  options.device = TestDevice();
  options.workers = workers;
  const char* coordinator = std::getenv("TESSERA_COORDINATOR_BINARY");
  const char* worker = std::getenv("TESSERA_WORKER_BINARY");
  options.coordinator_binary = coordinator != nullptr ? coordinator : TESSERA_COORDINATOR_BINARY;
  options.worker_binary = worker != nullptr ? worker : TESSERA_WORKER_BINARY;
  // Tests kill workers and wait for the coordinator to notice: a short liveness keeps them short.
  options.heartbeat_interval = absl::Milliseconds(200);
  options.dead_after = absl::Seconds(2);
  // Checkpoint tests write under the test's temporary directory.
  options.checkpoint_root = ::testing::TempDir();
  return options;
}

// A started cluster and a session connected to it (with no lease, as an administrator's).
struct TestCluster {
  std::unique_ptr<LocalCluster> cluster;
  std::shared_ptr<client::Session> client;

  // Starts the cluster; on failure `client` stays null and the error is returned.
  absl::Status Start(LocalClusterOptions options) {
    absl::StatusOr<std::unique_ptr<LocalCluster>> started = LocalCluster::Start(std::move(options));
    if (!started.ok()) return started.status();
    cluster = *std::move(started);
    client::SessionOptions session_options;
    session_options.keep_alive = false;
    session_options.timeout = absl::Seconds(30);
    absl::StatusOr<std::shared_ptr<client::Session>> connected =
        client::Session::Connect(cluster->address(), session_options);
    if (!connected.ok()) return connected.status();
    client = *std::move(connected);
    return absl::OkStatus();
  }

  // Ends every process; removes their logs unless a test has failed.
  void Stop() {
    const std::string logs = cluster ? cluster->log_dir() : "";
    client.reset();
    cluster.reset();
    if (!logs.empty() && ::testing::UnitTest::GetInstance()->Passed()) {
      std::error_code ignored;
      std::filesystem::remove_all(logs, ignored);
    }
  }

  // Where the processes log, for failure messages.
  std::string LogHint() const {
    return cluster ? absl::StrCat(" (logs in ", cluster->log_dir(), ")") : "";
  }
};

// Retries `call` while it answers UNAVAILABLE (a coordinator restarting, or recovering the name),
// up to `wait`; returns its last answer.
template <typename F>
auto RetryUnavailable(F call, absl::Duration wait = absl::Seconds(30)) {
  const absl::Time deadline = absl::Now() + wait;
  auto result = call();
  while (!result.ok() && result.status().code() == absl::StatusCode::kUnavailable &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    result = call();
  }
  return result;
}

// Waits until every tensor of `mesh` (every mesh where empty) is written on every rank, up to 30 s:
// a read may answer sooner, from one replica, and a Replicate distribute returns once its
// broadcast is posted. A write still running when a worker or the coordinator dies fails the
// tensor, or leaves it unrecorded.
inline ::testing::AssertionResult AllWritten(client::Session& client,
                                             const std::string& mesh = "") {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (true) {
    absl::StatusOr<std::vector<client::DTensorInfo>> listed = client.ListTensors(mesh);
    if (!listed.ok()) return ::testing::AssertionFailure() << listed.status();
    const auto pending = std::find_if(listed->begin(), listed->end(), [](const auto& t) {
      return t.state != client::TensorState::kReady;
    });
    if (pending == listed->end()) return ::testing::AssertionSuccess();
    if (absl::Now() > deadline) {
      return ::testing::AssertionFailure() << "tensor '" << pending->name << "' is not written";
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

// Success iff dtype and shape are equal and every element pair differs by at most
// `absolute_tolerance` + `relative_tolerance` times the larger magnitude of the pair (torch's
// assert_close rule; both 0: bit for bit); otherwise names the first element that differs.
inline ::testing::AssertionResult TensorsMatch(const HostTensor& got, const HostTensor& want,
                                               double relative_tolerance = 0,
                                               double absolute_tolerance = 0) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) {
    return ::testing::AssertionFailure()
           << "got " << DTypeName(got.dtype()) << ShapeToString(got.shape()) << ", want "
           << DTypeName(want.dtype()) << ShapeToString(want.shape());
  }
  const size_t element = DTypeSize(got.dtype());
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    if (std::memcmp(got.data() + i * element, want.data() + i * element, element) == 0) continue;
    const double a = kernels::testing::GetDouble(got, i), b = kernels::testing::GetDouble(want, i);
    if ((relative_tolerance > 0 || absolute_tolerance > 0) &&
        std::abs(a - b) <=
            absolute_tolerance + relative_tolerance * std::max(std::abs(a), std::abs(b))) {
      continue;
    }
    return ::testing::AssertionFailure()
           << DTypeName(got.dtype()) << ShapeToString(got.shape()) << " differs at flat index " << i
           << ": got " << a << ", want " << b;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_CLUSTER_FIXTURE_H_
