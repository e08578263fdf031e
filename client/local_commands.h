#ifndef TESSERA_CLIENT_LOCAL_COMMANDS_H_
#define TESSERA_CLIENT_LOCAL_COMMANDS_H_

#include <ostream>

#include "absl/status/status.h"
#include "client/cli_args.h"

namespace tessera::cli {

// Subcommands that need no cluster: they run the sharding model of core/ on this machine, with the
// simulated mesh standing in for the ranks. Each prints to `out`.

// tessera layout: how a tensor is laid out on a mesh (visualize_sharding).
absl::Status RunLayout(const Args& args, std::ostream& out);
// tessera plan: the redistribute plan between two layouts, checked on the simulated mesh.
absl::Status RunPlan(const Args& args, std::ostream& out);
// tessera shard: splits a .npy / .safetensors tensor into per-rank safetensors files.
absl::Status RunShard(const Args& args, std::ostream& out);
// tessera reshard: redistributes a sharded tensor on disk to new placements.
absl::Status RunReshard(const Args& args, std::ostream& out);
// tessera unshard: assembles per-rank files back into one .npy / .safetensors file.
absl::Status RunUnshard(const Args& args, std::ostream& out);

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_LOCAL_COMMANDS_H_
