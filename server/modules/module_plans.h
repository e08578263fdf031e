#ifndef TESSERA_SERVER_MODULES_MODULE_PLANS_H_
#define TESSERA_SERVER_MODULES_MODULE_PLANS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/modules/parallel_plan.h"
#include "server/modules/module_programs.h"
#include "server/tables/dtensor_table.h"
#include "server/tables/module_table.h"

namespace tessera {

// parallelize_module and distribute_module on a loaded module: the plan compiled for its mesh,
// every parameter redistributed in place to its new placements (the DTensor keeps its name), the
// program installed. A plan the compiler refuses, or parameters that would not fit the workers'
// budgets, change nothing. Thread-safe.
class ModulePlans {
 public:
  ModulePlans(DTensorTable* tensors, ModulePrograms* programs)
      : tensors_(tensors), programs_(programs) {}

  // Applies `plan` to `module` (on the mesh dim `mesh_dim` names, when not empty), waiting for
  // the workers until `deadline`; returns the plan's patterns that matched no module.
  absl::StatusOr<std::vector<std::string>> Apply(ModuleEntry& module, PlanSpec plan,
                                                 const std::string& mesh_dim, absl::Time deadline);

  // Frees a module's gradients and SGD momentum buffers (laid out for its current placements).
  void DropTrainingState(ModuleEntry& module) ABSL_EXCLUSIVE_LOCKS_REQUIRED(module.mu);

 private:
  DTensorTable* tensors_;
  ModulePrograms* programs_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_MODULES_MODULE_PLANS_H_
