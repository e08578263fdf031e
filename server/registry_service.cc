#include "server/registry_service.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "proto/grpc_status.h"
#include "proto/tls_files.h"
#include "security/constant_time.h"
#include "security/worker_identity.h"

namespace tessera {

absl::StatusOr<std::string> RegistryService::Authenticate(const grpc::ServerContext& context,
                                                          const char* method) {
  // The credential is checked first: a correct one is never refused, whatever strangers on the
  // same host have tried (AuthFailures counts and answers only the failures).
  if (!auth_.worker_identities.empty()) {
    const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
    if (auth != nullptr) {
      if (std::optional<std::string> name =
              AcceptedIdentity(PeerIdentities(*auth), auth_.worker_identities)) {
        return *std::move(name);
      }
    }
  }
  if (!auth_.secret.empty()) {
    const auto& metadata = context.client_metadata();
    auto it = metadata.find(kSecretMetadataKey);
    if (it != metadata.end() &&
        ConstantTimeEqual(absl::string_view(it->second.data(), it->second.size()), auth_.secret)) {
      return std::string();
    }
  }
  const std::string reason =
      auth_.worker_identities.empty()
          ? "the Registry takes calls from workers only: the cluster secret is missing or wrong"
          : absl::StrCat("the Registry takes calls from workers only: no certificate naming '",
                         absl::StrJoin(auth_.worker_identities, "' or '"), "'",
                         auth_.secret.empty() ? "" : " and no valid cluster secret");
  return auth_failures_.Refuse(AuthFailures::PeerHost(context.peer()),
                               absl::StrCat("tessera.v1.Registry/", method),
                               absl::UnauthenticatedError(reason));
}

absl::Status RegistryService::CheckBinding(const grpc::ServerContext& context,
                                           const std::string& identity,
                                           const std::string& address) {
  if (identity.empty()) return absl::OkStatus();  // the secret cannot tell workers apart
  const std::vector<std::string> names = PeerIdentities(*context.auth_context());
  if (!NamesCoverHost(names, AddressHost(address))) {
    return absl::PermissionDeniedError(absl::StrCat(
        "worker '", identity, "' may not serve at '", address, "': its certificate names ",
        absl::StrJoin(names, ", "), ", not the host of that address"));
  }
  absl::MutexLock lock(&bindings_mu_);
  auto [it, added] = identity_of_address_.try_emplace(address, identity);
  if (it->second != identity) {
    return absl::PermissionDeniedError(absl::StrCat("the worker at '", address, "' is '",
                                                    it->second, "'; worker '", identity,
                                                    "' may not act for it"));
  }
  return absl::OkStatus();
}

absl::Status RegistryService::CheckScope(const grpc::ServerContext& context,
                                         const std::string& identity,
                                         const std::vector<std::string>& keys) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kWorkerMetadataKey);
  const std::string caller =
      it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
  const std::vector<std::string> parts = absl::StrSplit(caller, '/');
  int64_t id = -1, incarnation = -1;
  absl::StatusOr<WorkerHandle> worker = absl::NotFoundError("");
  if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &id) &&
      absl::SimpleAtoi(parts[1], &incarnation)) {
    worker = workers_->Get(id);
  }
  if (!worker.ok() || worker->incarnation != incarnation) {
    return absl::PermissionDeniedError(
        absl::StrCat("the rendezvous store serves registered workers only; the "
                     "caller named itself '",
                     caller.substr(0, 40), "' (want <worker id>/<incarnation>)"));
  }
  RETURN_IF_ERROR(CheckBinding(context, identity, worker->address));
  for (const std::string& key : keys) {
    ASSIGN_OR_RETURN(const int64_t mesh, RendezvousStore::MeshOfKey(key));
    if (!member_of_(mesh, id)) {
      return absl::PermissionDeniedError(absl::StrCat("worker ", id, " is not a rank of mesh ",
                                                      mesh, ", whose rendezvous key '", key,
                                                      "' it asked for"));
    }
  }
  return absl::OkStatus();
}

grpc::Status RegistryService::Register(grpc::ServerContext* context,
                                       const v1::RegisterRequest* request,
                                       v1::RegisterReply* reply) {
  return ToGrpcStatus(RegisterImpl(*context, *request, *reply));
}

absl::Status RegistryService::RegisterImpl(const grpc::ServerContext& context,
                                           const v1::RegisterRequest& request,
                                           v1::RegisterReply& reply) {
  ASSIGN_OR_RETURN(const std::string identity, Authenticate(context, "Register"));
  if (request.address().empty()) {
    return absl::InvalidArgumentError("register needs the worker's address");
  }
  RETURN_IF_ERROR(CheckBinding(context, identity, request.address()));
  if (request.device() != "cpu" && request.device().rfind("cuda:", 0) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown device '", request.device(), "'; expected 'cpu' or 'cuda:N'"));
  }
  reply = workers_->Register(request);
  return absl::OkStatus();
}

grpc::Status RegistryService::Heartbeat(grpc::ServerContext* context,
                                        const v1::HeartbeatRequest* request, v1::HeartbeatReply*) {
  return ToGrpcStatus(HeartbeatImpl(*context, *request));
}

absl::Status RegistryService::HeartbeatImpl(const grpc::ServerContext& context,
                                            const v1::HeartbeatRequest& request) {
  ASSIGN_OR_RETURN(const std::string identity, Authenticate(context, "Heartbeat"));
  if (!identity.empty()) {
    if (absl::StatusOr<WorkerHandle> worker = workers_->Get(request.worker_id()); worker.ok()) {
      RETURN_IF_ERROR(CheckBinding(context, identity, worker->address));
    }
  }
  return workers_->Heartbeat(request);
}

grpc::Status RegistryService::StoreSet(grpc::ServerContext* context,
                                       const v1::StoreSetRequest* request, v1::StoreSetReply*) {
  return ToGrpcStatus(StoreSetImpl(*context, *request));
}

absl::Status RegistryService::StoreSetImpl(const grpc::ServerContext& context,
                                           const v1::StoreSetRequest& request) {
  ASSIGN_OR_RETURN(const std::string identity, Authenticate(context, "StoreSet"));
  RETURN_IF_ERROR(store_->CheckEntry(request.key(), request.value()));
  RETURN_IF_ERROR(CheckScope(context, identity, {request.key()}));
  return store_->Set(request.key(), request.value());
}

grpc::Status RegistryService::StoreGet(grpc::ServerContext* context,
                                       const v1::StoreGetRequest* request,
                                       v1::StoreGetReply* reply) {
  return ToGrpcStatus(StoreGetImpl(*context, *request, *reply));
}

absl::Status RegistryService::StoreGetImpl(const grpc::ServerContext& context,
                                           const v1::StoreGetRequest& request,
                                           v1::StoreGetReply& reply) {
  ASSIGN_OR_RETURN(const std::string identity, Authenticate(context, "StoreGet"));
  const std::vector<std::string> keys(request.keys().begin(), request.keys().end());
  RETURN_IF_ERROR(CheckScope(context, identity, keys));
  // Never wait past the caller's own deadline.
  absl::Duration timeout = absl::Milliseconds(std::max<int64_t>(request.timeout_ms(), 0));
  const auto left = context.deadline() - std::chrono::system_clock::now();
  timeout = std::min(timeout, absl::FromChrono(left));
  ASSIGN_OR_RETURN(std::vector<std::string> values, store_->Get(keys, timeout));
  for (std::string& v : values) reply.add_values(std::move(v));
  return absl::OkStatus();
}

}  // namespace tessera
