// tessera-worker: serves one device. Listens for the coordinator's commands, registers with it,
// then heartbeats; registers again (a new incarnation) whenever the coordinator forgets it or the
// command order is broken.

#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/release_mode.h"
#include "daemon/daemon_flags.h"
#include "daemon/server_setup.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "kernels/cpu/blas_config.h"
#include "proto/grpc_status.h"
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
  std::string advertise;
  std::string collective_host;
  int32_t threads = 1;
  std::string secret;
  int64_t max_message_bytes = int64_t{1} << 30;  // inline tensors of large batches fit
  absl::Duration sequence_stall_limit = absl::Minutes(1);
  int max_rpc_threads = tessera::daemon::kDefaultMaxRpcThreads;
};

void AddFlags(CLI::App& app, WorkerFlags& f) {
  app.add_option("--coordinator", f.coordinator, "the coordinator's address");
  app.add_option("--device", f.device, "the device served: cpu or cuda:N");
  app.add_option("--listen", f.listen, "address to serve on (port 0 picks one)");
  app.add_option("--memory_budget", f.memory_budget, "bytes of shards this worker holds at most")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--advertise", f.advertise,
                 "address the coordinator dials (host:port); default the listen address");
  app.add_option("--collective_host", f.collective_host,
                 "host or IP Gloo binds and advertises to peers; default the listen host, or "
                 "127.0.0.1 when listening on all interfaces");
  app.add_option("--threads", f.threads, "threads for local compute")->check(CLI::PositiveNumber);
  app.add_option("--secret", f.secret, "shared secret of the cluster")->envname("TESSERA_SECRET");
  app.add_option("--max_message_bytes", f.max_message_bytes,
                 "largest gRPC message accepted or sent")
      ->check(CLI::Range(int64_t{1}, int64_t{2147483647}));
  app.add_option("--max_rpc_threads", f.max_rpc_threads,
                 "most threads serving gRPC calls at once; a call past them is refused with "
                 "RESOURCE_EXHAUSTED")
      ->check(CLI::Range(16, 65536));
  tessera::daemon::AddDurationFlag(
      app, "--sequence_stall_limit", &f.sequence_stall_limit,
      "how long a command sequence the coordinator neither used nor released may hold later "
      "commands up before the worker refuses commands and registers again");
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
  const std::string& secret = flags.secret;
  if (secret.empty()) {
    spdlog::critical("a shared secret is required (--secret or $TESSERA_SECRET)");
    return 2;
  }
  const std::string& device = flags.device;
  if (device != "cpu" && device.rfind("cuda:", 0) != 0) {
    spdlog::critical("unknown --device '{}'; expected cpu or cuda:N", device);
    return 2;
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

  tessera::WorkerService service(secret, device, flags.memory_budget, flags.sequence_stall_limit);
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
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  const int max_bytes = static_cast<int>(flags.max_message_bytes);
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    spdlog::critical("{}", tessera::daemon::CannotListenMessage(listen));
    return 1;
  }
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
  std::shared_ptr<tessera::v1::Registry::Stub> registry = tessera::v1::Registry::NewStub(
      grpc::CreateCustomChannel(flags.coordinator, grpc::InsecureChannelCredentials(), args));
  tessera::v1::RegisterRequest request;
  request.set_address(address);
  request.set_device(device);
  request.set_memory_budget_bytes(flags.memory_budget);
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  request.set_hostname(hostname);
  request.set_pid(getpid());

  auto begin = [&]() {
    tessera::v1::RegisterReply reply = RegisterLoop(*registry, request);
    service.BeginIncarnation(reply.worker_id(), reply.incarnation(),
                             std::make_unique<tessera::RpcStore>(registry, absl::Seconds(60)),
                             collective_host);
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
      tessera::v1::HeartbeatReply ack;
      grpc::Status s = registry->Heartbeat(&context, hb, &ack);
      if (s.error_code() == grpc::StatusCode::NOT_FOUND ||
          s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
        spdlog::warn(
            "the coordinator refused the heartbeat of worker {} incarnation {} ({}); "
            "registering again",
            reg.worker_id(), reg.incarnation(), s.error_message());
        reg = begin();  // the coordinator restarted or replaced this incarnation
      }
    }
  });
  heartbeat.detach();
  server->Wait();
  return 0;
}
