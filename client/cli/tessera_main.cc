// tessera: the command-line client. Every subcommand is defined (flags, help, what it runs) in the
// file that implements it; this file puts them together and reports how the command ended.

#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/checkpoint_commands.h"
#include "client/cli/cli_args.h"
#include "client/cli/cluster_commands.h"
#include "client/cli/demo.h"
#include "client/cli/import_commands.h"
#include "client/cli/local_commands.h"
#include "client/cli/module_commands.h"
#include "client/cli/ops_commands.h"
#include "client/cli/tensor_commands.h"
#include "core/release_mode.h"

namespace {

// "tessera tensor: unknown command 'bogus'" when a word of argv should name a subcommand and names
// none (before any option); empty otherwise.
std::string UnknownCommand(CLI::App& app, int argc, char** argv) {
  CLI::App* at = &app;
  std::string path = app.get_name();
  for (int i = 1; i < argc && !at->get_subcommands(nullptr).empty(); ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') return "";
    std::vector<CLI::App*> named =
        at->get_subcommands([&word](CLI::App* c) { return c->check_name(word); });
    if (named.empty()) {
      std::vector<std::string> known;
      for (CLI::App* c : at->get_subcommands(nullptr)) known.push_back(c->get_name());
      return absl::StrCat(path, ": unknown command '", word, "'; expected ",
                          absl::StrJoin(known, ", "));
    }
    at = named.front();
    absl::StrAppend(&path, " ", at->get_name());
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  tessera::UseReleaseMutexes();
  CLI::App app("tessera: tensors sharded over a mesh of devices", "tessera");
  app.require_subcommand(1);
  app.footer(
      "Placements: S(d) / Shard(d), R / Replicate(), P(op) / Partial(op) with op "
      "sum|avg|max|min|product.\n"
      "Every command answers --help. A failed command prints its gRPC code and message on stderr "
      "and exits 1; a command line that does not parse exits 2.");
  tessera::cli::Action action;
  tessera::cli::AddLocalCommands(app, &action);
  tessera::cli::AddDemoCommand(app, &action);
  tessera::cli::AddClusterCommands(app, &action);
  tessera::cli::AddTensorCommands(app, &action);
  tessera::cli::AddCheckpointCommands(app, &action);
  tessera::cli::AddModuleCommands(app, &action);
  tessera::cli::AddOpsCommands(app, &action);
  tessera::cli::AddImportCommands(app, &action);

  if (argc < 2 || std::string(argv[1]) == "help") {
    std::cout << app.help();
    return argc < 2 ? 2 : 0;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (const std::string unknown = UnknownCommand(app, argc, argv); !unknown.empty()) {
      std::cerr << unknown << "\nRun with --help for more information.\n";
      return 2;
    }
    return app.exit(e) == 0 ? 0 : 2;
  }
  const absl::Status status = action(std::cout);
  if (!status.ok()) {
    std::cerr << "tessera " << tessera::cli::PickedCommand(app) << ": "
              << absl::StatusCodeToString(status.code()) << ": " << status.message() << "\n";
    return 1;
  }
  return 0;
}
