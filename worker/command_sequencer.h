#ifndef TESSERA_WORKER_COMMAND_SEQUENCER_H_
#define TESSERA_WORKER_COMMAND_SEQUENCER_H_

#include <cstdint>
#include <set>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tessera {

// Admits commands strictly in sequence order (1, 2, 3, ...), one at a time: the order every worker
// of a mesh agrees on, which keeps collectives from deadlocking. Batched commands and direct
// uploads and downloads share the one order.
//
// It never skips a number on a timer. The coordinator accounts for every number it hands out (see
// Dispatcher::Reserve): each is either used by the command or stream it was reserved for, or
// released (Release) once the call that reserved it ended without using it, so a command waits
// only for numbers that are on their way. A number that is neither used nor released (the release
// was lost) holds the commands behind it: each fails DEADLINE_EXCEEDED at its own deadline, and
// once such a gap has held commands up for `stall_limit` the sequencer is broken: every waiting
// and later command fails UNAVAILABLE with the reason, until Reset (the worker then registers
// again as a new incarnation, which its coordinator sees as a restart). Thread-safe.
class CommandSequencer {
 public:
  explicit CommandSequencer(absl::Duration stall_limit) : stall_limit_(stall_limit) {}

  // Blocks until `sequence` may run; on OK the caller must call Done(sequence). Otherwise
  // FAILED_PRECONDITION for a number already used or released, DEADLINE_EXCEEDED at `deadline`
  // (the number then counts as released: its command has been answered), UNAVAILABLE once broken
  // or when Reset while waiting.
  absl::Status Acquire(int64_t sequence, absl::Time deadline);
  // Ends the turn of `sequence`, which Acquire admitted.
  void Done(int64_t sequence);
  // The coordinator will not use `sequence`: the commands after it stop waiting for it, and a
  // command waiting for it fails. Releasing a number that ran or is running does nothing.
  void Release(int64_t sequence);
  // Starts again at 1 (a new incarnation), whole again.
  void Reset();

  // OK, or why the sequencer is broken.
  absl::Status broken() const;
  // The number whose turn is next (or running).
  int64_t next() const;

 private:
  // Moves past released numbers at the head of the order.
  void SkipReleased() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records that the head of the order moved: a gap, if any, starts anew.
  void Progressed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration stall_limit_;
  mutable absl::Mutex mu_;
  int64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  std::set<int64_t> released_ ABSL_GUARDED_BY(mu_);  // numbers past next_ that will not come
  // Since when a command has waited for next_, which has not arrived; InfiniteFuture if none has.
  absl::Time gap_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  int64_t progress_ ABSL_GUARDED_BY(mu_) = 0;    // counts moves of the head of the order
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // counts Resets
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMMAND_SEQUENCER_H_
