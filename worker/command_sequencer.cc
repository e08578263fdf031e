#include "worker/command_sequencer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tessera {

absl::Status CommandSequencer::Acquire(int64_t sequence, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (true) {
    if (sequence < next_ || released_.count(sequence) > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "command sequence ", sequence, " already ran or was skipped (next is ", next_, ")"));
    }
    if (sequence == next_ && !running_) {
      running_ = true;
      return absl::OkStatus();
    }
    // Only the command waiting right after a stalled gap may skip it.
    const absl::Time gap_expires = progress_ + gap_timeout_;
    const absl::Time wake = std::min(deadline, gap_expires);
    auto ready = [this, sequence]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return sequence < next_ || released_.count(sequence) > 0 || (sequence == next_ && !running_);
    };
    if (mu_.AwaitWithDeadline(absl::Condition(&ready), wake)) continue;
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("command sequence ", sequence,
                                                      " waited for its turn (at ", next_,
                                                      ") past its deadline"));
    }
    if (!running_ && now >= progress_ + gap_timeout_ && sequence > next_) {
      next_ = sequence;  // the commands in between never arrived
      progress_ = now;
    }
  }
}

void CommandSequencer::Done(int64_t sequence) {
  absl::MutexLock lock(&mu_);
  if (sequence == next_) {
    ++next_;
    running_ = false;
    SkipReleased();
    progress_ = absl::Now();
  }
}

void CommandSequencer::Release(int64_t sequence) {
  absl::MutexLock lock(&mu_);
  if (sequence < next_ || (sequence == next_ && running_)) return;  // used, or in use
  released_.insert(sequence);
  if (sequence == next_) {
    SkipReleased();
    progress_ = absl::Now();
  }
}

void CommandSequencer::SkipReleased() {
  while (!released_.empty() && *released_.begin() <= next_) {
    if (*released_.begin() == next_) ++next_;
    released_.erase(released_.begin());
  }
}

void CommandSequencer::Reset() {
  absl::MutexLock lock(&mu_);
  next_ = 1;
  running_ = false;
  released_.clear();
  progress_ = absl::Now();
}

}  // namespace tessera
