#include "server/coordinator_run.h"

#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "daemon_support/daemon_flags.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "metrics/registry.h"
#include "security/auth_failures.h"
#include "security/client_tokens.h"
#include "security/request_bytes.h"
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

namespace tessera {
namespace {

// False, with the reason logged, when flags of `config` contradict each other.
bool CheckConfig(const CoordinatorConfig& config) {
  if (config.dead_after <= config.heartbeat_interval) {
    spdlog::critical("--dead_after {} must be longer than --heartbeat_interval {}",
                     absl::FormatDuration(config.dead_after),
                     absl::FormatDuration(config.heartbeat_interval));
    return false;
  }
  if (absl::Status s = daemon::CheckStreamLimits(config.streams, config.max_rpc_threads); !s.ok()) {
    spdlog::critical("{}", std::string(s.message()));
    return false;
  }
  return true;
}

// With --tokens_file, makes `server` accept only clients sending one of its bearer tokens, their
// failures counted in `failures`. False, with the reason logged, when the file cannot be used.
bool AcceptClientTokens(const CoordinatorConfig& config, grpc::ServerCredentials& server,
                        AuthFailures* failures) {
  if (config.tokens_file.empty()) return true;
  if (!config.tls.enabled()) {
    spdlog::critical(
        "--tokens_file needs TLS (--tls_cert and --tls_key): bearer tokens would "
        "cross the network in the clear");
    return false;
  }
  absl::StatusOr<ClientTokens> tokens = ClientTokens::Load(config.tokens_file);
  if (!tokens.ok()) {
    spdlog::critical("--tokens_file: {}", std::string(tokens.status().message()));
    return false;
  }
  spdlog::info("accepting the bearer tokens of {} client(s)", tokens->size());
  server.SetAuthMetadataProcessor(
      std::make_shared<BearerTokenProcessor>(*std::move(tokens), failures));
  return true;
}

// The coordinator's tables and services, each given those declared before it.
struct Coordinator {
  Coordinator(const CoordinatorConfig& config, const daemon::DaemonCredentials& credentials);

  // Opens --state_dir, brings back what it recorded and records into it from now on. False, with
  // the reason logged, when it cannot.
  bool OpenState(const CoordinatorConfig& config);

  WorkerRegistry workers;
  RendezvousStore store;
  Dispatcher dispatcher;
  MeshTable meshes;
  RegistryService registry_service;
  WorkerBytes ledger;  // local tensors and DTensor shards, against each worker's budget
  CollectiveService collective_service;
  DTensorTable tensors;
  DTensorService dtensor_service;
  MeshReformer reformer;
  // The models published for serving (the inference endpoint serves them); a module that goes
  // with its mesh takes its published versions with it.
  ServedModels served;
  ModuleTable modules;
  ModuleService module_service;
  // Callers' streams, bounded in all and per peer: the threads left serve unary calls and the
  // workers' heartbeats and registrations.
  StreamLimits stream_limits;
  MeshService mesh_service;
  InferenceService inference_service;
  RequestBytes request_bytes;
  // With --state_dir.
  std::unique_ptr<StateStore> state;
  std::unique_ptr<StateRecovery> recovery;
};

Coordinator::Coordinator(const CoordinatorConfig& config,
                         const daemon::DaemonCredentials& credentials)
    : workers(config.heartbeat_interval, config.dead_after),
      dispatcher(&workers, config.secret),
      meshes(&workers),
      registry_service(&workers, &store, {config.secret, config.worker_identities},
                       [this](int64_t mesh, int64_t worker) {
                         absl::StatusOr<std::shared_ptr<Mesh>> m = meshes.FindById(mesh);
                         return m.ok() && (*m)->mesh.Contains(worker);
                       }),
      collective_service(&meshes, &dispatcher, config.stream_idle_timeout,
                         config.session_stream_idle_timeout),
      tensors(&meshes, &dispatcher, &ledger),
      dtensor_service(&tensors, config.client_grace, config.stream_idle_timeout,
                      config.direct_grant_lifetime, config.session_stream_idle_timeout),
      reformer(&meshes, &dispatcher, &store),
      modules([this](const v1::PublishedVersion& p) {
        served.Unpublish(p.model(), p.version()).IgnoreError();
      }),
      module_service(&tensors, &modules, &served, config.stream_idle_timeout),
      stream_limits("coordinator", config.streams.max_streams, config.streams.max_per_peer),
      mesh_service(&meshes, &dispatcher, &store, &reformer, &ledger,
                   {&collective_service, &tensors, &modules}),
      inference_service(&served),
      request_bytes("inference", config.max_request_bytes, "--max_request_bytes") {
  workers.set_worker_credentials(credentials.channel);
  dispatcher.ObserveBroken(
      [this](const WorkerHandle& worker, const v1::BrokenCommunicator& broken) {
        reformer.OnBroken(worker, broken);
      });
  dtensor_service.LimitStreams(&stream_limits);
  collective_service.LimitStreams(&stream_limits);
  module_service.LimitStreams(&stream_limits);
  inference_service.LimitRequestBytes(&request_bytes);
}

bool Coordinator::OpenState(const CoordinatorConfig& config) {
  absl::StatusOr<std::unique_ptr<StateStore>> opened = StateStore::Open(config.state_dir);
  if (!opened.ok()) {
    spdlog::critical("--state_dir: {}", opened.status().ToString());
    return false;
  }
  state = *std::move(opened);
  recovery = std::make_unique<StateRecovery>(state.get(), &workers, &meshes, &reformer, &tensors,
                                             &ledger, config.recovery_wait);
  if (absl::Status s = recovery->Load(); !s.ok()) {
    spdlog::critical("--state_dir: {}", s.ToString());
    return false;
  }
  if (absl::Status s = module_service.recovery().Load(*state); !s.ok()) {
    spdlog::critical("--state_dir: {}", s.ToString());
    return false;
  }
  recovery->Then([this] { module_service.recovery().RestoreAll(); });
  workers.RecordIn(state.get());
  tensors.RecordIn(state.get());
  modules.RecordIn(state.get());
  mesh_service.RecordIn(state.get());
  return true;
}

// Builds and starts the server of `coordinator`'s services on --listen with `credentials`,
// setting `*port` to the port bound; nullptr (or `*port` 0) when it cannot listen.
std::unique_ptr<grpc::Server> StartServer(
    const CoordinatorConfig& config, const std::shared_ptr<grpc::ServerCredentials>& credentials,
    Coordinator& coordinator, int* port) {
  grpc::ServerBuilder builder;
  // gRPC buffers a message whole before it can refuse it for its size: its buffers are bounded as
  // the requests worked on are (--max_request_bytes).
  daemon::ConfigureServer(builder, config.max_rpc_threads, 4 * config.max_request_bytes);
  builder.AddListeningPort(config.listen, credentials, port);
  const int max_bytes = static_cast<int>(config.max_message_bytes);
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  builder.RegisterService(&coordinator.registry_service);
  builder.RegisterService(&coordinator.mesh_service);
  builder.RegisterService(&coordinator.collective_service);
  builder.RegisterService(&coordinator.dtensor_service);
  builder.RegisterService(&coordinator.module_service);
  builder.RegisterService(&coordinator.inference_service);
  daemon::InstallInterceptors(builder, /*metrics=*/config.metrics_port >= 0);
  return builder.BuildAndStart();
}

// With `server` started: recovers the recorded state, repairs rejoining workers, serves the
// metrics, then waits for `server` to shut down. The exit code: 1 when the metrics cannot be
// served, 0 after the server shut down.
int ServeUntilShutdown(const CoordinatorConfig& config, Coordinator& coordinator,
                       grpc::Server& server) {
  if (coordinator.recovery != nullptr) coordinator.recovery->Start();
  // Takes restarted workers back into their meshes and repairs their replicas.
  ReplicaRepair repair(&coordinator.workers, &coordinator.meshes, &coordinator.dispatcher,
                       &coordinator.store, &coordinator.reformer, &coordinator.tensors,
                       &coordinator.ledger);
  repair.OnRejoined([&coordinator](const Mesh& old, const std::shared_ptr<Mesh>& now) {
    coordinator.module_service.MeshRejoined(old, now);
  });
  repair.Start();
  ExportCoordinatorMetrics(&metrics::DefaultRegistry(), &coordinator.workers,
                           &coordinator.dispatcher, &coordinator.tensors, &coordinator.modules,
                           &coordinator.served);
  absl::StatusOr<std::unique_ptr<metrics::HttpServer>> metrics_server =
      daemon::ServeMetrics("tessera-coordinator", config.listen, config.metrics_port);
  if (!metrics_server.ok()) {
    spdlog::critical("{}", metrics_server.status().ToString());
    return 1;
  }
  // Ready while it serves, as its gRPC health service answers (GET /ready, for TLS deployments).
  if (*metrics_server != nullptr) (*metrics_server)->ServeReadiness([] { return true; });
  server.Wait();
  return 0;
}

}  // namespace

int RunCoordinator(const CoordinatorConfig& config) {
  if (!CheckConfig(config)) return 2;
  absl::StatusOr<daemon::DaemonCredentials> credentials = daemon::MakeDaemonCredentials(
      config.tls, config.secret, absl::StrJoin(config.worker_identities, ","), "worker_identity");
  if (!credentials.ok()) {
    spdlog::critical("{}", std::string(credentials.status().message()));
    return 2;
  }
  // Failed client authentications, limited and logged (the Registry and workers keep their own).
  AuthFailures client_auth_failures("coordinator clients");
  if (!AcceptClientTokens(config, *credentials->server, &client_auth_failures)) return 2;
  Coordinator coordinator(config, *credentials);
  if (!config.state_dir.empty() && !coordinator.OpenState(config)) return 2;

  grpc::EnableDefaultHealthCheckService(true);
  if (absl::StatusOr<int> valid = daemon::ListenPort(config.listen); !valid.ok()) {
    spdlog::critical("--listen: {}", std::string(valid.status().message()));
    return 2;
  }
  int port = 0;
  std::unique_ptr<grpc::Server> server =
      StartServer(config, credentials->server, coordinator, &port);
  if (server == nullptr || port == 0) {
    spdlog::critical("{}", daemon::CannotListenMessage(config.listen));
    return 1;
  }
  // The first line on stdout is the bound port, for launchers that asked for port 0 (logs go to
  // stderr).
  std::cout << "tessera-coordinator listening on port " << port << std::endl;
  spdlog::info("serving {}", config.tls.enabled()
                                 ? (config.tls.ca_file.empty() ? "TLS" : "mutual TLS")
                                 : "plaintext");
  return ServeUntilShutdown(config, coordinator, *server);
}

}  // namespace tessera
