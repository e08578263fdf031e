#include "worker/incarnation_gate.h"

#include "absl/strings/str_cat.h"

namespace tessera {

void IncarnationGate::BeginRegistering() {
  absl::MutexLock lock(&mu_);
  registering_ = true;
}

void IncarnationGate::Take(int64_t incarnation) {
  absl::MutexLock lock(&mu_);
  current_ = incarnation;
  registering_ = false;
}

int64_t IncarnationGate::current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

absl::Status IncarnationGate::Admit(int64_t incarnation, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto settled = [this, incarnation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return incarnation == current_ || !registering_;
  };
  mu_.AwaitWithDeadline(absl::Condition(&settled), deadline);
  if (incarnation == current_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "command for incarnation ", incarnation, " reached incarnation ", current_,
      registering_ ? " (a registration was still under way at the call's deadline)" : ""));
}

}  // namespace tessera
