#ifndef TESSERA_WORKER_COMMAND_SEQUENCER_H_
#define TESSERA_WORKER_COMMAND_SEQUENCER_H_

#include <cstdint>
#include <set>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tessera {

// Admits commands strictly in sequence order (1, 2, 3, ...), one at a time: the order every worker
// of a mesh agrees on, which keeps collectives from deadlocking. A gap that stays open longer than
// `gap_timeout` (a command lost on its way) is skipped so that one lost RPC cannot stall a worker.
// Thread-safe.
class CommandSequencer {
 public:
  explicit CommandSequencer(absl::Duration gap_timeout) : gap_timeout_(gap_timeout) {}

  // Blocks until `sequence` may run; DEADLINE_EXCEEDED at `deadline`, FAILED_PRECONDITION for a
  // sequence that already ran. On OK the caller must call Done(sequence).
  absl::Status Acquire(int64_t sequence, absl::Time deadline);
  void Done(int64_t sequence);
  // The coordinator will not use `sequence`: the commands after it stop waiting for it, and a
  // command waiting for it fails. Releasing a number that ran or is running does nothing.
  void Release(int64_t sequence);
  // Starts again at 1 (a new incarnation).
  void Reset();

 private:
  // Moves past released numbers at the head of the order.
  void SkipReleased() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration gap_timeout_;
  absl::Mutex mu_;
  int64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  std::set<int64_t> released_ ABSL_GUARDED_BY(mu_);  // numbers past next_ that will not come
  absl::Time progress_ ABSL_GUARDED_BY(mu_) = absl::Now();
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMMAND_SEQUENCER_H_
