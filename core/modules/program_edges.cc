#include "core/modules/program_edges.h"

#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/sharding/dtensor_spec.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

// The row-major position of `coordinate` in `mesh`.
int64_t PositionOf(const DeviceMesh& mesh, const std::vector<int64_t>& coordinate) {
  int64_t position = 0;
  for (int m = 0; m < mesh.ndim(); ++m) position = position * mesh.size(m) + coordinate[m];
  return position;
}

// Reduces every Partial mesh dim of `locals` into its coordinate 0, one mesh dim after another.
void ReducePartials(std::vector<HostTensor>& locals, const DeviceMesh& mesh,
                    const std::vector<Placement>& placements) {
  for (int m = 0; m < mesh.ndim(); ++m) {
    const Placement& p = placements[m];
    if (!p.is_partial()) continue;
    for (int64_t r = 0; r < mesh.size(); ++r) {
      std::vector<int64_t> coord = mesh.CoordinateOfIndex(r);
      if (coord[m] != 0) continue;
      HostTensor& acc = locals[r];
      for (int64_t c = 1; c < mesh.size(m); ++c) {
        coord[m] = c;
        const HostTensor& peer = locals[PositionOf(mesh, coord)];
        ReduceInto(p.op, acc.dtype(), acc.data(), peer.data(), acc.num_elements());
      }
      if (p.op == ReduceOp::kAvg) {
        DivideInPlace(acc.dtype(), acc.data(), acc.num_elements(), mesh.size(m));
      }
    }
  }
}

}  // namespace

std::vector<Placement> EdgePlacements(const DeviceMesh& mesh, const Program& program,
                                      const Placement& tp) {
  std::vector<Placement> placements(mesh.ndim(), Placement::Replicate());
  for (int d : program.data_parallel_dims) {
    if (d >= 0 && d < mesh.ndim()) placements[d] = Placement::Shard(0);
  }
  if (program.tp_mesh_dim >= 0 && program.tp_mesh_dim < mesh.ndim()) {
    placements[program.tp_mesh_dim] = tp;
  }
  return placements;
}

int64_t DataParallelSize(const DeviceMesh& mesh, const Program& program) {
  int64_t size = 1;
  for (int d : program.data_parallel_dims) {
    if (d >= 0 && d < mesh.ndim()) size *= mesh.size(d);
  }
  return size;
}

absl::Status CheckModelInput(const ModuleInput& expected, DType dtype, const Shape& shape) {
  bool fits = dtype == expected.dtype && shape.size() == expected.shape.size();
  for (size_t d = 0; fits && d < shape.size(); ++d) {
    fits = expected.shape[d] < 0 || expected.shape[d] == shape[d];
  }
  if (fits) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "input ", DTypeName(dtype), ShapeToString(shape), " does not fit the model, which takes ",
      DTypeName(expected.dtype), ShapeToString(expected.shape), " (-1: any size)"));
}

Shape OutputShapeFor(const Program& program, const Shape& input_shape) {
  Shape shape = input_shape;
  if (IsFloatingPoint(program.input.dtype) && !shape.empty()) shape.pop_back();
  shape.push_back(program.output_features);
  return shape;
}

absl::StatusOr<std::vector<HostTensor>> SplitEdge(const HostTensor& full, const DeviceMesh& mesh,
                                                  const std::vector<Placement>& placements) {
  ASSIGN_OR_RETURN(const DTensorSpec spec,
                   MakeDTensorSpec(mesh, placements, full.shape(), full.dtype()));
  std::vector<HostTensor> locals;
  locals.reserve(static_cast<size_t>(mesh.size()));
  for (int64_t r = 0; r < mesh.size(); ++r) {
    const std::vector<int64_t> coord = mesh.CoordinateOfIndex(r);
    const LocalShard local = LocalShapeAndOffsetAt(spec, coord);
    ASSIGN_OR_RETURN(HostTensor piece, PackBlock(full, local.offset, local.shape));
    for (int m = 0; m < mesh.ndim(); ++m) {
      const Placement& p = spec.placements[m];
      if (p.is_partial()) {
        PartitionValue(p.op, coord[m], piece.dtype(), piece.data(), piece.num_elements());
      }
    }
    locals.push_back(std::move(piece));
  }
  return locals;
}

absl::StatusOr<Shape> AssembledShape(std::span<const Shape> local_shapes, const DeviceMesh& mesh,
                                     const std::vector<Placement>& placements) {
  if (static_cast<int64_t>(local_shapes.size()) != mesh.size()) {
    return absl::InvalidArgumentError(absl::StrCat(local_shapes.size(),
                                                   " local tensors for a mesh of ", mesh.size(),
                                                   " ranks; give one per rank"));
  }
  for (size_t r = 1; r < local_shapes.size(); ++r) {
    if (local_shapes[r].size() != local_shapes[0].size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", r, "'s local tensor is ", ShapeToString(local_shapes[r]), " and rank 0's ",
          ShapeToString(local_shapes[0]), "; they cannot make one tensor"));
    }
  }
  ASSIGN_OR_RETURN(const std::vector<Placement> normal,
                   NormalizePlacements(mesh, placements, static_cast<int>(local_shapes[0].size())));
  // A dim some mesh dims shard is the sum of its pieces along them (at coordinate 0 of the others).
  Shape shape = local_shapes[0];
  for (size_t d = 0; d < shape.size(); ++d) {
    bool sharded = false;
    for (const Placement& p : normal) sharded = sharded || p.is_shard(static_cast<int>(d));
    if (!sharded) continue;
    int64_t size = 0;
    for (int64_t r = 0; r < mesh.size(); ++r) {
      const std::vector<int64_t> coord = mesh.CoordinateOfIndex(r);
      bool along = true;
      for (int m = 0; m < mesh.ndim(); ++m) {
        if (!normal[m].is_shard(static_cast<int>(d)) && coord[m] != 0) along = false;
      }
      if (along) size += local_shapes[r][d];
    }
    shape[d] = size;
  }
  return shape;
}

absl::StatusOr<HostTensor> AssembleEdge(std::vector<HostTensor> locals, const DeviceMesh& mesh,
                                        const std::vector<Placement>& placements) {
  std::vector<Shape> shapes;
  for (const HostTensor& t : locals) shapes.push_back(t.shape());
  ASSIGN_OR_RETURN(const Shape shape, AssembledShape(shapes, mesh, placements));
  for (size_t r = 1; r < locals.size(); ++r) {
    if (locals[r].dtype() != locals[0].dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", r, "'s local tensor is ", DTypeName(locals[r].dtype()),
          ShapeToString(locals[r].shape()), " and rank 0's ", DTypeName(locals[0].dtype()),
          ShapeToString(locals[0].shape()), "; they cannot make one tensor"));
    }
  }
  ASSIGN_OR_RETURN(const DTensorSpec spec,
                   MakeDTensorSpec(mesh, placements, shape, locals[0].dtype()));
  const std::vector<Placement>& normal = spec.placements;
  for (int64_t r = 0; r < mesh.size(); ++r) {
    const Shape want = LocalShapeAndOffsetAt(spec, mesh.CoordinateOfIndex(r)).shape;
    if (locals[r].shape() != want) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, "'s local tensor is ", ShapeToString(locals[r].shape()),
                       ", but ", spec.ToString(), " gives it ", ShapeToString(want)));
    }
  }
  ReducePartials(locals, mesh, normal);
  ASSIGN_OR_RETURN(HostTensor full, HostTensor::Uninitialized(spec.dtype, spec.shape));
  for (int64_t r = 0; r < mesh.size(); ++r) {
    const std::vector<int64_t> coord = mesh.CoordinateOfIndex(r);
    bool holder = true;  // coordinate 0 on every mesh dim that does not shard
    for (int m = 0; m < mesh.ndim(); ++m) {
      if (!normal[m].is_shard() && coord[m] != 0) holder = false;
    }
    if (!holder) continue;
    RETURN_IF_ERROR(UnpackBlock(locals[r], LocalShapeAndOffsetAt(spec, coord).offset, full));
  }
  return full;
}

}  // namespace tessera
