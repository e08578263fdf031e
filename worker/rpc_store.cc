#include "worker/rpc_store.h"

#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"
#include "proto/grpc_status.h"

namespace tessera {

void RpcStore::NameCaller(grpc::ClientContext& context) const {
  if (!caller_.empty()) context.AddMetadata("x-tessera-worker", caller_);
}

void RpcStore::set(const std::string& key, const std::vector<char>& data) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(timeout_));
  NameCaller(context);
  v1::StoreSetRequest request;
  request.set_key(key);
  request.set_value(std::string(data.begin(), data.end()));
  v1::StoreSetReply reply;
  grpc::Status s = registry_->StoreSet(&context, request, &reply);
  if (!s.ok()) {
    throw gloo::IoException(absl::StrCat("rendezvous set '", key, "': ", s.error_message()));
  }
}

std::vector<std::string> RpcStore::Get(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout + std::chrono::seconds(5));
  NameCaller(context);
  v1::StoreGetRequest request;
  for (const std::string& k : keys) request.add_keys(k);
  request.set_timeout_ms(timeout.count());
  v1::StoreGetReply reply;
  grpc::Status s = registry_->StoreGet(&context, request, &reply);
  if (!s.ok()) {
    throw gloo::IoException(
        absl::StrCat("rendezvous get '", keys.empty() ? "" : keys[0], "': ", s.error_message()));
  }
  return std::vector<std::string>(reply.values().begin(), reply.values().end());
}

std::vector<char> RpcStore::get(const std::string& key) {
  std::string v = Get({key}, ToChrono())[0];
  return std::vector<char>(v.begin(), v.end());
}

void RpcStore::wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) {
  Get(keys, timeout);
}

}  // namespace tessera
