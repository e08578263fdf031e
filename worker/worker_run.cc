#include "worker/worker_run.h"

#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon_support/daemon_flags.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "kernels/backend.h"
#include "kernels/cpu/blas_config.h"
#include "metrics/registry.h"
#include "proto/grpc_status.h"
#include "security/stream_limits.h"
#include "security/tls_flags.h"
#include "spdlog/spdlog.h"
#include "tessera/v1/registry.grpc.pb.h"
#include "worker/rpc_store.h"
#include "worker/worker_service.h"

namespace tessera {
namespace {

// Registers until it succeeds; returns the reply.
v1::RegisterReply RegisterLoop(v1::Registry::Stub& registry, const v1::RegisterRequest& request) {
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(absl::Seconds(5)));
    v1::RegisterReply reply;
    grpc::Status s = registry.Register(&context, request, &reply);
    if (s.ok()) return reply;
    spdlog::warn("register with the coordinator failed: {}; retrying", s.error_message());
    absl::SleepFor(absl::Milliseconds(500));
  }
}

// --list_devices: what `tessera up --device cuda` starts a worker for.
int ListDevices() {
  absl::StatusOr<std::vector<kernels::DeviceDescription>> devices = kernels::ListCudaDevices();
  if (!devices.ok()) {
    std::cerr << "no CUDA device can be used: " << devices.status().message() << std::endl;
    return 1;
  }
  for (const kernels::DeviceDescription& d : *devices) {
    std::cout << d.device << "\t" << d.name << "\t" << d.total_bytes << "\t" << d.free_bytes
              << "\n";
  }
  std::cout << std::flush;
  return 0;
}

// The worker's shards in the process's metrics, read at every scrape.
void ExportShardMetrics(const WorkerService& service, const std::string& device, int64_t budget) {
  metrics::Registry& registry = metrics::DefaultRegistry();
  auto one = [device](double value) { return std::vector<metrics::Sample>{{{device}, value}}; };
  registry.AddCallback("tessera_shard_memory_used_bytes",
                       "bytes of shards this worker holds, in its device's memory", {"device"},
                       [&service, one] { return one(static_cast<double>(service.used_bytes())); });
  registry.AddCallback(
      "tessera_device_memory_allocated_bytes",
      "bytes allocated in this worker's device memory (shards and temporaries together)",
      {"device"},
      [&service, one] { return one(static_cast<double>(service.memory_usage().allocated_bytes)); });
  registry.AddCallback("tessera_device_memory_free_bytes",
                       "the GPU's free memory (cudaMemGetInfo); no sample on a cpu worker",
                       {"device"}, [&service, device] {
                         const int64_t free = service.memory_usage().device_free_bytes;
                         std::vector<metrics::Sample> samples;
                         if (free >= 0) samples.push_back({{device}, static_cast<double>(free)});
                         return samples;
                       });
  registry.AddCallback("tessera_shard_memory_budget_bytes",
                       "this worker's budget for shards (--memory_budget)", {"device"},
                       [budget, one] { return one(static_cast<double>(budget)); });
  registry.AddCallback(
      "tessera_shards", "local tensors (shards) this worker holds", {"device"},
      [&service, one] { return one(static_cast<double>(service.held_tensors())); });
}

// The implementations this worker holds: its device's memory space and kernels (the
// communicators follow the device too, comm::MakeCommunicator), limited to --memory_limit.
// nullptr, with the reason logged, for a device it cannot serve.
std::unique_ptr<kernels::KernelBackend> MakeKernels(const WorkerConfig& config) {
  const std::string& device = config.device;
  if (device != "cpu" && device.rfind("cuda:", 0) != 0) {
    spdlog::critical("unknown --device '{}'; expected cpu or cuda:N", device);
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<kernels::KernelBackend>> backend = kernels::MakeBackend(device);
  if (!backend.ok()) {
    spdlog::critical("cannot serve --device {}: {}", device, backend.status().ToString());
    return nullptr;
  }
  const int64_t memory_limit = config.memory_limit >= 0
                                   ? config.memory_limit
                                   : (device == "cpu" ? -1 : config.memory_budget);
  (*backend)->set_allocation_limit(memory_limit);
  if (const kernels::MemoryUsage usage = (*backend)->usage(); usage.device_total_bytes >= 0) {
    spdlog::info("{}: {} bytes of device memory, {} free; shards and temporaries limited to {}",
                 device, usage.device_total_bytes, usage.device_free_bytes, memory_limit);
  }
  return *std::move(backend);
}

// How the process allocates and computes: glibc's heap kept for the shards, --threads BLAS
// threads.
void SetUpHeapAndThreads(const WorkerConfig& config) {
  // Shards come and go in large blocks every op: keep freed memory in the heap for the next one
  // instead of returning it to the kernel and faulting fresh pages in (glibc mmaps and unmaps every
  // block past 32 MiB by default, which cost more than a 64 MiB collective in bench/RESULTS.md).
  // The shard store's budget bounds what the process holds.
  mallopt(M_ARENA_MAX, 1);  // one arena: a per-thread arena cannot hold a 64 MiB block
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // Local compute threads for BLAS (the library read its environment as it loaded; this wins).
  kernels::SetBlasThreads(config.threads);
  const kernels::BlasConfig blas = kernels::CurrentBlasConfig();
  spdlog::info("BLAS: OpenBLAS {} kernels ({}), {} thread(s)", blas.core, config.blas_core_choice,
               blas.threads);
}

// Builds and starts the server of `service` on --listen with `credentials`, setting `*port` to
// the port bound; nullptr (or `*port` 0) when it cannot listen.
std::unique_ptr<grpc::Server> StartServer(
    const WorkerConfig& config, const std::shared_ptr<grpc::ServerCredentials>& credentials,
    WorkerService& service, int* port) {
  grpc::ServerBuilder builder;
  daemon::ConfigureServer(builder, config.max_rpc_threads);
  builder.AddListeningPort(config.listen, credentials, port);
  const int max_bytes = static_cast<int>(config.max_message_bytes);
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  builder.RegisterService(&service);
  daemon::InstallInterceptors(builder, /*metrics=*/config.metrics_port >= 0);
  return builder.BuildAndStart();
}

// What the worker's registrations with the coordinator and its heartbeats use.
struct Registration {
  WorkerService* service = nullptr;
  // grpc.health.v1 (the readiness probe) answers NOT_SERVING until the coordinator has this
  // worker registered, and again while it registers anew; `registered` says the same for GET
  // /ready.
  grpc::HealthCheckServiceInterface* health = nullptr;
  std::atomic<bool>* registered = nullptr;
  std::shared_ptr<v1::Registry::Stub> registry;
  std::unique_ptr<v1::Registry::Stub> heartbeats;
  v1::RegisterRequest request;
  std::string device;
  std::string address;  // the one the coordinator dials
  std::string collective_host;
};

// The Registry's stubs and the registration request of a worker serving on `port`.
Registration Connect(const WorkerConfig& config,
                     const std::shared_ptr<grpc::ChannelCredentials>& credentials, int port,
                     WorkerService* service, grpc::HealthCheckServiceInterface* health,
                     std::atomic<bool>* registered) {
  Registration r;
  r.service = service;
  r.health = health;
  r.registered = registered;
  r.device = config.device;
  const std::string& listen = config.listen;
  const std::string host = listen.substr(0, listen.rfind(':'));
  r.address = config.advertise.empty() ? absl::StrCat(host, ":", port) : config.advertise;
  r.collective_host = config.collective_host;
  if (r.collective_host.empty()) {
    r.collective_host = (host == "0.0.0.0" || host == "[::]") ? "127.0.0.1" : host;
  }

  const int max_bytes = static_cast<int>(config.max_message_bytes);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_bytes);
  args.SetMaxSendMessageSize(max_bytes);
  // A coordinator started again is found within a second, however long it was gone (gRPC's
  // reconnect backoff otherwise grows to minutes).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Every call to the Registry carries the secret, when there is one (the coordinator may know
  // workers by their certificates instead).
  std::vector<std::pair<std::string, std::string>> registry_metadata;
  if (!config.secret.empty()) registry_metadata.emplace_back(kSecretMetadataKey, config.secret);
  r.registry = v1::Registry::NewStub(
      CreateChannelWithMetadata(config.coordinator, credentials, args, registry_metadata));
  // Heartbeats go on a connection of their own, beside the rendezvous store's long waits; the
  // thread that sends them does nothing else.
  grpc::ChannelArguments heartbeat_args;
  heartbeat_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  heartbeat_args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  heartbeat_args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  r.heartbeats = v1::Registry::NewStub(CreateChannelWithMetadata(
      config.coordinator, credentials, heartbeat_args, registry_metadata));
  r.request.set_address(r.address);
  r.request.set_device(r.device);
  r.request.set_memory_budget_bytes(config.memory_budget);
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  r.request.set_hostname(hostname);
  r.request.set_pid(getpid());
  r.request.set_device_name(service->device_name());
  return r;
}

// Registers with the coordinator (a new incarnation, with the tensors this worker still holds)
// and begins serving as what the reply makes it.
v1::RegisterReply Register(Registration& r) {
  r.health->SetServingStatus(false);
  *r.registered = false;
  r.request.clear_held_tensors();
  for (std::string& name : r.service->tensor_names()) r.request.add_held_tensors(std::move(name));
  r.service->BeginRegistering();
  v1::RegisterReply reply = RegisterLoop(*r.registry, r.request);
  r.service->SetGrantKey(reply.grant_key());
  r.service->BeginIncarnation(
      reply.worker_id(), reply.incarnation(),
      std::make_unique<RpcStore>(r.registry, absl::Seconds(60),
                                 absl::StrCat(reply.worker_id(), "/", reply.incarnation())),
      r.collective_host, reply.keep_tensors(),
      {reply.drop_tensors().begin(), reply.drop_tensors().end()});
  r.health->SetServingStatus(true);
  *r.registered = true;
  // Launchers (client/local_cluster/local_cluster.cc) wait for this line on stdout, whatever the
  // log level.
  std::cout << "tessera-worker " << reply.worker_id() << " (" << r.device << ") serving on "
            << r.address << ", incarnation " << reply.incarnation() << std::endl;
  return reply;
}

// Heartbeats as registered by `reg`, forever; registers again when the command order is broken
// or the coordinator refuses a heartbeat.
void HeartbeatForever(Registration& r, v1::RegisterReply reg) {
  while (true) {
    absl::SleepFor(absl::Milliseconds(reg.heartbeat_interval_ms()));
    if (absl::Status broken = r.service->command_order_broken(); !broken.ok()) {
      // Nothing can run until the order starts again: a new incarnation, which the coordinator
      // sees as a restart of this worker.
      spdlog::error("{}; registering again", std::string(broken.message()));
      reg = Register(r);
      continue;
    }
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(absl::Seconds(2)));
    v1::HeartbeatRequest hb;
    hb.set_worker_id(reg.worker_id());
    hb.set_incarnation(reg.incarnation());
    hb.set_used_bytes(r.service->used_bytes());
    const kernels::MemoryUsage usage = r.service->memory_usage();
    hb.set_device_allocated_bytes(usage.device_total_bytes >= 0 ? usage.allocated_bytes : -1);
    hb.set_device_free_bytes(usage.device_free_bytes);
    hb.set_device_total_bytes(usage.device_total_bytes);
    v1::HeartbeatReply ack;
    grpc::Status s = r.heartbeats->Heartbeat(&context, hb, &ack);
    if (s.error_code() == grpc::StatusCode::NOT_FOUND ||
        s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      spdlog::warn(
          "the coordinator refused the heartbeat of worker {} incarnation {} ({}); "
          "registering again",
          reg.worker_id(), reg.incarnation(), s.error_message());
      // The coordinator restarted (its incarnations are unique per process) or replaced this one.
      reg = Register(r);
    }
  }
}

}  // namespace

int RunWorker(const WorkerConfig& config) {
  if (config.list_devices) return ListDevices();
  absl::StatusOr<daemon::DaemonCredentials> credentials = daemon::MakeDaemonCredentials(
      config.tls, config.secret, config.coordinator_identity, "coordinator_identity");
  if (!credentials.ok()) {
    spdlog::critical("{}", std::string(credentials.status().message()));
    return 2;
  }
  std::unique_ptr<kernels::KernelBackend> backend = MakeKernels(config);
  if (backend == nullptr) return 2;
  SetUpHeapAndThreads(config);

  if (absl::Status s = daemon::CheckStreamLimits(config.streams, config.max_rpc_threads); !s.ok()) {
    spdlog::critical("{}", std::string(s.message()));
    return 2;
  }
  WorkerService service(config.secret, std::move(backend), config.memory_budget,
                        config.sequence_stall_limit, config.stream_idle_timeout);
  // Clients' direct streams, bounded in all and per peer: the coordinator's commands and
  // releases, and health checks, keep threads of their own.
  StreamLimits stream_limits("worker", config.streams.max_streams, config.streams.max_per_peer);
  service.LimitStreams(&stream_limits);
  service.RequireCoordinatorIdentity(config.coordinator_identity);
  service.SetCheckpointRoot(config.checkpoint_root);
  grpc::EnableDefaultHealthCheckService(true);
  if (absl::StatusOr<int> valid = daemon::ListenPort(config.listen); !valid.ok()) {
    spdlog::critical("--listen: {}", std::string(valid.status().message()));
    return 2;
  }
  int port = 0;
  std::unique_ptr<grpc::Server> server = StartServer(config, credentials->server, service, &port);
  if (server == nullptr || port == 0) {
    spdlog::critical("{}", daemon::CannotListenMessage(config.listen));
    return 1;
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(false);
  ExportShardMetrics(service, config.device, config.memory_budget);
  std::atomic<bool> registered{false};  // what the health service answers, for GET /ready
  absl::StatusOr<std::unique_ptr<metrics::HttpServer>> metrics_server =
      daemon::ServeMetrics("tessera-worker", config.listen, config.metrics_port);
  if (!metrics_server.ok()) {
    spdlog::critical("{}", metrics_server.status().ToString());
    return 1;
  }
  if (*metrics_server != nullptr) {
    (*metrics_server)->ServeReadiness([&registered] { return registered.load(); });
  }

  Registration registration =
      Connect(config, credentials->channel, port, &service, health, &registered);
  v1::RegisterReply reg = Register(registration);
  std::thread heartbeat([&registration, reg] { HeartbeatForever(registration, reg); });
  heartbeat.detach();
  server->Wait();
  return 0;
}

}  // namespace tessera
