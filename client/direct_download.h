#ifndef TESSERA_CLIENT_DIRECT_DOWNLOAD_H_
#define TESSERA_CLIENT_DIRECT_DOWNLOAD_H_

// full_tensor and to_local on the direct path. Internal to the client library.

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/session_impl.h"
#include "core/host_tensor.h"
#include "tessera/dtensor.h"
#include "tessera/v1/dtensor.pb.h"

namespace tessera::client {

// Plans the read `request` names with the coordinator, downloads each block straight from its
// worker under its read grant (at most kParallelBlocks at once) into the answer and returns it.
// On failure `may_relay` says whether the relayed path may still succeed: the coordinator does not
// offer the direct path, or a worker could not be reached (within `reach_timeout`) or refused
// the client. Reads planned but not made are released by the coordinator when the grants expire.
absl::StatusOr<HostTensor> DownloadDirect(internal::SessionImpl& impl,
                                          const v1::PlanDownloadRequest& request,
                                          const Progress& progress, absl::Duration reach_timeout,
                                          bool& may_relay);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_DIRECT_DOWNLOAD_H_
