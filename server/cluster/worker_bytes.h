#ifndef TESSERA_SERVER_CLUSTER_WORKER_BYTES_H_
#define TESSERA_SERVER_CLUSTER_WORKER_BYTES_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace tessera {

// The bytes the coordinator has accepted onto each worker, by worker id: DTensor shards and every
// mesh's local tensors, as the workers will hold them once the commands accepted so far have run.
// Each holding has a key of its own on its worker (a DTensor's or a mesh's local tensor's name),
// so that writing a name again replaces its bytes. Work that would take a worker past its memory
// budget is refused here, before anything is sent; the worker's own check stays the last line,
// for the temporaries and scratch buffers of running commands, which are not counted here.
// Thread-safe.
class WorkerBytes {
 public:
  // `bytes` to hold under `key` on `worker`, whose memory budget is `budget` (0: none).
  struct Holding {
    int64_t worker = 0;
    int64_t budget = 0;
    std::string key;
    int64_t bytes = 0;
  };

  // Enters every holding (each replacing what its key held on its worker) if no worker whose
  // bytes grow passes its budget; otherwise RESOURCE_EXHAUSTED naming the first worker that would,
  // what it holds and its budget ("<what> needs N bytes on worker W, which holds H of its B-byte
  // budget"), and nothing changes. Sums are checked: a worker whose total would pass int64 is
  // RESOURCE_EXHAUSTED whatever its budget, and negative bytes are INVALID_ARGUMENT.
  absl::Status Hold(std::span<const Holding> holdings, absl::string_view what);
  // Enters a holding without a check: bytes the workers hold already (e.g. a tensor a failed
  // command left as it was). Counts saturate: a worker's total stays within [0, int64 max].
  void Set(const Holding& holding);
  // Forgets `key` on `worker`.
  void Release(int64_t worker, const std::string& key);
  // Bytes held on `worker`.
  int64_t Held(int64_t worker) const;

 private:
  struct Worker {
    int64_t total = 0;
    std::map<std::string, int64_t> keys;
  };

  // Replaces what `holding.key` held on its worker by `holding.bytes` (clamped to what fits).
  void Enter(const Holding& holding) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<int64_t, Worker> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_SERVER_CLUSTER_WORKER_BYTES_H_
