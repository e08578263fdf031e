#ifndef TESSERA_CORE_MODULES_PROGRAM_EDGES_H_
#define TESSERA_CORE_MODULES_PROGRAM_EDGES_H_

#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/host_tensor.h"
#include "core/modules/module_program.h"
#include "core/modules/module_spec.h"
#include "core/shape.h"
#include "core/sharding/device_mesh.h"
#include "core/sharding/placement.h"

namespace tessera {

// The edges of a compiled module program as whole tensors: a full input cut into every rank's
// local input, and the ranks' local outputs put together into the full output. The edge's layout
// applies on the tensor-parallel mesh dim; the program's data-parallel mesh dims split the batch
// (dim 0); any other mesh dim (distribute_module's) holds the whole tensor on every rank.

// An edge's placements on `mesh`: `tp` on the program's tp_mesh_dim, Shard(0) on its
// data_parallel_dims, Replicate on the other mesh dims.
std::vector<Placement> EdgePlacements(const DeviceMesh& mesh, const Program& program,
                                      const Placement& tp);

// How many groups split the batch: the product of the sizes of the program's data-parallel mesh
// dims (1 without any).
int64_t DataParallelSize(const DeviceMesh& mesh, const Program& program);

// OK iff a tensor of `dtype` and `shape` is an input the model takes (`expected`: its dtype, and
// its shape with -1 for any size); INVALID_ARGUMENT naming both otherwise.
absl::Status CheckModelInput(const ModuleInput& expected, DType dtype, const Shape& shape);

// The full output's shape for a full input of `input_shape`: the input's shape with its last dim
// the output's features, or for integer ids (an Embedding's input) with them appended.
Shape OutputShapeFor(const Program& program, const Shape& input_shape);

// Every rank's piece of `full` under `placements` (one per mesh dim), in the mesh's row-major
// order: its block as torch.chunk cuts Shard dims; on a Partial(op) dim coordinate 0 holds the
// value and the others op's identity (sum, product) or the value too (distribute_tensor's split).
// INVALID_ARGUMENT if a placement does not fit the tensor.
absl::StatusOr<std::vector<HostTensor>> SplitEdge(const HostTensor& full, const DeviceMesh& mesh,
                                                  const std::vector<Placement>& placements);

// The full shape of the tensor that local tensors of `local_shapes` (row-major mesh order) make
// under `placements`: a dim some mesh dims shard is the sum of its pieces along them.
// INVALID_ARGUMENT if they are not one per rank, differ in their number of dims, or a placement
// does not fit them.
absl::StatusOr<Shape> AssembledShape(std::span<const Shape> local_shapes, const DeviceMesh& mesh,
                                     const std::vector<Placement>& placements);

// The full tensor that the ranks' `locals` (row-major mesh order) make under `placements`: Shard
// dims concatenate in torch.chunk order, Replicate dims take coordinate 0's copy, Partial dims
// reduce by their op. The full shape follows from the local shapes; INVALID_ARGUMENT naming the
// rank if the locals are not as many as the ranks, differ in dtype, or do not fit together.
absl::StatusOr<HostTensor> AssembleEdge(std::vector<HostTensor> locals, const DeviceMesh& mesh,
                                        const std::vector<Placement>& placements);

}  // namespace tessera

#endif  // TESSERA_CORE_MODULES_PROGRAM_EDGES_H_
