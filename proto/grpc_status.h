#ifndef TESSERA_PROTO_GRPC_STATUS_H_
#define TESSERA_PROTO_GRPC_STATUS_H_

#include <chrono>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace tessera {

// The one mapping between absl::Status and grpc::Status: the codes are numerically the same, and
// the message is bounded (BoundedStatusMessage).
grpc::Status ToGrpcStatus(const absl::Status& status);

// `message` cut to at most kMaxStatusMessageBytes, marked as cut with its full length: a status
// message travels in a header (percent-encoded, so up to three times its size), and one past
// gRPC's metadata limit (8 KiB) fails the call with a transport error instead of the status, so a
// refusal that echoes a huge name would never reach its caller.
std::string BoundedStatusMessage(std::string message);
inline constexpr size_t kMaxStatusMessageBytes = 2048;
absl::Status FromGrpcStatus(const grpc::Status& status);

// The gRPC deadline `timeout` from now (gRPC takes system_clock time points).
inline std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
}

// Metadata key carrying the cluster's shared secret on coordinator → worker calls.
inline constexpr char kSecretMetadataKey[] = "x-tessera-secret";
// The metadata entry in which a client's direct upload carries its grant (a serialized
// DirectGrant), so that the worker checks it before it reads a byte of the call.
inline constexpr char kGrantMetadataKey[] = "x-tessera-grant-bin";

}  // namespace tessera

#endif  // TESSERA_PROTO_GRPC_STATUS_H_
