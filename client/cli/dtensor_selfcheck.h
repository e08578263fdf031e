#ifndef TESSERA_CLIENT_CLI_DTENSOR_SELFCHECK_H_
#define TESSERA_CLIENT_CLI_DTENSOR_SELFCHECK_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace tessera {

// A tensor-parallel workload on a running cluster of at least 4 workers, through the DTensor
// client: the forward pass of a Megatron-style MLP (column-parallel, then row-parallel linear) on a
// 2x2 (dp, tp) mesh, then reductions, a move to a 1-D mesh, and a checkpoint saved from the 2x2
// mesh into `checkpoint_dir` and loaded onto the 1-D mesh in another layout, each result compared
// with the same computation in one process (the checkpoint bit for bit). Prints the layouts, the
// implicit redistributions and the timings. The meshes are over workers of `device` ("cpu" or
// "cuda").
absl::Status RunDTensorSelfcheck(const std::string& address, const std::string& device,
                                 const std::string& checkpoint_dir, std::ostream& out);

}  // namespace tessera

#endif  // TESSERA_CLIENT_CLI_DTENSOR_SELFCHECK_H_
