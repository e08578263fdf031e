#include "client/cli/import_commands.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/files/file_bytes.h"
#include "core/files/npy.h"
#include "core/shape.h"
#include "core/status_macros.h"
#include "import/archive_tensors.h"
#include "import/exported_program.h"
#include "import/hf_checkpoint.h"
#include "import/program_parallel.h"
#include "import/program_plan.h"
#include "import/pt2_archive.h"
#include "import/simulated_run.h"
#include "kernels/backend.h"
#include "kernels/host_element.h"

namespace tessera::cli {
namespace {

struct PlanFlags {
  std::string archive;
  MeshShapeFlags mesh;
  int mesh_dim = -1;
  std::string plan;     // a parallelize_module plan file
  std::string tp_plan;  // a Hugging Face tp_plan file (JSON object)
  std::string prefix;   // the tp_plan's base model prefix
  std::string weights;  // a Hugging Face checkpoint directory
  // run only
  std::vector<std::string> inputs;  // NAME=FILE.npy, or FILE.npy for the one user input
  std::string out;                  // the first output, as .npy
  bool check = false;               // also on one rank, and compare
};

absl::StatusOr<std::string> ReadText(const std::string& path) {
  ASSIGN_OR_RETURN(const std::vector<std::byte> bytes, ReadFileBytes(path));
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// What a forward's redistributions do, summed: per collective, how many and the bytes the busiest
// rank receives.
struct Traffic {
  std::map<std::string, int64_t> counts;
  int64_t recv_bytes = 0;

  void Add(const RedistributePlan& plan) {
    for (const RedistributeStep& s : plan.steps) {
      if (IsLocal(s.collective)) continue;
      ++counts[std::string(CollectiveName(s.collective))];
      recv_bytes += s.recv_bytes;
    }
  }
  void Add(const ops::PlannedCall& call) {
    for (const RedistributePlan& p : call.plan->input_plans) Add(p);
  }
};

// An archive read, laid out and planned as the flags say, and where each input's value comes
// from (`sources[i]`: "archive", "checkpoint", "checkpoint (tied: NAME)", or "" for a user input).
struct Prepared {
  std::optional<import::Pt2Zip> zip;
  import::ArchiveModel model;
  import::ExportedProgram program;
  std::vector<import::ArchiveTensor> stored;
  std::optional<import::HfCheckpoint> checkpoint;
  std::vector<std::string> checkpoint_names;  // per input, as MatchCheckpoint gives them
  std::vector<std::string> sources;
  std::optional<DeviceMesh> mesh;  // set by Prepare
  std::optional<import::ProgramPlan> plan;
  import::ProgramLayout layout;
  import::PlannedProgram planned;
};

absl::StatusOr<Prepared> Prepare(const PlanFlags& f) {
  Prepared p;
  ASSIGN_OR_RETURN(p.zip, import::Pt2Zip::Open(f.archive));
  ASSIGN_OR_RETURN(p.model, import::ReadArchiveModel(*p.zip));
  ASSIGN_OR_RETURN(p.program, import::ParseExportedProgram(p.model.json, f.archive));
  ASSIGN_OR_RETURN(p.stored, import::ListArchiveTensors(*p.zip, p.model.archive));
  ASSIGN_OR_RETURN(p.mesh, MakeMesh(f.mesh));
  if (f.mesh_dim >= p.mesh->ndim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mesh-dim ", f.mesh_dim, ": the mesh has ", p.mesh->ndim(), " dims"));
  }
  if (!f.plan.empty() && !f.tp_plan.empty()) {
    return absl::InvalidArgumentError("give --plan or --tp-plan, not both");
  }
  std::string plan_text, tp_plan_text;
  if (!f.plan.empty()) {
    ASSIGN_OR_RETURN(plan_text, ReadText(f.plan));
  }
  std::string prefix = f.prefix;
  if (f.tp_plan == "hf") {
    // The checkpoint's own plan, config.json's base_model_tp_plan.
    if (f.weights.empty()) {
      return absl::InvalidArgumentError(
          "--tp-plan hf takes the plan of the checkpoint's config.json: give --weights DIR");
    }
    ASSIGN_OR_RETURN(const import::HfCheckpoint checkpoint, import::OpenHfCheckpoint(f.weights));
    ASSIGN_OR_RETURN(tp_plan_text, import::HfTpPlanText(checkpoint));
    if (prefix.empty()) prefix = import::BaseModelPrefix(checkpoint);
  } else if (!f.tp_plan.empty()) {
    ASSIGN_OR_RETURN(tp_plan_text, ReadText(f.tp_plan));
  }
  absl::StatusOr<std::optional<import::ProgramPlan>> plan =
      import::ProgramPlanFromText(plan_text, tp_plan_text, prefix, f.mesh_dim, *p.mesh);
  if (!plan.ok()) {
    return absl::Status(plan.status().code(), absl::StrCat(!f.plan.empty() ? f.plan : f.tp_plan,
                                                           ": ", plan.status().message()));
  }
  p.plan = *std::move(plan);
  if (p.plan.has_value()) {
    ASSIGN_OR_RETURN(p.layout, import::LayOutProgram(p.program, *p.plan, *p.mesh));
  }
  // Where the weights come from.
  p.sources.assign(p.program.inputs.size(), "");
  p.checkpoint_names.assign(p.program.inputs.size(), "");
  for (size_t i = 0; i < p.sources.size(); ++i) {
    if (p.program.inputs[i].kind != import::InputKind::kUserInput) p.sources[i] = "archive";
  }
  if (!f.weights.empty()) {
    std::map<std::string, int64_t> entries;
    for (const import::ArchiveTensor& t : p.stored) entries[t.name] = t.entry;
    ASSIGN_OR_RETURN(p.checkpoint, import::OpenHfCheckpoint(f.weights));
    ASSIGN_OR_RETURN(const import::WeightSources matched,
                     import::MatchCheckpoint(p.program, *p.checkpoint, entries));
    p.checkpoint_names = matched.checkpoint_names;
    for (size_t i = 0; i < p.sources.size(); ++i) {
      const std::string& name = matched.checkpoint_names[i];
      if (name.empty()) continue;
      p.sources[i] = name == p.program.inputs[i].target
                         ? "checkpoint"
                         : absl::StrCat("checkpoint (tied: ", name, ")");
    }
  }
  ops::ShardingCache cache;
  ASSIGN_OR_RETURN(p.planned, import::PlanExportedProgram(p.program, *p.mesh, p.layout.inputs,
                                                          cache, p.layout.pins));
  return p;
}

absl::Status Plan(const PlanFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(const Prepared p, Prepare(f));
  const import::ExportedProgram& program = p.program;
  int64_t resolved = 0;
  for (const auto& [op, n] : program.resolved) resolved += n;
  std::map<import::InputKind, int> kinds;
  for (const import::ProgramInput& in : program.inputs) ++kinds[in.kind];
  out << p.model.model << ": " << program.nodes.size() << " nodes (" << resolved
      << " more answered by import), " << kinds[import::InputKind::kParameter] << " parameters, "
      << kinds[import::InputKind::kBuffer] + kinds[import::InputKind::kConstant]
      << " buffers and constants, " << kinds[import::InputKind::kUserInput] << " user input(s)\n";
  out << p.mesh->ToString();
  if (p.plan.has_value()) {
    out << ", " << p.layout.assigned.size() << " module(s) styled on mesh dim "
        << p.plan->tp_mesh_dim
        << (p.layout.unmatched.empty()
                ? std::string()
                : absl::StrCat("; matching nothing: ", absl::StrJoin(p.layout.unmatched, ", ")));
  } else {
    out << ", no plan: every parameter replicated";
  }
  out << "\n";
  for (size_t i = 0; i < program.inputs.size(); ++i) {
    const import::ProgramInput& in = program.inputs[i];
    const DTensorSpec& s = p.planned.values[i];
    out << absl::StrFormat(
        "  %-12s %-52s %-20s %s%s\n", import::InputKindName(in.kind), in.target,
        absl::StrCat(DTypeName(s.dtype), ShapeToString(s.shape)), PlacementsToString(s.placements),
        f.weights.empty() || p.sources[i].empty() ? "" : absl::StrCat("  ", p.sources[i]));
  }
  Traffic traffic;
  for (const import::PlannedNode& node : p.planned.nodes) {
    if (node.call.has_value()) traffic.Add(*node.call);
    if (node.decomposition.has_value()) {
      for (const ops::PlannedCall& c : node.decomposition->planned.nodes) traffic.Add(c);
    }
    for (const std::optional<RedistributePlan>& move : node.output_moves) {
      if (move.has_value()) traffic.Add(*move);
    }
  }
  std::vector<std::string> counts;
  for (const auto& [name, n] : traffic.counts) counts.push_back(absl::StrCat(n, " ", name));
  out << "a forward: " << (counts.empty() ? "no collectives" : absl::StrJoin(counts, ", "))
      << "; the busiest rank receives " << traffic.recv_bytes << " B\n";
  for (size_t o = 0; o < program.outputs.size(); ++o) {
    const DTensorSpec& s = p.planned.values[program.outputs[o]];
    out << "  output " << program.output_names[o] << ": " << DTypeName(s.dtype)
        << ShapeToString(s.shape) << " " << PlacementsToString(s.placements) << "\n";
  }
  return absl::OkStatus();
}

// Every input's full value: the user inputs from --input files, the rest from the archive or the
// checkpoint.
absl::StatusOr<std::vector<HostTensor>> InputValues(const PlanFlags& f, const Prepared& p) {
  std::map<std::string, std::string> files;
  int user_inputs = 0;
  for (const import::ProgramInput& in : p.program.inputs) {
    user_inputs += in.kind == import::InputKind::kUserInput ? 1 : 0;
  }
  for (const std::string& given : f.inputs) {
    const size_t eq = given.find('=');
    if (eq == std::string::npos) {
      if (user_inputs != 1) {
        return absl::InvalidArgumentError(absl::StrCat("--input ", given, ": the program takes ",
                                                       user_inputs,
                                                       " inputs; name each NAME=FILE"));
      }
      for (const import::ProgramInput& in : p.program.inputs) {
        if (in.kind == import::InputKind::kUserInput) files[in.name] = given;
      }
    } else {
      files[given.substr(0, eq)] = given.substr(eq + 1);
    }
  }
  std::map<std::string, const import::ArchiveTensor*> stored;
  for (const import::ArchiveTensor& t : p.stored) stored[t.name] = &t;
  std::vector<HostTensor> values;
  for (size_t i = 0; i < p.program.inputs.size(); ++i) {
    const import::ProgramInput& in = p.program.inputs[i];
    const ops::TensorMeta& meta = p.program.value_metas[i];
    if (in.kind == import::InputKind::kUserInput) {
      auto it = files.find(in.name);
      if (it == files.end()) {
        return absl::InvalidArgumentError(absl::StrCat("the program's input '", in.name,
                                                       "' needs --input ", in.name, "=FILE.npy"));
      }
      ASSIGN_OR_RETURN(HostTensor t, ReadNpyFile(it->second));
      if (t.shape() != meta.shape || t.dtype() != meta.dtype) {
        return absl::InvalidArgumentError(
            absl::StrCat(it->second, " is ", DTypeName(t.dtype()), ShapeToString(t.shape()),
                         "; input '", in.name, "' was exported as ", DTypeName(meta.dtype),
                         ShapeToString(meta.shape), " (static shapes)"));
      }
      values.push_back(std::move(t));
    } else if (!p.checkpoint_names[i].empty()) {
      ASSIGN_OR_RETURN(HostTensor t, import::ReadCheckpointTensor(
                                         p.checkpoint->tensors.at(p.checkpoint_names[i])));
      values.push_back(std::move(t));
    } else {
      auto it = stored.find(in.target);
      if (it == stored.end()) {
        return absl::InvalidArgumentError(absl::StrCat(f.archive, " stores no value for ",
                                                       import::InputKindName(in.kind), " '",
                                                       in.target, "'"));
      }
      ASSIGN_OR_RETURN(HostTensor t, import::ReadArchiveTensor(*p.zip, *it->second));
      values.push_back(std::move(t));
    }
  }
  for (const auto& [name, file] : files) {
    bool known = false;
    for (const import::ProgramInput& in : p.program.inputs) {
      known |= in.kind == import::InputKind::kUserInput && in.name == name;
    }
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("--input ", name, "=", file, ": the program has no input '", name, "'"));
    }
  }
  return values;
}

// The largest |a - b| over the elements, in double; NaN where one holds a NaN the other does not
// hold at that element.
double MaxDifference(const HostTensor& a, const HostTensor& b) {
  return kernels::VisitDType(a.dtype(), [&]<typename T>(std::type_identity<T>) {
    double worst = 0;
    for (int64_t i = 0; i < a.num_elements() && i < b.num_elements(); ++i) {
      const double x = static_cast<double>(kernels::Load(a.data_as<T>()[i]));
      const double y = static_cast<double>(kernels::Load(b.data_as<T>()[i]));
      if (std::isnan(x) != std::isnan(y)) return std::numeric_limits<double>::quiet_NaN();
      if (!std::isnan(x) && x != y) worst = std::max(worst, std::abs(x - y));
    }
    return worst;
  });
}

absl::Status Run(const PlanFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(const Prepared p, Prepare(f));
  ASSIGN_OR_RETURN(const std::vector<HostTensor> values, InputValues(f, p));
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::KernelBackend> backend, kernels::MakeBackend("cpu"));
  ASSIGN_OR_RETURN(const import::SimulatedRun run,
                   import::RunOnSimulatedMesh(*backend, p.program, p.planned, values));
  for (size_t o = 0; o < run.outputs.size(); ++o) {
    const HostTensor& t = run.outputs[o];
    const DTensorSpec& s = p.planned.values[p.program.outputs[o]];
    out << "output " << p.program.output_names[o] << ": " << DTypeName(t.dtype())
        << ShapeToString(t.shape()) << " " << PlacementsToString(s.placements) << " on "
        << p.mesh->ToString() << "; the ranks moved " << run.bytes_moved << " B\n";
  }
  if (f.check) {
    const DeviceMesh one = DeviceMesh::Create(p.mesh->device_type(), {1}).value();
    ops::ShardingCache cache;
    ASSIGN_OR_RETURN(const import::PlannedProgram single,
                     import::PlanExportedProgram(p.program, one, {}, cache));
    ASSIGN_OR_RETURN(const import::SimulatedRun reference,
                     import::RunOnSimulatedMesh(*backend, p.program, single, values));
    for (size_t o = 0; o < run.outputs.size(); ++o) {
      out << "  against one process: the largest difference is "
          << MaxDifference(run.outputs[o], reference.outputs[o]) << "\n";
    }
  }
  if (!f.out.empty()) {
    RETURN_IF_ERROR(WriteNpyFile(f.out, run.outputs[0]));
    out << "wrote " << f.out << "\n";
  }
  return absl::OkStatus();
}

// The flags `plan` and `run` share.
void AddPlanFlags(CLI::App& app, PlanFlags& flags) {
  app.add_option("archive", flags.archive, "the archive torch.export.save wrote")
      ->required()
      ->type_name("FILE.pt2");
  AddMeshShapeFlags(app, flags.mesh, "--mesh");
  app.add_option("--mesh-dim", flags.mesh_dim, "the tensor-parallel mesh dim (default: the last)");
  app.add_option("--plan", flags.plan, "a parallelize_module plan file")->type_name("FILE");
  app.add_option("--tp-plan", flags.tp_plan,
                 "a Hugging Face tp_plan: a JSON object of module pattern to style (colwise, "
                 "rowwise, ...); hf: the base_model_tp_plan of --weights' config.json (its prefix "
                 "from its model_type unless --prefix)")
      ->type_name("FILE|hf");
  app.add_option("--prefix", flags.prefix,
                 "the base model's prefix the tp_plan's patterns are under (a "
                 "base_model_tp_plan's: \"model\" for Llama)");
  app.add_option("--weights", flags.weights,
                 "a Hugging Face checkpoint directory giving the weights, matched by name")
      ->type_name("DIR");
}

}  // namespace

void AddImportCommands(CLI::App& app, Action* action) {
  CLI::App* group =
      app.add_subcommand("import",
                         "models brought from PyTorch: torch.export archives (.pt2), Hugging Face "
                         "checkpoints and plans");
  group->require_subcommand(1);
  auto plan = AddCommand(*group, "plan",
                         "read an archive, lay it out by a plan and plan it on a mesh in one "
                         "sharding-propagation pass: each input's placements and what a forward "
                         "moves between ranks",
                         Plan, action);
  AddPlanFlags(*plan.app, *plan.flags);
  auto run = AddCommand(*group, "run",
                        "plan an archive as `import plan` does and run it on a simulated mesh in "
                        "this process (each rank's shards, the plan's collectives block by block, "
                        "the kernels' local calls): a plan checked before it is deployed",
                        Run, action);
  AddPlanFlags(*run.app, *run.flags);
  run.app
      ->add_option("--input", run.flags->inputs,
                   "a user input: NAME=FILE.npy, or FILE.npy for a program of one input")
      ->type_name("[NAME=]FILE.npy");
  run.app->add_option("--out", run.flags->out, "write the first output here")
      ->type_name("FILE.npy");
  run.app->add_flag("--check", run.flags->check,
                    "also run the program on one rank and print the largest difference");
  group->group("Commands that need no cluster");
}

}  // namespace tessera::cli
