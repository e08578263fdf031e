#ifndef TESSERA_SERVER_CLUSTER_SEQUENCE_LEASE_H_
#define TESSERA_SERVER_CLUSTER_SEQUENCE_LEASE_H_

#include <cstdint>

#include "server/cluster/worker_registry.h"

namespace tessera {

// Where a lease gives back a number it did not use (the Dispatcher, which tells the worker).
class SequenceReleaser {
 public:
  virtual void ReleaseUnused(const WorkerHandle& worker, int64_t sequence) = 0;

 protected:
  ~SequenceReleaser() = default;
};

// A command sequence reserved on one worker for one command or stream (Dispatcher::Reserve). The
// worker runs its commands strictly in sequence order and never skips a number, so every reserved
// number must reach it: either the command or stream it was reserved for uses it (MarkUsed, once
// the worker has answered), or it is released to the worker: by Release, or when the lease ends
// unused (the call failed, timed out or lost its client first). Releasing a number the worker did
// use is harmless. Move-only; not thread-safe.
class SequenceLease {
 public:
  SequenceLease() = default;
  // A lease of `sequence` on `worker`; a negative sequence (a stale handle) is never sent.
  SequenceLease(SequenceReleaser* releaser, WorkerHandle worker, int64_t sequence);
  SequenceLease(SequenceLease&& other) noexcept { *this = std::move(other); }
  SequenceLease& operator=(SequenceLease&& other) noexcept;
  SequenceLease(const SequenceLease&) = delete;
  SequenceLease& operator=(const SequenceLease&) = delete;
  ~SequenceLease() { Release(); }

  int64_t sequence() const { return sequence_; }
  const WorkerHandle& worker() const { return worker_; }
  // True until it is used or released.
  bool held() const { return releaser_ != nullptr; }

  // The worker has answered the command or stream: the number is spent.
  void MarkUsed() { releaser_ = nullptr; }
  // Tells the worker now that the number will not be used (no-op unless held).
  void Release();
  // Ends the lease without a word to the worker, for a caller that releases the number itself
  // (several at once); returns it.
  int64_t TakeForRelease();

 private:
  SequenceReleaser* releaser_ = nullptr;  // null once used or released
  WorkerHandle worker_;
  int64_t sequence_ = -1;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_CLUSTER_SEQUENCE_LEASE_H_
