#ifndef TESSERA_WORKER_PROGRAM_STEPS_H_
#define TESSERA_WORKER_PROGRAM_STEPS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/modules/module_program.h"
#include "core/sharding/device_mesh.h"
#include "kernels/backend.h"
#include "worker/comm/communicator.h"

namespace tessera {

// The steps of a module program (core/modules/module_program.h) as one rank runs them on its local
// tensors, held in the memory space of the rank's kernels (host or device memory alike). Steps are
// checked by CheckProgram before they run; what only the tensors tell (shapes, dtypes) is checked
// here, INVALID_ARGUMENT naming the shapes.

// One buffer a step reads. `last_use`: no later step reads it (and the step reads it once), so
// the step may take its memory for an output.
struct StepInput {
  kernels::DeviceTensor* tensor = nullptr;
  bool last_use = false;
};

// A weight or bias as a step uses it: this rank's shard of a parameter's value (or a whole
// parameter a buffer holds), its gradient of the same shape (backward steps accumulate into it;
// null outside backward) and the shard's offset in the whole parameter, per dim (empty for a
// whole one; dim 0's is an Embedding weight's row_offset).
struct StepParameter {
  const kernels::DeviceTensor* value = nullptr;
  kernels::DeviceTensor* grad = nullptr;
  std::span<const int64_t> offset;
  // The kernels' prepared copy of `value` (a Linear forward's weight), or null: read `value`.
  const kernels::PreparedWeight* prepared = nullptr;

  int64_t row_offset() const { return offset.empty() ? 0 : offset[0]; }
};

// Runs a step of local compute (any kind but the collectives, kGatherParameter and
// kGradAllReduce) with the kernels; returns its outputs, one per step.outputs entry. `weight` and
// `bias` are the step's weight and bias, from a parameter or a buffer (value null where the step
// names none); kShardGrad's weight is the parameter whose gradient takes this rank's shard.
absl::StatusOr<std::vector<kernels::DeviceTensor>> RunComputeStep(kernels::KernelBackend& kernels,
                                                                  const ProgramStep& step,
                                                                  std::span<const StepInput> inputs,
                                                                  const StepParameter& weight,
                                                                  const StepParameter& bias);

// Runs a collective step (kAllReduce, kAllGather, kReduceScatter, kChunk, kAllToAll) on `group`,
// the communicator of this rank's group along the step's mesh dim; returns its output. A gather
// or all-to-all first exchanges the ranks' local shapes, so uneven torch.chunk pieces of any size
// are joined; pieces that are not torch.chunk pieces of one tensor are INVALID_ARGUMENT on every
// rank alike.
absl::StatusOr<kernels::DeviceTensor> RunCollectiveStep(kernels::KernelBackend& kernels,
                                                        const ProgramStep& step,
                                                        comm::Communicator& group, StepInput input);

// Runs a kGatherParameter step: `local` is this rank's shard, at `coordinate` of `mesh`, of
// `param`; returns the whole parameter, all-gathered along each mesh dim its placements shard
// (the last such mesh dim first, undoing the nesting) on `dim_groups[m]`, this rank's
// communicator along mesh dim m.
absl::StatusOr<kernels::DeviceTensor> GatherParameter(
    kernels::KernelBackend& kernels, const ProgramParameter& param,
    const kernels::DeviceTensor& local, const DeviceMesh& mesh, std::span<const int64_t> coordinate,
    std::span<comm::Communicator* const> dim_groups);

}  // namespace tessera

#endif  // TESSERA_WORKER_PROGRAM_STEPS_H_
