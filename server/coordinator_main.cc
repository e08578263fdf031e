// tessera-coordinator: the control plane. Serves the client-facing services (meshes,
// collectives, DTensors, modules), KServe v2 inference on the published models, and the
// worker-facing Registry (with the rendezvous store) on one port, plus gRPC health and reflection.

#include <malloc.h>

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "core/release_mode.h"
#include "daemon_support/daemon_flags.h"
#include "daemon_support/server_setup.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "security/client_tokens.h"
#include "security/stream_limits.h"
#include "security/tls_flags.h"
#include "server/cluster/dispatcher.h"
#include "server/cluster/rendezvous_store.h"
#include "server/cluster/state_store.h"
#include "server/cluster/worker_bytes.h"
#include "server/cluster/worker_registry.h"
#include "server/collective_service.h"
#include "server/coordinator_metrics.h"
#include "server/dtensor_service.h"
#include "server/inference_service.h"
#include "server/mesh_service.h"
#include "server/module_service.h"
#include "server/recovery/mesh_reformer.h"
#include "server/recovery/replica_repair.h"
#include "server/recovery/state_recovery.h"
#include "server/registry_service.h"
#include "server/tables/dtensor_table.h"
#include "server/tables/mesh_table.h"
#include "server/tables/module_table.h"
#include "server/tables/served_models.h"
#include "spdlog/spdlog.h"

namespace {

// The coordinator's command line; every flag is also accepted as --name=value.
struct CoordinatorFlags {
  std::string listen = "127.0.0.1:50051";
  std::string secret;
  tessera::TlsFiles tls;
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
  int max_rpc_threads = tessera::daemon::kDefaultMaxRpcThreads;
  tessera::daemon::StreamLimitFlags streams;
  int64_t max_request_bytes = int64_t{256} << 20;
  std::string state_dir;
  absl::Duration recovery_wait = absl::Seconds(30);
};

void AddFlags(CLI::App& app, CoordinatorFlags& f) {
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
  CoordinatorFlags flags;
  AddFlags(app, flags);
  if (std::optional<int> exit =
          tessera::daemon::ParseFlagsAndStartLogging(app, argc, argv, {"secret"})) {
    return *exit;
  }
  if (flags.dead_after <= flags.heartbeat_interval) {
    spdlog::critical("--dead_after {} must be longer than --heartbeat_interval {}",
                     absl::FormatDuration(flags.dead_after),
                     absl::FormatDuration(flags.heartbeat_interval));
    return 2;
  }
  if (absl::Status s = tessera::daemon::CheckStreamLimits(flags.streams, flags.max_rpc_threads);
      !s.ok()) {
    spdlog::critical("{}", std::string(s.message()));
    return 2;
  }
  const std::string& secret = flags.secret;
  absl::StatusOr<tessera::daemon::DaemonCredentials> credentials =
      tessera::daemon::MakeDaemonCredentials(
          flags.tls, secret, absl::StrJoin(flags.worker_identities, ","), "worker_identity");
  if (!credentials.ok()) {
    spdlog::critical("{}", std::string(credentials.status().message()));
    return 2;
  }
  // Failed client authentications, limited and logged (the Registry and workers keep their own).
  tessera::AuthFailures client_auth_failures("coordinator clients");
  if (!flags.tokens_file.empty()) {
    if (!flags.tls.enabled()) {
      spdlog::critical(
          "--tokens_file needs TLS (--tls_cert and --tls_key): bearer tokens would "
          "cross the network in the clear");
      return 2;
    }
    absl::StatusOr<tessera::ClientTokens> tokens = tessera::ClientTokens::Load(flags.tokens_file);
    if (!tokens.ok()) {
      spdlog::critical("--tokens_file: {}", std::string(tokens.status().message()));
      return 2;
    }
    spdlog::info("accepting the bearer tokens of {} client(s)", tokens->size());
    credentials->server->SetAuthMetadataProcessor(
        std::make_shared<tessera::BearerTokenProcessor>(*std::move(tokens), &client_auth_failures));
  }

  tessera::WorkerRegistry workers(flags.heartbeat_interval, flags.dead_after);
  tessera::RendezvousStore store;
  workers.set_worker_credentials(credentials->channel);
  tessera::Dispatcher dispatcher(&workers, secret);
  tessera::MeshTable meshes(&workers);
  tessera::RegistryService registry_service(
      &workers, &store, {secret, flags.worker_identities}, [&meshes](int64_t mesh, int64_t worker) {
        absl::StatusOr<std::shared_ptr<tessera::Mesh>> m = meshes.FindById(mesh);
        return m.ok() && (*m)->mesh.Contains(worker);
      });
  tessera::WorkerBytes ledger;  // local tensors and DTensor shards, against each worker's budget
  tessera::CollectiveService collective_service(&meshes, &dispatcher, flags.stream_idle_timeout,
                                                flags.session_stream_idle_timeout);
  tessera::DTensorTable tensors(&meshes, &dispatcher, &ledger);
  tessera::DTensorService dtensor_service(&tensors, flags.client_grace, flags.stream_idle_timeout,
                                          flags.direct_grant_lifetime,
                                          flags.session_stream_idle_timeout);
  tessera::MeshReformer reformer(&meshes, &dispatcher, &store);
  dispatcher.ObserveBroken([&reformer](const tessera::WorkerHandle& worker,
                                       const tessera::v1::BrokenCommunicator& broken) {
    reformer.OnBroken(worker, broken);
  });
  // The models published for serving (the inference endpoint serves them); a module that goes
  // with its mesh takes its published versions with it.
  tessera::ServedModels served;
  tessera::ModuleTable modules([&served](const tessera::v1::PublishedVersion& p) {
    served.Unpublish(p.model(), p.version()).IgnoreError();
  });
  tessera::ModuleService module_service(&tensors, &modules, &served, flags.stream_idle_timeout);
  // Callers' streams, bounded in all and per peer: the threads left serve unary calls and the
  // workers' heartbeats and registrations.
  tessera::StreamLimits stream_limits("coordinator", flags.streams.max_streams,
                                      flags.streams.max_per_peer);
  dtensor_service.LimitStreams(&stream_limits);
  collective_service.LimitStreams(&stream_limits);
  module_service.LimitStreams(&stream_limits);
  tessera::MeshService mesh_service(&meshes, &dispatcher, &store, &reformer, &ledger,
                                    {&collective_service, &tensors, &modules});
  tessera::InferenceService inference_service(&served);
  tessera::RequestBytes request_bytes("inference", flags.max_request_bytes, "--max_request_bytes");
  inference_service.LimitRequestBytes(&request_bytes);

  std::unique_ptr<tessera::StateStore> state;
  std::unique_ptr<tessera::StateRecovery> recovery;
  if (!flags.state_dir.empty()) {
    absl::StatusOr<std::unique_ptr<tessera::StateStore>> opened =
        tessera::StateStore::Open(flags.state_dir);
    if (!opened.ok()) {
      spdlog::critical("--state_dir: {}", opened.status().ToString());
      return 2;
    }
    state = *std::move(opened);
    recovery = std::make_unique<tessera::StateRecovery>(state.get(), &workers, &meshes, &reformer,
                                                        &tensors, &ledger, flags.recovery_wait);
    if (absl::Status s = recovery->Load(); !s.ok()) {
      spdlog::critical("--state_dir: {}", s.ToString());
      return 2;
    }
    if (absl::Status s = module_service.recovery().Load(*state); !s.ok()) {
      spdlog::critical("--state_dir: {}", s.ToString());
      return 2;
    }
    recovery->Then([&module_service] { module_service.recovery().RestoreAll(); });
    workers.RecordIn(state.get());
    tensors.RecordIn(state.get());
    modules.RecordIn(state.get());
    mesh_service.RecordIn(state.get());
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  if (absl::StatusOr<int> valid = tessera::daemon::ListenPort(flags.listen); !valid.ok()) {
    spdlog::critical("--listen: {}", std::string(valid.status().message()));
    return 2;
  }
  grpc::ServerBuilder builder;
  // gRPC buffers a message whole before it can refuse it for its size: its buffers are bounded as
  // the requests worked on are (--max_request_bytes).
  tessera::daemon::ConfigureServer(builder, flags.max_rpc_threads, 4 * flags.max_request_bytes);
  int port = 0;
  builder.AddListeningPort(flags.listen, credentials->server, &port);
  const int max_bytes = static_cast<int>(flags.max_message_bytes);
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  builder.RegisterService(&registry_service);
  builder.RegisterService(&mesh_service);
  builder.RegisterService(&collective_service);
  builder.RegisterService(&dtensor_service);
  builder.RegisterService(&module_service);
  builder.RegisterService(&inference_service);
  tessera::daemon::InstallInterceptors(builder, /*metrics=*/flags.metrics_port >= 0);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    spdlog::critical("{}", tessera::daemon::CannotListenMessage(flags.listen));
    return 1;
  }
  // The first line on stdout is the bound port, for launchers that asked for port 0 (logs go to
  // stderr).
  std::cout << "tessera-coordinator listening on port " << port << std::endl;
  spdlog::info("serving {}", flags.tls.enabled()
                                 ? (flags.tls.ca_file.empty() ? "TLS" : "mutual TLS")
                                 : "plaintext");
  if (recovery != nullptr) recovery->Start();
  // Takes restarted workers back into their meshes and repairs their replicas.
  tessera::ReplicaRepair repair(&workers, &meshes, &dispatcher, &store, &reformer, &tensors,
                                &ledger);
  repair.OnRejoined(
      [&module_service](const tessera::Mesh& old, const std::shared_ptr<tessera::Mesh>& now) {
        module_service.MeshRejoined(old, now);
      });
  repair.Start();
  tessera::ExportCoordinatorMetrics(&tessera::metrics::DefaultRegistry(), &workers, &dispatcher,
                                    &tensors, &modules, &served);
  absl::StatusOr<std::unique_ptr<tessera::metrics::HttpServer>> metrics =
      tessera::daemon::ServeMetrics("tessera-coordinator", flags.listen, flags.metrics_port);
  if (!metrics.ok()) {
    spdlog::critical("{}", metrics.status().ToString());
    return 1;
  }
  // Ready while it serves, as its gRPC health service answers (GET /ready, for TLS deployments).
  if (*metrics != nullptr) (*metrics)->ServeReadiness([] { return true; });
  server->Wait();
  return 0;
}
