#ifndef TESSERA_SERVER_TABLES_CLIENT_LEASES_H_
#define TESSERA_SERVER_TABLES_CLIENT_LEASES_H_

#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tessera {

// The sessions of clients that keep their tensors alive by calling in: a client that has called
// KeepAlive holds a lease renewed by each of its calls; once it goes `grace` without one, its lease
// expires and its tensors are reclaimed. Clients that never called KeepAlive (the CLI) hold no
// lease and their tensors stay until freed. Thread-safe.
class ClientLeases {
 public:
  explicit ClientLeases(absl::Duration grace) : grace_(grace) {}

  // Starts or renews `client`'s lease.
  void KeepAlive(const std::string& client, absl::Time now = absl::Now());
  // Renews `client`'s lease if it holds one.
  void Touch(const std::string& client, absl::Time now = absl::Now());
  // Removes and returns the clients whose lease expired by `now`.
  std::vector<std::string> TakeExpired(absl::Time now = absl::Now());
  absl::Duration grace() const { return grace_; }

 private:
  const absl::Duration grace_;
  absl::Mutex mu_;
  std::map<std::string, absl::Time> last_call_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TABLES_CLIENT_LEASES_H_
