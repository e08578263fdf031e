// tessera: the command-line client.

#include <iostream>
#include <set>
#include <string>

#include "client/cli_args.h"
#include "client/cluster_commands.h"
#include "client/demo.h"
#include "client/local_commands.h"
#include "client/tensor_commands.h"
#include "core/release_mode.h"

namespace {

constexpr char kUsage[] = R"usage(tessera: tensors sharded over a mesh of devices

Commands that run the sharding model on this machine (no cluster needed):
  tessera layout  --mesh 2,2 [--names dp,tp] --shape 2,5 --placements "S(1),S(1)" [--dtype float32]
      how each rank holds the tensor (visualize_sharding)
  tessera plan    --mesh 2,2 --shape 8,6 --from "S(0),R" --to "R,S(1)" [--planner min-cost|greedy]
      the collectives, mesh dims and bytes of a redistribute, checked on a simulated mesh
  tessera shard   IN.npy|IN.safetensors --mesh 4 --placements "S(0)" --out DIR [--tensor KEY]
  tessera reshard DIR --to "R" --out DIR2 [--planner min-cost|greedy]
  tessera unshard DIR --out OUT.npy|OUT.safetensors
      split a tensor file into per-rank safetensors files, redistribute them, join them back
  tessera demo    [--workdir DIR] [--size 1024]
      a tour of the above on generated data, every result checked against a reference

Commands that run or talk to a cluster (--coordinator HOST:PORT, default $TESSERA_COORDINATOR):
  tessera up      [--workers 4] [--port 50051] [--selfcheck]
      start a coordinator and N cpu workers on loopback; Ctrl-C stops them all
  tessera status
      workers, devices, liveness, memory; meshes and their tensors
  tessera mesh    create NAME --shape 2,2 [--names dp,tp] [--device cpu] | list | delete NAME
  tessera tensor  put FILE.npy|FILE.safetensors --mesh NAME --placements "S(0)" [--name T]
                      [--tensor KEY] [--src-rank R]
                  get NAME --out FILE.npy|FILE.safetensors [--rank R]
                  redistribute NAME --to "R" [--mesh OTHER] [--name OUT] [--explain]
                      [--planner min-cost|greedy]
                  show NAME | list [--mesh NAME] | rm NAME...
      DTensors on the cluster: distribute a file, read it back whole or one rank's shard,
      redistribute (or print the plan), draw the layout per rank; the CLI is client "cli"
      (--client / $TESSERA_CLIENT) and its tensors stay until removed

Placements: S(d) / Shard(d), R / Replicate(), P(op) / Partial(op) with op sum|avg|max|min|product.
)usage";

}  // namespace

int main(int argc, char** argv) {
  tessera::UseReleaseMutexes();
  if (argc < 2 || std::string(argv[1]) == "help" || std::string(argv[1]) == "--help") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  using Runner = absl::Status (*)(const tessera::cli::Args&, std::ostream&);
  struct Command {
    Runner run;
    std::set<std::string> flags;
  };
  const std::set<std::string> mesh_flags = {"mesh", "names", "device"};
  auto with_mesh = [&](std::set<std::string> flags) {
    flags.insert(mesh_flags.begin(), mesh_flags.end());
    return flags;
  };
  Command cmd;
  if (command == "layout") {
    cmd = {tessera::cli::RunLayout, with_mesh({"shape", "placements", "dtype"})};
  } else if (command == "plan") {
    cmd = {tessera::cli::RunPlan, with_mesh({"shape", "from", "to", "dtype", "planner"})};
  } else if (command == "shard") {
    cmd = {tessera::cli::RunShard, with_mesh({"placements", "out", "tensor", "name"})};
  } else if (command == "reshard") {
    cmd = {tessera::cli::RunReshard, {"to", "out", "name", "planner"}};
  } else if (command == "unshard") {
    cmd = {tessera::cli::RunUnshard, {"out", "name"}};
  } else if (command == "up") {
    cmd = {tessera::cli::RunUp, {"workers", "port"}};
  } else if (command == "status") {
    cmd = {tessera::cli::RunStatus, {"coordinator"}};
  } else if (command == "mesh") {
    cmd = {tessera::cli::RunMesh, with_mesh({"coordinator", "shape"})};
  } else if (command == "tensor") {
    cmd = {tessera::cli::RunTensor,
           {"coordinator", "client", "mesh", "placements", "name", "tensor", "src-rank", "out",
            "rank", "to", "explain", "planner"}};
  } else if (command == "demo") {
    cmd = {tessera::cli::RunDemo, {"workdir", "size"}};
  } else {
    std::cerr << "tessera: unknown command '" << command << "'\n\n" << kUsage;
    return 2;
  }
  absl::StatusOr<tessera::cli::Args> args =
      tessera::cli::Args::Parse(argc, argv, 2, cmd.flags, {"selfcheck", "explain"});
  absl::Status status = args.ok() ? cmd.run(*args, std::cout) : args.status();
  if (!status.ok()) {
    std::cerr << "tessera " << command << ": " << status.message() << "\n";
    return 1;
  }
  return 0;
}
