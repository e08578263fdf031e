#ifndef TESSERA_SECURITY_STREAM_LIMITS_H_
#define TESSERA_SECURITY_STREAM_LIMITS_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/hold.h"
#include "grpcpp/server_context.h"

namespace tessera {

// Bounds the streams a daemon serves to callers at once, in all and per peer (a client's name where
// a token or certificate gives one, else its host), so that callers holding streams open take at
// most their own share of the server's threads and the rest stay free for other callers and for
// the daemons' own traffic (heartbeats, commands). Counted in tessera_streams_open{service} and,
// refused, tessera_streams_refused_total{service,peer} (the first 64 peers by name, later ones as
// 'other'). Thread-safe.
class StreamLimits {
 public:
  // `service` labels metrics ("coordinator", "worker"); `flags` names the settings in messages.
  StreamLimits(std::string service, int max_streams, int max_per_peer,
               std::string flags = "--max_streams and --max_streams_per_peer");
  StreamLimits(const StreamLimits&) = delete;
  StreamLimits& operator=(const StreamLimits&) = delete;

  // One admitted stream; gives its place back when it goes.
  using Ticket = Hold;

  // A place for one more stream `what` of `peer`; RESOURCE_EXHAUSTED naming the peer, its count
  // and the limit when the peer or the daemon has no room.
  absl::StatusOr<Ticket> Admit(const std::string& peer, absl::string_view what);

  // Streams open now, of `peer` or in all.
  int open(const std::string& peer) const;
  int open() const;

 private:
  void Leave(const std::string& peer);
  // The metric label of `peer`: itself for the first 64 peers refused, "other" after.
  std::string PeerLabel(const std::string& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string service_;
  const int max_streams_;
  const int max_per_peer_;
  const std::string flags_;
  mutable absl::Mutex mu_;
  int total_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, int> per_peer_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> labeled_ ABSL_GUARDED_BY(mu_);
  absl::Time logged_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();  // the last refusal logged
};

// The peer a stream of the caller of `context` counts under: the client's name where a bearer
// token named it (kClientNameProperty), else the host of its address.
std::string StreamPeer(const grpc::ServerContext& context);

// Admits a stream `what` of the caller of `context` to `limits`; with no limits (null) every
// stream is admitted.
absl::StatusOr<StreamLimits::Ticket> AdmitStream(StreamLimits* limits,
                                                 const grpc::ServerContext& context,
                                                 absl::string_view what);

}  // namespace tessera

#endif  // TESSERA_SECURITY_STREAM_LIMITS_H_
