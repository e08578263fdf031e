#ifndef TESSERA_SERVER_REGISTRY_SERVICE_H_
#define TESSERA_SERVER_REGISTRY_SERVICE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "security/auth_failures.h"
#include "server/cluster/rendezvous_store.h"
#include "server/cluster/worker_registry.h"
#include "tessera/v1/registry.grpc.pb.h"

namespace tessera {

// Who may call the Registry: a caller whose verified TLS certificate carries a name that
// `worker_identities` admits (AcceptedIdentity: exact names, or "prefix*" patterns), or one that
// sends `secret` (when set) in the kSecretMetadataKey metadata entry.
struct WorkerAuth {
  std::string secret;
  std::vector<std::string> worker_identities;
};

// The metadata entry in which a worker names itself to the rendezvous store: "<id>/<incarnation>".
inline constexpr char kWorkerMetadataKey[] = "x-tessera-worker";

// The worker-facing Registry service: registration, heartbeats and the rendezvous store. Every
// call must authenticate as a worker (WorkerAuth; UNAUTHENTICATED otherwise, logged and limited
// per peer host by AuthFailures); the store's keys are scoped to the meshes of the calling worker
// (PERMISSION_DENIED outside them). A worker known by its certificate is bound to its address: it
// registers only an address its certificate names the host of, an address first registered by
// one identity is that identity's, and heartbeats and store calls for a worker come from the
// identity its address is bound to (PERMISSION_DENIED otherwise), so that one worker cannot pose
// as another.
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
  // The handlers' bodies, each answered through ToGrpcStatus.
  absl::Status RegisterImpl(const grpc::ServerContext& context, const v1::RegisterRequest& request,
                            v1::RegisterReply& reply);
  absl::Status HeartbeatImpl(const grpc::ServerContext& context,
                             const v1::HeartbeatRequest& request);
  absl::Status StoreSetImpl(const grpc::ServerContext& context, const v1::StoreSetRequest& request);
  absl::Status StoreGetImpl(const grpc::ServerContext& context, const v1::StoreGetRequest& request,
                            v1::StoreGetReply& reply);
  // The caller's admitted certificate name when it authenticates as a worker (WorkerAuth), or ""
  // for a caller known by the secret; refused (AuthFailures) otherwise.
  absl::StatusOr<std::string> Authenticate(const grpc::ServerContext& context, const char* method);
  // OK when a caller known by `identity` ("" for the secret: any) may act for the worker at
  // `address`: its certificate names the address's host, and the address is bound to `identity`
  // (bound now when it is not yet, as after a coordinator restart).
  absl::Status CheckBinding(const grpc::ServerContext& context, const std::string& identity,
                            const std::string& address);
  // OK when the caller is a registered worker's current incarnation (kWorkerMetadataKey), may act
  // for it (CheckBinding), and is a rank of the mesh of every key in `keys`.
  absl::Status CheckScope(const grpc::ServerContext& context, const std::string& identity,
                          const std::vector<std::string>& keys);

  WorkerRegistry* workers_;
  RendezvousStore* store_;
  const WorkerAuth auth_;
  const std::function<bool(int64_t, int64_t)> member_of_;
  AuthFailures auth_failures_{"coordinator registry"};
  absl::Mutex bindings_mu_;
  // Worker address -> the certificate identity that registered it.
  absl::flat_hash_map<std::string, std::string> identity_of_address_ ABSL_GUARDED_BY(bindings_mu_);
};

}  // namespace tessera

#endif  // TESSERA_SERVER_REGISTRY_SERVICE_H_
