#include "client/cli/checkpoint_commands.h"

#include "absl/strings/str_cat.h"
#include "client/cli/cli_session.h"
#include "core/status_macros.h"
#include "tessera/tessera.h"

namespace tessera::cli {
namespace {

// How long load waits for the workers to read their shards.
constexpr absl::Duration kLoadTimeout = absl::Hours(1);

struct SaveFlags {
  ClusterFlags cluster;
  std::string name;
  std::string path;
};

absl::Status Save(const SaveFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  ASSIGN_OR_RETURN(auto t, client::GetTensor(*session, f.name));
  ASSIGN_OR_RETURN(client::SaveInfo saved, t.Save(f.path));
  out << "saved " << t.name() << " (" << DTypeName(t.dtype()) << ShapeToString(t.shape()) << " "
      << PlacementsToString(t.placements()) << ") to " << saved.path << ": " << saved.files
      << " block file(s) cut as " << saved.saved_layout << " in " << saved.data_dir << "\n";
  return absl::OkStatus();
}

struct LoadFlags {
  ClusterFlags cluster;
  std::string path;
  std::string mesh;
  std::string placements;
  std::string name;
  std::string tensor;
  bool async = false;
};

absl::Status Load(const LoadFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  ASSIGN_OR_RETURN(auto mesh, client::GetMesh(*session, f.mesh));
  ASSIGN_OR_RETURN(auto placements, ParsePlacements(f.placements));
  ASSIGN_OR_RETURN(client::DTensor t, client::LoadTensor(*session, f.path, mesh, placements,
                                                         client::LoadOptions{f.tensor, f.name}));
  if (!f.async) RETURN_IF_ERROR(t.Synchronize(kLoadTimeout));
  t.Detach();  // the CLI's tensors stay until removed
  out << "loaded " << f.path << " as " << t.name() << " (" << DTypeName(t.dtype())
      << ShapeToString(t.shape()) << " " << PlacementsToString(t.placements()) << " on mesh "
      << f.mesh << ")\n";
  return absl::OkStatus();
}

}  // namespace

void AddCheckpointCommands(CLI::App& app, Action* action) {
  auto save = AddCommand(app, "save",
                         "save a tensor into a checkpoint directory on the workers' filesystem: "
                         "each worker writes its own blocks; the previous checkpoint there stays "
                         "readable until the new one is complete",
                         Save, action);
  AddClusterFlags(*save.app, save.flags->cluster, /*with_client=*/true);
  save.app->add_option("name", save.flags->name, "the tensor's name")
      ->required()
      ->type_name("NAME");
  save.app
      ->add_option("path", save.flags->path,
                   "absolute checkpoint directory (its parent must exist on every worker)")
      ->required()
      ->type_name("DIR");

  auto load = AddCommand(app, "load",
                         "load a checkpoint (or a `tessera shard` directory) onto a mesh and "
                         "placements, whatever it was saved from, and wait until the workers "
                         "hold it",
                         Load, action);
  AddClusterFlags(*load.app, load.flags->cluster, /*with_client=*/true);
  load.app->add_option("path", load.flags->path, "absolute checkpoint directory")
      ->required()
      ->type_name("DIR");
  load.app->add_option("--mesh", load.flags->mesh, "the mesh's name")
      ->required()
      ->type_name("NAME");
  load.app->add_option("--placements", load.flags->placements, "one per mesh dim, e.g. S(0),R")
      ->required()
      ->type_name("PLACEMENTS");
  load.app->add_option("--name", load.flags->name, "the new tensor's name (default: one is made)")
      ->type_name("NAME");
  load.app
      ->add_option("--tensor", load.flags->tensor,
                   "which tensor of the checkpoint (default: its only one)")
      ->type_name("KEY");
  load.app->add_flag("--async", load.flags->async,
                     "return once the coordinator accepted the load, without waiting");
  save.app->group(
      "Commands that run or talk to a cluster (--coordinator HOST:PORT, default "
      "$TESSERA_COORDINATOR)");
  load.app->group(
      "Commands that run or talk to a cluster (--coordinator HOST:PORT, default "
      "$TESSERA_COORDINATOR)");
}

}  // namespace tessera::cli
