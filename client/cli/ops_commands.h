#ifndef TESSERA_CLIENT_CLI_OPS_COMMANDS_H_
#define TESSERA_CLIENT_CLI_OPS_COMMANDS_H_

#include "client/cli/cli_args.h"

namespace tessera::cli {

// `tessera ops list`: the op registry (core/ops), offline, or with --remote the coordinator's.
void AddOpsCommands(CLI::App& app, Action* action);

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_CLI_OPS_COMMANDS_H_
