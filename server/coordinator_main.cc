// tessera-coordinator: the control plane. Serves the client-facing services (meshes,
// collectives, DTensors) and the worker-facing Registry (with the rendezvous store) on one port,
// plus gRPC health and reflection.

#include <malloc.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "core/release_mode.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/collective_service.h"
#include "server/dispatcher.h"
#include "server/dtensor_service.h"
#include "server/dtensor_table.h"
#include "server/mesh_reformer.h"
#include "server/mesh_service.h"
#include "server/mesh_table.h"
#include "server/registry_service.h"
#include "server/rendezvous_store.h"
#include "server/worker_bytes.h"
#include "server/worker_registry.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "address to serve on (host:port; port 0 picks one)");
ABSL_FLAG(std::string, secret, "", "shared secret sent to workers; default $TESSERA_SECRET");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Milliseconds(500),
          "how often workers heartbeat");
ABSL_FLAG(absl::Duration, dead_after, absl::Seconds(3),
          "a worker silent for this long is dead and its meshes are broken");
ABSL_FLAG(absl::Duration, client_grace, absl::Seconds(60),
          "a client holding a lease that makes no call for this long loses its tensors");
ABSL_FLAG(int64_t, max_message_bytes, 64 << 20, "largest gRPC message accepted or sent");

int main(int argc, char** argv) {
  tessera::UseReleaseMutexes();
  absl::SetProgramUsageMessage("tessera-coordinator --listen=HOST:PORT [--secret=S]");
  absl::ParseCommandLine(argc, argv);
  std::string secret = absl::GetFlag(FLAGS_secret);
  if (secret.empty() && std::getenv("TESSERA_SECRET") != nullptr)
    secret = std::getenv("TESSERA_SECRET");
  if (secret.empty()) {
    std::cerr << "tessera-coordinator: a shared secret is required (--secret or $TESSERA_SECRET)\n";
    return 2;
  }

  // The coordinator's large allocations are the 1 MiB windows of tensor streams, freed by other
  // threads soon after. With glibc's defaults they land in per-thread arenas and its mmap threshold
  // grows past them, so freed windows stay in the heap and the process grows with every stream; a
  // fixed threshold maps each window on its own and returns it to the kernel when it is freed.
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  mallopt(M_ARENA_MAX, 1);

  tessera::WorkerRegistry workers(absl::GetFlag(FLAGS_heartbeat_interval),
                                  absl::GetFlag(FLAGS_dead_after));
  tessera::RendezvousStore store;
  tessera::Dispatcher dispatcher(&workers, secret);
  tessera::RegistryService registry_service(&workers, &store);
  tessera::MeshTable meshes(&workers);
  tessera::WorkerBytes ledger;  // local tensors and DTensor shards, against each worker's budget
  tessera::CollectiveService collective_service(&meshes, &dispatcher);
  tessera::DTensorTable tensors(&meshes, &dispatcher, &ledger);
  tessera::DTensorService dtensor_service(&tensors, absl::GetFlag(FLAGS_client_grace));
  tessera::MeshReformer reformer(&meshes, &dispatcher, &store);
  dispatcher.ObserveBroken([&reformer](const tessera::WorkerHandle& worker,
                                       const tessera::v1::BrokenCommunicator& broken) {
    reformer.OnBroken(worker, broken);
  });
  tessera::MeshService mesh_service(&meshes, &dispatcher, &store, &reformer, &ledger,
                                    {&collective_service, &tensors});

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), grpc::InsecureServerCredentials(), &port);
  const int max_bytes = static_cast<int>(absl::GetFlag(FLAGS_max_message_bytes));
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  builder.RegisterService(&registry_service);
  builder.RegisterService(&mesh_service);
  builder.RegisterService(&collective_service);
  builder.RegisterService(&dtensor_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "tessera-coordinator: cannot listen on " << absl::GetFlag(FLAGS_listen) << "\n";
    return 1;
  }
  // The first line on stdout is the bound port, for launchers that asked for port 0.
  std::cout << "tessera-coordinator listening on port " << port << std::endl;
  server->Wait();
  return 0;
}
