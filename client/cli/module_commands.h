#ifndef TESSERA_CLIENT_CLI_MODULE_COMMANDS_H_
#define TESSERA_CLIENT_CLI_MODULE_COMMANDS_H_

#include "client/cli/cli_args.h"

namespace tessera::cli {

// tessera module load|parallelize|distribute|show|list|rm|export-plan|forward|step|save|publish|
// unpublish: torch.nn modules on a cluster (tessera/module.h), their spec, plans, weights, inputs
// and outputs read from and written to JSON, .npy and .safetensors files. Every command waits until
// the service has done the work; a refused call prints the service's code and message.
void AddModuleCommands(CLI::App& app, Action* action);

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_CLI_MODULE_COMMANDS_H_
