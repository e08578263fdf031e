#ifndef TESSERA_SERVER_CLUSTER_RENDEZVOUS_STORE_H_
#define TESSERA_SERVER_CLUSTER_RENDEZVOUS_STORE_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tessera {

// What the rendezvous store holds at most.
struct RendezvousLimits {
  int64_t max_value_bytes = 1 << 20;  // One value (Gloo's addresses and NCCL ids are < 1 KiB).
  int64_t max_key_bytes = 512;        // One key.
  int64_t max_keys_per_mesh = 4096;   // Keys under one mesh's prefix ("mesh/<id>/").
  int64_t max_keys = 1 << 16;         // Keys in all.
};

// The key-value store workers rendezvous through (Gloo's store, NCCL unique ids): every key lives
// under a mesh's prefix, "mesh/<id>/", and the store is bounded by RendezvousLimits. Thread-safe.
class RendezvousStore {
 public:
  explicit RendezvousStore(RendezvousLimits limits = {}) : limits_(limits) {}

  // The mesh id of a key "mesh/<id>/<rest>" (rest non-empty); INVALID_ARGUMENT naming the key
  // otherwise.
  static absl::StatusOr<int64_t> MeshOfKey(const std::string& key);

  // OK when `key` is under a mesh's prefix and `key` and `value` are within RendezvousLimits;
  // INVALID_ARGUMENT or RESOURCE_EXHAUSTED as Set otherwise.
  absl::Status CheckEntry(const std::string& key, const std::string& value) const;

  // Sets `key` to `value`, waking waiters. INVALID_ARGUMENT for a key outside every mesh's prefix;
  // RESOURCE_EXHAUSTED, naming the bound, for a key or value past RendezvousLimits or a new key
  // past the mesh's or the store's key count; nothing is stored then.
  absl::Status Set(const std::string& key, std::string value);
  // The values of `keys`, waiting up to `timeout` for all of them to exist; DEADLINE_EXCEEDED
  // naming the first missing key otherwise.
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               absl::Duration timeout);
  // Drops every key that starts with `prefix` (a mesh's keys when it is deleted).
  void ErasePrefix(const std::string& prefix);
  size_t size() const;

 private:
  const RendezvousLimits limits_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, int64_t> keys_per_mesh_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_SERVER_CLUSTER_RENDEZVOUS_STORE_H_
