#ifndef TESSERA_SERVER_TABLES_MODEL_RUNNER_H_
#define TESSERA_SERVER_TABLES_MODEL_RUNNER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/host_tensor.h"

namespace tessera {

// Triton's dynamic batching settings of one model. Off when max_batch_size is 0.
struct BatchingOptions {
  int64_t max_batch_size = 0;                                // rows joined into one run at most
  absl::Duration max_queue_delay = absl::Microseconds(500);  // the oldest request waits at most
};

// What runs a served model: one forward on a full input batch (dim 0 the batch), giving the full
// output batch. Thread-safe; may be called concurrently.
class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // INVALID_ARGUMENT naming the shape or dtype for an input the model cannot take;
  // DEADLINE_EXCEEDED once `deadline` (the call's) passes; other codes as the forward failed.
  virtual absl::StatusOr<HostTensor> Run(const HostTensor& input, absl::Time deadline) = 0;
  // A model of several inputs or outputs: every input in the model's order, every output back in
  // its order. By default the one input through Run.
  virtual absl::StatusOr<std::vector<HostTensor>> RunAll(std::vector<HostTensor> inputs,
                                                         absl::Time deadline) {
    if (inputs.size() != 1) {
      return absl::InternalError("a runner of one input was given several");
    }
    absl::StatusOr<HostTensor> out = Run(inputs[0], deadline);
    if (!out.ok()) return out.status();
    std::vector<HostTensor> outs;
    outs.push_back(*std::move(out));
    return outs;
  }
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TABLES_MODEL_RUNNER_H_
