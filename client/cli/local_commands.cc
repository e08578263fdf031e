#include "client/cli/local_commands.h"

#include <chrono>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli/tensor_files.h"
#include "core/checked_math.h"
#include "core/files/checkpoint.h"
#include "core/files/checkpoint_files.h"
#include "core/files/npy.h"
#include "core/files/safetensors.h"
#include "core/files/sharded_files.h"
#include "core/sharding/redistribute_planner.h"
#include "core/sharding/simulated_mesh.h"
#include "core/sharding/visualize_sharding.h"
#include "core/small_integer_tensor.h"

namespace tessera::cli {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct LayoutFlags {
  MeshShapeFlags mesh;
  std::string shape;
  std::string placements;
  std::string dtype = "float32";
};

absl::Status RunLayout(const LayoutFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto mesh, MakeMesh(f.mesh));
  ASSIGN_OR_RETURN(auto shape, ParseShape(f.shape));
  ASSIGN_OR_RETURN(auto placements, ParsePlacements(f.placements));
  ASSIGN_OR_RETURN(auto dtype, ParseDType(f.dtype));
  ASSIGN_OR_RETURN(auto spec, MakeDTensorSpec(mesh, placements, shape, dtype));
  out << VisualizeSharding(spec);
  return absl::OkStatus();
}

struct PlanFlags {
  MeshShapeFlags mesh;
  std::string shape;
  std::string from;
  std::string to;
  std::string dtype = "float32";
  std::string planner;
};

// The most bytes `tessera plan` materializes to check a plan on the simulated mesh.
constexpr int64_t kSimulatedBytes = int64_t{256} << 20;

// The bytes a simulated mesh holds for `spec`: the full tensor and each rank's block, saturating.
int64_t SimulatedBytes(const DTensorSpec& spec) {
  const auto bytes = [&](const Shape& shape) {
    std::optional<int64_t> n =
        CheckedMul(NumElements(shape), static_cast<int64_t>(DTypeSize(spec.dtype)));
    return n.value_or(std::numeric_limits<int64_t>::max() / 4);
  };
  int64_t total = bytes(spec.shape);
  for (int64_t pos = 0; pos < spec.mesh.size() && total <= kSimulatedBytes; ++pos) {
    total += bytes(LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(pos)).shape);
  }
  return total;
}

absl::Status RunPlan(const PlanFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto mesh, MakeMesh(f.mesh));
  ASSIGN_OR_RETURN(auto shape, ParseShape(f.shape));
  ASSIGN_OR_RETURN(auto from, ParsePlacements(f.from));
  ASSIGN_OR_RETURN(auto to, ParsePlacements(f.to));
  ASSIGN_OR_RETURN(auto dtype, ParseDType(f.dtype));
  ASSIGN_OR_RETURN(auto src, MakeDTensorSpec(mesh, from, shape, dtype));
  ASSIGN_OR_RETURN(auto dst, MakeDTensorSpec(mesh, to, shape, dtype));
  ASSIGN_OR_RETURN(auto plan, PlanRedistribute(src, dst.placements, PlannerNamed(f.planner)));
  out << "redistribute " << src.ToString() << "\n          -> " << PlacementsToString(to) << "\n"
      << plan.ToString();
  out << absl::StrFormat("total per rank: send %d B, recv %d B over %d step(s)\n",
                         plan.total_send_bytes(), plan.total_recv_bytes(), plan.steps.size());

  // Check the plan on the simulated mesh: a full tensor, distributed, redistributed, compared.
  // That holds the full tensor and every rank's blocks before and after in this process, so a
  // tensor whose copies pass kSimulatedBytes is planned only.
  if (const int64_t held = SimulatedBytes(src) + SimulatedBytes(dst); held > kSimulatedBytes) {
    out << absl::StrFormat(
        "not checked on the simulated mesh: that holds the tensor and every rank's blocks, %d B, "
        "more than its %d B\n",
        held, kSimulatedBytes);
    return absl::OkStatus();
  }
  const HostTensor full = SmallIntegerTensor(dtype, shape, 1234);
  SimulatedMesh sim(mesh);
  ASSIGN_OR_RETURN(auto shards, sim.Distribute(full, src));
  ASSIGN_OR_RETURN(auto result, sim.Redistribute(src, plan, std::move(shards)));
  const int64_t moved = *std::max_element(sim.bytes_received().begin(), sim.bytes_received().end());
  bool match = true;
  if (HasPartial(dst)) {
    ASSIGN_OR_RETURN(auto back, sim.FullTensor(dst, std::move(result)));
    match = back.BitEqual(full);
  } else {
    for (int64_t pos = 0; pos < mesh.size() && match; ++pos) {
      const LocalShard local = LocalShapeAndOffsetAt(dst, mesh.CoordinateOfIndex(pos));
      ASSIGN_OR_RETURN(auto want, PackBlock(full, local.offset, local.shape));
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

struct ShardFlags {
  std::string input;
  MeshShapeFlags mesh;
  std::string placements;
  std::string out;
  std::string tensor;
  std::string name = "tensor";
};

absl::Status RunShard(const ShardFlags& f, std::ostream& out) {
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(auto full, ReadTensorFile(f.input, f.tensor));
  ASSIGN_OR_RETURN(auto mesh, MakeMesh(f.mesh));
  ASSIGN_OR_RETURN(auto placements, ParsePlacements(f.placements));
  const std::string& dir = f.out;
  ASSIGN_OR_RETURN(auto spec, MakeDTensorSpec(mesh, placements, full.shape(), full.dtype()));
  SimulatedMesh sim(mesh);
  ASSIGN_OR_RETURN(auto shards, sim.Distribute(full, spec));
  if (absl::Status s = WriteShardedTensor(dir, f.name, ShardedTensor{spec, std::move(shards)});
      !s.ok()) {
    return s;
  }
  out << VisualizeSharding(spec)
      << absl::StrFormat("wrote %d rank files to %s in %.3f s\n", mesh.size(), dir,
                         SecondsSince(start));
  return absl::OkStatus();
}

struct ReshardFlags {
  std::string dir;
  std::string to;
  std::string out;
  std::string name = "tensor";
  std::string planner;
};

absl::Status RunReshard(const ReshardFlags& f, std::ostream& out) {
  const auto start = std::chrono::steady_clock::now();
  const std::string& name = f.name;
  ASSIGN_OR_RETURN(auto tensor, ReadShardedTensor(f.dir, name));
  ASSIGN_OR_RETURN(auto to, ParsePlacements(f.to));
  const std::string& dir = f.out;
  ASSIGN_OR_RETURN(auto plan, PlanRedistribute(tensor.spec, to, PlannerNamed(f.planner)));
  SimulatedMesh sim(tensor.spec.mesh);
  ASSIGN_OR_RETURN(auto shards, sim.Redistribute(tensor.spec, plan, std::move(tensor.shards)));
  ASSIGN_OR_RETURN(auto dst,
                   MakeDTensorSpec(tensor.spec.mesh, to, tensor.spec.shape, tensor.spec.dtype));
  if (absl::Status s = WriteShardedTensor(dir, name, ShardedTensor{dst, std::move(shards)});
      !s.ok()) {
    return s;
  }
  out << plan.ToString()
      << absl::StrFormat("resharded to %s in %s in %.3f s\n", PlacementsToString(to), dir,
                         SecondsSince(start));
  return absl::OkStatus();
}

struct UnshardFlags {
  std::string dir;
  std::string out;
  std::string name = "tensor";
};

// Joins one tensor of the checkpoint at `dir` (docs/checkpoints.md) into `path`: the only one, or
// the one named `name` when it holds several.
absl::Status UnshardCheckpoint(const std::string& dir, const std::string& name,
                               const std::string& path, std::ostream& out) {
  ASSIGN_OR_RETURN(const CheckpointIndex index, ReadCheckpointIndex(dir));
  const CheckpointTensor* tensor = nullptr;
  for (const CheckpointTensor& t : index.tensors) {
    if (index.tensors.size() == 1 || t.name == name) tensor = &t;
  }
  if (tensor == nullptr) {
    std::vector<std::string> names;
    for (const CheckpointTensor& t : index.tensors) names.push_back(t.name);
    return absl::NotFoundError(absl::StrCat("checkpoint ", dir, " has no tensor '", name,
                                            "'; it holds ", absl::StrJoin(names, ", ")));
  }
  const LocalShard whole{tensor->shape, std::vector<int64_t>(tensor->shape.size(), 0)};
  ASSIGN_OR_RETURN(HostTensor full, LoadCheckpointShard(dir, *tensor, whole));
  RETURN_IF_ERROR(WriteTensorFile(path, tensor->name, std::move(full)));
  out << "wrote " << tensor->name << " " << DTypeName(tensor->dtype) << ShapeToString(tensor->shape)
      << " (saved as " << tensor->saved_layout << ") from checkpoint " << dir
      << " as one tensor to " << path << "\n";
  return absl::OkStatus();
}

absl::Status RunUnshard(const UnshardFlags& f, std::ostream& out) {
  if (std::filesystem::exists(std::filesystem::path(f.dir) / std::string(kCheckpointIndexFile))) {
    return UnshardCheckpoint(f.dir, f.name, f.out, out);
  }
  const std::string& name = f.name;
  ASSIGN_OR_RETURN(auto tensor, ReadShardedTensor(f.dir, name));
  const std::string& path = f.out;
  SimulatedMesh sim(tensor.spec.mesh);
  ASSIGN_OR_RETURN(auto full, sim.FullTensor(tensor.spec, std::move(tensor.shards)));
  if (absl::Status s = WriteTensorFile(path, name, std::move(full)); !s.ok()) return s;
  out << "wrote " << tensor.spec.ToString() << " as one tensor to " << path << "\n";
  return absl::OkStatus();
}

// --dtype NAME (default float32) on `cmd`.
void AddDTypeFlag(CLI::App& cmd, std::string& dtype) {
  std::vector<std::string> names;
  for (DType d : kAllDTypes) names.emplace_back(DTypeName(d));
  cmd.add_option("--dtype", dtype, absl::StrCat("element type: ", absl::StrJoin(names, ", ")))
      ->type_name("DTYPE")
      ->capture_default_str();
}

// --name KEY (default "tensor") on `cmd`: the tensor's name in the per-rank files.
void AddFileTensorNameFlag(CLI::App& cmd, std::string& name) {
  cmd.add_option("--name", name, "the tensor's name in the per-rank files")
      ->type_name("KEY")
      ->capture_default_str();
}

void AddLayoutCommand(CLI::App& app, const std::string& group, Action* action) {
  auto layout = AddCommand(app, "layout", "how each rank holds a tensor (visualize_sharding)",
                           RunLayout, action);
  layout.app->group(group);
  AddMeshShapeFlags(*layout.app, layout.flags->mesh, "--mesh");
  layout.app->add_option("--shape", layout.flags->shape, "the tensor's shape, e.g. 8,6")
      ->required()
      ->type_name("SHAPE");
  layout.app->add_option("--placements", layout.flags->placements, "one per mesh dim, e.g. S(0),R")
      ->required()
      ->type_name("PLACEMENTS");
  AddDTypeFlag(*layout.app, layout.flags->dtype);
}

void AddPlanCommand(CLI::App& app, const std::string& group, Action* action) {
  auto plan = AddCommand(app, "plan",
                         "the collectives, mesh dims and bytes of a redistribute, checked on a "
                         "simulated mesh",
                         RunPlan, action);
  plan.app->group(group);
  AddMeshShapeFlags(*plan.app, plan.flags->mesh, "--mesh");
  plan.app->add_option("--shape", plan.flags->shape, "the tensor's shape, e.g. 8,6")
      ->required()
      ->type_name("SHAPE");
  plan.app->add_option("--from", plan.flags->from, "the placements it has, e.g. S(0),R")
      ->required()
      ->type_name("PLACEMENTS");
  plan.app->add_option("--to", plan.flags->to, "the placements it gets, e.g. R,S(1)")
      ->required()
      ->type_name("PLACEMENTS");
  AddDTypeFlag(*plan.app, plan.flags->dtype);
  AddPlannerFlag(*plan.app, plan.flags->planner);
}

void AddShardCommand(CLI::App& app, const std::string& group, Action* action) {
  auto shard = AddCommand(app, "shard",
                          "split a tensor file into one safetensors file per rank (see reshard, "
                          "unshard)",
                          RunShard, action);
  shard.app->group(group);
  shard.app->add_option("input", shard.flags->input, "IN.npy or IN.safetensors")
      ->required()
      ->type_name("FILE");
  AddMeshShapeFlags(*shard.app, shard.flags->mesh, "--mesh");
  shard.app->add_option("--placements", shard.flags->placements, "one per mesh dim, e.g. S(0),R")
      ->required()
      ->type_name("PLACEMENTS");
  shard.app->add_option("--out", shard.flags->out, "directory for the per-rank files")
      ->required()
      ->type_name("DIR");
  shard.app
      ->add_option("--tensor", shard.flags->tensor,
                   "which tensor of a .safetensors file (default: its only one)")
      ->type_name("KEY");
  AddFileTensorNameFlag(*shard.app, shard.flags->name);
}

void AddReshardCommand(CLI::App& app, const std::string& group, Action* action) {
  auto reshard = AddCommand(app, "reshard", "redistribute per-rank files to new placements",
                            RunReshard, action);
  reshard.app->group(group);
  reshard.app->add_option("dir", reshard.flags->dir, "directory written by shard or reshard")
      ->required()
      ->type_name("DIR");
  reshard.app->add_option("--to", reshard.flags->to, "the placements it gets, e.g. R,S(0)")
      ->required()
      ->type_name("PLACEMENTS");
  reshard.app->add_option("--out", reshard.flags->out, "directory for the new per-rank files")
      ->required()
      ->type_name("DIR2");
  AddFileTensorNameFlag(*reshard.app, reshard.flags->name);
  AddPlannerFlag(*reshard.app, reshard.flags->planner);
}

void AddUnshardCommand(CLI::App& app, const std::string& group, Action* action) {
  auto unshard =
      AddCommand(app, "unshard", "join per-rank files or a checkpoint back into one tensor file",
                 RunUnshard, action);
  unshard.app->group(group);
  unshard.app
      ->add_option("dir", unshard.flags->dir,
                   "directory written by shard or reshard, or a checkpoint (tessera save)")
      ->required()
      ->type_name("DIR");
  unshard.app->add_option("--out", unshard.flags->out, "OUT.npy or OUT.safetensors")
      ->required()
      ->type_name("FILE");
  AddFileTensorNameFlag(*unshard.app, unshard.flags->name);
}

}  // namespace

void AddLocalCommands(CLI::App& app, Action* action) {
  const std::string group = "Commands that run the sharding model on this machine (no cluster)";
  AddLayoutCommand(app, group, action);
  AddPlanCommand(app, group, action);
  AddShardCommand(app, group, action);
  AddReshardCommand(app, group, action);
  AddUnshardCommand(app, group, action);
}

}  // namespace tessera::cli
