#ifndef TESSERA_SERVER_RENDEZVOUS_STORE_H_
#define TESSERA_SERVER_RENDEZVOUS_STORE_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tessera {

// The key-value store workers rendezvous through (Gloo's store, NCCL unique ids). Thread-safe.
class RendezvousStore {
 public:
  // Sets `key` to `value`, waking waiters.
  void Set(const std::string& key, std::string value);
  // The values of `keys`, waiting up to `timeout` for all of them to exist; DEADLINE_EXCEEDED
  // naming the first missing key otherwise.
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               absl::Duration timeout);
  // Drops every key that starts with `prefix` (a mesh's keys when it is deleted).
  void ErasePrefix(const std::string& prefix);
  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_SERVER_RENDEZVOUS_STORE_H_
