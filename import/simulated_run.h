// A planned exported program run on a simulated mesh in one process, as the workers of a mesh
// would run it: every value held as each rank's shard, each node's inputs redistributed by its
// plan (SimulatedMesh moves the blocks), each rank's part computed by the kernels' local calls
// (kernels/aten/local_call.h). `tessera import run` and the import tests compare its outputs
// with one process's and with transformers' own.
#ifndef TESSERA_IMPORT_SIMULATED_RUN_H_
#define TESSERA_IMPORT_SIMULATED_RUN_H_

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/host_tensor.h"
#include "import/exported_program.h"
#include "import/program_plan.h"
#include "kernels/backend.h"

namespace tessera::import {

// What a run gives: the full value of each program output, and the bytes its nodes'
// redistributions moved between ranks (the outputs' gathering not counted).
struct SimulatedRun {
  std::vector<HostTensor> outputs;
  int64_t bytes_moved = 0;
};

// Runs `planned` (PlanExportedProgram of `program`) with `inputs`, the full value of each program
// input in order, distributed as the plan lays them out.
absl::StatusOr<SimulatedRun> RunOnSimulatedMesh(kernels::KernelBackend& backend,
                                                const ExportedProgram& program,
                                                const PlannedProgram& planned,
                                                std::span<const HostTensor> inputs);

}  // namespace tessera::import

#endif  // TESSERA_IMPORT_SIMULATED_RUN_H_
