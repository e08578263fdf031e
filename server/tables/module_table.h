#ifndef TESSERA_SERVER_TABLES_MODULE_TABLE_H_
#define TESSERA_SERVER_TABLES_MODULE_TABLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/dtype.h"
#include "core/modules/module_program.h"
#include "core/modules/module_spec.h"
#include "server/cluster/state_store.h"
#include "server/tables/dtensor_table.h"
#include "server/tables/mesh_table.h"
#include "server/tables/module_graph.h"
#include "tessera/v1/module.pb.h"
#include "tessera/v1/state.pb.h"

namespace tessera {

// A module on the coordinator: its spec, its plan and the program compiled from them for its mesh,
// and its parameters held as DTensors ("<module>.<fqn>"). What is set at load never changes; the
// rest changes under `mu`, held exclusively by what changes the module (a plan, a training step,
// removal) and shared by what only reads it (forwards, show, save).
struct ModuleEntry {
  ModuleEntry(std::string name, std::shared_ptr<Mesh> mesh, ModelSpec spec, std::string spec_json,
              int64_t program_id);
  // A module imported from a program: `graph` set, its spec empty.
  ModuleEntry(std::string name, std::shared_ptr<Mesh> mesh,
              std::shared_ptr<const ModuleGraph> graph, int64_t program_id);

  const std::string name;
  const std::shared_ptr<Mesh> mesh;
  const ModelSpec spec;
  const std::string spec_json;  // as ModelSpecToJson writes it
  const DType dtype;            // of every parameter (ParameterDType)
  const int64_t program_id;     // the workers' id of its program
  // An imported program (its program's parameters listed in `program.parameters`, its forward
  // the graph's); null for a module made from a spec.
  const std::shared_ptr<const ModuleGraph> graph;

  mutable absl::Mutex mu;
  std::string plan_json ABSL_GUARDED_BY(mu);  // as PlanSpecToJson writes it; empty: no plan
  std::string mesh_dim ABSL_GUARDED_BY(mu);   // the mesh dim the plan was applied on, as given
  Program program ABSL_GUARDED_BY(mu);
  // One per Program::parameters entry, in that order.
  std::vector<std::shared_ptr<DTensorEntry>> parameters ABSL_GUARDED_BY(mu);
  // The same order, once a step wrote them; empty before.
  std::vector<std::shared_ptr<DTensorEntry>> gradients ABSL_GUARDED_BY(mu);
  bool momentum ABSL_GUARDED_BY(mu) = false;  // SGD momentum buffers exist on the workers
  std::vector<v1::PublishedVersion> published ABSL_GUARDED_BY(mu);
  bool removed ABSL_GUARDED_BY(mu) = false;
};

// The names of what a module holds. Parameters and gradients are DTensors any client can read;
// momentum buffers are worker-side tensors only.
std::string ParameterTensorName(const std::string& module, const std::string& fqn);
std::string GradientTensorName(const std::string& module, const std::string& fqn);
std::string MomentumWorkerName(const std::string& module, const std::string& fqn);
// The owner of a module's DTensors: no client, so no lease reclaims them and no client frees them.
std::string ModuleOwner(const std::string& module);

// Every module by name, and the names of modules being loaded. Thread-safe.
class ModuleTable : public MeshUser {
 public:
  // Called for each published version of a module that goes with its mesh.
  using Unpublish = std::function<void(const v1::PublishedVersion&)>;
  explicit ModuleTable(Unpublish unpublish = nullptr) : unpublish_(std::move(unpublish)) {}

  // OK iff `name` can name a module: 1 to 100 letters, digits, '_' and '-'; else
  // INVALID_ARGUMENT naming it.
  static absl::Status CheckName(const std::string& name);

  // Records every module (ModuleRecord) in `store` when Persist is called, and erases the record
  // when Unrecord is called or its mesh goes (ForgetMesh); null: nothing is recorded.
  void RecordIn(StateStore* store) { store_ = store; }
  // Writes the record of `module` (durably, before returning) if a store is set.
  absl::Status Persist(const ModuleEntry& module) const ABSL_SHARED_LOCKS_REQUIRED(module.mu);
  // Writes the record of `module` with `plan_json` on mesh dim `mesh_dim` as the plan being
  // applied, before its parameters move.
  absl::Status PersistPending(const ModuleEntry& module, const std::string& plan_json,
                              const std::string& mesh_dim) const
      ABSL_SHARED_LOCKS_REQUIRED(module.mu);
  // Erases the record of the module `name`, logging a failure. Called with the module's mu held
  // once it is marked removed, so that no Persist (which checks `removed`) writes it again.
  void Unrecord(const std::string& name) const;
  // The record of `module` as Persist writes it.
  static v1::ModuleRecord Record(const ModuleEntry& module) ABSL_SHARED_LOCKS_REQUIRED(module.mu);
  // Names being recovered after a coordinator restart answer UNAVAILABLE until DoneRecovering
  // (NOT_FOUND after, if they were not recovered).
  void SetRecovering(std::set<std::string> names);
  void DoneRecovering(const std::string& name);
  // Enters a module recovered from its record (in place of one of the same name: a module moved
  // onto its mesh set up again); with `lost` not OK, Find answers `lost` for it (DATA_LOSS naming
  // the parameter it lost) and only removing it works.
  void CommitRecovered(std::shared_ptr<ModuleEntry> module, absl::Status lost);

  // Holds `name` for a module being loaded; ALREADY_EXISTS if a module or a load has it.
  absl::Status Reserve(const std::string& name);
  // Gives back a reserved name (the load failed).
  void Unreserve(const std::string& name);
  // Enters a loaded module under the name it reserved.
  void Commit(std::shared_ptr<ModuleEntry> module);
  // The named module; NOT_FOUND if unknown, UNAVAILABLE while it is recovered, its loss if it
  // lost a parameter at recovery.
  absl::StatusOr<std::shared_ptr<ModuleEntry>> Find(const std::string& name) const;
  // Removes the named module from the table and returns it (its caller marks it removed, erases
  // its record and frees what it holds); NOT_FOUND if unknown.
  absl::StatusOr<std::shared_ptr<ModuleEntry>> Take(const std::string& name);
  // Every module, ordered by name.
  std::vector<std::shared_ptr<ModuleEntry>> List() const;
  // A fresh id for a module's program on the workers.
  int64_t NextProgramId();

  // Drops the modules on `mesh` (their DTensors go with the mesh's tensors) and their published
  // versions; returns their momentum buffers' worker-side names.
  std::vector<std::string> ForgetMesh(const Mesh& mesh) override;

  // The module as ShowModule replies (its parameters, plan and edge layouts).
  static v1::ModuleInfo Describe(const ModuleEntry& module);

 private:
  const Unpublish unpublish_;
  StateStore* store_ = nullptr;
  mutable absl::Mutex mu_;
  std::set<std::string> recovering_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Status> lost_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<ModuleEntry>> modules_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> loading_ ABSL_GUARDED_BY(mu_);
  int64_t next_program_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TABLES_MODULE_TABLE_H_
