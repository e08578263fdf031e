#ifndef TESSERA_WORKER_COMM_MAKE_COMMUNICATOR_H_
#define TESSERA_WORKER_COMM_MAKE_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace tessera::comm {

// Settings of a communicator of either backend.
struct CommunicatorOptions {
  // Bound on the rendezvous and connection, and the default timeout of every call.
  absl::Duration timeout = absl::Seconds(30);
  // Gloo: host name or IP address to bind and advertise, or a network interface (wins if set).
  std::string hostname = "127.0.0.1";
  std::string interface;
  // NCCL: the CUDA device ordinal for "cuda" (a "cuda:N" device type names it instead).
  int cuda_device = 0;
  // NCCL: the stream (a cudaStream_t) on which the buffers passed in are written; a collective
  // waits for the work queued there before it starts (an event, not a host wait). Null: none.
  void* compute_stream = nullptr;
};

// True when this build has the NCCL communicator.
bool HaveNccl();

// A communicator for rank `rank` of `size` on `device_type`: "cpu" gives Gloo, "cuda" or "cuda:N"
// gives NCCL. Rendezvous goes through `store` under `prefix` (one prefix per group and
// incarnation). INVALID_ARGUMENT for an unknown device type, FAILED_PRECONDITION for "cuda" in a
// build without CUDA or on a machine without a usable GPU; otherwise the backend's Create errors.
absl::StatusOr<std::unique_ptr<Communicator>> MakeCommunicator(absl::string_view device_type,
                                                               gloo::rendezvous::Store& store,
                                                               absl::string_view prefix, int rank,
                                                               int size,
                                                               const CommunicatorOptions& options);

}  // namespace tessera::comm

#endif  // TESSERA_WORKER_COMM_MAKE_COMMUNICATOR_H_
