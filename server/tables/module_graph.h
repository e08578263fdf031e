#ifndef TESSERA_SERVER_TABLES_MODULE_GRAPH_H_
#define TESSERA_SERVER_TABLES_MODULE_GRAPH_H_

#include <vector>

#include "import/exported_program.h"
#include "import/program_parallel.h"
#include "import/program_plan.h"
#include "tessera/v1/module.pb.h"
#include "tessera/v1/worker.pb.h"

namespace tessera {

// A module imported from a torch.export program (docs/import.md), ready for its mesh: the program
// as read, laid out by its plan, planned in one sharding-propagation pass, and compiled into the
// graph program every worker of the mesh installs (server/modules/graph_modules.h). Made once at
// load (and again at recovery, from `source`); never changed.
struct ModuleGraph {
  v1::ImportedProgram source;  // as the load gave it (recorded)
  import::ExportedProgram program;
  import::ProgramLayout layout;
  import::PlannedProgram planned;
  v1::GraphProgram compiled;
  std::vector<int> user_inputs;  // the program inputs a forward gives, in order
  std::vector<int> weights;      // the others (parameters, buffers, constants), in order: the
                                 // module's parameters
  int64_t collectives = 0;       // of one forward
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TABLES_MODULE_GRAPH_H_
