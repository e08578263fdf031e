#include "security/auth_failures.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "metrics/registry.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

// Callers remembered at most; past it, callers whose failures have all refilled are forgotten.
constexpr size_t kMaxCallers = 100000;

metrics::Family<metrics::Counter>& FailureCounter() {
  static metrics::Family<metrics::Counter>& family = metrics::DefaultRegistry().AddCounter(
      "tessera_auth_failures_total",
      "Calls refused for a missing or wrong credential, by service and calling peer (the first 64 "
      "peers by name, later ones as 'other').",
      {"service", "peer"});
  return family;
}

}  // namespace

AuthFailures::AuthFailures(std::string service, int burst, absl::Duration refill,
                           std::function<absl::Time()> clock)
    : service_(std::move(service)), burst_(burst), refill_(refill), clock_(std::move(clock)) {
  FailureCounter();  // the family shows on /metrics before the first failure
}

std::string AuthFailures::PeerHost(const std::string& peer) {
  for (const char* scheme : {"ipv4:", "ipv6:"}) {
    if (!absl::StartsWith(peer, scheme)) continue;
    const std::string host = peer.substr(std::string(scheme).size());
    const size_t colon = host.rfind(':');
    return colon == std::string::npos ? host : host.substr(0, colon);
  }
  return peer;
}

void AuthFailures::Refill(Bucket& bucket, absl::Time now) const {
  if (now > bucket.updated) {
    bucket.tokens =
        std::min<double>(burst_, bucket.tokens + absl::FDivDuration(now - bucket.updated, refill_));
    bucket.updated = now;
  }
}

std::string AuthFailures::PeerLabel(const std::string& caller) {
  if (labeled_.contains(caller)) return caller;
  if (labeled_.size() >= kMaxLabeledPeers) return "other";
  labeled_.insert(caller);
  return caller;
}

absl::Status AuthFailures::Refuse(const std::string& caller, const std::string& method,
                                  absl::Status refusal) {
  const absl::Time now = clock_();
  absl::MutexLock lock(&mu_);
  FailureCounter().With({service_, PeerLabel(caller)}).Increment();
  if (callers_.size() >= kMaxCallers) {
    absl::erase_if(callers_, [&](auto& kv) {
      Refill(kv.second, now);
      return kv.second.tokens >= burst_;
    });
  }
  auto [it, added] = callers_.try_emplace(caller, Bucket{static_cast<double>(burst_), now, 0, now});
  Bucket& bucket = it->second;
  Refill(bucket, now);
  if (bucket.tokens >= 1) {
    bucket.tokens -= 1;
    spdlog::warn("authentication failed: peer {} calling {} ({}): {}", caller, method, service_,
                 std::string(refusal.message()));
    return refusal;
  }
  ++bucket.unlogged;
  if (now - bucket.logged >= kLogPeriod) {
    spdlog::warn(
        "authentication failed: peer {} calling {} ({}): {}; {} failures of this peer since the "
        "last line (refused RESOURCE_EXHAUSTED)",
        caller, method, service_, std::string(refusal.message()), bucket.unlogged);
    bucket.unlogged = 0;
    bucket.logged = now;
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "too many failed authentications from ", caller, " (", refusal.message(),
      "); the next failure is answered with its reason in ",
      absl::FormatDuration(absl::Ceil((1 - bucket.tokens) * refill_, absl::Milliseconds(1)))));
}

}  // namespace tessera
