#ifndef TESSERA_WORKER_PROGRAM_STEPS_H_
#define TESSERA_WORKER_PROGRAM_STEPS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/host_tensor.h"
#include "core/module_program.h"
#include "kernels/backend.h"
#include "worker/comm/communicator.h"

namespace tessera {

// The steps of a module program (core/module_program.h) as one rank runs them on its local
// tensors. Steps are checked by CheckProgram before they run; what only the tensors tell (shapes,
// dtypes) is checked here, INVALID_ARGUMENT naming the shapes.

// One buffer a step reads. `last_use`: no later step reads it (and the step reads it once), so
// the step may take its memory for an output.
struct StepInput {
  HostTensor* tensor = nullptr;
  bool last_use = false;
};

// A parameter as a step uses it: this rank's shard of its value, its gradient (backward steps
// accumulate into it; null outside backward) and the shard's first row in the full parameter (an
// Embedding weight's row_offset).
struct StepParameter {
  const HostTensor* value = nullptr;
  HostTensor* grad = nullptr;
  int64_t row_offset = 0;
};

// Runs a step of local compute (any kind but the collectives and kGradAllReduce) with the
// kernels; returns its outputs, one per step.outputs entry. `weight` and `bias` are the step's
// parameters (value null where the step names none).
absl::StatusOr<std::vector<HostTensor>> RunComputeStep(kernels::KernelBackend& kernels,
                                                       const ProgramStep& step,
                                                       std::span<const StepInput> inputs,
                                                       const StepParameter& weight,
                                                       const StepParameter& bias);

// Runs a collective step (kAllReduce, kAllGather, kReduceScatter, kChunk, kAllToAll) on `group`,
// the communicator of this rank's group along the step's mesh dim; returns its output. A gather
// or all-to-all first exchanges the ranks' local shapes, so uneven torch.chunk pieces of any size
// are joined; pieces that are not torch.chunk pieces of one tensor are INVALID_ARGUMENT on every
// rank alike.
absl::StatusOr<HostTensor> RunCollectiveStep(const ProgramStep& step, comm::Communicator& group,
                                             StepInput input);

}  // namespace tessera

#endif  // TESSERA_WORKER_PROGRAM_STEPS_H_
