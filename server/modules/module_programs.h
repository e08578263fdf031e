#ifndef TESSERA_SERVER_MODULES_MODULE_PROGRAMS_H_
#define TESSERA_SERVER_MODULES_MODULE_PROGRAMS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/modules/module_program.h"
#include "core/modules/module_spec.h"
#include "core/modules/parallel_plan.h"
#include "core/sharding/device_mesh.h"
#include "server/tables/dtensor_table.h"
#include "server/tables/module_table.h"
#include "tessera/v1/program.pb.h"

namespace tessera {

// A module's plan compiled for its mesh.
struct CompiledPlan {
  Program program;
  std::string plan_json;  // the plan as applied (PlanSpecToJson); empty for no plan
};

// Compiles modules' plans, and installs and drops their programs on the workers of their mesh.
// Thread-safe.
class ModulePrograms {
 public:
  explicit ModulePrograms(DTensorTable* tensors) : tensors_(tensors) {}

  // Compiles `model` for `mesh` under `plan`: parallelize_module's styles (on the mesh dim
  // `mesh_dim` names when not empty: a dim name or index, in place of the plan's), a
  // distribute_module partition, or with neither every parameter Replicate. On an N-D mesh the
  // other mesh dims are data parallel (the compiler averages gradients over them).
  // INVALID_ARGUMENT naming the value the plan cannot take.
  static absl::StatusOr<CompiledPlan> Compile(const ModelSpec& model, PlanSpec plan,
                                              const DeviceMesh& mesh,
                                              const std::string& mesh_dim = "");

  // The program as the workers of `module` run it: every parameter's value, gradient and momentum
  // buffer named.
  static v1::Program ForWorkers(const std::string& module, const Program& program);

  // OK iff `mesh` can run commands; FAILED_PRECONDITION saying why not (a worker lost, its
  // communicators broken and not yet re-formed).
  absl::Status MeshReady(const Mesh& mesh) const;

  // Installs `program` as `module`'s program on every worker of its mesh (an imported module's
  // graph program in its place), after the commands posted before, and waits for that until
  // `deadline`.
  absl::Status Install(const ModuleEntry& module, const Program& program, absl::Time deadline);
  // Drops the module's program on its workers (asynchronously).
  void Drop(const ModuleEntry& module);

 private:
  DTensorTable* tensors_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_MODULES_MODULE_PROGRAMS_H_
