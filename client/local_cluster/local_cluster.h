#ifndef TESSERA_CLIENT_LOCAL_CLUSTER_LOCAL_CLUSTER_H_
#define TESSERA_CLIENT_LOCAL_CLUSTER_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera {

// How to start a cluster of local processes on loopback.
struct LocalClusterOptions {
  // "cpu": `workers` CPU workers. "cuda": a worker per visible GPU (tessera-worker
  // --list_devices), worker i serving cuda:i; `workers` 0 takes them all, more than there are is
  // FAILED_PRECONDITION.
  std::string device = "cpu";
  int workers = 4;  // Workers to start.
  std::string
      coordinator_binary;     // Path to tessera-coordinator; found next to this program if empty.
  std::string worker_binary;  // Path to tessera-worker; found next to this program if empty.
  int coordinator_port = 0;   // 0 picks a free port.
  std::string secret;         // Shared secret; random if empty.
  int64_t memory_budget_bytes = int64_t{4} << 30;  // Per worker.
  // How often workers heartbeat, and how long a silent worker counts as alive: many missed
  // heartbeats, so that a loaded machine does not break healthy meshes.
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  absl::Duration dead_after = absl::Seconds(10);
  std::string log_dir;  // Where each process logs; a new temporary dir if empty.
  absl::Duration client_grace = absl::Seconds(60);  // Coordinator's --client_grace.
  // Every daemon serves Prometheus metrics on a free port (--metrics_port=0).
  bool metrics = false;
  absl::Duration stream_idle_timeout = absl::Seconds(30);  // --stream_idle_timeout.
  // Flags added to those the cluster gives the coordinator and every worker (TLS, tokens); "{i}"
  // in a worker flag is that worker's index (a certificate of its own: --tls_cert=worker-{i}.pem).
  std::vector<std::string> coordinator_flags;
  std::vector<std::string> worker_flags;
  // What the cluster's own calls to the coordinator present (tessera::client::SessionOptions).
  std::string tls_ca_file, tls_cert_file, tls_key_file, token;
  // The coordinator's --state_dir (its state survives a restart there); empty: in memory only,
  // or with keep_state, log_dir/state.
  std::string state_dir;
  bool keep_state = false;
  absl::Duration recovery_wait = absl::Seconds(30);  // --recovery_wait.
  // Every worker's --checkpoint_root: checkpoint paths lie inside it (relative ones are taken
  // relative to it); empty: log_dir/checkpoints.
  std::string checkpoint_root;
};

// The CUDA devices `worker_binary` (tessera-worker) could serve: "cuda:N" names, in order.
// FAILED_PRECONDITION with its reason when it can use none (no GPU, no driver, no CUDA support).
absl::StatusOr<std::vector<std::string>> ListWorkerCudaDevices(const std::string& worker_binary);

// A coordinator and CPU or GPU workers as child processes on 127.0.0.1: what `tessera up` runs and
// what the integration tests stand on. Children start with no signal blocked or ignored and die
// with the thread that started them (PR_SET_PDEATHSIG, so start and stop the cluster from one
// thread that lives as long as it); Stop() and the destructor end them all. Not thread-safe.
class LocalCluster {
 public:
  // Starts everything and waits until every worker is registered and alive.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(LocalClusterOptions options);
  ~LocalCluster();

  // host:port of the coordinator.
  const std::string& address() const { return address_; }
  const std::string& log_dir() const { return options_.log_dir; }
  // Where the workers read and write checkpoints (--checkpoint_root).
  const std::string& checkpoint_root() const { return options_.checkpoint_root; }
  // The coordinator's --state_dir; empty when its state is in memory only.
  const std::string& state_dir() const { return options_.state_dir; }
  int num_workers() const { return static_cast<int>(workers_.size()); }
  pid_t worker_pid(int i) const { return workers_[i].pid; }
  // http://host:port/metrics of the coordinator and of worker `i`; empty without
  // options.metrics.
  const std::string& coordinator_metrics_url() const { return coordinator_.metrics_url; }
  const std::string& worker_metrics_url(int i) const { return workers_[i].metrics_url; }
  pid_t coordinator_pid() const { return coordinator_.pid; }

  // kill -9 of the coordinator.
  absl::Status KillCoordinator();
  // Starts the coordinator again on the port and with the flags it had; the workers register again
  // by themselves.
  absl::Status RestartCoordinator();
  // Reaps the processes that ended since the last call (the coordinator first), each as
  // FAILED_PRECONDITION naming it, its pid, its exit status or signal and its log; their pids
  // become -1. Empty while all run.
  std::vector<absl::Status> ReapEnded();

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
    std::string address;      // for workers: where it serves
    std::string metrics_url;  // where it serves metrics, if it does
  };
  explicit LocalCluster(LocalClusterOptions options) : options_(std::move(options)) {}
  absl::StatusOr<Process> Spawn(const std::string& binary, const std::vector<std::string>& args,
                                const std::string& log);
  absl::Status StartWorker(int i, const std::string& listen);
  absl::Status StartCoordinator(int port);

  LocalClusterOptions options_;
  std::string address_;
  Process coordinator_;
  int coordinator_starts_ = 0;  // lines "listening on port" its log holds
  std::vector<Process> workers_;
};

// The directory this program's binary lives in.
std::string SelfDirectory();
// `name` found beside this program, in the build tree's server/ or worker/ folders, or on PATH.
absl::StatusOr<std::string> FindDaemonBinary(const std::string& name);

}  // namespace tessera

#endif  // TESSERA_CLIENT_LOCAL_CLUSTER_LOCAL_CLUSTER_H_
