#ifndef TESSERA_WORKER_RPC_STORE_H_
#define TESSERA_WORKER_RPC_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"
#include "tessera/v1/registry.grpc.pb.h"

namespace tessera {

// Gloo's rendezvous store backed by the coordinator's key-value store (Registry.StoreSet and
// StoreGet). Throws gloo::IoException on failure, as Gloo's stores do; the communicator catches it.
class RpcStore final : public gloo::rendezvous::Store {
 public:
  // `caller`: "<worker id>/<incarnation>", how this worker names itself to the store.
  RpcStore(std::shared_ptr<v1::Registry::Stub> registry, absl::Duration timeout,
           std::string caller = "")
      : registry_(std::move(registry)), timeout_(timeout), caller_(std::move(caller)) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, ToChrono()); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::chrono::milliseconds ToChrono() const { return absl::ToChronoMilliseconds(timeout_); }
  std::vector<std::string> Get(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout);
  // Names this worker on a call to the store.
  void NameCaller(grpc::ClientContext& context) const;

  std::shared_ptr<v1::Registry::Stub> registry_;
  const absl::Duration timeout_;
  const std::string caller_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_RPC_STORE_H_
