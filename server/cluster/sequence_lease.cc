#include "server/cluster/sequence_lease.h"

#include <utility>

namespace tessera {

SequenceLease::SequenceLease(SequenceReleaser* releaser, WorkerHandle worker, int64_t sequence)
    : releaser_(sequence > 0 ? releaser : nullptr),
      worker_(std::move(worker)),
      sequence_(sequence) {}

SequenceLease& SequenceLease::operator=(SequenceLease&& other) noexcept {
  if (this != &other) {
    Release();
    releaser_ = std::exchange(other.releaser_, nullptr);
    worker_ = std::move(other.worker_);
    sequence_ = other.sequence_;
  }
  return *this;
}

void SequenceLease::Release() {
  if (releaser_ == nullptr) return;
  std::exchange(releaser_, nullptr)->ReleaseUnused(worker_, sequence_);
}

int64_t SequenceLease::TakeForRelease() {
  releaser_ = nullptr;
  return sequence_;
}

}  // namespace tessera
