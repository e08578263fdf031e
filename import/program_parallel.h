// Tensor-parallel plans for an exported program: a parallelize_module plan (core/modules/
// parallel_plan.h) or a Hugging Face tp_plan ({"layers.*.self_attn.q_proj": "colwise", ...}, the
// style strings of transformers' tensor-parallel integration), matched on the program's module
// FQNs, giving each parameter its placements on the tensor-parallel mesh dim and each styled
// module's output the layout the style redistributes it to.
#ifndef TESSERA_IMPORT_PROGRAM_PARALLEL_H_
#define TESSERA_IMPORT_PROGRAM_PARALLEL_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/modules/parallel_plan.h"
#include "core/sharding/device_mesh.h"
#include "core/sharding/placement.h"
#include "import/exported_program.h"
#include "nlohmann/json.hpp"

namespace tessera::import {

// How a style lays out the module it lands on, whichever plan named it.
struct ModuleStyle {
  enum class Kind {
    kColwise,           // a Linear's weight and bias Shard(0) (a Conv1D's weight Shard(1)); an
                        // Embedding's weight Shard(1)
    kRowwise,           // a Linear's weight Shard(1), bias Replicate (a Conv1D's weight Shard(0));
                        // an Embedding's weight Shard(0) (vocab-parallel)
    kSequenceParallel,  // parameters Replicate (a norm, a dropout)
    kReplicate,         // parameters Replicate
  };
  Kind kind = Kind::kReplicate;
  // The layout the module's output is redistributed to on the tp mesh dim; nullopt: as sharding
  // propagation leaves it.
  std::optional<Placement> output;
  std::string name;  // as the plan spelled it ("colwise_gather_output", "RowwiseParallel")
};

// FQN patterns (matched token by token with fnmatch, "" the root) to styles, on one mesh dim.
struct ProgramPlan {
  int tp_mesh_dim = 0;
  std::vector<std::pair<std::string, ModuleStyle>> styles;
};

// A parallelize_module plan as a program plan on `mesh` (its mesh dim by name or index):
// ColwiseParallel, RowwiseParallel and SequenceParallel with their output_layouts.
// INVALID_ARGUMENT naming a mesh dim the mesh lacks; UNIMPLEMENTED for PrepareModuleInput and
// PrepareModuleOutput, which program plans do not take yet.
absl::StatusOr<ProgramPlan> ProgramPlanOf(const ParallelizePlan& plan, const DeviceMesh& mesh);

// A Hugging Face tp_plan (an object of pattern to style string) as a program plan on mesh dim
// `tp_mesh_dim`, each pattern under `prefix` (a model's base_model_tp_plan is relative to its base
// model: "model" for Llama). The strings as transformers reads them: colwise (output Shard(-1)),
// colwise_rep and colwise_gather_output (output Replicate), rowwise, rowwise_rep and
// rowwise_split_input (output Replicate), embedding_rowwise and embedding_colwise (output
// Replicate), sequence_parallel, replicate, replicated_with_grad_allreduce. INVALID_ARGUMENT naming
// the pattern and the string for one it does not know or that is not a string; UNIMPLEMENTED for
// packed_colwise and packed_rowwise (each packed part sharded on its own: a layout no placement
// here expresses yet).
absl::StatusOr<ProgramPlan> ParseHfTpPlan(const nlohmann::json& tp_plan, const std::string& prefix,
                                          int tp_mesh_dim);

// A plan as its text gives it: a parallelize_module plan file (`plan_json`) or a Hugging Face
// tp_plan (`tp_plan_json`, under `prefix`), at most one of them; neither: nullopt (every parameter
// replicated). On mesh dim `mesh_dim`, or where it is -1 the plan file's own, else the mesh's last
// dim. INVALID_ARGUMENT naming what does not parse, a partition plan, both plans given, a mesh dim
// the mesh lacks.
absl::StatusOr<std::optional<ProgramPlan>> ProgramPlanFromText(const std::string& plan_json,
                                                               const std::string& tp_plan_json,
                                                               const std::string& prefix,
                                                               int mesh_dim,
                                                               const DeviceMesh& mesh);

// What a plan gives a program on a mesh: placements for every input (parameters as their
// module's style lays them out, everything else Replicate) and, per value, the layout it is
// redistributed to once written (empty: none; else one entry per mesh dim, nullopt where that
// mesh dim is left as propagation gives it).
struct ProgramLayout {
  std::vector<std::vector<Placement>> inputs;
  std::vector<std::vector<std::optional<Placement>>> pins;
  std::vector<std::pair<std::string, std::string>> assigned;  // (module FQN, style name)
  std::vector<std::string> unmatched;                         // patterns matching no module
};

// Lays `program` out on `mesh` by `plan`. A module's output values are the values its nodes (and
// its submodules') write that a node outside it reads, or that the program returns.
// INVALID_ARGUMENT naming the module, its class and the style where the style cannot apply (a
// Colwise or Rowwise style on anything but a Linear, a Conv1D or an Embedding), where two patterns
// land on one module, and where a parameter cannot take its placements.
absl::StatusOr<ProgramLayout> LayOutProgram(const ExportedProgram& program, const ProgramPlan& plan,
                                            const DeviceMesh& mesh);

}  // namespace tessera::import

#endif  // TESSERA_IMPORT_PROGRAM_PARALLEL_H_
