#include "server/modules/module_plans.h"

#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/sharding/redistribute_planner.h"
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

// The module's parameters by fqn; INTERNAL if `program` holds another number of them.
absl::StatusOr<std::map<std::string, std::shared_ptr<DTensorEntry>>> ParametersByFqn(
    const ModuleEntry& module, const Program& program) ABSL_EXCLUSIVE_LOCKS_REQUIRED(module.mu) {
  std::map<std::string, std::shared_ptr<DTensorEntry>> by_fqn;
  for (size_t i = 0; i < module.parameters.size(); ++i) {
    by_fqn[module.program.parameters[i].fqn] = module.parameters[i];
  }
  if (program.parameters.size() != by_fqn.size()) {
    return absl::InternalError(absl::StrCat("the plan's program holds ", program.parameters.size(),
                                            " parameters; module '", module.name, "' has ",
                                            by_fqn.size()));
  }
  return by_fqn;
}

// Holds the new layout of every parameter of `program` in the ledger: `parameters` gets each
// one's entry as it will be, `moves` each relayout; stops at the first refusal.
absl::Status HoldNewLayouts(DTensorTable& tensors, const ModuleEntry& module,
                            const Program& program,
                            const std::map<std::string, std::shared_ptr<DTensorEntry>>& by_fqn,
                            std::vector<std::shared_ptr<DTensorEntry>>& parameters,
                            std::vector<Move>& moves) ABSL_EXCLUSIVE_LOCKS_REQUIRED(module.mu) {
  for (const ProgramParameter& p : program.parameters) {
    auto it = by_fqn.find(p.fqn);
    if (it == by_fqn.end()) {
      return absl::InternalError(
          absl::StrCat("the plan's program has a parameter '", p.fqn, "' the module has not"));
    }
    const std::shared_ptr<DTensorEntry>& from = it->second;
    absl::StatusOr<DTensorSpec> spec =
        MakeDTensorSpec(module.mesh->mesh, p.placements, p.shape, module.dtype);
    if (!spec.ok()) return spec.status();
    if (spec->placements == from->spec.placements) {
      parameters.push_back(from);
      continue;
    }
    absl::StatusOr<RedistributePlan> steps = PlanRedistribute(from->spec, spec->placements);
    absl::StatusOr<std::shared_ptr<DTensorEntry>> to =
        steps.ok() ? tensors.Relayout(*from, *std::move(spec))
                   : absl::StatusOr<std::shared_ptr<DTensorEntry>>(steps.status());
    if (!to.ok()) return to.status();
    parameters.push_back(*to);
    moves.push_back({from, *std::move(to), *std::move(steps)});
  }
  return absl::OkStatus();
}

// Puts back the layouts `moves` held; the module holds the entries put back.
void PutBack(DTensorTable& tensors, ModuleEntry& module, const std::vector<Move>& moves)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(module.mu) {
  for (const Move& m : moves) {
    tensors.Relayout(*m.to, m.from->spec, m.from->write).IgnoreError();
  }
  // The entries put back are new; the module holds them in place of the old ones.
  for (auto& t : module.parameters) {
    if (absl::StatusOr<std::shared_ptr<DTensorEntry>> now = tensors.Find(t->name); now.ok()) {
      t = *std::move(now);
    }
  }
}

// Posts the redistribute of every move to the module's workers.
absl::Status PostMoves(DTensorTable& tensors, const ModuleEntry& module,
                       const std::vector<Move>& moves) {
  for (const Move& m : moves) {
    v1::Command command;
    v1::RedistributeTensor* r = command.mutable_redistribute();
    r->set_mesh_id(module.mesh->id);
    r->set_input(DTensorTable::WorkerName(m.to->name));
    r->set_output(DTensorTable::WorkerName(m.to->name));
    *r->mutable_spec() = ToProto(m.from->spec);
    *r->mutable_plan() = ToProto(m.plan);
    RETURN_IF_ERROR(tensors.PostWrite(*m.to, command, {m.from}));
  }
  return absl::OkStatus();
}

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
  ASSIGN_OR_RETURN(auto by_fqn, ParametersByFqn(module, compiled.program));
  // The ledger first: every parameter's new layout is held before anything is posted, and a
  // refusal puts back the layouts already moved.
  std::vector<std::shared_ptr<DTensorEntry>> parameters;
  std::vector<Move> moves;
  absl::Status status =
      HoldNewLayouts(*tensors_, module, compiled.program, by_fqn, parameters, moves);
  if (!status.ok()) {
    PutBack(*tensors_, module, moves);
    return status;
  }
  DropTrainingState(module);
  RETURN_IF_ERROR(PostMoves(*tensors_, module, moves));
  module.parameters = std::move(parameters);
  module.program = std::move(compiled.program);
  module.plan_json = std::move(compiled.plan_json);
  module.mesh_dim = mesh_dim;
  RETURN_IF_ERROR(programs_->Install(module, module.program, deadline));
  RETURN_IF_ERROR(DTensorTable::AwaitWrites(module.parameters, deadline));
  return module.program.unmatched;
}

}  // namespace tessera
