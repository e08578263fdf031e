#include "security/stream_limits.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "metrics/registry.h"
#include "security/auth_failures.h"
#include "security/client_tokens.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

constexpr size_t kMaxLabeledPeers = 64;

metrics::Family<metrics::Gauge>& OpenGauge() {
  static metrics::Family<metrics::Gauge>& family = metrics::DefaultRegistry().AddGauge(
      "tessera_streams_open", "Streams of callers being served now.", {"service"});
  return family;
}

metrics::Family<metrics::Counter>& RefusedCounter() {
  static metrics::Family<metrics::Counter>& family = metrics::DefaultRegistry().AddCounter(
      "tessera_streams_refused_total",
      "Streams refused RESOURCE_EXHAUSTED because their peer, or the daemon, had as many open as "
      "allowed, by service and peer (the first 64 peers by name, later ones as 'other').",
      {"service", "peer"});
  return family;
}

}  // namespace

StreamLimits::StreamLimits(std::string service, int max_streams, int max_per_peer,
                           std::string flags)
    : service_(std::move(service)),
      max_streams_(max_streams),
      max_per_peer_(max_per_peer),
      flags_(std::move(flags)) {
  OpenGauge().With({service_}).Set(0);
  RefusedCounter();
}

std::string StreamLimits::PeerLabel(const std::string& peer) {
  if (labeled_.contains(peer)) return peer;
  if (labeled_.size() >= kMaxLabeledPeers) return "other";
  labeled_.insert(peer);
  return peer;
}

absl::StatusOr<StreamLimits::Ticket> StreamLimits::Admit(const std::string& peer,
                                                         absl::string_view what) {
  absl::MutexLock lock(&mu_);
  int& mine = per_peer_[peer];
  if (mine >= max_per_peer_ || total_ >= max_streams_) {
    const bool peer_full = mine >= max_per_peer_;
    if (mine == 0) per_peer_.erase(peer);
    RefusedCounter().With({service_, PeerLabel(peer)}).Increment();
    const std::string why = peer_full ? absl::StrCat(peer, " has ", max_per_peer_,
                                                     " streams open, as many as one peer "
                                                     "may")
                                      : absl::StrCat("this ", service_, " serves ", max_streams_,
                                                     " streams already, as many as it may");
    // A flood of refusals logs a line a second at most; the counter has them all.
    if (const absl::Time now = absl::Now(); now - logged_ >= absl::Seconds(1)) {
      logged_ = now;
      spdlog::warn("{} stream of {} refused: {}", std::string(what), peer, why);
    }
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " refused: ", why, " (", flags_, "); end one or try again later"));
  }
  ++mine;
  ++total_;
  OpenGauge().With({service_}).Set(total_);
  return Ticket([this, peer] { Leave(peer); });
}

void StreamLimits::Leave(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  auto it = per_peer_.find(peer);
  if (it != per_peer_.end() && --it->second <= 0) per_peer_.erase(it);
  --total_;
  OpenGauge().With({service_}).Set(total_);
}

int StreamLimits::open(const std::string& peer) const {
  absl::MutexLock lock(&mu_);
  auto it = per_peer_.find(peer);
  return it == per_peer_.end() ? 0 : it->second;
}

int StreamLimits::open() const {
  absl::MutexLock lock(&mu_);
  return total_;
}

std::string StreamPeer(const grpc::ServerContext& context) {
  if (const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context()) {
    for (const grpc::string_ref& name : auth->FindPropertyValues(kClientNameProperty)) {
      return absl::StrCat("client ", absl::string_view(name.data(), name.size()));
    }
  }
  return AuthFailures::PeerHost(context.peer());
}

absl::StatusOr<StreamLimits::Ticket> AdmitStream(StreamLimits* limits,
                                                 const grpc::ServerContext& context,
                                                 absl::string_view what) {
  if (limits == nullptr) return StreamLimits::Ticket();
  return limits->Admit(StreamPeer(context), what);
}

}  // namespace tessera
