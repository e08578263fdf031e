#ifndef TESSERA_CLIENT_CLI_CHECKPOINT_COMMANDS_H_
#define TESSERA_CLIENT_CLI_CHECKPOINT_COMMANDS_H_

#include "client/cli/cli_args.h"

namespace tessera::cli {

// tessera save|load: a DTensor saved into a checkpoint directory on the workers' filesystem (each
// worker writes its own blocks), and a checkpoint (or a `tessera shard` directory) loaded onto any
// mesh and placements (docs/checkpoints.md).
void AddCheckpointCommands(CLI::App& app, Action* action);

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_CLI_CHECKPOINT_COMMANDS_H_
