#include "security/idle_streams.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"

namespace tessera {

IdleStreams::IdleStreams(absl::Duration limit, std::string flag)
    : limit_(limit), flag_(std::move(flag)) {
  if (limit_ <= absl::ZeroDuration() || limit_ == absl::InfiniteDuration()) return;
  checker_ = std::thread([this] { Run(); });
}

IdleStreams::~IdleStreams() {
  stopping_.Notify();
  if (checker_.joinable()) checker_.join();
}

std::string IdleStreams::Message(const Call& call) const {
  return absl::StrCat(
      call.what, call.writing ? " stream's client took nothing for " : " stream sent nothing for ",
      absl::FormatDuration(limit_), " (", flag_, "); the call was ended and what it held released");
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

std::unique_ptr<IdleStreams::Watch> IdleStreams::Start(const grpc::ServerContext& context,
                                                       std::string what) {
  absl::MutexLock lock(&mu_);
  const int64_t id = next_id_++;
  if (checker_.joinable()) {
    Call& call = calls_[id];
    // Only to cancel it: c_call() changes nothing, though gRPC declares it non-const.
    call.call = const_cast<grpc::ServerContext&>(context).c_call();
    call.what = std::move(what);
  }
  return std::unique_ptr<Watch>(new Watch(this, id));
}

IdleStreams::Watch::~Watch() {
  absl::MutexLock lock(&owner_->mu_);
  owner_->calls_.erase(id_);
}

void IdleStreams::Watch::Waiting(bool waiting, bool writing) {
  absl::MutexLock lock(&owner_->mu_);
  auto it = owner_->calls_.find(id_);
  if (it == owner_->calls_.end()) return;
  it->second.waiting = waiting;
  if (waiting) it->second.writing = writing;  // kept after, for the message
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
