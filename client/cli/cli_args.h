#ifndef TESSERA_CLIENT_CLI_CLI_ARGS_H_
#define TESSERA_CLIENT_CLI_CLI_ARGS_H_

// The pieces every `tessera` subcommand is defined with (CLI11): a subcommand bound to a struct of
// its flags, and the flags several subcommands share. Each subcommand is defined once, in the file
// that runs it; its --help comes from that definition.

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "core/sharding/device_mesh.h"
#include "core/sharding/redistribute_planner.h"
#include "core/status_macros.h"

namespace tessera::cli {

// What the subcommand picked by the command line does, printing to `out`.
using Action = std::function<absl::Status(std::ostream& out)>;

// A subcommand and the struct its flags are parsed into.
template <typename Flags>
struct Command {
  CLI::App* app;
  Flags* flags;
};

// Adds subcommand `name` to `parent` with flags parsed into a new `Flags` (alive as long as
// `parent`); once the command line has picked it and parsed, `*action` becomes run(flags, out).
template <typename Flags>
Command<Flags> AddCommand(CLI::App& parent, const std::string& name, const std::string& help,
                          absl::Status (*run)(const Flags&, std::ostream&), Action* action) {
  auto flags = std::make_shared<Flags>();
  CLI::App* app = parent.add_subcommand(name, help);
  app->callback([flags, run, action] {
    *action = [flags, run](std::ostream& out) { return run(*flags, out); };
  });
  return {app, flags.get()};
}

// A mesh's shape, dim names and device type, as flags.
struct MeshShapeFlags {
  std::string shape;
  std::string names;
  std::string device = "cpu";
};
// `shape_flag` SHAPE (required), --names N1,N2,... and --device TYPE on `cmd`.
void AddMeshShapeFlags(CLI::App& cmd, MeshShapeFlags& flags, const std::string& shape_flag);
// The names of --names; none if it was not given.
std::vector<std::string> DimNames(const MeshShapeFlags& flags);
// The mesh the flags describe, over ranks 0..N-1.
absl::StatusOr<DeviceMesh> MakeMesh(const MeshShapeFlags& flags);

// Where the cluster is and who the CLI is on it.
struct ClusterFlags {
  std::string coordinator = "127.0.0.1:50051";
  std::string client = "cli";
  std::string tls_ca;    // PEM CA of the coordinator's certificate; empty with no TLS
  std::string tls_cert;  // this client's certificate, for mutual TLS
  std::string tls_key;   // its key
  std::string token;     // bearer token
};
// --coordinator HOST:PORT (default $TESSERA_COORDINATOR, then 127.0.0.1:50051) on `cmd`, and with
// `with_client` --client ID (default $TESSERA_CLIENT, then "cli"); and --tls_ca, --tls_cert,
// --tls_key, --token ($TESSERA_TLS_CA, $TESSERA_TLS_CERT, $TESSERA_TLS_KEY, $TESSERA_TOKEN).
void AddClusterFlags(CLI::App& cmd, ClusterFlags& flags, bool with_client);

// --planner min-cost|greedy (default min-cost) on `cmd`.
void AddPlannerFlag(CLI::App& cmd, std::string& planner);
// The planner a valid --planner value names.
PlannerKind PlannerNamed(const std::string& planner);

// The subcommand path the command line picked below `app`, e.g. "tensor put"; empty if none.
std::string PickedCommand(const CLI::App& app);

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_CLI_CLI_ARGS_H_
