#include "worker/redistribute_step.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/sharding/chunk.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "kernels/layout.h"
#include "worker/dim_collectives.h"

namespace tessera {
namespace {

// Checks that `local` is this rank's shard of `spec` and that `step` is the step PlanStep makes
// for it, with a group of the right size and rank for a collective step.
absl::Status CheckStep(const DTensorSpec& spec, const RedistributeStep& step,
                       absl::Span<const int64_t> coordinate, const comm::Communicator* group,
                       const kernels::DeviceTensor& local) {
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
  if (IsLocal(step.collective)) return absl::OkStatus();
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

// Shard(d) → Partial(sum): zeros of `full_shape` (the shard's shape after the step) holding
// `local` at the offset of chunk `q` of k along d, so that the sum over the group is the unsharded
// tensor. No traffic.
absl::StatusOr<kernels::DeviceTensor> LocalEmbed(kernels::MemorySpace& memory,
                                                 const kernels::DeviceTensor& local, int d,
                                                 int64_t k, int64_t q, const Shape& full_shape) {
  ASSIGN_OR_RETURN(kernels::DeviceTensor out, memory.Zeros(local.dtype(), full_shape));
  RETURN_IF_ERROR(kernels::PlaceAlong(memory, local.View(), d, ChunkOf(full_shape[d], k, q).offset,
                                      out.View()));
  return out;
}

// True for the steps that rewrite the shard in place rather than build a new one.
bool UpdatesInPlace(Collective c) {
  return c == Collective::kLocalPartition || c == Collective::kAllReduce;
}

// Runs a step for which UpdatesInPlace holds on `shard`; arguments are checked.
absl::Status RunInPlace(kernels::KernelBackend& kernels, const RedistributeStep& step,
                        absl::Span<const int64_t> coordinate, comm::Communicator* group,
                        kernels::DeviceTensor& shard) {
  if (step.collective == Collective::kAllReduce) {
    return group->AllReduce(shard.data(), shard.num_elements(), shard.dtype(), step.from.op);
  }
  return PartitionShard(kernels, step.to.op, coordinate[step.mesh_dim], shard.View());
}

// Runs a step for which UpdatesInPlace does not hold; arguments are checked.
absl::StatusOr<kernels::DeviceTensor> RunToNewShard(kernels::KernelBackend& kernels,
                                                    const DTensorSpec& spec,
                                                    const RedistributeStep& step,
                                                    absl::Span<const int64_t> coordinate,
                                                    comm::Communicator* group,
                                                    const kernels::DeviceTensor& local) {
  const int m = step.mesh_dim;
  DTensorSpec after = spec;
  after.placements[m] = step.to;
  switch (step.collective) {
    case Collective::kLocalChunk: {
      const int d = step.to.dim;
      const ChunkRange r = ChunkOf(local.shape()[d], spec.mesh.size(m), coordinate[m]);
      return kernels::SliceAlong(kernels, local.View(), d, r.offset, r.size);
    }
    case Collective::kLocalEmbed:
      return LocalEmbed(kernels, local, step.from.dim, spec.mesh.size(m), coordinate[m],
                        LocalShapeAndOffsetAt(after, coordinate).shape);
    case Collective::kAllGather:
      return AllGatherAlong(kernels, *group, local, step.from.dim,
                            LocalShapeAndOffsetAt(after, coordinate).shape);
    case Collective::kReduceScatter:
      return ReduceScatterAlong(kernels, *group, local, step.to.dim, step.from.op);
    case Collective::kAllToAll: {
      const int i = step.from.dim;
      return AllToAllAlong(kernels, *group, local, i, step.to.dim,
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

absl::Status PartitionShard(kernels::KernelBackend& kernels, ReduceOp op, int64_t coordinate,
                            const kernels::TensorView& shard) {
  if (coordinate == 0 || !PartitionUsesIdentity(op)) return absl::OkStatus();
  return kernels.Fill(shard, op == ReduceOp::kProduct ? 1.0 : 0.0);
}

absl::StatusOr<kernels::DeviceTensor> RunRedistributeStep(kernels::KernelBackend& kernels,
                                                          const DTensorSpec& spec,
                                                          const RedistributeStep& step,
                                                          absl::Span<const int64_t> coordinate,
                                                          comm::Communicator* group,
                                                          const kernels::DeviceTensor& local) {
  RETURN_IF_ERROR(CheckStep(spec, step, coordinate, group, local));
  if (!UpdatesInPlace(step.collective)) {
    return RunToNewShard(kernels, spec, step, coordinate, group, local);
  }
  ASSIGN_OR_RETURN(kernels::DeviceTensor shard, kernels.Clone(local.View()));
  RETURN_IF_ERROR(RunInPlace(kernels, step, coordinate, group, shard));
  return shard;
}

namespace {

// RunRedistributePlan on a shard that is either borrowed (read only; copied before the first step
// that would write it) or owned.
absl::StatusOr<kernels::DeviceTensor> RunPlan(kernels::KernelBackend& kernels,
                                              const DTensorSpec& spec, const RedistributePlan& plan,
                                              absl::Span<const int64_t> coordinate,
                                              absl::Span<comm::Communicator* const> dim_groups,
                                              const kernels::DeviceTensor* borrowed,
                                              std::optional<kernels::DeviceTensor> owned) {
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
    const kernels::DeviceTensor& shard = owned.has_value() ? *owned : *borrowed;
    absl::Status s = CheckStep(current, step, coordinate, group, shard);
    if (s.ok() && UpdatesInPlace(step.collective) && !owned.has_value()) {
      absl::StatusOr<kernels::DeviceTensor> copy = kernels.Clone(borrowed->View());
      s = copy.status();
      if (copy.ok()) owned = *std::move(copy);
    }
    if (s.ok()) {
      if (UpdatesInPlace(step.collective)) {
        s = RunInPlace(kernels, step, coordinate, group, *owned);
      } else {
        absl::StatusOr<kernels::DeviceTensor> next =
            RunToNewShard(kernels, current, step, coordinate, group, shard);
        s = next.status();
        if (next.ok()) owned = *std::move(next);
      }
    }
    if (!s.ok()) {
      return WithContext(absl::StrCat("step ", i, " (", CollectiveName(step.collective),
                                      " on mesh dim ", step.mesh_dim, ")"),
                         s);
    }
    current.placements[step.mesh_dim] = step.to;
  }
  if (!owned.has_value()) return kernels.Clone(borrowed->View());
  return *std::move(owned);
}

}  // namespace

absl::StatusOr<kernels::DeviceTensor> RunRedistributePlan(
    kernels::KernelBackend& kernels, const DTensorSpec& spec, const RedistributePlan& plan,
    absl::Span<const int64_t> coordinate, absl::Span<comm::Communicator* const> dim_groups,
    kernels::DeviceTensor local) {
  return RunPlan(kernels, spec, plan, coordinate, dim_groups, nullptr, std::move(local));
}

absl::StatusOr<kernels::DeviceTensor> RunRedistributePlan(
    kernels::KernelBackend& kernels, const DTensorSpec& spec, const RedistributePlan& plan,
    absl::Span<const int64_t> coordinate, absl::Span<comm::Communicator* const> dim_groups,
    const kernels::DeviceTensor* local) {
  return RunPlan(kernels, spec, plan, coordinate, dim_groups, local, std::nullopt);
}

}  // namespace tessera
