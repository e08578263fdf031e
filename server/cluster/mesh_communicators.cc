#include "server/cluster/mesh_communicators.h"

#include "absl/strings/str_cat.h"

namespace tessera {

absl::Status MeshCommunicators::Health() const {
  absl::MutexLock lock(&mu_);
  return broken_;
}

int64_t MeshCommunicators::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

int64_t MeshCommunicators::Next(absl::string_view why) {
  ++generation_;
  forming_ = true;
  broken_ = absl::UnavailableError(
      absl::StrCat("its communicators broke (", cause_, "); re-forming them", why));
  return generation_;
}

std::optional<int64_t> MeshCommunicators::Broke(int64_t generation, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (generation != generation_) return std::nullopt;  // an older generation: re-formed already
  if (forming_) {
    if (broke_while_forming_.empty()) broke_while_forming_ = reason;
    return std::nullopt;
  }
  if (attempts_ >= kMaxAttempts) return std::nullopt;  // given up on
  cause_ = reason;
  attempts_ = 1;
  return Next("");
}

std::optional<int64_t> MeshCommunicators::Formed(int64_t generation, const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (generation != generation_ || !forming_) return std::nullopt;
  forming_ = false;
  if (status.ok()) {
    attempts_ = 0;
    broken_ = absl::OkStatus();
    if (broke_while_forming_.empty()) return std::nullopt;
    cause_ = std::move(broke_while_forming_);
    broke_while_forming_.clear();
    attempts_ = 1;
    return Next("");
  }
  broke_while_forming_.clear();
  if (attempts_ < kMaxAttempts) {
    ++attempts_;
    return Next(
        absl::StrCat(" (attempt ", attempts_, "; the last one failed: ", status.message(), ")"));
  }
  broken_ = absl::UnavailableError(
      absl::StrCat("its communicators broke (", cause_, ") and re-forming them failed ", attempts_,
                   " times, the last: ", status.message(), "; delete and create the mesh again"));
  return std::nullopt;
}

}  // namespace tessera
