// The neural-network kernels' conformance suites on the CPU backend (cuda_kernels_test.cc runs the
// same suites on the CUDA backend).

#include "kernels/backend.h"
#include "kernels/testing/attention_conformance.h"
#include "kernels/testing/nn_argument_conformance.h"
#include "kernels/testing/nn_conformance.h"

namespace tessera::kernels::testing {

DeviceUnderTest GetDeviceUnderTest() { return {"cpu", /*skip_if_unavailable=*/false}; }

}  // namespace tessera::kernels::testing
