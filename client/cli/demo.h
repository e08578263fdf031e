#ifndef TESSERA_CLIENT_CLI_DEMO_H_
#define TESSERA_CLIENT_CLI_DEMO_H_

#include "client/cli/cli_args.h"

namespace tessera::cli {

// tessera demo: layouts, plans and a shard → reshard → unshard round trip through real files on
// generated data, each result checked against a single-process reference, each step run through
// the local subcommands as if typed. Fails on any mismatch.
void AddDemoCommand(CLI::App& app, Action* action);

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_CLI_DEMO_H_
