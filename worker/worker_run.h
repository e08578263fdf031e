#ifndef TESSERA_WORKER_WORKER_RUN_H_
#define TESSERA_WORKER_WORKER_RUN_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "daemon_support/server_setup.h"
#include "proto/tls_files.h"

namespace tessera {

// What tessera-worker runs with: its command line, one field per flag of the same name
// (worker_main.cc binds them and gives their help), each default the flag's.
struct WorkerConfig {
  std::string coordinator = "127.0.0.1:50051";
  std::string device = "cpu";
  std::string listen = "127.0.0.1:0";
  int64_t memory_budget = int64_t{4} << 30;
  int64_t memory_limit = -1;  // unset: --memory_budget on a GPU, none on the CPU
  std::string advertise;
  std::string collective_host;
  std::string checkpoint_root;
  int32_t threads = 1;
  std::string secret;
  TlsFiles tls;
  std::string coordinator_identity;
  int64_t max_message_bytes = int64_t{1} << 30;  // inline tensors of large batches fit
  absl::Duration sequence_stall_limit = absl::Minutes(1);
  bool list_devices = false;
  int metrics_port = -1;
  int max_rpc_threads = daemon::kDefaultMaxRpcThreads;
  daemon::StreamLimitFlags streams;
  absl::Duration stream_idle_timeout = absl::Seconds(30);

  // Not a flag: why the BLAS kernels are the ones they are, as kernels::UsePreferredBlasCore
  // answered (main calls it first of all, since it may start the program again); logged.
  std::string blas_core_choice;
};

// Runs the worker until its server shuts down. With --list_devices, prints the CUDA devices and
// returns instead (0, or 1 when CUDA cannot be used). Otherwise checks `config`, makes the
// credentials and the device's kernels, serves the Worker service with gRPC health on --listen
// (the caller registers reflection) and the metrics of --metrics_port, registers with the
// coordinator (printing a line on stdout each time) and heartbeats on a thread of its own,
// registering again whenever the coordinator forgets this worker or the command order is broken.
// Returns the process's exit code: 2 for a config it cannot run with, 1 when it cannot listen or
// serve metrics (each logged), 0 after the server shut down.
int RunWorker(const WorkerConfig& config);

}  // namespace tessera

#endif  // TESSERA_WORKER_WORKER_RUN_H_
