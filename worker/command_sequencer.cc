#include "worker/command_sequencer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tessera {

absl::Status CommandSequencer::Acquire(int64_t sequence, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  const int64_t generation = generation_;
  while (true) {
    if (generation_ != generation) {
      // The coordinator restarted, or took the worker back after counting it dead: the command
      // was cut short by that, and may be tried again (UNAVAILABLE, as any call in flight then).
      return absl::UnavailableError(absl::StrCat(
          "the worker started a new incarnation (it registered with the coordinator again) while "
          "command sequence ",
          sequence, " waited; try again"));
    }
    if (!broken_.ok()) return broken_;
    if (sequence < next_ || released_.count(sequence) > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "command sequence ", sequence, " was already used or released (next is ", next_, ")"));
    }
    if (sequence == next_ && !running_) {
      running_ = true;
      Progressed();
      return absl::OkStatus();
    }
    // Wait for the command running before it, or for the missing next_ to be used or released;
    // wake on any progress to look again.
    if (!running_ && gap_since_ == absl::InfiniteFuture()) gap_since_ = absl::Now();
    const int64_t seen = progress_;
    auto changed = [this, sequence, generation, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return progress_ != seen || generation_ != generation || !broken_.ok() || sequence < next_ ||
             released_.count(sequence) > 0;
    };
    const absl::Time stall_at = running_ ? absl::InfiniteFuture() : gap_since_ + stall_limit_;
    if (mu_.AwaitWithDeadline(absl::Condition(&changed), std::min(deadline, stall_at))) continue;
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      // Its command is answered now and will not run: the ones after it need not wait for it.
      if (sequence > next_) released_.insert(sequence);
      return absl::DeadlineExceededError(absl::StrCat(
          "command sequence ", sequence, " waited past its deadline for its turn: sequence ", next_,
          running_ ? " is still running" : " was neither used nor released by the coordinator"));
    }
    if (!running_ && now >= gap_since_ + stall_limit_) {
      broken_ = absl::UnavailableError(absl::StrCat(
          "this worker's command order is stuck: sequence ", next_,
          " was neither used nor released by the coordinator within ",
          absl::FormatDuration(stall_limit_),
          " while later commands waited; the worker refuses commands until it registers again"));
      return broken_;
    }
  }
}

void CommandSequencer::Done(int64_t sequence) {
  absl::MutexLock lock(&mu_);
  if (sequence != next_ || !running_) return;
  ++next_;
  running_ = false;
  SkipReleased();
  Progressed();
}

void CommandSequencer::Release(int64_t sequence) {
  absl::MutexLock lock(&mu_);
  if (sequence < next_ || (sequence == next_ && running_)) return;  // used, or in use
  released_.insert(sequence);
  if (sequence == next_) {
    SkipReleased();
    Progressed();
  }
}

void CommandSequencer::Reset() {
  absl::MutexLock lock(&mu_);
  ++generation_;
  next_ = 1;
  running_ = false;
  released_.clear();
  broken_ = absl::OkStatus();
  Progressed();
}

absl::Status CommandSequencer::broken() const {
  absl::MutexLock lock(&mu_);
  return broken_;
}

int64_t CommandSequencer::next() const {
  absl::MutexLock lock(&mu_);
  return next_;
}

void CommandSequencer::SkipReleased() {
  while (!released_.empty() && *released_.begin() <= next_) {
    if (*released_.begin() == next_) ++next_;
    released_.erase(released_.begin());
  }
}

void CommandSequencer::Progressed() {
  ++progress_;
  gap_since_ = absl::InfiniteFuture();
}

}  // namespace tessera
