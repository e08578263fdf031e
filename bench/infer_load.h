// Concurrent KServe v2 clients for module_bench: each client a thread with its own channel to the
// coordinator's inference endpoint (inference::GRPCInferenceService), sending ModelInfer requests
// back to back, each waiting for its reply before the next.
#ifndef TESSERA_BENCH_INFER_LOAD_H_
#define TESSERA_BENCH_INFER_LOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/host_tensor.h"

namespace tessera::bench {

// What one load run measured.
struct InferLoad {
  std::vector<double> latency_us;  // every timed request's, all clients together
  double seconds = 0;              // from the first timed request to the last reply
  int64_t requests = 0;            // timed requests answered
};

// Runs `clients` clients, each sending `warmup` untimed requests then timed ones until `duration`
// has passed since the timed part began, each request the float32 tensor `input` for `model`'s
// input "input". The first failed request's status fails the whole run; so does a reply whose
// output is not `output_elements` float32 values.
absl::StatusOr<InferLoad> RunInferLoad(const std::string& address, const std::string& model,
                                       const HostTensor& input, int64_t output_elements,
                                       int clients, int warmup, absl::Duration duration);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_INFER_LOAD_H_
