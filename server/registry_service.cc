#include "server/registry_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "proto/grpc_status.h"

namespace tessera {

grpc::Status RegistryService::Register(grpc::ServerContext*, const v1::RegisterRequest* request,
                                       v1::RegisterReply* reply) {
  if (request->address().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "register needs the worker's address");
  }
  if (request->device() != "cpu" && request->device().rfind("cuda:", 0) != 0) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("unknown device '", request->device(), "'; expected 'cpu' or 'cuda:N'"));
  }
  *reply = workers_->Register(*request);
  return grpc::Status::OK;
}

grpc::Status RegistryService::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* request,
                                        v1::HeartbeatReply*) {
  return ToGrpcStatus(workers_->Heartbeat(*request));
}

grpc::Status RegistryService::StoreSet(grpc::ServerContext*, const v1::StoreSetRequest* request,
                                       v1::StoreSetReply*) {
  return ToGrpcStatus(store_->Set(request->key(), request->value()));
}

grpc::Status RegistryService::StoreGet(grpc::ServerContext* context,
                                       const v1::StoreGetRequest* request,
                                       v1::StoreGetReply* reply) {
  // Never wait past the caller's own deadline.
  absl::Duration timeout = absl::Milliseconds(std::max<int64_t>(request->timeout_ms(), 0));
  const auto left = context->deadline() - std::chrono::system_clock::now();
  timeout = std::min(timeout, absl::FromChrono(left));
  absl::StatusOr<std::vector<std::string>> values = store_->Get(
      std::vector<std::string>(request->keys().begin(), request->keys().end()), timeout);
  if (!values.ok()) return ToGrpcStatus(values.status());
  for (std::string& v : *values) reply->add_values(std::move(v));
  return grpc::Status::OK;
}

}  // namespace tessera
