// The kernel conformance suite on the CUDA backend (device cuda:0): compute, elementwise ops,
// reductions and the other kernels along a dim (arg-reductions, scans, sorts, softmax), indexing,
// data, the memory space's layout moves and staged transfers, and the neural-network kernels
// (norms, embedding, attention, activation gradients, SGD), each against the references the CPU
// backend passes too (kernels_test.cc, kernels_nn_test.cc). Without a usable device (or without
// CUDA support in the build) every test skips with the one-line reason, e.g. "no CUDA device:
// cudaGetDeviceCount returned 35 (cudaErrorInsufficientDriver: ...)".

#include "kernels/testing/attention_conformance.h"
#include "kernels/testing/compute_conformance.h"
#include "kernels/testing/data_conformance.h"
#include "kernels/testing/dim_conformance.h"
#include "kernels/testing/elementwise_conformance.h"
#include "kernels/testing/index_conformance.h"
#include "kernels/testing/layout_conformance.h"
#include "kernels/testing/nn_argument_conformance.h"
#include "kernels/testing/nn_conformance.h"
#include "kernels/testing/reduce_conformance.h"
#include "kernels/testing/sort_conformance.h"

namespace tessera::kernels::testing {

DeviceUnderTest GetDeviceUnderTest() { return {"cuda:0", /*skip_if_unavailable=*/true}; }

}  // namespace tessera::kernels::testing
