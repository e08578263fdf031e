#ifndef TESSERA_CLIENT_CLI_LOCAL_COMMANDS_H_
#define TESSERA_CLIENT_CLI_LOCAL_COMMANDS_H_

#include "client/cli/cli_args.h"

namespace tessera::cli {

// The subcommands that need no cluster: they run the sharding model of core/ on this machine, with
// the simulated mesh standing in for the ranks.
//   layout:  how a tensor is laid out on a mesh (visualize_sharding).
//   plan:    the redistribute plan between two layouts, checked on the simulated mesh.
//   shard:   splits a .npy / .safetensors tensor into per-rank safetensors files.
//   reshard: redistributes a sharded tensor on disk to new placements.
//   unshard: assembles per-rank files back into one .npy / .safetensors file.
void AddLocalCommands(CLI::App& app, Action* action);

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_CLI_LOCAL_COMMANDS_H_
