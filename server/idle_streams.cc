#include "server/idle_streams.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"

namespace tessera {

IdleStreams::IdleStreams(absl::Duration limit) : limit_(limit) {
  if (limit_ <= absl::ZeroDuration() || limit_ == absl::InfiniteDuration()) return;
  checker_ = std::thread([this] { Run(); });
}

IdleStreams::~IdleStreams() {
  stopping_.Notify();
  if (checker_.joinable()) checker_.join();
}

std::string IdleStreams::Message(const Call& call) const {
  return absl::StrCat(call.what, " stream sent nothing for ", absl::FormatDuration(limit_),
                      " (the coordinator's --stream_idle_timeout); the call was ended and what "
                      "it held released");
}

void IdleStreams::Run() {
  const absl::Duration period = std::clamp(limit_ / 4, absl::Milliseconds(10), absl::Seconds(1));
  while (!stopping_.WaitForNotificationWithTimeout(period)) {
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&mu_);
    for (auto& [id, call] : calls_) {
      if (call.expired || !call.waiting || now - call.since < limit_) continue;
      call.expired = true;
      // Under the lock, so the call cannot end meanwhile (~Watch takes the lock first). Sends the
      // client this status; the handler's pending Read returns false.
      const std::string message = Message(call);
      grpc_call_cancel_with_status(call.call, GRPC_STATUS_DEADLINE_EXCEEDED, message.c_str(),
                                   nullptr);
    }
  }
}

std::unique_ptr<IdleStreams::Watch> IdleStreams::Start(grpc::ServerContext& context,
                                                       std::string what) {
  absl::MutexLock lock(&mu_);
  const int64_t id = next_id_++;
  if (checker_.joinable()) {
    Call& call = calls_[id];
    call.call = context.c_call();
    call.what = std::move(what);
  }
  return std::unique_ptr<Watch>(new Watch(this, id));
}

IdleStreams::Watch::~Watch() {
  absl::MutexLock lock(&owner_->mu_);
  owner_->calls_.erase(id_);
}

void IdleStreams::Watch::Waiting(bool waiting) {
  absl::MutexLock lock(&owner_->mu_);
  auto it = owner_->calls_.find(id_);
  if (it == owner_->calls_.end()) return;
  it->second.waiting = waiting;
  it->second.since = absl::Now();
}

bool IdleStreams::Watch::expired() const {
  absl::MutexLock lock(&owner_->mu_);
  auto it = owner_->calls_.find(id_);
  return it != owner_->calls_.end() && it->second.expired;
}

absl::Status IdleStreams::Watch::ExpiredError() const {
  absl::MutexLock lock(&owner_->mu_);
  auto it = owner_->calls_.find(id_);
  return absl::DeadlineExceededError(it == owner_->calls_.end() ? "stream idle"
                                                                : owner_->Message(it->second));
}

}  // namespace tessera
