#include "server/registry_service.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "proto/grpc_status.h"
#include "proto/tls_files.h"
#include "security/constant_time.h"
#include "security/worker_identity.h"

namespace tessera {

grpc::Status RegistryService::Authenticate(const grpc::ServerContext& context, const char* method,
                                           std::string* identity) {
  // The credential is checked first: a correct one is never refused, whatever strangers on the
  // same host have tried (AuthFailures counts and answers only the failures).
  identity->clear();
  if (!auth_.worker_identities.empty()) {
    const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
    if (auth != nullptr) {
      if (std::optional<std::string> name =
              AcceptedIdentity(PeerIdentities(*auth), auth_.worker_identities)) {
        *identity = *std::move(name);
        return grpc::Status::OK;
      }
    }
  }
  if (!auth_.secret.empty()) {
    const auto& metadata = context.client_metadata();
    auto it = metadata.find(kSecretMetadataKey);
    if (it != metadata.end() &&
        ConstantTimeEqual(absl::string_view(it->second.data(), it->second.size()), auth_.secret)) {
      return grpc::Status::OK;
    }
  }
  const std::string reason =
      auth_.worker_identities.empty()
          ? "the Registry takes calls from workers only: the cluster secret is missing or wrong"
          : absl::StrCat("the Registry takes calls from workers only: no certificate naming '",
                         absl::StrJoin(auth_.worker_identities, "' or '"), "'",
                         auth_.secret.empty() ? "" : " and no valid cluster secret");
  return ToGrpcStatus(auth_failures_.Refuse(AuthFailures::PeerHost(context.peer()),
                                            absl::StrCat("tessera.v1.Registry/", method),
                                            absl::UnauthenticatedError(reason)));
}

grpc::Status RegistryService::CheckBinding(const grpc::ServerContext& context,
                                           const std::string& identity,
                                           const std::string& address) {
  if (identity.empty()) return grpc::Status::OK;  // the secret cannot tell workers apart
  const std::vector<std::string> names = PeerIdentities(*context.auth_context());
  if (!NamesCoverHost(names, AddressHost(address))) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("worker '", identity, "' may not serve at '", address,
                                     "': its certificate names ", absl::StrJoin(names, ", "),
                                     ", not the host of that address"));
  }
  absl::MutexLock lock(&bindings_mu_);
  auto [it, added] = identity_of_address_.try_emplace(address, identity);
  if (it->second != identity) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("the worker at '", address, "' is '", it->second,
                                     "'; worker '", identity, "' may not act for it"));
  }
  return grpc::Status::OK;
}

grpc::Status RegistryService::CheckScope(const grpc::ServerContext& context,
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
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("the rendezvous store serves registered workers only; the "
                                     "caller named itself '",
                                     caller.substr(0, 40), "' (want <worker id>/<incarnation>)"));
  }
  if (grpc::Status s = CheckBinding(context, identity, worker->address); !s.ok()) return s;
  for (const std::string& key : keys) {
    absl::StatusOr<int64_t> mesh = RendezvousStore::MeshOfKey(key);
    if (!mesh.ok()) return ToGrpcStatus(mesh.status());
    if (!member_of_(*mesh, id)) {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          absl::StrCat("worker ", id, " is not a rank of mesh ", *mesh,
                                       ", whose rendezvous key '", key, "' it asked for"));
    }
  }
  return grpc::Status::OK;
}

grpc::Status RegistryService::Register(grpc::ServerContext* context,
                                       const v1::RegisterRequest* request,
                                       v1::RegisterReply* reply) {
  std::string identity;
  if (grpc::Status s = Authenticate(*context, "Register", &identity); !s.ok()) return s;
  if (request->address().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "register needs the worker's address");
  }
  if (grpc::Status s = CheckBinding(*context, identity, request->address()); !s.ok()) return s;
  if (request->device() != "cpu" && request->device().rfind("cuda:", 0) != 0) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("unknown device '", request->device(), "'; expected 'cpu' or 'cuda:N'"));
  }
  *reply = workers_->Register(*request);
  return grpc::Status::OK;
}

grpc::Status RegistryService::Heartbeat(grpc::ServerContext* context,
                                        const v1::HeartbeatRequest* request, v1::HeartbeatReply*) {
  std::string identity;
  if (grpc::Status s = Authenticate(*context, "Heartbeat", &identity); !s.ok()) return s;
  if (!identity.empty()) {
    if (absl::StatusOr<WorkerHandle> worker = workers_->Get(request->worker_id()); worker.ok()) {
      if (grpc::Status s = CheckBinding(*context, identity, worker->address); !s.ok()) return s;
    }
  }
  return ToGrpcStatus(workers_->Heartbeat(*request));
}

grpc::Status RegistryService::StoreSet(grpc::ServerContext* context,
                                       const v1::StoreSetRequest* request, v1::StoreSetReply*) {
  std::string identity;
  if (grpc::Status s = Authenticate(*context, "StoreSet", &identity); !s.ok()) return s;
  if (absl::Status s = store_->CheckEntry(request->key(), request->value()); !s.ok()) {
    return ToGrpcStatus(s);
  }
  if (grpc::Status s = CheckScope(*context, identity, {request->key()}); !s.ok()) return s;
  return ToGrpcStatus(store_->Set(request->key(), request->value()));
}

grpc::Status RegistryService::StoreGet(grpc::ServerContext* context,
                                       const v1::StoreGetRequest* request,
                                       v1::StoreGetReply* reply) {
  std::string identity;
  if (grpc::Status s = Authenticate(*context, "StoreGet", &identity); !s.ok()) return s;
  const std::vector<std::string> keys(request->keys().begin(), request->keys().end());
  if (grpc::Status s = CheckScope(*context, identity, keys); !s.ok()) return s;
  // Never wait past the caller's own deadline.
  absl::Duration timeout = absl::Milliseconds(std::max<int64_t>(request->timeout_ms(), 0));
  const auto left = context->deadline() - std::chrono::system_clock::now();
  timeout = std::min(timeout, absl::FromChrono(left));
  absl::StatusOr<std::vector<std::string>> values = store_->Get(keys, timeout);
  if (!values.ok()) return ToGrpcStatus(values.status());
  for (std::string& v : *values) reply->add_values(std::move(v));
  return grpc::Status::OK;
}

}  // namespace tessera
