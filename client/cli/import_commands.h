#ifndef TESSERA_CLIENT_CLI_IMPORT_COMMANDS_H_
#define TESSERA_CLIENT_CLI_IMPORT_COMMANDS_H_

#include "client/cli/cli_args.h"

namespace tessera::cli {

// `tessera import plan`: a torch.export archive read, laid out by a plan and planned on a mesh,
// offline: what each parameter becomes and what a forward moves between ranks.
void AddImportCommands(CLI::App& app, Action* action);

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_CLI_IMPORT_COMMANDS_H_
