#ifndef TESSERA_CORE_MODULES_PARALLEL_PLAN_H_
#define TESSERA_CORE_MODULES_PARALLEL_PLAN_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/modules/module_spec.h"
#include "core/sharding/placement.h"

namespace tessera {

// The tensor-parallel styles of torch.distributed.tensor.parallel.
enum class StyleKind : int {
  kColwise,              // ColwiseParallel
  kRowwise,              // RowwiseParallel
  kSequenceParallel,     // SequenceParallel
  kPrepareModuleInput,   // PrepareModuleInput
  kPrepareModuleOutput,  // PrepareModuleOutput
};

// "ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
// "PrepareModuleOutput".
absl::string_view StyleKindName(StyleKind kind);

// A layout on the tensor-parallel mesh dim, or nullopt for torch's None (a non-tensor argument,
// left alone).
using Layout = std::optional<Placement>;

// One style with torch's arguments. Every field holds its effective value: MakeStyle fills
// torch's defaults for the kind, and the plan parser overrides those given.
//   ColwiseParallel:  input_layouts [R], desired_input_layouts [R], output_layouts [S(-1)],
//                     use_local_output true.
//   RowwiseParallel:  input_layouts [S(-1)], desired_input_layouts [S(-1)] (for an Embedding:
//                     input and desired [R]), output_layouts [R], use_local_output true.
//   SequenceParallel: sequence_dim 1, input/desired/output [S(sequence_dim)], use_local_output
//                     false.
//   PrepareModuleInput:  input_layouts, desired_input_layouts as given (same length),
//                        use_local_output false.
//   PrepareModuleOutput: output_layouts, desired_output_layouts as given, use_local_output true.
struct ParallelStyle {
  StyleKind kind = StyleKind::kColwise;
  std::vector<Layout> input_layouts;
  std::vector<Layout> desired_input_layouts;
  std::vector<Layout> output_layouts;
  std::vector<Layout> desired_output_layouts;  // PrepareModuleOutput only
  bool use_local_output = true;
  int sequence_dim = 1;  // SequenceParallel only
};

// A style of `kind` with torch's defaults. RowwiseParallel's are a Linear's: which module a style
// lands on is not known here, so the compiler applies the Embedding case above.
ParallelStyle MakeStyle(StyleKind kind);

// A parallelize_module plan: FQN patterns to styles, in the order given, on one mesh dim.
struct ParallelizePlan {
  // The tensor-parallel mesh dim: a name ("tp") or, when empty, `mesh_dim_index` (0 on a 1-D
  // mesh).
  std::string mesh_dim_name;
  int mesh_dim_index = 0;
  // Pattern -> style. The pattern "" applies the style to the root module itself, as
  // parallelize_module(module, mesh, ColwiseParallel()) does.
  std::vector<std::pair<std::string, ParallelStyle>> styles;
};

// A distribute_module partition: per-parameter placements on the whole mesh (one per mesh dim)
// by FQN pattern (matched token by token as a parallelize plan's), first match wins; a parameter
// no pattern matches is Replicate on every dim.
struct DistributePlan {
  std::vector<std::pair<std::string, std::vector<Placement>>> placements;
};

// Either kind of plan, as a plan file holds it.
struct PlanSpec {
  std::optional<ParallelizePlan> parallelize;
  std::optional<DistributePlan> distribute;
};

// Parses a plan file (JSON; docs/modules.md):
//   {"mesh_dim": "tp" | 0,
//    "plan": {"net1": {"style": "ColwiseParallel", "output_layouts": "Replicate()"},
//             "net2": "RowwiseParallel", ...}}
// or {"plan": "RowwiseParallel"} (a style for the root), or
//   {"distribute": {"net1.weight": ["Shard(0)"], "*.bias": "Replicate()"}}.
// Layouts are placement strings in Tessera's or torch's spelling, a list of them, or null for
// None. INVALID_ARGUMENT naming the key and value for an unknown style or argument, a bad
// placement, an argument the style does not take, or lists of different lengths.
absl::StatusOr<PlanSpec> ParsePlanSpec(absl::string_view json);
// The plan as JSON that ParsePlanSpec reads back to an equal plan (every argument written out).
std::string PlanSpecToJson(const PlanSpec& plan);

// Python's fnmatch.fnmatchcase of one name against one pattern token: "*", "?", "[seq]",
// "[!seq]", case-sensitive; no escapes.
bool FnMatch(absl::string_view pattern, absl::string_view name);

// Where each pattern of a plan lands, as parallelize_module walks the tree: the pattern is split
// on "." and each token matched with FnMatch against the children's names, level by level.
struct PlanMatch {
  // (module FQN, index into plan.styles), in named_modules() order.
  std::vector<std::pair<std::string, int>> assigned;
  // Patterns that matched no module (torch warns; Tessera reports them to the caller).
  std::vector<std::string> unmatched;
};
// INVALID_ARGUMENT naming the module and both patterns if two patterns land on one module, and
// naming the module, its type and the style if a style cannot apply to it: Colwise and Rowwise
// need a Linear or an Embedding; SequenceParallel a LayerNorm, RMSNorm or Dropout (or a module
// without parameters).
absl::StatusOr<PlanMatch> MatchPlan(const ModuleSpec& root, const ParallelizePlan& plan);

// The placements (one per mesh dim, `mesh_ndim` of them) of every parameter under a
// distribute_module partition, in NamedParameters order; INVALID_ARGUMENT naming the parameter
// if a placement list has the wrong length or shards a dim the parameter does not have.
absl::StatusOr<std::vector<std::pair<std::string, std::vector<Placement>>>> DistributePlacements(
    const ModuleSpec& root, const DistributePlan& plan, int mesh_ndim);

}  // namespace tessera

#endif  // TESSERA_CORE_MODULES_PARALLEL_PLAN_H_
