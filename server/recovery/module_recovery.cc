#include "server/recovery/module_recovery.h"

#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/sharding/placement.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

// How long a recovered module's program may take to install on its workers.
constexpr absl::Duration kInstallWait = absl::Seconds(60);

// `model` compiled for `mesh` under the plan `plan_json` (empty: none) on `mesh_dim`.
absl::StatusOr<CompiledPlan> CompileRecorded(const ModelSpec& model, const std::string& plan_json,
                                             const DeviceMesh& mesh, const std::string& mesh_dim) {
  PlanSpec plan;
  if (!plan_json.empty()) {
    absl::StatusOr<PlanSpec> parsed = ParsePlanSpec(plan_json);
    if (!parsed.ok()) return WithContext("plan", parsed.status());
    plan = *std::move(parsed);
  }
  return ModulePrograms::Compile(model, std::move(plan), mesh, mesh_dim);
}

}  // namespace

bool ModuleRecovery::Follows(const std::string& module, const Program& program) const {
  for (const ProgramParameter& p : program.parameters) {
    absl::StatusOr<std::shared_ptr<DTensorEntry>> t =
        tensors_->Find(ParameterTensorName(module, p.fqn));
    if (!t.ok() || (*t)->spec.placements != p.placements) return false;
  }
  return true;
}

absl::Status ModuleRecovery::Load(StateStore& store) {
  ASSIGN_OR_RETURN(auto records, store.Load("module"));
  std::set<std::string> names;
  for (const auto& [name, bytes] : records) {
    if (!recorded_[name].ParseFromString(bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(store.path(), ": module record '", name, "' cannot be parsed"));
    }
    names.insert(name);
  }
  modules_->SetRecovering(std::move(names));
  return absl::OkStatus();
}

void ModuleRecovery::RestoreAll() {
  for (const auto& [name, record] : recorded_) {
    if (absl::Status s = Restore(record); !s.ok()) {
      spdlog::error("module '{}' was not recovered: {}", name, s.ToString());
    }
    modules_->DoneRecovering(name);
  }
  if (!recorded_.empty()) spdlog::info("{} modules recovered", recorded_.size());
}

absl::Status ModuleRecovery::FindParameters(ModuleEntry& module) {
  absl::Status lost;
  for (const ProgramParameter& p : module.program.parameters) {
    const std::string tensor = ParameterTensorName(module.name, p.fqn);
    absl::StatusOr<std::shared_ptr<DTensorEntry>> t = tensors_->Find(tensor);
    absl::Status why;
    if (!t.ok()) {
      why = absl::DataLossError(
          absl::StrCat("its tensor '", tensor, "' did not come back: ", t.status().message()));
    } else if ((*t)->spec.placements != p.placements) {
      why = absl::DataLossError(absl::StrCat(
          "its tensor '", tensor, "' is laid out ", PlacementsToString((*t)->spec.placements),
          ", not ", PlacementsToString(p.placements), " as the module's plan places it"));
    } else if (absl::Status usable = tensors_->Usable(tensor).status();
               usable.code() == absl::StatusCode::kDataLoss) {
      // A block lost with its worker (dead during the outage, or back without it).
      why = usable;
    }
    if (t.ok()) module.parameters.push_back(*t);
    if (lost.ok() && !why.ok()) {
      lost = absl::DataLossError(absl::StrCat("module '", module.name, "' lost its parameter '",
                                              p.fqn, "': ", why.message()));
    }
  }
  return lost;
}

void ModuleRecovery::FindGradients(ModuleEntry& module, bool parameters_whole) {
  std::vector<std::shared_ptr<DTensorEntry>> gradients;
  for (size_t i = 0; i < module.program.parameters.size(); ++i) {
    const ProgramParameter& p = module.program.parameters[i];
    absl::StatusOr<std::shared_ptr<DTensorEntry>> g =
        tensors_->Find(GradientTensorName(module.name, p.fqn));
    if (g.ok()) gradients.push_back(*g);
  }
  bool whole = parameters_whole && gradients.size() == module.parameters.size();
  for (size_t i = 0; whole && i < gradients.size(); ++i) {
    whole =
        gradients[i]->name == GradientTensorName(module.name, module.program.parameters[i].fqn) &&
        gradients[i]->spec.placements == module.parameters[i]->spec.placements &&
        gradients[i]->write->status.ok();
  }
  if (whole) {
    module.gradients = std::move(gradients);
  } else {
    for (const auto& g : gradients) tensors_->Release(*g);
  }
}

void ModuleRecovery::ServeAgain(const std::shared_ptr<ModuleEntry>& module,
                                const v1::ModuleRecord& record, bool usable) {
  for (const v1::PublishedVersion& p : record.published()) {
    // A module that cannot run keeps its versions in its record but serves none of them.
    if (usable) {
      if (absl::Status s = publish_(module, p); !s.ok()) {
        spdlog::error("module '{}': version {} of model '{}' is not served again: {}",
                      record.name(), p.version(), p.model(), s.ToString());
        continue;
      }
    }
    module->published.push_back(p);
  }
}

absl::Status ModuleRecovery::Restore(const v1::ModuleRecord& record) {
  const std::string& name = record.name();
  ASSIGN_OR_RETURN(std::shared_ptr<Mesh> mesh, tensors_->meshes().Find(record.mesh()));
  if (record.has_program()) return RestoreImported(record, std::move(mesh));
  absl::StatusOr<ModelSpec> spec = ParseModelSpec(record.spec_json());
  if (!spec.ok()) return WithContext("module spec", spec.status());
  ASSIGN_OR_RETURN(CompiledPlan compiled,
                   CompileRecorded(*spec, record.plan_json(), mesh->mesh, record.mesh_dim()));
  std::string mesh_dim = record.mesh_dim();
  // A plan being applied when the coordinator stopped: the module takes it if its parameters all
  // moved to it already (else they follow the recorded plan, or their moves were cut short).
  if (record.has_pending_plan()) {
    absl::StatusOr<CompiledPlan> pending =
        CompileRecorded(*spec, record.pending_plan_json(), mesh->mesh, record.pending_mesh_dim());
    if (pending.ok() && Follows(name, pending->program)) {
      compiled = *std::move(pending);
      mesh_dim = record.pending_mesh_dim();
    }
  }
  auto module = std::make_shared<ModuleEntry>(name, mesh, *std::move(spec), record.spec_json(),
                                              modules_->NextProgramId());
  absl::MutexLock lock(&module->mu);
  module->plan_json = std::move(compiled.plan_json);
  module->mesh_dim = mesh_dim;
  module->program = std::move(compiled.program);
  // Each parameter must be back with the layout the plan gives it and every block held.
  absl::Status lost = FindParameters(*module);
  // Gradients come back only whole: a step cut short by the restart leaves none.
  FindGradients(*module, lost.ok());
  // SGD momentum buffers are worker-side tensors no record names: the workers dropped them.
  module->momentum = false;
  if (lost.ok()) lost = programs_->MeshReady(*mesh);
  if (lost.ok()) {
    lost = programs_->Install(*module, module->program, absl::Now() + kInstallWait);
  }
  ServeAgain(module, record, lost.ok());
  if (!lost.ok()) spdlog::error("module '{}' recovered unusable: {}", name, lost.ToString());
  // The plan it took, no longer pending.
  if (record.has_pending_plan()) RETURN_IF_ERROR(modules_->Persist(*module));
  modules_->CommitRecovered(module, std::move(lost));
  return absl::OkStatus();
}

absl::Status ModuleRecovery::RestoreImported(const v1::ModuleRecord& record,
                                             std::shared_ptr<Mesh> mesh) {
  const std::string& name = record.name();
  const int64_t program_id = modules_->NextProgramId();
  ASSIGN_OR_RETURN(std::shared_ptr<const ModuleGraph> graph,
                   BuildModuleGraph(record.program(), record.plan_json(), mesh->mesh, mesh->id,
                                    name, program_id));
  auto module = std::make_shared<ModuleEntry>(name, mesh, std::move(graph), program_id);
  absl::MutexLock lock(&module->mu);
  module->plan_json = record.plan_json();
  module->program.parameters = GraphParameters(*module->graph);
  // Each parameter must be back with the layout its plan gives it and every block held.
  absl::Status lost = FindParameters(*module);
  if (lost.ok()) lost = programs_->MeshReady(*mesh);
  if (lost.ok()) lost = programs_->Install(*module, module->program, absl::Now() + kInstallWait);
  ServeAgain(module, record, lost.ok());
  if (!lost.ok()) spdlog::error("module '{}' recovered unusable: {}", name, lost.ToString());
  modules_->CommitRecovered(module, std::move(lost));
  return absl::OkStatus();
}

}  // namespace tessera
