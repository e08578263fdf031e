// tessera-worker: serves one device. Listens for the coordinator's commands, registers with it,
// then heartbeats; registers again (a new incarnation) whenever the coordinator forgets it or the
// command order is broken.

#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/release_mode.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/grpc_status.h"
#include "tessera/v1/registry.grpc.pb.h"
#include "worker/rpc_store.h"
#include "worker/worker_service.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:50051", "the coordinator's address");
ABSL_FLAG(std::string, device, "cpu", "the device served: cpu or cuda:N");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "address to serve on (port 0 picks one)");
ABSL_FLAG(int64_t, memory_budget, int64_t{4} << 30, "bytes of shards this worker holds at most");
ABSL_FLAG(std::string, advertise, "",
          "address the coordinator dials (host:port); default the listen address");
ABSL_FLAG(std::string, collective_host, "",
          "host or IP Gloo binds and advertises to peers; default the listen host, or 127.0.0.1 "
          "when listening on all interfaces");
ABSL_FLAG(int32_t, threads, 1, "threads for local compute");
ABSL_FLAG(std::string, secret, "", "shared secret of the cluster; default $TESSERA_SECRET");
ABSL_FLAG(int64_t, max_message_bytes, 64 << 20, "largest gRPC message accepted or sent");
ABSL_FLAG(absl::Duration, sequence_stall_limit, absl::Minutes(1),
          "how long a command sequence the coordinator neither used nor released may hold later "
          "commands up before the worker refuses commands and registers again");

namespace {

// Registers until it succeeds; returns the reply.
tessera::v1::RegisterReply RegisterLoop(tessera::v1::Registry::Stub& registry,
                                        const tessera::v1::RegisterRequest& request) {
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(tessera::DeadlineAfter(absl::Seconds(5)));
    tessera::v1::RegisterReply reply;
    grpc::Status s = registry.Register(&context, request, &reply);
    if (s.ok()) return reply;
    std::cerr << "tessera-worker: register with the coordinator failed: " << s.error_message()
              << "; retrying\n";
    absl::SleepFor(absl::Milliseconds(500));
  }
}

}  // namespace

int main(int argc, char** argv) {
  tessera::UseReleaseMutexes();
  absl::SetProgramUsageMessage(
      "tessera-worker --coordinator=HOST:PORT --device=cpu|cuda:N [--listen=HOST:PORT]");
  absl::ParseCommandLine(argc, argv);
  std::string secret = absl::GetFlag(FLAGS_secret);
  if (secret.empty() && std::getenv("TESSERA_SECRET") != nullptr)
    secret = std::getenv("TESSERA_SECRET");
  if (secret.empty()) {
    std::cerr << "tessera-worker: a shared secret is required (--secret or $TESSERA_SECRET)\n";
    return 2;
  }
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "cpu" && device.rfind("cuda:", 0) != 0) {
    std::cerr << "tessera-worker: unknown --device '" << device << "'; expected cpu or cuda:N\n";
    return 2;
  }
  // Shards come and go in large blocks every op: keep freed memory in the heap for the next one
  // instead of returning it to the kernel and faulting fresh pages in (glibc mmaps and unmaps every
  // block past 32 MiB by default, which cost more than a 64 MiB collective in bench/RESULTS.md).
  // The shard store's budget bounds what the process holds.
  mallopt(M_ARENA_MAX, 1);  // one arena: a per-thread arena cannot hold a 64 MiB block
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // Local compute threads for BLAS; must be set before the library starts its pool.
  setenv("OPENBLAS_NUM_THREADS", absl::StrCat(absl::GetFlag(FLAGS_threads)).c_str(), 0);

  tessera::WorkerService service(secret, device, absl::GetFlag(FLAGS_memory_budget),
                                 absl::GetFlag(FLAGS_sequence_stall_limit));
  const std::string listen = absl::GetFlag(FLAGS_listen);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  const int max_bytes = static_cast<int>(absl::GetFlag(FLAGS_max_message_bytes));
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "tessera-worker: cannot listen on " << listen << "\n";
    return 1;
  }
  const std::string host = listen.substr(0, listen.rfind(':'));
  const std::string address = absl::GetFlag(FLAGS_advertise).empty()
                                  ? absl::StrCat(host, ":", port)
                                  : absl::GetFlag(FLAGS_advertise);
  std::string collective_host = absl::GetFlag(FLAGS_collective_host);
  if (collective_host.empty()) {
    collective_host = (host == "0.0.0.0" || host == "[::]") ? "127.0.0.1" : host;
  }

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_bytes);
  args.SetMaxSendMessageSize(max_bytes);
  std::shared_ptr<tessera::v1::Registry::Stub> registry =
      tessera::v1::Registry::NewStub(grpc::CreateCustomChannel(
          absl::GetFlag(FLAGS_coordinator), grpc::InsecureChannelCredentials(), args));
  tessera::v1::RegisterRequest request;
  request.set_address(address);
  request.set_device(device);
  request.set_memory_budget_bytes(absl::GetFlag(FLAGS_memory_budget));
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  request.set_hostname(hostname);
  request.set_pid(getpid());

  auto begin = [&]() {
    tessera::v1::RegisterReply reply = RegisterLoop(*registry, request);
    service.BeginIncarnation(reply.worker_id(), reply.incarnation(),
                             std::make_unique<tessera::RpcStore>(registry, absl::Seconds(60)),
                             collective_host);
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
        std::cerr << "tessera-worker: " << broken.message() << "\n";
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
        reg = begin();  // the coordinator restarted or replaced this incarnation
      }
    }
  });
  heartbeat.detach();
  server->Wait();
  return 0;
}
