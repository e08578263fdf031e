#ifndef TESSERA_CLIENT_WORKER_CHANNELS_H_
#define TESSERA_CLIENT_WORKER_CHANNELS_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"

namespace tessera::client {

// A client's channels straight to workers, one per address, kept for the session; an address
// that could not be reached is remembered for kRetryAfter so that later calls relay at once.
// Thread-safe.
class WorkerChannels {
 public:
  // The channel to `address`, connected within `reach_timeout`; UNAVAILABLE naming the address
  // if it was not (now or within the last kRetryAfter).
  absl::StatusOr<std::shared_ptr<grpc::Channel>> Connected(
      const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
      absl::Duration reach_timeout);

  // Counts `address` unreachable from now (a stream to it failed UNAVAILABLE).
  void MarkUnreachable(const std::string& address);

  static constexpr absl::Duration kRetryAfter = absl::Seconds(30);

 private:
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Time> unreachable_since_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_WORKER_CHANNELS_H_
