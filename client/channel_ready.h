#ifndef TESSERA_CLIENT_CHANNEL_READY_H_
#define TESSERA_CLIENT_CHANNEL_READY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"

namespace tessera::client::internal {

// Why a connection attempt to a coordinator failed, read from gRPC's last error.
enum class ConnectFailure {
  kOther,            // not reachable (refused, no route): it may still come up
  kSpeaksTls,        // a plaintext client's connection was closed at once: the port wants TLS
  kSpeaksPlaintext,  // a TLS client got no TLS answer: the port serves plaintext
  kTlsRefused,       // the TLS handshake failed (a certificate not trusted on either side)
};

// Classifies gRPC's status detail of a call that failed to connect (wait_for_ready false).
ConnectFailure ClassifyConnectFailure(bool tls, absl::string_view detail);

// Waits until `channel` to the coordinator at `address` is connected: OK; UNAVAILABLE at once
// (after a second attempt confirms it) when the handshake shows the two ends disagree on TLS or
// the TLS handshake is refused, saying so; UNAVAILABLE when `deadline` passes otherwise (a
// coordinator not up yet is waited for).
absl::Status AwaitConnected(grpc::Channel& channel, const std::string& address, bool tls,
                            absl::Time deadline, absl::Duration timeout);

}  // namespace tessera::client::internal

#endif  // TESSERA_CLIENT_CHANNEL_READY_H_
