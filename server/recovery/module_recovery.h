#ifndef TESSERA_SERVER_RECOVERY_MODULE_RECOVERY_H_
#define TESSERA_SERVER_RECOVERY_MODULE_RECOVERY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "server/cluster/state_store.h"
#include "server/modules/graph_modules.h"
#include "server/modules/module_programs.h"
#include "server/tables/dtensor_table.h"
#include "server/tables/module_table.h"
#include "tessera/v1/state.pb.h"

namespace tessera {

// Brings back the modules a state store recorded before a coordinator restart, once their meshes
// and parameters' DTensors are back: each module's program compiled again from its spec and plan
// (or the plan it was being given, if its parameters all moved to that one already) and installed
// on its workers, its parameters (and gradients) found by name, its published
// versions served again. A module whose parameter did not come back whole (a block lost with its
// worker, a relayout cut short by the restart) answers DATA_LOSS naming the parameter, and can
// only be removed. While a module is being recovered its name answers UNAVAILABLE.
class ModuleRecovery {
 public:
  // Serves a published version of a recovered module; the caller holds the module's mu.
  using Publish =
      std::function<absl::Status(std::shared_ptr<ModuleEntry>, const v1::PublishedVersion&)>;

  ModuleRecovery(DTensorTable* tensors, ModuleTable* modules, ModulePrograms* programs,
                 Publish publish)
      : tensors_(tensors), modules_(modules), programs_(programs), publish_(std::move(publish)) {}

  // Reads the module records of `store`; call before serving. UNAVAILABLE if the store cannot be
  // read, INVALID_ARGUMENT naming a record that cannot be parsed.
  absl::Status Load(StateStore& store);
  // Recovers every module read; call once the meshes and tensors are recovered.
  void RestoreAll();
  // Brings the module of `record` back onto its mesh as it is now (set up again after a worker
  // came back, its tensors moved onto it), as a recovery does: its program installed anew, its
  // versions served again, DATA_LOSS naming a parameter that could not be repaired. The module
  // it replaces must be marked removed, its versions unpublished, by the caller.
  absl::Status Reinstall(const v1::ModuleRecord& record) { return Restore(record); }

 private:
  // Whether every parameter of `module` is back laid out as `program` places it.
  bool Follows(const std::string& module, const Program& program) const;
  // Recovers the module of `record`; an error if it could not be entered at all.
  absl::Status Restore(const v1::ModuleRecord& record);
  // Restore for a module imported from a program: built again from the recorded program and plan
  // for `mesh`, its parameters found, its graph program installed anew.
  absl::Status RestoreImported(const v1::ModuleRecord& record, std::shared_ptr<Mesh> mesh);
  // Restore's parts, each called under the module's mu.
  // Finds the parameters of `module`'s program by name; DATA_LOSS naming the first that is not
  // back whole, laid out as the program places it.
  absl::Status FindParameters(ModuleEntry& module) ABSL_EXCLUSIVE_LOCKS_REQUIRED(module.mu);
  // Finds `module`'s gradients, kept only if they and (`parameters_whole`) its parameters are all
  // back whole and laid out alike; else released.
  void FindGradients(ModuleEntry& module, bool parameters_whole)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(module.mu);
  // Serves `record`'s published versions of `module` again if it is `usable`; lists them in it.
  void ServeAgain(const std::shared_ptr<ModuleEntry>& module, const v1::ModuleRecord& record,
                  bool usable) ABSL_EXCLUSIVE_LOCKS_REQUIRED(module->mu);

  DTensorTable* tensors_;
  ModuleTable* modules_;
  ModulePrograms* programs_;
  const Publish publish_;
  std::map<std::string, v1::ModuleRecord> recorded_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_RECOVERY_MODULE_RECOVERY_H_
