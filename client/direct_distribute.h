#ifndef TESSERA_CLIENT_DIRECT_DISTRIBUTE_H_
#define TESSERA_CLIENT_DIRECT_DISTRIBUTE_H_

// distribute_tensor and from_local on the direct path. Internal to the client library.

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/session_impl.h"
#include "core/host_tensor.h"
#include "tessera/dtensor.h"
#include "tessera/v1/dtensor.pb.h"

namespace tessera::client {

// Plans the upload `request` names with the coordinator, streams each block straight to its
// worker with its grant (at most kParallelBlocks at once, one chunk each in memory) and commits
// it. `sources`: the full tensor (distribute_tensor), or every rank's local tensor in rank order
// (from_local, each route's block being its rank's whole tensor). On failure the plan is aborted
// (nothing is kept) and `may_relay` says whether the relayed path may still succeed: the
// coordinator does not offer the direct path, or a worker could not be reached (within
// `reach_timeout`) or refused the client.
absl::StatusOr<v1::TensorInfo> UploadDirect(internal::SessionImpl& impl,
                                            const v1::PlanUploadRequest& request,
                                            absl::Span<const HostTensor> sources,
                                            const Progress& progress, absl::Duration reach_timeout,
                                            bool& may_relay);

// True for the codes of a direct transfer's failure after which the relay may still succeed.
bool RelayMayHelp(absl::StatusCode code);

inline constexpr int kParallelBlocks = 16;
// How long kAuto waits for a worker's connection before it relays instead.
inline constexpr absl::Duration kWorkerReachTimeout = absl::Seconds(2);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_DIRECT_DISTRIBUTE_H_
