#include "client/cli/cli_args.h"

#include "absl/strings/str_split.h"
#include "core/shape.h"

namespace tessera::cli {

void AddMeshShapeFlags(CLI::App& cmd, MeshShapeFlags& flags, const std::string& shape_flag) {
  cmd.add_option(shape_flag, flags.shape, "the mesh's shape, e.g. 4 or 2,2")
      ->required()
      ->type_name("SHAPE");
  cmd.add_option("--names", flags.names, "a name per mesh dim, e.g. dp,tp (default: none)")
      ->type_name("NAMES");
  cmd.add_option("--device", flags.device, "device type of the mesh")
      ->type_name("TYPE")
      ->capture_default_str();
}

std::vector<std::string> DimNames(const MeshShapeFlags& flags) {
  if (flags.names.empty()) return {};
  return absl::StrSplit(flags.names, ',');
}

absl::StatusOr<DeviceMesh> MakeMesh(const MeshShapeFlags& flags) {
  ASSIGN_OR_RETURN(auto shape, ParseShape(flags.shape));
  return DeviceMesh::Create(flags.device, shape, DimNames(flags));
}

void AddClusterFlags(CLI::App& cmd, ClusterFlags& flags, bool with_client) {
  cmd.add_option("--coordinator", flags.coordinator, "the coordinator's address")
      ->envname("TESSERA_COORDINATOR")
      ->type_name("HOST:PORT")
      ->capture_default_str();
  cmd.add_option("--tls_ca", flags.tls_ca,
                 "PEM CA that signs the coordinator's certificate: connect over TLS")
      ->envname("TESSERA_TLS_CA");
  cmd.add_option("--tls_cert", flags.tls_cert,
                 "PEM certificate of this client, for a coordinator that requires one")
      ->envname("TESSERA_TLS_CERT");
  cmd.add_option("--tls_key", flags.tls_key, "PEM key of --tls_cert")->envname("TESSERA_TLS_KEY");
  cmd.add_option("--token", flags.token,
                 "bearer token for a coordinator started with --tokens_file")
      ->envname("TESSERA_TOKEN");
  if (!with_client) return;
  cmd.add_option("--client", flags.client,
                 "the client id the CLI acts as; its tensors belong to it and stay until removed")
      ->envname("TESSERA_CLIENT")
      ->type_name("ID")
      ->capture_default_str();
}

void AddPlannerFlag(CLI::App& cmd, std::string& planner) {
  planner = "min-cost";
  cmd.add_option("--planner", planner, "how redistribute steps are chosen")
      ->check(CLI::IsMember({"min-cost", "greedy"}))
      ->capture_default_str();
}

PlannerKind PlannerNamed(const std::string& planner) {
  return planner == "greedy" ? PlannerKind::kGreedy : PlannerKind::kMinCost;
}

std::string PickedCommand(const CLI::App& app) {
  std::string path;
  for (const CLI::App* at = &app; !at->get_subcommands().empty();) {
    at = at->get_subcommands().front();
    path += (path.empty() ? "" : " ") + at->get_name();
  }
  return path;
}

}  // namespace tessera::cli
