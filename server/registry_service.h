#ifndef TESSERA_SERVER_REGISTRY_SERVICE_H_
#define TESSERA_SERVER_REGISTRY_SERVICE_H_

#include <functional>
#include <string>

#include "security/auth_failures.h"
#include "server/rendezvous_store.h"
#include "server/worker_registry.h"
#include "tessera/v1/registry.grpc.pb.h"

namespace tessera {

// Who may call the Registry: a caller whose verified TLS certificate names `worker_identity`
// (when set), or one that sends `secret` (when set) in the kSecretMetadataKey metadata entry.
struct WorkerAuth {
  std::string secret;
  std::string worker_identity;
};

// The metadata entry in which a worker names itself to the rendezvous store: "<id>/<incarnation>".
inline constexpr char kWorkerMetadataKey[] = "x-tessera-worker";

// The worker-facing Registry service: registration, heartbeats and the rendezvous store. Every
// call must authenticate as a worker (WorkerAuth; UNAUTHENTICATED otherwise, logged and limited
// per peer host by AuthFailures); the store's keys are scoped to the meshes of the calling worker
// (PERMISSION_DENIED outside them).
class RegistryService final : public v1::Registry::Service {
 public:
  // `member_of(mesh, worker)`: whether worker `worker` is a rank of mesh `mesh`.
  RegistryService(WorkerRegistry* workers, RendezvousStore* store, WorkerAuth auth,
                  std::function<bool(int64_t mesh, int64_t worker)> member_of)
      : workers_(workers),
        store_(store),
        auth_(std::move(auth)),
        member_of_(std::move(member_of)) {}

  grpc::Status Register(grpc::ServerContext* context, const v1::RegisterRequest* request,
                        v1::RegisterReply* reply) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatReply* reply) override;
  grpc::Status StoreSet(grpc::ServerContext* context, const v1::StoreSetRequest* request,
                        v1::StoreSetReply* reply) override;
  grpc::Status StoreGet(grpc::ServerContext* context, const v1::StoreGetRequest* request,
                        v1::StoreGetReply* reply) override;

 private:
  // OK when the caller authenticates as a worker (WorkerAuth).
  grpc::Status Authenticate(const grpc::ServerContext& context, const char* method);
  // OK when the caller is a registered worker's current incarnation (kWorkerMetadataKey) and a
  // rank of the mesh of every key in `keys`.
  grpc::Status CheckScope(const grpc::ServerContext& context,
                          const std::vector<std::string>& keys) const;

  WorkerRegistry* workers_;
  RendezvousStore* store_;
  const WorkerAuth auth_;
  const std::function<bool(int64_t, int64_t)> member_of_;
  AuthFailures auth_failures_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_REGISTRY_SERVICE_H_
