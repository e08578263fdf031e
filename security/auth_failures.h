#ifndef TESSERA_SECURITY_AUTH_FAILURES_H_
#define TESSERA_SECURITY_AUTH_FAILURES_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tessera {

// Failed authentications, counted per peer host (the address without its port, so that new
// connections do not start afresh): each failure is logged (spdlog warning with peer, method and
// reason, never the credential), and a host may fail `burst` times at once, then once per `refill`.
// A host with no failures left is refused before its credentials are checked. Thread-safe.
class AuthFailures {
 public:
  explicit AuthFailures(int burst = 20, absl::Duration refill = absl::Milliseconds(500));

  // OK while `peer` (gRPC's peer string, "ipv4:10.0.0.1:5678") may try to authenticate;
  // RESOURCE_EXHAUSTED saying when it may try again otherwise.
  absl::Status Admit(const std::string& peer);

  // Records that `peer` failed to authenticate a call of `method` for `reason` and logs it.
  void Record(const std::string& peer, const std::string& method, const std::string& reason);

  // The host part of a gRPC peer string: "ipv4:10.0.0.1:5678" -> "10.0.0.1".
  static std::string PeerHost(const std::string& peer);

 private:
  struct Bucket {
    double tokens;
    absl::Time updated;
  };
  // Brings `bucket` up to date at `now`.
  void Refill(Bucket& bucket, absl::Time now) const;

  const int burst_;
  const absl::Duration refill_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Bucket> hosts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_SECURITY_AUTH_FAILURES_H_
