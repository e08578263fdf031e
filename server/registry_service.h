#ifndef TESSERA_SERVER_REGISTRY_SERVICE_H_
#define TESSERA_SERVER_REGISTRY_SERVICE_H_

#include "server/rendezvous_store.h"
#include "server/worker_registry.h"
#include "tessera/v1/registry.grpc.pb.h"

namespace tessera {

// The worker-facing Registry service: registration, heartbeats and the rendezvous store.
class RegistryService final : public v1::Registry::Service {
 public:
  RegistryService(WorkerRegistry* workers, RendezvousStore* store)
      : workers_(workers), store_(store) {}

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* request,
                        v1::RegisterReply* reply) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* request,
                         v1::HeartbeatReply* reply) override;
  grpc::Status StoreSet(grpc::ServerContext*, const v1::StoreSetRequest* request,
                        v1::StoreSetReply* reply) override;
  grpc::Status StoreGet(grpc::ServerContext* context, const v1::StoreGetRequest* request,
                        v1::StoreGetReply* reply) override;

 private:
  WorkerRegistry* workers_;
  RendezvousStore* store_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_REGISTRY_SERVICE_H_
