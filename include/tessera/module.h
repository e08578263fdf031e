#ifndef TESSERA_INCLUDE_TESSERA_MODULE_H_
#define TESSERA_INCLUDE_TESSERA_MODULE_H_

// Modules on the service with PyTorch's names: a torch.nn module described by a JSON spec is
// loaded onto a mesh (from a safetensors file, or initialized from a seed), parallelize_module /
// distribute_module shard it by a plan, and its forward and training steps run on the workers
// (one command per worker each). Parameters are DTensors named "<module>.<fqn>" that
// Session::ListTensors and GetTensor see. A module stays on the service until removed; dropping a
// handle leaves it there.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/dtype.h"
#include "core/host_tensor.h"
#include "core/shape.h"
#include "core/sharding/dtensor_spec.h"
#include "core/sharding/placement.h"
#include "tessera/dtensor.h"
#include "tessera/mesh.h"

namespace tessera::client {

class Session;

// How the ranks' local tensors at one edge of a module make the full one: the placement on the
// tensor-parallel mesh dim (the other mesh dims split the batch), and whether torch would hand the
// caller a DTensor (false: local tensors, use_local_output).
struct EdgeLayoutInfo {
  Placement placement = Placement::Replicate();
  bool is_dtensor = true;
};

// One parameter of a module.
struct ModuleParameter {
  std::string fqn;                 // state_dict name ("net1.weight").
  std::string tensor;              // The DTensor holding it ("<module>.<fqn>").
  DTensorSpec spec;                // Full shape, dtype, mesh and placements.
  std::vector<LocalShard> shards;  // Every rank's local shape and offset, in row-major order.
  std::string grad;                // The DTensor holding its gradient; empty before a step.
};

// A published version of a module.
struct PublishedVersion {
  std::string model;
  std::string version;
  int64_t max_batch_size = 0;
  absl::Duration max_queue_delay = absl::ZeroDuration();
};

// A value at an imported program's edge: its name and its layout on the mesh.
struct ProgramEdgeInfo {
  std::string name;
  DTensorSpec spec;
};

// What a module imported from a torch.export program is on its mesh.
struct ImportedInfo {
  std::string source;                    // The archive it came from ("llama.pt2").
  int64_t nodes = 0;                     // Nodes of the program (registered ops).
  std::vector<ProgramEdgeInfo> inputs;   // Its user inputs, in ForwardMany's order.
  std::vector<ProgramEdgeInfo> outputs;  // Its outputs, in ForwardMany's order.
  std::vector<std::string> styled;       // "model.layers.0.self_attn.q_proj: colwise", per module.
  std::string tp_plan_json;              // The Hugging Face tp_plan it was laid out by, if any.
  int64_t collectives = 0;               // Collectives of one forward.
};

// A module as the service holds it.
struct ModuleInfo {
  std::string name;
  std::string mesh;
  std::string spec_json;                    // The spec, every argument written out.
  std::string plan_json;                    // The plan applied; empty for none.
  std::vector<ModuleParameter> parameters;  // In state_dict order.
  DType input_dtype = DType::kFloat32;
  std::vector<int64_t> input_shape;  // -1 where the size varies.
  EdgeLayoutInfo input_layout;
  EdgeLayoutInfo output_layout;
  int tp_mesh_dim = 0;  // The mesh dim the plan's collectives run on.
  DType output_dtype = DType::kFloat32;
  int64_t output_features = 0;         // Full size of the output's last dim.
  std::vector<std::string> unmatched;  // Plan patterns that matched no module.
  std::vector<PublishedVersion> published;
  int64_t program_steps = 0;             // Steps of the compiled forward.
  std::optional<ImportedInfo> imported;  // For a module imported from a program.
};

// Which outputs a forward or step sends back.
enum class Outputs : int {
  kFull = 0,   // The full output, put together by the output layout.
  kLocal = 1,  // Every rank's local output.
  kBoth = 2,
};

// What a forward gave.
struct ModuleOutput {
  EdgeLayoutInfo layout;  // How `locals` make `full`.
  int tp_mesh_dim = 0;
  std::optional<HostTensor> full;  // When asked for.
  std::vector<HostTensor> locals;  // Every rank's, when asked for.
};

// torch.optim.SGD's options (dampening 0, no Nesterov).
struct SgdOptions {
  double lr = 0.01;
  double momentum = 0;
  double weight_decay = 0;
};

// A training step: forward, backward from the loss, then (with `sgd`) the update.
struct StepOptions {
  // The loss is output.sum() when no grad_output is given; otherwise grad_output is the full
  // output's gradient.
  std::optional<HostTensor> grad_output = {};
  std::optional<SgdOptions> sgd = {};  // None: gradients only.
  Outputs outputs = Outputs::kFull;
};

// What a step gave: its forward's output and where the gradients are.
struct StepResult {
  ModuleOutput output;
  std::vector<ModuleParameter> gradients;  // Each parameter with its `grad` DTensor named.
};

// How Publish serves a module (KServe v2 model `model`, version `version`), with Triton's
// dynamic batching: requests joined into batches of at most max_batch_size rows (0: off), the
// oldest waiting at most max_queue_delay.
struct PublishOptions {
  std::string model = {};    // Empty: the module's name.
  std::string version = {};  // Empty: "1".
  int64_t max_batch_size = 0;
  absl::Duration max_queue_delay = absl::Microseconds(500);
};

// Where a loaded module's parameters come from: a safetensors file whose names are the state_dict
// names (streamed, never read whole); a checkpoint directory on the workers' filesystem
// (Module::SaveCheckpoint's, or any checkpoint holding tensors under the state_dict names) that
// the workers read, each only its shard's bytes; or, without either, torch's initialization from
// `seed`.
struct ModuleInit {
  std::string weights_path = {};
  uint64_t seed = 0;
  std::string checkpoint = {};
};

struct LoadModuleOptions {
  std::string plan_json = {};  // A plan applied as the module loads; empty: every parameter
                               // Replicate.
  Progress progress = {};      // Bytes of weights sent, of all.
};

// A handle to a module on the service; copies name the same module. Calls use the session's
// deadline, or kTransferTimeout for those that move tensors.
class Module {
 public:
  Module() = default;

  const std::string& name() const { return info_.name; }
  // What the service said when this handle was made (Show() asks again).
  const ModuleInfo& info() const { return info_; }

  // module(input): the full input, split by the input layout.
  absl::StatusOr<ModuleOutput> Forward(const HostTensor& input,
                                       Outputs outputs = Outputs::kFull) const;
  // module(input) with every rank's local input given (row-major mesh order).
  absl::StatusOr<ModuleOutput> ForwardLocal(std::span<const HostTensor> locals,
                                            Outputs outputs = Outputs::kFull) const;
  // An imported program's forward: the full value of each of its user inputs, in order
  // (info().imported->inputs); the full value of each output, in order.
  absl::StatusOr<std::vector<HostTensor>> ForwardMany(std::span<const HostTensor> inputs) const;
  // A training step on the full input.
  absl::StatusOr<StepResult> Step(const HostTensor& input, const StepOptions& options = {}) const;
  // state_dict(): every parameter whole (with `gradients`, each gradient too, as "<fqn>.grad").
  absl::StatusOr<std::vector<std::pair<std::string, HostTensor>>> StateDict(
      bool gradients = false) const;
  // Writes StateDict() to a safetensors file at `path` (on the client's filesystem).
  absl::Status Save(const std::string& path, bool gradients = false) const;
  // Saves every parameter (with `gradients`, every gradient too, as "<fqn>.grad") into the
  // checkpoint directory `path` on the workers' filesystem (docs/checkpoints.md): every worker
  // writes its own blocks, none passes through the coordinator or the client; the previous
  // checkpoint at `path` stays readable until the new one is complete. LoadModule with
  // ModuleInit::checkpoint reads it back onto any mesh and plan.
  absl::StatusOr<SaveInfo> SaveCheckpoint(const std::string& path, bool gradients = false) const;
  // Serves the forward over KServe v2 (the coordinator's inference endpoint).
  absl::StatusOr<PublishedVersion> Publish(const PublishOptions& options = {}) const;
  // Fresh information: parameters and their layouts, plan, edges.
  absl::StatusOr<ModuleInfo> Show() const;
  // The plan as a plan file; empty when none was applied.
  absl::StatusOr<std::string> ExportPlan() const;
  // Removes the module from the service: its program, parameters, gradients and published
  // versions.
  absl::Status Remove() const;

 private:
  friend struct ModuleAccess;
  std::shared_ptr<Session> session_;
  ModuleInfo info_;
};

// Loads the module `spec_json` describes onto `mesh` as `name`, its parameters from
// `init.weights_path` or `init.seed`. A weights file that does not fit the spec (a parameter
// missing, extra or of another shape) is refused before any of its bytes reaches a worker.
absl::StatusOr<Module> LoadModule(Session& session, const std::string& spec_json, const Mesh& mesh,
                                  const std::string& name, const ModuleInit& init,
                                  const LoadModuleOptions& options = {});
// How LoadExported lays a program out and where its weights come from.
struct LoadExportedOptions {
  std::string plan_json = {};     // A parallelize_module plan file's text; or
  std::string tp_plan_json = {};  // a Hugging Face tp_plan ({"layers.*.self_attn.q_proj":
                                  // "colwise", ...}), its patterns under
  std::string tp_prefix = {};     // this module ("model"). Neither: every parameter Replicate.
  int mesh_dim = -1;              // The plan's mesh dim; -1: the plan file's own, else the last.
  // A Hugging Face checkpoint directory (config.json with model.safetensors or a sharded
  // model.safetensors.index.json): the weights by state_dict name in place of the archive's
  // (ties resolved as the archive stores them); empty: the archive's own.
  std::string checkpoint_dir = {};
  Progress progress = {};  // Bytes of weights sent, of all.
};

// Loads the program of the torch.export archive at `archive_path` (torch.export.save's .pt2)
// onto `mesh` as `name` (docs/import.md): the coordinator reads the program into registered ops
// (UNIMPLEMENTED listing by name and count the ops the registry lacks, nothing loaded), lays it
// out by the plan and plans it in one pass; every parameter, buffer and constant then streams to
// its shards, one tensor read at a time. A weight missing, extra or of another shape is
// INVALID_ARGUMENT naming it, before any byte reaches a worker.
absl::StatusOr<Module> LoadExported(Session& session, const std::string& archive_path,
                                    const Mesh& mesh, const std::string& name,
                                    const LoadExportedOptions& options = {});
// parallelize_module(module, mesh_or_dim, plan): `mesh_or_dim` is the module's mesh name (the
// plan's own mesh dim applies) or a dim of it ("tp", "1"). Returns the module as it is after;
// info().unmatched lists the plan's patterns that matched no module (torch warns of them).
absl::StatusOr<Module> ParallelizeModule(const Module& module, const std::string& mesh_or_dim,
                                         const std::string& plan_json);
// distribute_module(module, mesh, partition): per-parameter placements by FQN pattern.
absl::StatusOr<Module> DistributeModule(const Module& module, const std::string& partition_json);
// An existing module by name; NOT_FOUND naming it if there is none.
absl::StatusOr<Module> GetModule(Session& session, const std::string& name);
// Every module on the service, ordered by name.
absl::StatusOr<std::vector<ModuleInfo>> ListModules(Session& session);
// Removes a module by name.
absl::Status RemoveModule(Session& session, const std::string& name);
// Stops serving `model` (only `version`, when not empty).
absl::Status Unpublish(Session& session, const std::string& model, const std::string& version = "");

}  // namespace tessera::client

#endif  // TESSERA_INCLUDE_TESSERA_MODULE_H_
