#ifndef TESSERA_CLIENT_CLI_CLUSTER_COMMANDS_H_
#define TESSERA_CLIENT_CLI_CLUSTER_COMMANDS_H_

#include "client/cli/cli_args.h"

namespace tessera::cli {

// The subcommands that start or inspect a cluster (--coordinator HOST:PORT, default
// $TESSERA_COORDINATOR or 127.0.0.1:50051).
//   up:     starts a coordinator and N CPU workers on loopback, creates the mesh "world" over them,
//           prints the address and runs until Ctrl-C / SIGTERM (or, with --selfcheck, runs
//           collectives and DTensor ops against a local reference and exits).
//   status: workers (device, liveness, memory) and meshes (shape, dims, readiness, tensors).
//   mesh create NAME --shape S [--names N] [--device cpu] | mesh list | mesh delete NAME.
void AddClusterCommands(CLI::App& app, Action* action);

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_CLI_CLUSTER_COMMANDS_H_
