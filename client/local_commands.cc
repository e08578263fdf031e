#include "client/local_commands.h"

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/tensor_files.h"
#include "core/npy.h"
#include "core/redistribute_planner.h"
#include "core/safetensors.h"
#include "core/sharded_files.h"
#include "core/simulated_mesh.h"
#include "core/small_integer_tensor.h"
#include "core/visualize_sharding.h"

namespace tessera::cli {
namespace {

absl::StatusOr<DeviceMesh> MeshFromArgs(const Args& args) {
  TESSERA_ASSIGN(mesh_text, args.Required("mesh"));
  TESSERA_ASSIGN(shape, ParseShape(mesh_text));
  std::vector<std::string> names;
  if (args.Has("names")) names = absl::StrSplit(args.Get("names", ""), ',');
  return DeviceMesh::Create(args.Get("device", "cpu"), shape, names);
}

absl::StatusOr<PlannerKind> PlannerFromArgs(const Args& args) {
  const std::string name = args.Get("planner", "min-cost");
  if (name == "min-cost") return PlannerKind::kMinCost;
  if (name == "greedy") return PlannerKind::kGreedy;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --planner '", name, "'; expected min-cost or greedy"));
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

absl::Status RunLayout(const Args& args, std::ostream& out) {
  TESSERA_ASSIGN(mesh, MeshFromArgs(args));
  TESSERA_ASSIGN(shape_text, args.Required("shape"));
  TESSERA_ASSIGN(shape, ParseShape(shape_text));
  TESSERA_ASSIGN(placements_text, args.Required("placements"));
  TESSERA_ASSIGN(placements, ParsePlacements(placements_text));
  TESSERA_ASSIGN(dtype, ParseDType(args.Get("dtype", "float32")));
  TESSERA_ASSIGN(spec, MakeDTensorSpec(mesh, placements, shape, dtype));
  out << VisualizeSharding(spec);
  return absl::OkStatus();
}

absl::Status RunPlan(const Args& args, std::ostream& out) {
  TESSERA_ASSIGN(mesh, MeshFromArgs(args));
  TESSERA_ASSIGN(shape_text, args.Required("shape"));
  TESSERA_ASSIGN(shape, ParseShape(shape_text));
  TESSERA_ASSIGN(from_text, args.Required("from"));
  TESSERA_ASSIGN(from, ParsePlacements(from_text));
  TESSERA_ASSIGN(to_text, args.Required("to"));
  TESSERA_ASSIGN(to, ParsePlacements(to_text));
  TESSERA_ASSIGN(dtype, ParseDType(args.Get("dtype", "float32")));
  TESSERA_ASSIGN(kind, PlannerFromArgs(args));
  TESSERA_ASSIGN(src, MakeDTensorSpec(mesh, from, shape, dtype));
  TESSERA_ASSIGN(dst, MakeDTensorSpec(mesh, to, shape, dtype));
  TESSERA_ASSIGN(plan, PlanRedistribute(src, dst.placements, kind));
  out << "redistribute " << src.ToString() << "\n          -> " << PlacementsToString(to) << "\n"
      << plan.ToString();
  out << absl::StrFormat("total per rank: send %d B, recv %d B over %d step(s)\n",
                         plan.total_send_bytes(), plan.total_recv_bytes(), plan.steps.size());

  // Check the plan on the simulated mesh: a full tensor, distributed, redistributed, compared.
  const HostTensor full = SmallIntegerTensor(dtype, shape, 1234);
  SimulatedMesh sim(mesh);
  TESSERA_ASSIGN(shards, sim.Distribute(full, src));
  TESSERA_ASSIGN(result, sim.Redistribute(src, plan, std::move(shards)));
  const int64_t moved = *std::max_element(sim.bytes_received().begin(), sim.bytes_received().end());
  bool match = true;
  if (HasPartial(dst)) {
    TESSERA_ASSIGN(back, sim.FullTensor(dst, std::move(result)));
    match = back.BitEqual(full);
  } else {
    for (int64_t pos = 0; pos < mesh.size() && match; ++pos) {
      const LocalShard local = LocalShapeAndOffsetAt(dst, mesh.CoordinateOfIndex(pos));
      TESSERA_ASSIGN(want, PackBlock(full, local.offset, local.shape));
      match = result[pos].BitEqual(want);
    }
  }
  if (!match) {
    return absl::InternalError(
        "the plan's result on the simulated mesh differs from the reference");
  }
  out << absl::StrFormat(
      "checked on the simulated mesh: every rank holds the expected values; the busiest rank "
      "received %d B\n",
      moved);
  return absl::OkStatus();
}

absl::Status RunShard(const Args& args, std::ostream& out) {
  if (args.positionals().size() != 1) {
    return absl::InvalidArgumentError(
        "usage: tessera shard IN.npy|IN.safetensors --mesh M "
        "--placements P --out DIR");
  }
  const auto start = std::chrono::steady_clock::now();
  TESSERA_ASSIGN(full, ReadTensorFile(args.positionals()[0], args.Get("tensor", "")));
  TESSERA_ASSIGN(mesh, MeshFromArgs(args));
  TESSERA_ASSIGN(placements_text, args.Required("placements"));
  TESSERA_ASSIGN(placements, ParsePlacements(placements_text));
  TESSERA_ASSIGN(dir, args.Required("out"));
  TESSERA_ASSIGN(spec, MakeDTensorSpec(mesh, placements, full.shape(), full.dtype()));
  SimulatedMesh sim(mesh);
  TESSERA_ASSIGN(shards, sim.Distribute(full, spec));
  if (absl::Status s = WriteShardedTensor(dir, args.Get("name", "tensor"),
                                          ShardedTensor{spec, std::move(shards)});
      !s.ok()) {
    return s;
  }
  out << VisualizeSharding(spec)
      << absl::StrFormat("wrote %d rank files to %s in %.3f s\n", mesh.size(), dir,
                         SecondsSince(start));
  return absl::OkStatus();
}

absl::Status RunReshard(const Args& args, std::ostream& out) {
  if (args.positionals().size() != 1) {
    return absl::InvalidArgumentError("usage: tessera reshard DIR --to P --out DIR2");
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string name = args.Get("name", "tensor");
  TESSERA_ASSIGN(tensor, ReadShardedTensor(args.positionals()[0], name));
  TESSERA_ASSIGN(to_text, args.Required("to"));
  TESSERA_ASSIGN(to, ParsePlacements(to_text));
  TESSERA_ASSIGN(dir, args.Required("out"));
  TESSERA_ASSIGN(kind, PlannerFromArgs(args));
  TESSERA_ASSIGN(plan, PlanRedistribute(tensor.spec, to, kind));
  SimulatedMesh sim(tensor.spec.mesh);
  TESSERA_ASSIGN(shards, sim.Redistribute(tensor.spec, plan, std::move(tensor.shards)));
  TESSERA_ASSIGN(dst, MakeDTensorSpec(tensor.spec.mesh, to, tensor.spec.shape, tensor.spec.dtype));
  if (absl::Status s = WriteShardedTensor(dir, name, ShardedTensor{dst, std::move(shards)});
      !s.ok()) {
    return s;
  }
  out << plan.ToString()
      << absl::StrFormat("resharded to %s in %s in %.3f s\n", PlacementsToString(to), dir,
                         SecondsSince(start));
  return absl::OkStatus();
}

absl::Status RunUnshard(const Args& args, std::ostream& out) {
  if (args.positionals().size() != 1) {
    return absl::InvalidArgumentError("usage: tessera unshard DIR --out OUT.npy|OUT.safetensors");
  }
  const std::string name = args.Get("name", "tensor");
  TESSERA_ASSIGN(tensor, ReadShardedTensor(args.positionals()[0], name));
  TESSERA_ASSIGN(path, args.Required("out"));
  SimulatedMesh sim(tensor.spec.mesh);
  TESSERA_ASSIGN(full, sim.FullTensor(tensor.spec, std::move(tensor.shards)));
  if (absl::Status s = WriteTensorFile(path, name, std::move(full)); !s.ok()) return s;
  out << "wrote " << tensor.spec.ToString() << " as one tensor to " << path << "\n";
  return absl::OkStatus();
}

}  // namespace tessera::cli
