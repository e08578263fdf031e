// An exported program planned on a mesh in one sharding-propagation pass: from its inputs'
// placements (parameters as a plan lays them out, buffers and constants replicated), every node
// placed as DTensor would run it, with the redistributions its strategy needs, and every value's
// shape and dtype checked against what torch recorded for it.
#ifndef TESSERA_IMPORT_PROGRAM_PLAN_H_
#define TESSERA_IMPORT_PROGRAM_PLAN_H_

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/ops/op_propagation.h"
#include "core/sharding/device_mesh.h"
#include "core/sharding/dtensor_spec.h"
#include "core/sharding/placement.h"
#include "core/sharding/redistribute_planner.h"
#include "import/exported_program.h"

namespace tessera::import {

// One node as it runs: a call of a registered op (its strategy and its inputs' plans), or, for an
// op that decomposes, its graph planned node by node. Exactly one is set.
struct PlannedNode {
  std::optional<ops::PlannedCall> call;
  std::optional<ops::PlannedDecomposition> decomposition;
  // Per output: the redistribution to its pinned layout, run once it is written (nullopt: none).
  std::vector<std::optional<RedistributePlan>> output_moves;
};

struct PlannedProgram {
  std::vector<PlannedNode> nodes;   // one per program node
  std::vector<DTensorSpec> values;  // every value's spec, numbered as the program's values
};

// Plans `program` on `mesh`. `input_placements[i]` lays out input i (one placement per mesh
// dim; an empty list, or a list shorter than the inputs, means Replicate). `pins[v]`, where not
// empty, is the layout value v is redistributed to once written (one entry per mesh dim; nullopt
// keeps that dim as propagation gives it): a styled module's output (program_parallel.h). A
// node's factory (arange, full, ...) is made on `mesh`, replicated.
//
// Before anything is planned, ops the registry lacks are UNIMPLEMENTED, listed by name and node
// count. INVALID_ARGUMENT naming the node (its name, op and module) where a call does not bind or
// its meta refuses it, and where the registry's shape or dtype for a value is not the one the
// archive records (a graph whose shapes disagree); placements that do not fit an input are
// INVALID_ARGUMENT naming it.
absl::StatusOr<PlannedProgram> PlanExportedProgram(
    const ExportedProgram& program, const DeviceMesh& mesh,
    std::span<const std::vector<Placement>> input_placements, ops::ShardingCache& cache,
    std::span<const std::vector<std::optional<Placement>>> pins = {});

// "node 12 'linear_3' (aten::linear) in model.layers.0.mlp.up_proj": how messages name a node.
std::string NodeText(const ExportedProgram& program, int k);

}  // namespace tessera::import

#endif  // TESSERA_IMPORT_PROGRAM_PLAN_H_
