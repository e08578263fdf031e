#ifndef TESSERA_CLIENT_CLI_TENSOR_COMMANDS_H_
#define TESSERA_CLIENT_CLI_TENSOR_COMMANDS_H_

#include "client/cli/cli_args.h"

namespace tessera::cli {

// tessera tensor put|get|redistribute|op|show|list|rm: DTensors on a cluster, read from and
// written to .npy / .safetensors files, and the registry's ops on them. The CLI acts as client
// "cli" (or --client / $TESSERA_CLIENT) and holds no lease, so its tensors stay until removed.
// put, redistribute and op wait until the workers have written the tensor and fail with the
// workers' error (one that fails leaves no tensor behind); with --async they return once the
// coordinator has accepted the work.
void AddTensorCommands(CLI::App& app, Action* action);

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_CLI_TENSOR_COMMANDS_H_
