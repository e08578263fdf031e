// The kernel conformance suite on the CUDA backend (device cuda:0). Without a usable device (or
// without CUDA support in the build) every test skips with the reason, e.g.
// "no CUDA device: cudaGetDeviceCount returned 35 (cudaErrorInsufficientDriver: ...)".

#include "kernels/testing/compute_conformance.h"
#include "kernels/testing/data_conformance.h"
#include "kernels/testing/reduce_conformance.h"

namespace tessera::kernels::testing {

DeviceUnderTest GetDeviceUnderTest() { return {"cuda:0", /*skip_if_unavailable=*/true}; }

}  // namespace tessera::kernels::testing
