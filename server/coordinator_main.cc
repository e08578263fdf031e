// tessera-coordinator: the control plane. Serves the client-facing services (meshes,
// collectives, DTensors, modules), KServe v2 inference on the published models, and the
// worker-facing Registry (with the rendezvous store) on one port, plus gRPC health and reflection.

#include <malloc.h>

#include <optional>

#include "CLI/CLI.hpp"
#include "absl/time/time.h"
#include "core/release_mode.h"
#include "daemon_support/daemon_flags.h"
#include "daemon_support/server_setup.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "security/tls_flags.h"
#include "server/coordinator_run.h"

namespace {

// The coordinator's command line, bound to `f`; every flag is also accepted as --name=value.
void AddFlags(CLI::App& app, tessera::CoordinatorConfig& f) {
  app.add_option("--listen", f.listen, "address to serve on (host:port; port 0 picks one)");
  app.add_option("--secret", f.secret,
                 "shared secret of the cluster: workers send it to the Registry, and commands to "
                 "workers carry it; may be left out with mutual TLS and --worker_identity")
      ->envname("TESSERA_SECRET");
  tessera::daemon::AddTlsFlags(app, &f.tls);
  app.add_option("--worker_identity", f.worker_identities,
                 "with mutual TLS: a name (common name or subject alternative name) a worker's "
                 "certificate must carry for the Registry to accept its calls; repeat it (or "
                 "separate names by commas) to accept several, and end one with '*' to accept "
                 "every name starting with the rest (tessera-worker-*)")
      ->envname("TESSERA_WORKER_IDENTITY")
      ->delimiter(',');
  app.add_option("--tokens_file", f.tokens_file,
                 "clients must send a bearer token of this file (lines 'NAME TOKEN'); needs TLS")
      ->envname("TESSERA_TOKENS_FILE");
  tessera::daemon::AddDurationFlag(app, "--heartbeat_interval", &f.heartbeat_interval,
                                   "how often workers heartbeat", absl::Milliseconds(10),
                                   absl::Minutes(1));
  tessera::daemon::AddDurationFlag(
      app, "--dead_after", &f.dead_after,
      "a worker silent for this long is dead and its meshes are broken; longer than "
      "--heartbeat_interval",
      absl::Milliseconds(20), absl::Hours(1));
  tessera::daemon::AddDurationFlag(
      app, "--client_grace", &f.client_grace,
      "a client holding a lease that makes no call for this long loses its tensors",
      absl::Seconds(1), absl::Hours(24 * 30));
  tessera::daemon::AddDurationFlag(
      app, "--stream_idle_timeout", &f.stream_idle_timeout,
      "a stream whose client sends nothing for this long (an upload: distribute, from_local, "
      "put, module load), or takes nothing (a download), is ended with DEADLINE_EXCEEDED, "
      "releasing its workers' turns and its buffers; 0 never ends one",
      absl::ZeroDuration(), absl::Hours(1));
  tessera::daemon::AddDurationFlag(
      app, "--session_stream_idle_timeout", &f.session_stream_idle_timeout,
      "an op or collective stream whose client sends nothing for this long is ended with "
      "DEADLINE_EXCEEDED (the clients close their idle op streams after 4 min themselves, so "
      "that none of their calls meets the cut); 0 never ends one",
      absl::ZeroDuration(), absl::Hours(24));
  tessera::daemon::AddDurationFlag(
      app, "--direct_grant_lifetime", &f.direct_grant_lifetime,
      "how long a grant of the direct path (a client's upload to or read from a worker) stays "
      "valid; its sequence is released to the worker soon after",
      absl::Milliseconds(100), absl::Minutes(10));
  app.add_option("--max_message_bytes", f.max_message_bytes,
                 "largest gRPC message accepted or sent")
      ->check(CLI::Range(int64_t{1}, int64_t{2147483647}));
  tessera::daemon::AddMetricsPortFlag(app, &f.metrics_port);
  app.add_option("--max_rpc_threads", f.max_rpc_threads,
                 "most threads serving gRPC calls at once; a call past them is refused with "
                 "RESOURCE_EXHAUSTED")
      ->check(CLI::Range(16, 65536));
  tessera::daemon::AddStreamLimitFlags(app, &f.streams);
  app.add_option("--max_request_bytes", f.max_request_bytes,
                 "most bytes of inference requests worked on at once; one past them is refused "
                 "with RESOURCE_EXHAUSTED before it is decoded (the coordinator's memory peaks "
                 "at several times this: a replicated model's input goes to every rank), and "
                 "gRPC's buffers for messages being received are bounded by 4 times this")
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 40));
  app.add_option("--state_dir", f.state_dir,
                 "directory of the durable state (workers, meshes, tensors; SQLite): a restart "
                 "with the same directory recovers them; empty keeps state in memory only");
  tessera::daemon::AddDurationFlag(
      app, "--recovery_wait", &f.recovery_wait,
      "after a restart, how long to wait for the recorded meshes' workers to register again "
      "before recovering the meshes without those missing",
      absl::ZeroDuration(), absl::Hours(1));
}

}  // namespace

int main(int argc, char** argv) {
  // The coordinator's large allocations are the 1 MiB windows of tensor streams, freed by other
  // threads soon after. With glibc's defaults they land in per-thread arenas and its mmap threshold
  // grows past them, so freed windows stay in the heap and the process grows with every stream; a
  // fixed threshold maps each window on its own and returns it to the kernel when it is freed.
  // Smaller blocks come from the heap, which keeps up to 8 MiB free at its top: a module forward
  // copies its input and output (a few hundred KiB) several times, and mapping each copy afresh
  // cost ~135 us of page faults per 256 KiB, more than a millisecond per forward.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 8 << 20);
  // Set first, before any thread (gRPC's, from the credentials on) makes an arena of its own.
  mallopt(M_ARENA_MAX, 1);
  tessera::daemon::IgnoreBrokenPipes();
  tessera::UseReleaseMutexes();
  CLI::App app("tessera-coordinator: the control plane of a tessera cluster",
               "tessera-coordinator");
  tessera::CoordinatorConfig config;
  AddFlags(app, config);
  if (std::optional<int> exit =
          tessera::daemon::ParseFlagsAndStartLogging(app, argc, argv, {"secret"})) {
    return *exit;
  }
  // Server reflection is registered here, where gRPC's reflection library is linked: loading it
  // adds the service to every server of a process, so tessera_server (which tests link) does not.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  return tessera::RunCoordinator(config);
}
