#include "core/ops/factory_call.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessera::ops {
namespace {

absl::Status CheckPlacements(const OpDef& op, const DeviceMesh& mesh,
                             std::span<const Placement> placements) {
  if (static_cast<int>(placements.size()) != mesh.ndim()) {
    return absl::InvalidArgumentError(absl::StrCat(op.name(), ": ", placements.size(),
                                                   " placements (", PlacementsToString(placements),
                                                   ") for a mesh of ", mesh.ndim(), " dims"));
  }
  for (const Placement& p : placements) {
    if (p.is_partial()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op.name(), ": a factory's output cannot be Partial (placements ",
                       PlacementsToString(placements), "); ask for Shard or Replicate placements"));
    }
  }
  return absl::OkStatus();
}

// The plan of a call whose inputs stay as they are and whose output takes `placements`.
absl::StatusOr<std::shared_ptr<const OpPlan>> PlanAsAsked(const BoundCall& call,
                                                          std::span<const DTensorSpec> specs,
                                                          const DeviceMesh& mesh,
                                                          std::vector<Placement> placements) {
  RETURN_IF_ERROR(CheckPlacements(*call.op, mesh, placements));
  Strategy strategy;
  for (const DTensorSpec& s : specs) strategy.inputs.push_back(s.placements);
  strategy.output = placements;
  absl::StatusOr<DTensorSpec> out =
      MakeDTensorSpec(mesh, std::move(placements), call.output.shape, call.output.dtype);
  if (!out.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(call.op->name(), ": ", out.status().message()));
  }
  std::vector<DTensorSpec> more;
  for (const OutputMeta& m : call.more_outputs) {
    ASSIGN_OR_RETURN(DTensorSpec spec, MakeDTensorSpec(mesh, out->placements, m.shape, m.dtype));
    more.push_back(std::move(spec));
  }
  OpPlan plan{std::move(strategy), std::vector<RedistributePlan>(specs.size()), *std::move(out),
              std::move(more), 0};
  return std::make_shared<const OpPlan>(std::move(plan));
}

}  // namespace

bool TakesRequestedLayout(const OpDef& op) { return op.family == OpFamily::kFactory; }

absl::StatusOr<PlannedCall> PlanCallInLayout(const OpDef& op, std::span<const NamedValue> args,
                                             std::span<const DTensorSpec> given,
                                             const RequestedLayout& layout, ShardingCache& cache) {
  const bool asked = layout.mesh != nullptr || !layout.placements.empty();
  if (asked && !TakesRequestedLayout(op)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op.name(),
                     " takes its layout from its inputs; a mesh and placements are "
                     "given to factories (zeros, rand, new_zeros, rand_like, ...)"));
  }
  std::vector<TensorMeta> metas;
  for (const DTensorSpec& s : given) metas.push_back({s.shape, s.dtype});
  PlannedCall out;
  ASSIGN_OR_RETURN(out.prepared, PrepareCall(op, args, metas));
  for (int i : out.prepared.input_of) out.specs.push_back(given[i]);
  if (out.specs.empty()) {
    if (layout.mesh == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(op.name(),
                       " takes no tensor, so it needs a mesh to be made on "
                       "(device_mesh=, and placements=)"));
    }
    std::vector<Placement> placements = layout.placements;
    if (placements.empty()) placements.assign(layout.mesh->ndim(), Placement::Replicate());
    ASSIGN_OR_RETURN(
        out.plan, PlanAsAsked(out.prepared.call, out.specs, *layout.mesh, std::move(placements)));
    return out;
  }
  const DeviceMesh& mesh = out.specs[0].mesh;
  if (layout.mesh != nullptr && !(*layout.mesh == mesh)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op.name(), ": the mesh asked for, ", layout.mesh->ToString(), ", is not its input's, ",
        mesh.ToString(), "; redistribute the input onto that mesh first"));
  }
  if (!layout.placements.empty()) {
    ASSIGN_OR_RETURN(out.plan, PlanAsAsked(out.prepared.call, out.specs, mesh, layout.placements));
    return out;
  }
  ASSIGN_OR_RETURN(out.plan, cache.Plan(out.prepared.call, out.specs));
  return out;
}

int64_t RandomElementsDrawn(const BoundCall& call) {
  return call.op->random ? NumElements(call.output.shape) : 0;
}

}  // namespace tessera::ops
