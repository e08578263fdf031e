#ifndef TESSERA_WORKER_COLLECTIVE_OUTPUTS_H_
#define TESSERA_WORKER_COLLECTIVE_OUTPUTS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/device_tensor.h"
#include "kernels/memory_space.h"
#include "worker/shard_store.h"

namespace tessera {

// The buffer rules of one RunCollective command: every buffer it allocates (in the store's memory
// space) is counted against the store's budget as replacing its output tensor, and its output may
// reuse that tensor's buffer. A buffer over budget is still handed out, so that the rank takes part
// in the collective (one that left would strand its peers in it until the timeout, which breaks
// the communicators); the refusal is kept in failure() and reported once the collective is over.
class CollectiveOutputs {
 public:
  CollectiveOutputs(ShardStore& store, std::string input, std::string output, DType dtype);

  kernels::MemorySpace& memory() const { return store_.memory(); }
  // Counts `bytes` more against the budget, as replacing the output; a refusal (RESOURCE_EXHAUSTED)
  // goes to failure().
  void Charge(int64_t bytes);
  // A budget-checked buffer of `shape` (a refusal goes to failure()). Its contents are
  // uninitialized: every use overwrites all of it, and zeroing first costs as much as a copy at
  // large sizes.
  absl::StatusOr<kernels::DeviceTensor> Scratch(Shape shape);
  // The output's buffer: that of the tensor it replaces when it has the same size and no reader (a
  // repeated collective then writes into memory it already touched, instead of faulting in fresh
  // pages every time), else Scratch. A failed collective loses the replaced tensor.
  absl::StatusOr<kernels::DeviceTensor> Final(Shape shape);
  // The first budget refusal of this command's buffers; OK if none.
  const absl::Status& failure() const { return failure_; }

 private:
  ShardStore& store_;
  const std::string input_;
  const std::string output_;
  const DType dtype_;
  absl::Status failure_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COLLECTIVE_OUTPUTS_H_
