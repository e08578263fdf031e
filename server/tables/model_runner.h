#ifndef TESSERA_SERVER_TABLES_MODEL_RUNNER_H_
#define TESSERA_SERVER_TABLES_MODEL_RUNNER_H_

#include <cstdint>

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
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TABLES_MODEL_RUNNER_H_
