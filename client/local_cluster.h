#ifndef TESSERA_CLIENT_LOCAL_CLUSTER_H_
#define TESSERA_CLIENT_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera {

// How to start a cluster of local processes on loopback.
struct LocalClusterOptions {
  int workers = 4;  // CPU workers to start.
  std::string
      coordinator_binary;     // Path to tessera-coordinator; found next to this program if empty.
  std::string worker_binary;  // Path to tessera-worker; found next to this program if empty.
  int coordinator_port = 0;   // 0 picks a free port.
  std::string secret;         // Shared secret; random if empty.
  int64_t memory_budget_bytes = int64_t{4} << 30;  // Per worker.
  absl::Duration heartbeat_interval = absl::Milliseconds(200);
  absl::Duration dead_after = absl::Seconds(2);
  std::string log_dir;  // Where each process logs; a new temporary dir if empty.
  absl::Duration client_grace = absl::Seconds(60);         // Coordinator's --client_grace.
  absl::Duration stream_idle_timeout = absl::Seconds(30);  // --stream_idle_timeout.
};

// A coordinator and CPU workers as child processes on 127.0.0.1: what `tessera up` runs and what
// the integration tests stand on. Children die with their parent (PR_SET_PDEATHSIG); Stop() and the
// destructor end them all. Not thread-safe.
class LocalCluster {
 public:
  // Starts everything and waits until every worker is registered and alive.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(LocalClusterOptions options);
  ~LocalCluster();

  // host:port of the coordinator.
  const std::string& address() const { return address_; }
  const std::string& log_dir() const { return options_.log_dir; }
  int num_workers() const { return static_cast<int>(workers_.size()); }
  pid_t worker_pid(int i) const { return workers_[i].pid; }

  // kill -9 of worker `i`.
  absl::Status KillWorker(int i);
  // Starts worker `i` again on the address it had, so that it keeps its worker id.
  absl::Status RestartWorker(int i);
  // Waits until `count` workers are alive according to the coordinator.
  absl::Status WaitForAliveWorkers(int count, absl::Duration timeout);
  // SIGTERM to every process, then SIGKILL to those still running after a grace period.
  void Stop();

 private:
  struct Process {
    pid_t pid = -1;
    std::string log;
    std::string address;  // for workers: where it serves
  };
  explicit LocalCluster(LocalClusterOptions options) : options_(std::move(options)) {}
  absl::StatusOr<Process> Spawn(const std::string& binary, const std::vector<std::string>& args,
                                const std::string& log);
  absl::Status StartWorker(int i, const std::string& listen);

  LocalClusterOptions options_;
  std::string address_;
  Process coordinator_;
  std::vector<Process> workers_;
};

// The directory this program's binary lives in.
std::string SelfDirectory();
// `name` found beside this program, in the build tree's server/ or worker/ folders, or on PATH.
absl::StatusOr<std::string> FindDaemonBinary(const std::string& name);

}  // namespace tessera

#endif  // TESSERA_CLIENT_LOCAL_CLUSTER_H_
