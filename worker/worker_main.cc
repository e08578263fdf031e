// tessera-worker: serves one device. Listens for the coordinator's commands, registers with it,
// then heartbeats; registers again (a new incarnation) whenever the coordinator forgets it or the
// command order is broken.

#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/release_mode.h"
#include "daemon_support/daemon_flags.h"
#include "daemon_support/server_setup.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "kernels/backend.h"
#include "kernels/cpu/blas_config.h"
#include "proto/grpc_status.h"
#include "proto/tls_files.h"
#include "security/stream_limits.h"
#include "security/tls_flags.h"
#include "spdlog/spdlog.h"
#include "tessera/v1/registry.grpc.pb.h"
#include "worker/rpc_store.h"
#include "worker/worker_service.h"

namespace {

// The worker's command line; every flag is also accepted as --name=value.
struct WorkerFlags {
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
  tessera::TlsFiles tls;
  std::string coordinator_identity;
  int64_t max_message_bytes = int64_t{1} << 30;  // inline tensors of large batches fit
  absl::Duration sequence_stall_limit = absl::Minutes(1);
  bool list_devices = false;
  int metrics_port = -1;
  int max_rpc_threads = tessera::daemon::kDefaultMaxRpcThreads;
  tessera::daemon::StreamLimitFlags streams;
  absl::Duration stream_idle_timeout = absl::Seconds(30);
};

void AddFlags(CLI::App& app, WorkerFlags& f) {
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

// Registers until it succeeds; returns the reply.
tessera::v1::RegisterReply RegisterLoop(tessera::v1::Registry::Stub& registry,
                                        const tessera::v1::RegisterRequest& request) {
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(tessera::DeadlineAfter(absl::Seconds(5)));
    tessera::v1::RegisterReply reply;
    grpc::Status s = registry.Register(&context, request, &reply);
    if (s.ok()) return reply;
    spdlog::warn("register with the coordinator failed: {}; retrying", s.error_message());
    absl::SleepFor(absl::Milliseconds(500));
  }
}

// --list_devices: what `tessera up --device cuda` starts a worker for.
int ListDevices() {
  absl::StatusOr<std::vector<tessera::kernels::DeviceDescription>> devices =
      tessera::kernels::ListCudaDevices();
  if (!devices.ok()) {
    std::cerr << "no CUDA device can be used: " << devices.status().message() << std::endl;
    return 1;
  }
  for (const tessera::kernels::DeviceDescription& d : *devices) {
    std::cout << d.device << "\t" << d.name << "\t" << d.total_bytes << "\t" << d.free_bytes
              << "\n";
  }
  std::cout << std::flush;
  return 0;
}

// The worker's shards in the process's metrics, read at every scrape.
void ExportShardMetrics(const tessera::WorkerService& service, const std::string& device,
                        int64_t budget) {
  tessera::metrics::Registry& registry = tessera::metrics::DefaultRegistry();
  auto one = [device](double value) {
    return std::vector<tessera::metrics::Sample>{{{device}, value}};
  };
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
                         std::vector<tessera::metrics::Sample> samples;
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

}  // namespace

int main(int argc, char** argv) {
  // First, since it may start the program again: the BLAS kernels fastest on this CPU.
  const std::string blas_core_choice = tessera::kernels::UsePreferredBlasCore(argv);
  tessera::daemon::IgnoreBrokenPipes();
  tessera::UseReleaseMutexes();
  CLI::App app("tessera-worker: serves one device to a tessera-coordinator", "tessera-worker");
  WorkerFlags flags;
  AddFlags(app, flags);
  if (std::optional<int> exit =
          tessera::daemon::ParseFlagsAndStartLogging(app, argc, argv, {"secret"})) {
    return *exit;
  }
  if (flags.list_devices) return ListDevices();
  const std::string& secret = flags.secret;
  absl::StatusOr<tessera::daemon::DaemonCredentials> credentials =
      tessera::daemon::MakeDaemonCredentials(flags.tls, secret, flags.coordinator_identity,
                                             "coordinator_identity");
  if (!credentials.ok()) {
    spdlog::critical("{}", std::string(credentials.status().message()));
    return 2;
  }
  const std::string& device = flags.device;
  if (device != "cpu" && device.rfind("cuda:", 0) != 0) {
    spdlog::critical("unknown --device '{}'; expected cpu or cuda:N", device);
    return 2;
  }
  // The implementations this worker holds: its device's memory space and kernels (the
  // communicators follow the device too, comm::MakeCommunicator).
  absl::StatusOr<std::unique_ptr<tessera::kernels::KernelBackend>> kernels =
      tessera::kernels::MakeBackend(device);
  if (!kernels.ok()) {
    spdlog::critical("cannot serve --device {}: {}", device, kernels.status().ToString());
    return 2;
  }
  const int64_t memory_limit =
      flags.memory_limit >= 0 ? flags.memory_limit : (device == "cpu" ? -1 : flags.memory_budget);
  (*kernels)->set_allocation_limit(memory_limit);
  if (const tessera::kernels::MemoryUsage usage = (*kernels)->usage();
      usage.device_total_bytes >= 0) {
    spdlog::info("{}: {} bytes of device memory, {} free; shards and temporaries limited to {}",
                 device, usage.device_total_bytes, usage.device_free_bytes, memory_limit);
  }
  // Shards come and go in large blocks every op: keep freed memory in the heap for the next one
  // instead of returning it to the kernel and faulting fresh pages in (glibc mmaps and unmaps every
  // block past 32 MiB by default, which cost more than a 64 MiB collective in bench/RESULTS.md).
  // The shard store's budget bounds what the process holds.
  mallopt(M_ARENA_MAX, 1);  // one arena: a per-thread arena cannot hold a 64 MiB block
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // Local compute threads for BLAS (the library read its environment as it loaded; this wins).
  tessera::kernels::SetBlasThreads(flags.threads);
  const tessera::kernels::BlasConfig blas = tessera::kernels::CurrentBlasConfig();
  spdlog::info("BLAS: OpenBLAS {} kernels ({}), {} thread(s)", blas.core, blas_core_choice,
               blas.threads);

  if (absl::Status s = tessera::daemon::CheckStreamLimits(flags.streams, flags.max_rpc_threads);
      !s.ok()) {
    spdlog::critical("{}", std::string(s.message()));
    return 2;
  }
  tessera::WorkerService service(secret, *std::move(kernels), flags.memory_budget,
                                 flags.sequence_stall_limit, flags.stream_idle_timeout);
  // Clients' direct streams, bounded in all and per peer: the coordinator's commands and
  // releases, and health checks, keep threads of their own.
  tessera::StreamLimits stream_limits("worker", flags.streams.max_streams,
                                      flags.streams.max_per_peer);
  service.LimitStreams(&stream_limits);
  service.RequireCoordinatorIdentity(flags.coordinator_identity);
  service.SetCheckpointRoot(flags.checkpoint_root);
  const std::string& listen = flags.listen;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  if (absl::StatusOr<int> valid = tessera::daemon::ListenPort(listen); !valid.ok()) {
    spdlog::critical("--listen: {}", std::string(valid.status().message()));
    return 2;
  }
  grpc::ServerBuilder builder;
  tessera::daemon::ConfigureServer(builder, flags.max_rpc_threads);
  int port = 0;
  builder.AddListeningPort(listen, credentials->server, &port);
  const int max_bytes = static_cast<int>(flags.max_message_bytes);
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  builder.RegisterService(&service);
  tessera::daemon::InstallInterceptors(builder, /*metrics=*/flags.metrics_port >= 0);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    spdlog::critical("{}", tessera::daemon::CannotListenMessage(listen));
    return 1;
  }
  // grpc.health.v1 (the readiness probe) answers NOT_SERVING until the coordinator has this worker
  // registered, and again while it registers anew.
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(false);
  ExportShardMetrics(service, device, flags.memory_budget);
  std::atomic<bool> registered{false};  // what the health service answers, for GET /ready
  absl::StatusOr<std::unique_ptr<tessera::metrics::HttpServer>> metrics =
      tessera::daemon::ServeMetrics("tessera-worker", listen, flags.metrics_port);
  if (!metrics.ok()) {
    spdlog::critical("{}", metrics.status().ToString());
    return 1;
  }
  if (*metrics != nullptr) (*metrics)->ServeReadiness([&registered] { return registered.load(); });
  const std::string host = listen.substr(0, listen.rfind(':'));
  const std::string address =
      flags.advertise.empty() ? absl::StrCat(host, ":", port) : flags.advertise;
  std::string collective_host = flags.collective_host;
  if (collective_host.empty()) {
    collective_host = (host == "0.0.0.0" || host == "[::]") ? "127.0.0.1" : host;
  }

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
  if (!secret.empty()) registry_metadata.emplace_back(tessera::kSecretMetadataKey, secret);
  std::shared_ptr<tessera::v1::Registry::Stub> registry =
      tessera::v1::Registry::NewStub(tessera::CreateChannelWithMetadata(
          flags.coordinator, credentials->channel, args, registry_metadata));
  // Heartbeats go on a connection of their own, beside the rendezvous store's long waits; the
  // thread that sends them does nothing else.
  grpc::ChannelArguments heartbeat_args;
  heartbeat_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  heartbeat_args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  heartbeat_args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  std::unique_ptr<tessera::v1::Registry::Stub> heartbeats =
      tessera::v1::Registry::NewStub(tessera::CreateChannelWithMetadata(
          flags.coordinator, credentials->channel, heartbeat_args, registry_metadata));
  tessera::v1::RegisterRequest request;
  request.set_address(address);
  request.set_device(device);
  request.set_memory_budget_bytes(flags.memory_budget);
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  request.set_hostname(hostname);
  request.set_pid(getpid());
  request.set_device_name(service.device_name());

  auto begin = [&]() {
    health->SetServingStatus(false);
    registered = false;
    request.clear_held_tensors();
    for (std::string& name : service.tensor_names()) request.add_held_tensors(std::move(name));
    service.BeginRegistering();
    tessera::v1::RegisterReply reply = RegisterLoop(*registry, request);
    service.SetGrantKey(reply.grant_key());
    service.BeginIncarnation(
        reply.worker_id(), reply.incarnation(),
        std::make_unique<tessera::RpcStore>(
            registry, absl::Seconds(60), absl::StrCat(reply.worker_id(), "/", reply.incarnation())),
        collective_host, reply.keep_tensors(),
        {reply.drop_tensors().begin(), reply.drop_tensors().end()});
    health->SetServingStatus(true);
    registered = true;
    // Launchers (client/local_cluster.cc) wait for this line on stdout, whatever the log level.
    std::cout << "tessera-worker " << reply.worker_id() << " (" << device << ") serving on "
              << address << ", incarnation " << reply.incarnation() << std::endl;
    return reply;
  };
  tessera::v1::RegisterReply reg = begin();
  std::thread heartbeat([&] {
    while (true) {
      absl::SleepFor(absl::Milliseconds(reg.heartbeat_interval_ms()));
      if (absl::Status broken = service.command_order_broken(); !broken.ok()) {
        // Nothing can run until the order starts again: a new incarnation, which the coordinator
        // sees as a restart of this worker.
        spdlog::error("{}; registering again", std::string(broken.message()));
        reg = begin();
        continue;
      }
      grpc::ClientContext context;
      context.set_deadline(tessera::DeadlineAfter(absl::Seconds(2)));
      tessera::v1::HeartbeatRequest hb;
      hb.set_worker_id(reg.worker_id());
      hb.set_incarnation(reg.incarnation());
      hb.set_used_bytes(service.used_bytes());
      const tessera::kernels::MemoryUsage usage = service.memory_usage();
      hb.set_device_allocated_bytes(usage.device_total_bytes >= 0 ? usage.allocated_bytes : -1);
      hb.set_device_free_bytes(usage.device_free_bytes);
      hb.set_device_total_bytes(usage.device_total_bytes);
      tessera::v1::HeartbeatReply ack;
      grpc::Status s = heartbeats->Heartbeat(&context, hb, &ack);
      if (s.error_code() == grpc::StatusCode::NOT_FOUND ||
          s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
        spdlog::warn(
            "the coordinator refused the heartbeat of worker {} incarnation {} ({}); "
            "registering again",
            reg.worker_id(), reg.incarnation(), s.error_message());
        // The coordinator restarted (its incarnations are unique per process) or replaced this one.
        reg = begin();
      }
    }
  });
  heartbeat.detach();
  server->Wait();
  return 0;
}
