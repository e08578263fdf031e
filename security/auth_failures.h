#ifndef TESSERA_SECURITY_AUTH_FAILURES_H_
#define TESSERA_SECURITY_AUTH_FAILURES_H_

#include <functional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tessera {

// Failed authentications of one service, counted per caller (a peer host, a certificate name or a
// connection): a credential is always checked first, and a correct one is never refused here, so
// a stranger's wrong guesses from a host cost that host's good callers nothing. Each failure is
// counted in tessera_auth_failures_total{service,peer} and logged (a spdlog warning with peer,
// method and reason, never the credential); a caller may fail `burst` times at once, then once per
// `refill`, with its refusal's own code; past that its failures are answered RESOURCE_EXHAUSTED and
// logged once per kLogPeriod with their count. Thread-safe.
class AuthFailures {
 public:
  explicit AuthFailures(
      std::string service, int burst = 20, absl::Duration refill = absl::Milliseconds(500),
      std::function<absl::Time()> clock = [] { return absl::Now(); });

  // Counts and logs that `caller` failed to authenticate a call of `method`, which is answered
  // `refusal` (its message saying why; never OK) or, for a caller past its failures,
  // RESOURCE_EXHAUSTED saying when it may fail again. Returns the answer.
  absl::Status Refuse(const std::string& caller, const std::string& method, absl::Status refusal);

  // The host part of a gRPC peer string: "ipv4:10.0.0.1:5678" -> "10.0.0.1".
  static std::string PeerHost(const std::string& peer);

  static constexpr absl::Duration kLogPeriod = absl::Seconds(10);

 private:
  struct Bucket {
    double tokens = 0;
    absl::Time updated;
    int64_t unlogged = 0;  // failures since the last line logged for this caller
    absl::Time logged;     // when that line was
  };
  // Brings `bucket` up to date at `now`: a token per `refill_` elapsed, fractions kept.
  void Refill(Bucket& bucket, absl::Time now) const;
  // The metric label of `caller`: itself for the first kMaxLabeledPeers callers, "other" after.
  std::string PeerLabel(const std::string& caller) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string service_;
  const int burst_;
  const absl::Duration refill_;
  const std::function<absl::Time()> clock_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Bucket> callers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> labeled_ ABSL_GUARDED_BY(mu_);
  static constexpr size_t kMaxLabeledPeers = 64;
};

}  // namespace tessera

#endif  // TESSERA_SECURITY_AUTH_FAILURES_H_
