#include "server/modules/module_programs.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "proto/convert.h"

namespace tessera {
namespace {

// Points `plan` at the mesh dim `mesh_dim` names (a dim name or index of `mesh`).
absl::Status UseMeshDim(const DeviceMesh& mesh, const std::string& mesh_dim,
                        ParallelizePlan& plan) {
  int index = 0;
  if (absl::SimpleAtoi(mesh_dim, &index)) {
    if (index < 0 || index >= mesh.ndim()) {
      return absl::InvalidArgumentError(
          absl::StrCat("mesh dim ", index, " is not a dim of ", mesh.ToString()));
    }
    plan.mesh_dim_name.clear();
    plan.mesh_dim_index = index;
    return absl::OkStatus();
  }
  if (!mesh.DimIndex(mesh_dim).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("mesh dim '", mesh_dim, "' is not a dim of ", mesh.ToString()));
  }
  plan.mesh_dim_name = mesh_dim;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CompiledPlan> ModulePrograms::Compile(const ModelSpec& model, PlanSpec plan,
                                                     const DeviceMesh& mesh,
                                                     const std::string& mesh_dim) {
  CompiledPlan out;
  if (plan.distribute.has_value()) {
    if (!mesh_dim.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a distribute_module partition places parameters on every mesh dim; mesh "
                       "dim '",
                       mesh_dim, "' cannot be chosen for it"));
    }
    ASSIGN_OR_RETURN(out.program, CompileDistribute(model, *plan.distribute, mesh));
    out.plan_json = PlanSpecToJson(plan);
    return out;
  }
  const bool given = plan.parallelize.has_value();
  ParallelizePlan& styles = given ? *plan.parallelize : plan.parallelize.emplace();
  if (!mesh_dim.empty()) RETURN_IF_ERROR(UseMeshDim(mesh, mesh_dim, styles));
  ASSIGN_OR_RETURN(out.program, CompileParallelize(model, styles, mesh));
  if (given) out.plan_json = PlanSpecToJson(plan);
  return out;
}

v1::Program ModulePrograms::ForWorkers(const std::string& module, const Program& program) {
  std::vector<ParameterTensors> tensors;
  for (const ProgramParameter& p : program.parameters) {
    tensors.push_back({DTensorTable::WorkerName(ParameterTensorName(module, p.fqn)),
                       DTensorTable::WorkerName(GradientTensorName(module, p.fqn)),
                       MomentumWorkerName(module, p.fqn)});
  }
  return ToProto(program, tensors);
}

absl::Status ModulePrograms::MeshReady(const Mesh& mesh) const {
  absl::Status health = tensors_->meshes().Health(mesh);
  if (health.ok()) return health;
  return absl::FailedPreconditionError(
      absl::StrCat("mesh '", mesh.name, "' is not ready: ", health.message()));
}

absl::Status ModulePrograms::Install(const ModuleEntry& module, const Program& program,
                                     absl::Time deadline) {
  v1::Command command;
  if (module.graph != nullptr) {
    v1::LoadGraph* load = command.mutable_load_graph();
    load->set_mesh_id(module.mesh->id);
    load->set_program_id(module.program_id);
    *load->mutable_graph() = module.graph->compiled;
  } else {
    v1::LoadProgram* load = command.mutable_load_program();
    load->set_mesh_id(module.mesh->id);
    load->set_program_id(module.program_id);
    *load->mutable_program() = ForWorkers(module.name, program);
  }
  auto write = std::make_shared<TensorWrite>();
  tensors_->Post(*module.mesh, command, write);
  if (!write->done.WaitForNotificationWithDeadline(deadline)) {
    return absl::DeadlineExceededError(absl::StrCat("installing the program of module '",
                                                    module.name, "' on mesh '", module.mesh->name,
                                                    "' ran past the call's deadline"));
  }
  if (!write->status.ok()) {
    return WithContext(absl::StrCat("installing the program of module '", module.name, "'"),
                       write->status);
  }
  return absl::OkStatus();
}

void ModulePrograms::Drop(const ModuleEntry& module) {
  if (!tensors_->meshes().Workers(*module.mesh).ok()) return;  // the workers are gone
  v1::Command command;
  command.mutable_drop_program()->set_program_id(module.program_id);
  tensors_->Post(*module.mesh, command, std::make_shared<TensorWrite>());
}

}  // namespace tessera
