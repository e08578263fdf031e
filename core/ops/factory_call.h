// Calls whose output layout the caller gives: a factory (no tensor input: arange, full, rand, ...)
// is made on the mesh and placements asked for, as torch.distributed.tensor.zeros(size,
// device_mesh=, placements=) does; a factory of another tensor (new_zeros, rand_like, ...) runs on
// its input's mesh, in the placements asked for or else those its strategies give.
#ifndef TESSERA_CORE_OPS_FACTORY_CALL_H_
#define TESSERA_CORE_OPS_FACTORY_CALL_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/ops/op_propagation.h"
#include "core/ops/op_registry.h"
#include "core/sharding/device_mesh.h"
#include "core/sharding/dtensor_spec.h"
#include "core/sharding/placement.h"

namespace tessera::ops {

// The layout a caller asks for the output: a mesh (null: none) and placements (empty: none; all
// Replicate for a factory without a tensor input).
struct RequestedLayout {
  const DeviceMesh* mesh = nullptr;
  std::vector<Placement> placements;
};

// Whether `op` takes a requested layout (the factory family).
bool TakesRequestedLayout(const OpDef& op);

// Plans `op` called with `args` on `given` (the arguments' tensors by index) in `layout`:
// without a tensor input, on `layout.mesh` (INVALID_ARGUMENT naming the op when there is none)
// with no input plans; with one and placements asked, on its mesh with the inputs left as they
// are; otherwise as PlanOpCall through `cache`. A Partial asked for, placements that are not one
// per mesh dim, a mesh other than the input's, or a layout asked of an op that takes none is
// INVALID_ARGUMENT naming the op.
absl::StatusOr<PlannedCall> PlanCallInLayout(const OpDef& op, std::span<const NamedValue> args,
                                             std::span<const DTensorSpec> given,
                                             const RequestedLayout& layout, ShardingCache& cache);

// The elements a call draws from the caller's random stream: one per output element for a
// random op (OpDef::random), none for any other.
int64_t RandomElementsDrawn(const BoundCall& call);

}  // namespace tessera::ops

#endif  // TESSERA_CORE_OPS_FACTORY_CALL_H_
