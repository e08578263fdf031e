#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"

#if TESSERA_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace tessera::kernels {

absl::StatusOr<std::unique_ptr<KernelBackend>> MakeBackend(absl::string_view device) {
  if (device == "cpu") return std::make_unique<CpuBackend>();
  absl::string_view rest = device;
  if (!absl::ConsumePrefix(&rest, "cuda")) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown device '", device, "'; expected 'cpu', 'cuda' or 'cuda:N'"));
  }
  int ordinal = 0;
  if (!rest.empty()) {
    const bool digits = absl::ConsumePrefix(&rest, ":") && !rest.empty() &&
                        std::all_of(rest.begin(), rest.end(), absl::ascii_isdigit);
    if (!digits || !absl::SimpleAtoi(rest, &ordinal)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad CUDA device '", device, "'; expected 'cuda' or 'cuda:N'"));
    }
  }
#if TESSERA_WITH_CUDA
  return MakeCudaBackend(ordinal);
#else
  return absl::FailedPreconditionError(absl::StrCat(
      "device 'cuda:", ordinal,
      "' needs CUDA support, which this build lacks (configured with TESSERA_CUDA=OFF, or nvcc "
      "or NCCL was not found)"));
#endif
}

absl::StatusOr<std::vector<DeviceDescription>> ListCudaDevices() {
#if TESSERA_WITH_CUDA
  return DescribeCudaDevices();
#else
  return absl::FailedPreconditionError(
      "this build lacks CUDA support (configured with TESSERA_CUDA=OFF, or nvcc or NCCL was not "
      "found)");
#endif
}

}  // namespace tessera::kernels
