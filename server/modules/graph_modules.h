// Modules imported from torch.export programs, as the coordinator makes them ready for a mesh:
// the program read from its JSON into registered ops, laid out by its plan, planned in one
// sharding-propagation pass (import/), and compiled into one graph program of RunOp,
// RedistributeTensor and DeleteTensors steps that every worker of the mesh installs and runs
// whole for a forward (one RunGraph command per worker).
#ifndef TESSERA_SERVER_MODULES_GRAPH_MODULES_H_
#define TESSERA_SERVER_MODULES_GRAPH_MODULES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/modules/module_program.h"
#include "core/sharding/device_mesh.h"
#include "server/tables/module_graph.h"
#include "tessera/v1/module.pb.h"

namespace tessera {

// The largest program JSON a load takes.
inline constexpr int64_t kMaxProgramJsonBytes = int64_t{256} << 20;

// `source` made ready for `mesh` (id `mesh_id`) as module `module`, its graph program to be
// installed under `program_id`; `plan_json` is a parallelize_module plan (with source's tp_plan
// empty). UNIMPLEMENTED listing the ops the registry lacks by name and count, before anything
// else; INVALID_ARGUMENT naming what the program, the plan or the mesh cannot take (a node, a
// style on a module it cannot style, a graph whose shapes disagree, heads that do not divide).
absl::StatusOr<std::shared_ptr<const ModuleGraph>> BuildModuleGraph(
    const v1::ImportedProgram& source, const std::string& plan_json, const DeviceMesh& mesh,
    int64_t mesh_id, const std::string& module, int64_t program_id);

// The module's parameters as ModuleEntry::program lists them: every program input but the user
// inputs, by state_dict name, with its full shape and its placements on the mesh.
std::vector<ProgramParameter> GraphParameters(const ModuleGraph& graph);

// The graph program compiled for the workers (exposed for tests): every value a local tensor
// under "graph/<program_id>/", parameters under their DTensors' worker names, each value freed
// after the last step that reads it.
v1::GraphProgram CompileGraph(const import::ExportedProgram& program,
                              const import::PlannedProgram& planned, int64_t mesh_id,
                              const std::string& module, int64_t program_id);

}  // namespace tessera

#endif  // TESSERA_SERVER_MODULES_GRAPH_MODULES_H_
