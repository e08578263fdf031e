#include "server/modules/module_plans.h"

#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/redistribute_planner.h"
#include "core/status_macros.h"
#include "proto/convert.h"

namespace tessera {
namespace {

// A parameter moving to new placements: its entry before and after, and the plan between them.
struct Move {
  std::shared_ptr<DTensorEntry> from;
  std::shared_ptr<DTensorEntry> to;
  RedistributePlan plan;
};

}  // namespace

void ModulePlans::DropTrainingState(ModuleEntry& module) {
  for (const auto& g : module.gradients) tensors_->Release(*g);
  module.gradients.clear();
  if (!module.momentum) return;
  module.momentum = false;
  if (!tensors_->meshes().Workers(*module.mesh).ok()) return;  // they went with the workers
  v1::Command command;
  for (const ProgramParameter& p : module.program.parameters) {
    command.mutable_delete_tensors()->add_names(MomentumWorkerName(module.name, p.fqn));
  }
  tensors_->Post(*module.mesh, command, std::make_shared<TensorWrite>());
}

absl::StatusOr<std::vector<std::string>> ModulePlans::Apply(ModuleEntry& module, PlanSpec plan,
                                                            const std::string& mesh_dim,
                                                            absl::Time deadline) {
  absl::MutexLock lock(&module.mu);
  if (module.removed) {
    return absl::NotFoundError(absl::StrCat("module '", module.name, "' was removed"));
  }
  RETURN_IF_ERROR(programs_->MeshReady(*module.mesh));
  ASSIGN_OR_RETURN(CompiledPlan compiled, ModulePrograms::Compile(module.spec, std::move(plan),
                                                                  module.mesh->mesh, mesh_dim));
  std::map<std::string, std::shared_ptr<DTensorEntry>> by_fqn;
  for (size_t i = 0; i < module.parameters.size(); ++i) {
    by_fqn[module.program.parameters[i].fqn] = module.parameters[i];
  }
  if (compiled.program.parameters.size() != by_fqn.size()) {
    return absl::InternalError(
        absl::StrCat("the plan's program holds ", compiled.program.parameters.size(),
                     " parameters; module '", module.name, "' has ", by_fqn.size()));
  }
  // The ledger first: every parameter's new layout is held before anything is posted, and a
  // refusal puts back the layouts already moved.
  std::vector<std::shared_ptr<DTensorEntry>> parameters;
  std::vector<Move> moves;
  absl::Status status;
  for (const ProgramParameter& p : compiled.program.parameters) {
    auto it = by_fqn.find(p.fqn);
    if (it == by_fqn.end()) {
      status = absl::InternalError(
          absl::StrCat("the plan's program has a parameter '", p.fqn, "' the module has not"));
      break;
    }
    const std::shared_ptr<DTensorEntry>& from = it->second;
    absl::StatusOr<DTensorSpec> spec =
        MakeDTensorSpec(module.mesh->mesh, p.placements, p.shape, module.dtype);
    if (!spec.ok()) {
      status = spec.status();
      break;
    }
    if (spec->placements == from->spec.placements) {
      parameters.push_back(from);
      continue;
    }
    absl::StatusOr<RedistributePlan> steps = PlanRedistribute(from->spec, spec->placements);
    absl::StatusOr<std::shared_ptr<DTensorEntry>> to =
        steps.ok() ? tensors_->Relayout(*from, *std::move(spec))
                   : absl::StatusOr<std::shared_ptr<DTensorEntry>>(steps.status());
    if (!to.ok()) {
      status = to.status();
      break;
    }
    parameters.push_back(*to);
    moves.push_back({from, *std::move(to), *std::move(steps)});
  }
  if (!status.ok()) {
    for (const Move& m : moves) {
      tensors_->Relayout(*m.to, m.from->spec, m.from->write).IgnoreError();
    }
    // The entries put back are new; the module holds them in place of the old ones.
    for (auto& t : module.parameters) {
      if (absl::StatusOr<std::shared_ptr<DTensorEntry>> now = tensors_->Find(t->name); now.ok()) {
        t = *std::move(now);
      }
    }
    return status;
  }
  DropTrainingState(module);
  for (const Move& m : moves) {
    v1::Command command;
    v1::RedistributeTensor* r = command.mutable_redistribute();
    r->set_mesh_id(module.mesh->id);
    r->set_input(DTensorTable::WorkerName(m.to->name));
    r->set_output(DTensorTable::WorkerName(m.to->name));
    *r->mutable_spec() = ToProto(m.from->spec);
    *r->mutable_plan() = ToProto(m.plan);
    RETURN_IF_ERROR(tensors_->PostWrite(*m.to, command, {m.from}));
  }
  module.parameters = std::move(parameters);
  module.program = std::move(compiled.program);
  module.plan_json = std::move(compiled.plan_json);
  module.mesh_dim = mesh_dim;
  RETURN_IF_ERROR(programs_->Install(module, module.program, deadline));
  RETURN_IF_ERROR(DTensorTable::AwaitWrites(module.parameters, deadline));
  return module.program.unmatched;
}

}  // namespace tessera
