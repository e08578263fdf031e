#include "server/sequence_lease.h"

#include <utility>

#include "server/dispatcher.h"

namespace tessera {

SequenceLease::SequenceLease(Dispatcher* dispatcher, WorkerHandle worker, int64_t sequence)
    : dispatcher_(sequence > 0 ? dispatcher : nullptr),
      worker_(std::move(worker)),
      sequence_(sequence) {}

SequenceLease& SequenceLease::operator=(SequenceLease&& other) noexcept {
  if (this != &other) {
    Release();
    dispatcher_ = std::exchange(other.dispatcher_, nullptr);
    worker_ = std::move(other.worker_);
    sequence_ = other.sequence_;
  }
  return *this;
}

void SequenceLease::Release() {
  if (dispatcher_ == nullptr) return;
  std::exchange(dispatcher_, nullptr)->Release(worker_, {sequence_});
}

int64_t SequenceLease::TakeForRelease() {
  dispatcher_ = nullptr;
  return sequence_;
}

}  // namespace tessera
