#include "server/tables/client_leases.h"

namespace tessera {

void ClientLeases::KeepAlive(const std::string& client, absl::Time now) {
  absl::MutexLock lock(&mu_);
  last_call_[client] = now;
}

void ClientLeases::Touch(const std::string& client, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (auto it = last_call_.find(client); it != last_call_.end()) it->second = now;
}

std::vector<std::string> ClientLeases::TakeExpired(absl::Time now) {
  std::vector<std::string> expired;
  absl::MutexLock lock(&mu_);
  for (auto it = last_call_.begin(); it != last_call_.end();) {
    if (now - it->second > grace_) {
      expired.push_back(it->first);
      it = last_call_.erase(it);
    } else {
      ++it;
    }
  }
  return expired;
}

}  // namespace tessera
