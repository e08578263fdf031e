#ifndef TESSERA_WORKER_REDISTRIBUTE_STEP_H_
#define TESSERA_WORKER_REDISTRIBUTE_STEP_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/sharding/dtensor_spec.h"
#include "core/sharding/redistribute_planner.h"
#include "kernels/backend.h"
#include "worker/comm/communicator.h"

namespace tessera {

// Makes this rank's copy of a value its part of a Partial(op) along a mesh dim where it sits at
// `coordinate` (core's PartitionValue, on the backend's memory): off coordinate 0, sum and product
// parts become the identity; the others keep the value.
absl::Status PartitionShard(kernels::KernelBackend& kernels, ReduceOp op, int64_t coordinate,
                            const kernels::TensorView& shard);

// Runs one planned step on this rank: `local` is its shard of a tensor laid out as `spec`,
// `coordinate` its mesh coordinate, `group` the communicator of its process group along
// step.mesh_dim (unused by the local steps; may be null for them). Returns the rank's shard under
// the step's destination placement, equal bit for bit to what SimulatedMesh computes. Every rank of
// the group must call it with the same spec and step. INVALID_ARGUMENT if the shard, coordinate,
// step or group do not fit the spec; the communicator's error if a collective fails.
absl::StatusOr<kernels::DeviceTensor> RunRedistributeStep(kernels::KernelBackend& kernels,
                                                          const DTensorSpec& spec,
                                                          const RedistributeStep& step,
                                                          absl::Span<const int64_t> coordinate,
                                                          comm::Communicator* group,
                                                          const kernels::DeviceTensor& local);

// Runs every step of `plan`, starting from `spec`; `dim_groups[m]` is the communicator of mesh
// dim m (may be null for a mesh dim whose steps are all local).
absl::StatusOr<kernels::DeviceTensor> RunRedistributePlan(
    kernels::KernelBackend& kernels, const DTensorSpec& spec, const RedistributePlan& plan,
    absl::Span<const int64_t> coordinate, absl::Span<comm::Communicator* const> dim_groups,
    kernels::DeviceTensor local);
// The same on a shard that stays untouched: it is read by the steps that build a new shard and
// copied only before a step that would rewrite it (all_reduce, local partition).
absl::StatusOr<kernels::DeviceTensor> RunRedistributePlan(
    kernels::KernelBackend& kernels, const DTensorSpec& spec, const RedistributePlan& plan,
    absl::Span<const int64_t> coordinate, absl::Span<comm::Communicator* const> dim_groups,
    const kernels::DeviceTensor* local);

}  // namespace tessera

#endif  // TESSERA_WORKER_REDISTRIBUTE_STEP_H_
