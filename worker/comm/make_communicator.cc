#include "worker/comm/make_communicator.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"
#include "worker/comm/gloo_communicator.h"
#if TESSERA_COMM_WITH_NCCL
#include "worker/comm/nccl_communicator.h"
#endif

namespace tessera::comm {

bool HaveNccl() {
#if TESSERA_COMM_WITH_NCCL
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeCommunicator(absl::string_view device_type,
                                                               gloo::rendezvous::Store& store,
                                                               absl::string_view prefix, int rank,
                                                               int size,
                                                               const CommunicatorOptions& options) {
  if (device_type == "cpu") {
    GlooCommunicatorOptions gloo_options;
    gloo_options.hostname = options.hostname;
    gloo_options.interface = options.interface;
    gloo_options.timeout = options.timeout;
    ASSIGN_OR_RETURN(auto comm, GlooCommunicator::Create(store, prefix, rank, size, gloo_options));
    return std::unique_ptr<Communicator>(std::move(comm));
  }
  absl::string_view ordinal = device_type;
  if (absl::ConsumePrefix(&ordinal, "cuda")) {
    int device = options.cuda_device;
    if (!ordinal.empty() && !(absl::ConsumePrefix(&ordinal, ":") &&
                              absl::SimpleAtoi(ordinal, &device) && device >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("device type '", device_type, "' is not cpu, cuda or cuda:N"));
    }
#if TESSERA_COMM_WITH_NCCL
    NcclCommunicatorOptions nccl_options;
    nccl_options.device = device;
    nccl_options.timeout = options.timeout;
    nccl_options.compute_stream = static_cast<cudaStream_t>(options.compute_stream);
    ASSIGN_OR_RETURN(auto comm, NcclCommunicator::Create(store, prefix, rank, size, nccl_options));
    return std::unique_ptr<Communicator>(std::move(comm));
#else
    return absl::FailedPreconditionError(absl::StrCat(
        "device type '", device_type, "' needs NCCL, but this build has no CUDA support"));
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device type '", device_type, "' is not cpu, cuda or cuda:N"));
}

}  // namespace tessera::comm
