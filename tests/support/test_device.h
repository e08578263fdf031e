#ifndef TESSERA_TESTS_TEST_DEVICE_H_
#define TESSERA_TESTS_TEST_DEVICE_H_

// The device the worker-level suites run their workers on: $TESSERA_TEST_DEVICE, "cpu" (the
// default) or "cuda" (scripts/run-gpu-checks.sh sets it). On cpu, the workers of the in-process
// suites compute over a StrictMemoryBackend (host memory used as a GPU's); on cuda, rank r's worker
// holds the backend of cuda:r and NCCL communicators, and the cluster suites start GPU workers.

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "tests/support/strict_memory_backend.h"

namespace tessera::testing {

// "cpu" or "cuda".
inline std::string TestDevice() {
  const char* device = std::getenv("TESSERA_TEST_DEVICE");
  return device != nullptr && std::string(device) == "cuda" ? "cuda" : "cpu";
}

// The kernels and memory space of the worker at mesh position `rank` on TestDevice().
inline absl::StatusOr<std::unique_ptr<kernels::KernelBackend>> TestBackendForRank(int64_t rank) {
  if (TestDevice() == "cpu") return std::make_unique<StrictMemoryBackend>();
  return kernels::MakeBackend(absl::StrCat("cuda:", rank));
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_TEST_DEVICE_H_
