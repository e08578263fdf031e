#ifndef TESSERA_SERVER_COORDINATOR_RUN_H_
#define TESSERA_SERVER_COORDINATOR_RUN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon_support/server_setup.h"
#include "proto/tls_files.h"

namespace tessera {

// What tessera-coordinator runs with: its command line, one field per flag of the same name
// (coordinator_main.cc binds them and gives their help), each default the flag's.
struct CoordinatorConfig {
  std::string listen = "127.0.0.1:50051";
  std::string secret;
  TlsFiles tls;
  std::vector<std::string> worker_identities;
  std::string tokens_file;
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  absl::Duration dead_after = absl::Seconds(3);
  absl::Duration client_grace = absl::Seconds(60);
  absl::Duration stream_idle_timeout = absl::Seconds(30);
  absl::Duration session_stream_idle_timeout = absl::Minutes(10);
  absl::Duration direct_grant_lifetime = absl::Seconds(10);
  int64_t max_message_bytes = 64 << 20;
  int metrics_port = -1;
  int max_rpc_threads = daemon::kDefaultMaxRpcThreads;
  daemon::StreamLimitFlags streams;
  int64_t max_request_bytes = int64_t{256} << 20;
  std::string state_dir;
  absl::Duration recovery_wait = absl::Seconds(30);
};

// Runs the coordinator until its server shuts down: checks `config`, makes the credentials (and
// the bearer tokens of --tokens_file), sets up the tables and services and recovers the state of
// --state_dir, serves them with gRPC health on --listen (the caller registers reflection), prints
// the bound port as the first line on stdout, then repairs rejoining workers and serves the
// metrics of --metrics_port. Returns the process's exit code: 2 for a config it cannot run with
// or a state it cannot recover, 1 when it cannot listen or serve metrics (each logged), 0 after
// the server shut down.
int RunCoordinator(const CoordinatorConfig& config);

}  // namespace tessera

#endif  // TESSERA_SERVER_COORDINATOR_RUN_H_
