#include "client/channel_ready.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "proto/grpc_status.h"
#include "tessera/v1/mesh.grpc.pb.h"

namespace tessera::client::internal {
namespace {

// How long one wait for the channel's next state lasts before the deadline is looked at again.
constexpr absl::Duration kPoll = absl::Milliseconds(200);

// What the client says about `failure` at `address`; `detail` is gRPC's last error.
absl::Status Explain(ConnectFailure failure, const std::string& address,
                     const std::string& detail) {
  switch (failure) {
    case ConnectFailure::kSpeaksTls:
      return absl::UnavailableError(absl::StrCat(
          "tessera-coordinator at ", address,
          " closed a plaintext connection at once: a coordinator serving TLS refuses plaintext; "
          "give its CA (--tls_ca or $TESSERA_TLS_CA) [",
          detail, "]"));
    case ConnectFailure::kSpeaksPlaintext:
      return absl::UnavailableError(absl::StrCat(
          "tessera-coordinator at ", address,
          " does not speak TLS (it serves plaintext): connect without --tls_ca, --tls_cert and "
          "--tls_key ($TESSERA_TLS_*), or start it with --tls_cert and --tls_key [",
          detail, "]"));
    case ConnectFailure::kTlsRefused:
      return absl::UnavailableError(absl::StrCat(
          "the handshake with tessera-coordinator at ", address,
          " failed over TLS: is its certificate signed by the CA given and valid for that "
          "address, and does it accept this client's certificate? [",
          detail, "]"));
    case ConnectFailure::kOther:
      break;
  }
  return absl::UnavailableError(detail);
}

}  // namespace

ConnectFailure ClassifyConnectFailure(bool tls, absl::string_view detail) {
  const bool closed =
      absl::StrContains(detail, "Socket closed") || absl::StrContains(detail, "Connection reset");
  if (!tls) return closed ? ConnectFailure::kSpeaksTls : ConnectFailure::kOther;
  if (absl::StrContains(absl::AsciiStrToLower(detail), "wrong version number")) {
    return ConnectFailure::kSpeaksPlaintext;
  }
  if (closed || absl::StrContains(absl::AsciiStrToLower(detail), "handshake")) {
    return ConnectFailure::kTlsRefused;
  }
  return ConnectFailure::kOther;
}

absl::Status AwaitConnected(grpc::Channel& channel, const std::string& address, bool tls,
                            absl::Time deadline, absl::Duration timeout) {
  std::unique_ptr<v1::MeshService::Stub> probe;
  ConnectFailure last = ConnectFailure::kOther;
  std::string detail;
  while (true) {
    const grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
    if (state == GRPC_CHANNEL_READY) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE) {
      // A call that does not wait for the channel fails at once with the connection's last
      // error, which says what the handshake met.
      if (probe == nullptr) probe = v1::MeshService::NewStub(channel.shared_from_this());
      grpc::ClientContext context;
      context.set_wait_for_ready(false);
      context.set_deadline(DeadlineAfter(std::min(deadline - now, absl::Seconds(1))));
      v1::ListWorkersReply reply;
      const grpc::Status s = probe->ListWorkers(&context, v1::ListWorkersRequest(), &reply);
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
          s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
        return absl::OkStatus();  // the coordinator answered
      }
      const ConnectFailure failure = ClassifyConnectFailure(tls, s.error_message());
      // Two attempts in a row that fail the same way: not a coordinator caught mid-restart.
      if (failure != ConnectFailure::kOther && failure == last) {
        return Explain(failure, address, s.error_message());
      }
      last = failure;
      detail = s.error_message();
    }
    channel.WaitForStateChange(state, DeadlineAfter(std::min(deadline - absl::Now(), kPoll)));
  }
  return absl::UnavailableError(absl::StrCat(
      "cannot reach tessera-coordinator at ", address, " within ", absl::FormatDuration(timeout),
      tls ? " over TLS (is it serving TLS, is its certificate signed by the CA given and valid for "
            "that address, and does it accept this client's certificate?)"
          : " (a coordinator serving TLS refuses plaintext: give the CA, --tls_ca or "
            "$TESSERA_TLS_CA)",
      detail.empty() ? "" : absl::StrCat(" [last error: ", detail, "]")));
}

}  // namespace tessera::client::internal
