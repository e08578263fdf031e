#include "security/auth_failures.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

// Hosts remembered at most; past it, hosts whose failures have all refilled are forgotten.
constexpr size_t kMaxHosts = 100000;

}  // namespace

AuthFailures::AuthFailures(int burst, absl::Duration refill) : burst_(burst), refill_(refill) {}

std::string AuthFailures::PeerHost(const std::string& peer) {
  std::string host = peer;
  for (const char* scheme : {"ipv4:", "ipv6:"}) {
    if (absl::StartsWith(host, scheme)) host = host.substr(std::string(scheme).size());
  }
  if (absl::StartsWith(peer, "ipv4:") || absl::StartsWith(peer, "ipv6:")) {
    const size_t colon = host.rfind(':');
    if (colon != std::string::npos) host = host.substr(0, colon);
  }
  return host;
}

void AuthFailures::Refill(Bucket& bucket, absl::Time now) const {
  bucket.tokens = std::min<double>(burst_, bucket.tokens + (now - bucket.updated) / refill_);
  bucket.updated = now;
}

absl::Status AuthFailures::Admit(const std::string& peer) {
  const std::string host = PeerHost(peer);
  absl::MutexLock lock(&mu_);
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return absl::OkStatus();
  Refill(it->second, absl::Now());
  if (it->second.tokens >= 1) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "too many failed authentications from ", host, "; try again in ",
      absl::FormatDuration(absl::Ceil((1 - it->second.tokens) * refill_, absl::Milliseconds(1)))));
}

void AuthFailures::Record(const std::string& peer, const std::string& method,
                          const std::string& reason) {
  spdlog::warn("authentication failed: peer {} calling {}: {}", peer, method, reason);
  const std::string host = PeerHost(peer);
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  if (hosts_.size() >= kMaxHosts) {
    absl::erase_if(hosts_, [&](auto& kv) {
      Refill(kv.second, now);
      return kv.second.tokens >= burst_;
    });
  }
  auto [it, added] = hosts_.try_emplace(host, Bucket{static_cast<double>(burst_), now});
  Refill(it->second, now);
  it->second.tokens = std::max(0.0, it->second.tokens - 1);
}

}  // namespace tessera
