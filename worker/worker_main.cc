// tessera-worker: serves one device. Listens for the coordinator's commands, registers with it,
// then heartbeats; registers again (a new incarnation) whenever the coordinator forgets it or the
// command order is broken.

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/time/time.h"
#include "core/release_mode.h"
#include "daemon_support/daemon_flags.h"
#include "daemon_support/server_setup.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "kernels/cpu/blas_config.h"
#include "security/tls_flags.h"
#include "worker/worker_run.h"

namespace {

// The worker's command line, bound to `f`; every flag is also accepted as --name=value.
void AddFlags(CLI::App& app, tessera::WorkerConfig& f) {
  app.add_option("--coordinator", f.coordinator, "the coordinator's address");
  app.add_option("--device", f.device, "the device served: cpu or cuda:N");
  app.add_option("--listen", f.listen, "address to serve on (port 0 picks one)");
  app.add_option("--memory_budget", f.memory_budget, "bytes of shards this worker holds at most")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
  app.add_option("--memory_limit", f.memory_limit,
                 "bytes of the device's memory that shards and temporaries together may take "
                 "(RESOURCE_EXHAUSTED past it, and past the GPU's free memory); default: "
                 "--memory_budget on cuda devices, no limit on cpu; -1 for that default")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 50));
  app.add_option("--advertise", f.advertise,
                 "address the coordinator dials (host:port); default the listen address");
  app.add_option("--collective_host", f.collective_host,
                 "host or IP Gloo binds and advertises to peers; default the listen host, or "
                 "127.0.0.1 when listening on all interfaces");
  app.add_option("--checkpoint_root", f.checkpoint_root,
                 "directory inside which clients' checkpoint paths must lie (a relative path is "
                 "taken relative to it); checkpoints are refused where it is not set");
  app.add_option("--threads", f.threads, "threads for local compute")->check(CLI::Range(1, 1024));
  app.add_option("--secret", f.secret,
                 "shared secret of the cluster: sent to the coordinator's Registry, and required "
                 "of commands unless --coordinator_identity is set")
      ->envname("TESSERA_SECRET");
  tessera::daemon::AddTlsFlags(app, &f.tls);
  app.add_option(
         "--coordinator_identity", f.coordinator_identity,
         "with mutual TLS: accept commands only from a caller whose certificate carries this "
         "name (common name or subject alternative name), instead of by the secret")
      ->envname("TESSERA_COORDINATOR_IDENTITY");
  app.add_option("--max_message_bytes", f.max_message_bytes,
                 "largest gRPC message accepted or sent")
      ->check(CLI::Range(int64_t{1}, int64_t{2147483647}));
  app.add_flag("--list_devices", f.list_devices,
               "print the CUDA devices this worker could serve, one per line (device, model, total "
               "and free bytes, tab-separated), and exit: 0 with the list (empty if there are "
               "none), 1 with the reason on stderr when CUDA cannot be used");
  app.add_option("--max_rpc_threads", f.max_rpc_threads,
                 "most threads serving gRPC calls at once; a call past them is refused with "
                 "RESOURCE_EXHAUSTED")
      ->check(CLI::Range(16, 65536));
  tessera::daemon::AddStreamLimitFlags(app, &f.streams);
  tessera::daemon::AddDurationFlag(
      app, "--stream_idle_timeout", &f.stream_idle_timeout,
      "a client's direct upload that sends nothing, or download that takes nothing, for this "
      "long is ended with DEADLINE_EXCEEDED, releasing the turn it holds; 0 never ends one",
      absl::ZeroDuration(), absl::Hours(1));
  tessera::daemon::AddDurationFlag(
      app, "--sequence_stall_limit", &f.sequence_stall_limit,
      "how long a command sequence the coordinator neither used nor released may hold later "
      "commands up before the worker refuses commands and registers again",
      absl::Seconds(1), absl::Hours(1));
  tessera::daemon::AddMetricsPortFlag(app, &f.metrics_port);
}

}  // namespace

int main(int argc, char** argv) {
  // First, since it may start the program again: the BLAS kernels fastest on this CPU.
  const std::string blas_core_choice = tessera::kernels::UsePreferredBlasCore(argv);
  tessera::daemon::IgnoreBrokenPipes();
  tessera::UseReleaseMutexes();
  CLI::App app("tessera-worker: serves one device to a tessera-coordinator", "tessera-worker");
  tessera::WorkerConfig config;
  AddFlags(app, config);
  if (std::optional<int> exit =
          tessera::daemon::ParseFlagsAndStartLogging(app, argc, argv, {"secret"})) {
    return *exit;
  }
  config.blas_core_choice = blas_core_choice;
  // Server reflection is registered here, where gRPC's reflection library is linked: loading it
  // adds the service to every server of a process, so tessera_worker (which tests link) does not.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  return tessera::RunWorker(config);
}
