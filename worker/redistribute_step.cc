#include "worker/redistribute_step.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/chunk.h"
#include "core/elementwise_reduce.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

// The elements before `dim` of a contiguous tensor of `shape`: 1 when `dim` is its outermost
// non-unit dim, so that consecutive slices along `dim` are consecutive in memory.
int64_t Outer(const Shape& shape, int dim) {
  int64_t outer = 1;
  for (int d = 0; d < dim; ++d) outer *= shape[d];
  return outer;
}

// The corner of size `sizes` of the contiguous tensor of `shape` starting at `data`, as a view.
ConstStridedView Corner(const std::byte* data, DType dtype, const Shape& shape, Shape sizes) {
  return {data, dtype, std::move(sizes), ContiguousStrides(shape)};
}
StridedView Corner(std::byte* data, DType dtype, const Shape& shape, Shape sizes) {
  return {data, dtype, std::move(sizes), ContiguousStrides(shape)};
}

// Copies `src` into `dst` at `offset` along `dim`.
absl::Status CopyInto(const ConstStridedView& src, int dim, int64_t offset, HostTensor& dst) {
  std::vector<int64_t> offsets(dst.shape().size(), 0);
  offsets[dim] = offset;
  ASSIGN_OR_RETURN(StridedView target, dst.Block(offsets, src.shape));
  CopyStrided(src, target);
  return absl::OkStatus();
}

// A pointer `blocks` blocks of `block` elements past `data`.
template <typename Byte>
Byte* BlockAt(Byte* data, int64_t blocks, int64_t block, DType dtype) {
  return data + blocks * block * static_cast<int64_t>(DTypeSize(dtype));
}

// Checks that `local` is this rank's shard of `spec` and that `step` is the step PlanStep makes
// for it, with a group of the right size and rank for a collective step.
absl::Status CheckStep(const DTensorSpec& spec, const RedistributeStep& step,
                       absl::Span<const int64_t> coordinate, const comm::Communicator* group,
                       const HostTensor& local) {
  const DeviceMesh& mesh = spec.mesh;
  if (static_cast<int>(coordinate.size()) != mesh.ndim()) {
    return absl::InvalidArgumentError(absl::StrCat("coordinate of ", coordinate.size(),
                                                   " dims on a mesh of ", mesh.ndim(), " dims"));
  }
  for (int m = 0; m < mesh.ndim(); ++m) {
    if (coordinate[m] < 0 || coordinate[m] >= mesh.size(m)) {
      return absl::InvalidArgumentError(absl::StrCat("coordinate ", ShapeToString(coordinate),
                                                     " is outside mesh ",
                                                     ShapeToString(mesh.shape())));
    }
  }
  if (step.mesh_dim < 0 || step.mesh_dim >= mesh.ndim() ||
      spec.placements[step.mesh_dim] != step.from) {
    return absl::InvalidArgumentError(
        absl::StrCat("step on mesh dim ", step.mesh_dim, " from ", PlacementToString(step.from),
                     " does not apply to ", PlacementsToString(spec.placements)));
  }
  ASSIGN_OR_RETURN(RedistributeStep planned, PlanStep(spec, step.mesh_dim, step.to));
  if (planned.collective != step.collective) {
    return absl::InvalidArgumentError(
        absl::StrCat(PlacementToString(step.from), " -> ", PlacementToString(step.to),
                     " on mesh dim ", step.mesh_dim, " is ", CollectiveName(planned.collective),
                     ", not ", CollectiveName(step.collective)));
  }
  const Shape want = LocalShapeAndOffsetAt(spec, coordinate).shape;
  if (local.dtype() != spec.dtype || local.shape() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("local shard ", DTypeName(local.dtype()), ShapeToString(local.shape()),
                     " at coordinate ", ShapeToString(coordinate), " is not the shard of ",
                     spec.ToString(), ", which is ", DTypeName(spec.dtype), ShapeToString(want)));
  }
  const bool local_step =
      step.collective == Collective::kLocalChunk || step.collective == Collective::kLocalPartition;
  if (local_step) return absl::OkStatus();
  if (group == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(CollectiveName(step.collective), " on mesh dim ",
                                                   step.mesh_dim, " needs a communicator"));
  }
  if (group->size() != mesh.size(step.mesh_dim) || group->rank() != coordinate[step.mesh_dim]) {
    return absl::InvalidArgumentError(absl::StrCat("communicator is rank ", group->rank(), " of ",
                                                   group->size(), ", but mesh dim ", step.mesh_dim,
                                                   " needs rank ", coordinate[step.mesh_dim],
                                                   " of ", mesh.size(step.mesh_dim)));
  }
  return absl::OkStatus();
}

// Shard(d) → Replicate: all_gather of shards padded to the chunk size c, each rank's rows placed
// at its chunk's offset. `full_shape` is the shard's shape after the step.
absl::StatusOr<HostTensor> AllGather(comm::Communicator& group, const HostTensor& local, int d,
                                     const Shape& full_shape) {
  const DType dtype = local.dtype();
  const int64_t k = group.size();
  const int64_t n = full_shape[d];
  const int64_t c = ChunkSize(n, k);
  const Shape block_shape = WithDimSize(full_shape, d, c);
  const int64_t block = NumElements(block_shape);
  HostTensor padded;
  const HostTensor* send = &local;
  if (local.shape()[d] != c) {
    ASSIGN_OR_RETURN(padded, PadTo(local, block_shape));
    send = &padded;
  }
  if (Outer(full_shape, d) == 1 && n == k * c) {  // the blocks are the output, in order
    ASSIGN_OR_RETURN(HostTensor out, HostTensor::Uninitialized(dtype, full_shape));
    RETURN_IF_ERROR(group.AllGather(send->data(), out.data(), block, dtype));
    return out;
  }
  ASSIGN_OR_RETURN(HostTensor gathered, HostTensor::Uninitialized(dtype, {k * block}));
  RETURN_IF_ERROR(group.AllGather(send->data(), gathered.data(), block, dtype));
  ASSIGN_OR_RETURN(HostTensor out, HostTensor::Uninitialized(dtype, full_shape));
  for (int64_t q = 0; q < k; ++q) {
    const ChunkRange r = ChunkOf(n, k, q);
    const ConstStridedView rows = Corner(BlockAt(std::as_const(gathered).data(), q, block, dtype),
                                         dtype, block_shape, WithDimSize(block_shape, d, r.size));
    RETURN_IF_ERROR(CopyInto(rows, d, r.offset, out));
  }
  return out;
}

// Partial(op) → Shard(d): reduce_scatter of k blocks of c slices along d (padded with zeros), each
// rank keeping its chunk's rows of the reduced block.
absl::StatusOr<HostTensor> ReduceScatter(comm::Communicator& group, const HostTensor& local, int d,
                                         ReduceOp op) {
  const DType dtype = local.dtype();
  const Shape& shape = local.shape();
  const int64_t k = group.size();
  const int64_t n = shape[d];
  const int64_t c = ChunkSize(n, k);
  const Shape block_shape = WithDimSize(shape, d, c);
  const int64_t block = NumElements(block_shape);
  HostTensor packed;
  const std::byte* send = local.data();
  if (Outer(shape, d) != 1 || n != k * c) {
    ASSIGN_OR_RETURN(packed, HostTensor::Zeros(dtype, {k * block}));
    for (int64_t j = 0; j < k; ++j) {
      const ChunkRange r = ChunkOf(n, k, j);
      ASSIGN_OR_RETURN(ConstStridedView rows, local.Narrow(d, r.offset, r.size));
      CopyStrided(rows, Corner(BlockAt(packed.data(), j, block, dtype), dtype, block_shape,
                               WithDimSize(block_shape, d, r.size)));
    }
    send = packed.data();
  }
  ASSIGN_OR_RETURN(HostTensor reduced, HostTensor::Uninitialized(dtype, block_shape));
  RETURN_IF_ERROR(group.ReduceScatter(send, reduced.data(), block, dtype, op));
  const int64_t keep = ChunkOf(n, k, group.rank()).size;
  if (keep == c) return reduced;
  return SliceAlong(reduced, d, 0, keep);
}

// Shard(i) → Shard(j): all_to_all of k blocks (block q: slice q along j, padded to c_i along i and
// c_j along j), then each peer's block placed at its chunk's offset along i.
absl::StatusOr<HostTensor> AllToAll(comm::Communicator& group, const HostTensor& local, int i,
                                    int j, int64_t ni) {
  const DType dtype = local.dtype();
  const Shape& shape = local.shape();
  const int64_t k = group.size();
  const int64_t nj = shape[j];
  const int64_t ci = ChunkSize(ni, k);
  const int64_t cj = ChunkSize(nj, k);
  const Shape block_shape = WithDimSize(WithDimSize(shape, i, ci), j, cj);
  const int64_t block = NumElements(block_shape);

  HostTensor packed;
  const std::byte* send = local.data();
  if (shape[i] != ci || nj != k * cj || Outer(shape, j) != 1) {
    ASSIGN_OR_RETURN(packed, HostTensor::Zeros(dtype, {k * block}));
    for (int64_t q = 0; q < k; ++q) {
      const ChunkRange r = ChunkOf(nj, k, q);
      ASSIGN_OR_RETURN(ConstStridedView part, local.Narrow(j, r.offset, r.size));
      CopyStrided(part, Corner(BlockAt(packed.data(), q, block, dtype), dtype, block_shape,
                               WithDimSize(shape, j, r.size)));
    }
    send = packed.data();
  }

  const ChunkRange mine = ChunkOf(nj, k, group.rank());
  const Shape out_shape = WithDimSize(WithDimSize(shape, i, ni), j, mine.size);
  if (Outer(out_shape, i) == 1 && ni == k * ci && mine.size == cj) {  // blocks are the output
    ASSIGN_OR_RETURN(HostTensor out, HostTensor::Uninitialized(dtype, out_shape));
    RETURN_IF_ERROR(group.AllToAll(send, out.data(), block, dtype));
    return out;
  }
  ASSIGN_OR_RETURN(HostTensor received, HostTensor::Uninitialized(dtype, {k * block}));
  RETURN_IF_ERROR(group.AllToAll(send, received.data(), block, dtype));
  ASSIGN_OR_RETURN(HostTensor out, HostTensor::Uninitialized(dtype, out_shape));
  for (int64_t p = 0; p < k; ++p) {
    const ChunkRange r = ChunkOf(ni, k, p);
    const ConstStridedView kept =
        Corner(BlockAt(std::as_const(received).data(), p, block, dtype), dtype, block_shape,
               WithDimSize(WithDimSize(block_shape, i, r.size), j, mine.size));
    RETURN_IF_ERROR(CopyInto(kept, i, r.offset, out));
  }
  return out;
}

// True for the steps that rewrite the shard in place rather than build a new one.
bool UpdatesInPlace(Collective c) {
  return c == Collective::kLocalPartition || c == Collective::kAllReduce;
}

// Runs a step for which UpdatesInPlace holds on `shard`; arguments are checked.
absl::Status RunInPlace(const RedistributeStep& step, absl::Span<const int64_t> coordinate,
                        comm::Communicator* group, HostTensor& shard) {
  if (step.collective == Collective::kAllReduce) {
    return group->AllReduce(shard.data(), shard.num_elements(), shard.dtype(), step.from.op);
  }
  if (coordinate[step.mesh_dim] != 0 && PartitionUsesIdentity(step.to.op)) {
    FillIdentity(step.to.op, shard.dtype(), shard.data(), shard.num_elements());
  }
  return absl::OkStatus();
}

// Runs a step for which UpdatesInPlace does not hold; arguments are checked.
absl::StatusOr<HostTensor> RunToNewShard(const DTensorSpec& spec, const RedistributeStep& step,
                                         absl::Span<const int64_t> coordinate,
                                         comm::Communicator* group, const HostTensor& local) {
  const int m = step.mesh_dim;
  DTensorSpec after = spec;
  after.placements[m] = step.to;
  switch (step.collective) {
    case Collective::kLocalChunk: {
      const int d = step.to.dim;
      const ChunkRange r = ChunkOf(local.shape()[d], spec.mesh.size(m), coordinate[m]);
      return SliceAlong(local, d, r.offset, r.size);
    }
    case Collective::kAllGather:
      return AllGather(*group, local, step.from.dim,
                       LocalShapeAndOffsetAt(after, coordinate).shape);
    case Collective::kReduceScatter:
      return ReduceScatter(*group, local, step.to.dim, step.from.op);
    case Collective::kAllToAll: {
      const int i = step.from.dim;
      return AllToAll(*group, local, i, step.to.dim,
                      LocalShapeAndOffsetAt(after, coordinate).shape[i]);
    }
    case Collective::kLocalPartition:
    case Collective::kAllReduce:
      break;
  }
  return absl::InternalError(
      absl::StrCat(CollectiveName(step.collective), " does not build a new shard"));
}

}  // namespace

absl::StatusOr<HostTensor> RunRedistributeStep(const DTensorSpec& spec,
                                               const RedistributeStep& step,
                                               absl::Span<const int64_t> coordinate,
                                               comm::Communicator* group, const HostTensor& local) {
  RETURN_IF_ERROR(CheckStep(spec, step, coordinate, group, local));
  if (!UpdatesInPlace(step.collective)) {
    return RunToNewShard(spec, step, coordinate, group, local);
  }
  HostTensor shard = local.Clone();
  RETURN_IF_ERROR(RunInPlace(step, coordinate, group, shard));
  return shard;
}

namespace {

// RunRedistributePlan on a shard that is either borrowed (read only; copied before the first step
// that would write it) or owned.
absl::StatusOr<HostTensor> RunPlan(const DTensorSpec& spec, const RedistributePlan& plan,
                                   absl::Span<const int64_t> coordinate,
                                   absl::Span<comm::Communicator* const> dim_groups,
                                   const HostTensor* borrowed, std::optional<HostTensor> owned) {
  if (static_cast<int>(dim_groups.size()) != spec.mesh.ndim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        dim_groups.size(), " communicators for a mesh of ", spec.mesh.ndim(), " dims"));
  }
  DTensorSpec current = spec;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const RedistributeStep& step = plan.steps[i];
    comm::Communicator* group = step.mesh_dim >= 0 && step.mesh_dim < spec.mesh.ndim()
                                    ? dim_groups[step.mesh_dim]
                                    : nullptr;
    const HostTensor& shard = owned.has_value() ? *owned : *borrowed;
    absl::Status s = CheckStep(current, step, coordinate, group, shard);
    if (s.ok()) {
      if (UpdatesInPlace(step.collective)) {
        if (!owned.has_value()) owned = borrowed->Clone();
        s = RunInPlace(step, coordinate, group, *owned);
      } else {
        absl::StatusOr<HostTensor> next = RunToNewShard(current, step, coordinate, group, shard);
        s = next.status();
        if (next.ok()) owned = *std::move(next);
      }
    }
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("step ", i, " (", CollectiveName(step.collective), " on mesh dim ",
                                 step.mesh_dim, "): ", s.message()));
    }
    current.placements[step.mesh_dim] = step.to;
  }
  if (!owned.has_value()) return borrowed->Clone();
  return *std::move(owned);
}

}  // namespace

absl::StatusOr<HostTensor> RunRedistributePlan(const DTensorSpec& spec,
                                               const RedistributePlan& plan,
                                               absl::Span<const int64_t> coordinate,
                                               absl::Span<comm::Communicator* const> dim_groups,
                                               HostTensor local) {
  return RunPlan(spec, plan, coordinate, dim_groups, nullptr, std::move(local));
}

absl::StatusOr<HostTensor> RunRedistributePlan(const DTensorSpec& spec,
                                               const RedistributePlan& plan,
                                               absl::Span<const int64_t> coordinate,
                                               absl::Span<comm::Communicator* const> dim_groups,
                                               const HostTensor* local) {
  return RunPlan(spec, plan, coordinate, dim_groups, local, std::nullopt);
}

}  // namespace tessera
