#ifndef TESSERA_PROTO_GRPC_STATUS_H_
#define TESSERA_PROTO_GRPC_STATUS_H_

#include <chrono>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace tessera {

// The one mapping between absl::Status and grpc::Status: the codes are numerically the same.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// The gRPC deadline `timeout` from now (gRPC takes system_clock time points).
inline std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
}

// Metadata key carrying the cluster's shared secret on coordinator → worker calls.
inline constexpr char kSecretMetadataKey[] = "x-tessera-secret";

}  // namespace tessera

#endif  // TESSERA_PROTO_GRPC_STATUS_H_
