#include "server/rendezvous_store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tessera {

void RendezvousStore::Set(const std::string& key, std::string value) {
  absl::MutexLock lock(&mu_);
  values_[key] = std::move(value);
}

absl::StatusOr<std::vector<std::string>> RendezvousStore::Get(const std::vector<std::string>& keys,
                                                              absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto all_present = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    for (const std::string& k : keys) {
      if (!values_.contains(k)) return false;
    }
    return true;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&all_present), timeout)) {
    for (const std::string& k : keys) {
      if (!values_.contains(k)) {
        return absl::DeadlineExceededError(absl::StrCat(
            "rendezvous key '", k, "' was not set within ", absl::FormatDuration(timeout)));
      }
    }
  }
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(values_.at(k));
  return out;
}

void RendezvousStore::ErasePrefix(const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  absl::erase_if(values_, [&](const auto& kv) { return absl::StartsWith(kv.first, prefix); });
}

size_t RendezvousStore::size() const {
  absl::MutexLock lock(&mu_);
  return values_.size();
}

}  // namespace tessera
