#ifndef TESSERA_CLIENT_CLUSTER_COMMANDS_H_
#define TESSERA_CLIENT_CLUSTER_COMMANDS_H_

#include <ostream>

#include "absl/status/status.h"
#include "client/cli_args.h"

namespace tessera::cli {

// Subcommands that talk to a cluster (--coordinator HOST:PORT, default $TESSERA_COORDINATOR or
// 127.0.0.1:50051).

// tessera up: starts a coordinator and N CPU workers on loopback, creates the mesh "world" over
// them, prints the address and runs until Ctrl-C / SIGTERM (or, with --selfcheck, runs collectives
// against a local reference and exits).
absl::Status RunUp(const Args& args, std::ostream& out);
// tessera status: workers (device, liveness, memory) and meshes (shape, readiness, tensors).
absl::Status RunStatus(const Args& args, std::ostream& out);
// tessera mesh create NAME --shape S [--names N] [--device cpu] | list | delete NAME.
absl::Status RunMesh(const Args& args, std::ostream& out);

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_CLUSTER_COMMANDS_H_
