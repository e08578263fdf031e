#include "client/cli/import_commands.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/files/file_bytes.h"
#include "core/modules/parallel_plan.h"
#include "core/shape.h"
#include "core/status_macros.h"
#include "import/archive_tensors.h"
#include "import/exported_program.h"
#include "import/hf_checkpoint.h"
#include "import/program_parallel.h"
#include "import/program_plan.h"
#include "import/pt2_archive.h"

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

absl::Status Plan(const PlanFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(const import::Pt2Zip zip, import::Pt2Zip::Open(f.archive));
  ASSIGN_OR_RETURN(const import::ArchiveModel model, import::ReadArchiveModel(zip));
  ASSIGN_OR_RETURN(const import::ExportedProgram program,
                   import::ParseExportedProgram(model.json, f.archive));
  ASSIGN_OR_RETURN(const std::vector<import::ArchiveTensor> stored,
                   import::ListArchiveTensors(zip, model.archive));
  ASSIGN_OR_RETURN(const DeviceMesh mesh, MakeMesh(f.mesh));
  const int tp = f.mesh_dim >= 0 ? f.mesh_dim : mesh.ndim() - 1;

  int64_t resolved = 0;
  for (const auto& [op, n] : program.resolved) resolved += n;
  std::map<import::InputKind, int> kinds;
  for (const import::ProgramInput& in : program.inputs) ++kinds[in.kind];
  out << model.model << ": " << program.nodes.size() << " nodes (" << resolved
      << " more answered by import), " << kinds[import::InputKind::kParameter] << " parameters, "
      << kinds[import::InputKind::kBuffer] + kinds[import::InputKind::kConstant]
      << " buffers and constants, " << kinds[import::InputKind::kUserInput] << " user input(s)\n";

  // The plan: a parallelize_module plan file, a Hugging Face tp_plan, or none (all replicated).
  import::ProgramLayout layout;
  if (!f.plan.empty() && !f.tp_plan.empty()) {
    return absl::InvalidArgumentError("give --plan or --tp-plan, not both");
  }
  std::optional<import::ProgramPlan> plan;
  if (!f.plan.empty()) {
    ASSIGN_OR_RETURN(const std::string text, ReadText(f.plan));
    ASSIGN_OR_RETURN(PlanSpec spec, ParsePlanSpec(text));
    if (!spec.parallelize.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.plan, " is a distribute_module partition; give a parallelize plan"));
    }
    if (f.mesh_dim >= 0) {
      spec.parallelize->mesh_dim_name.clear();
      spec.parallelize->mesh_dim_index = f.mesh_dim;
    } else if (spec.parallelize->mesh_dim_name.empty()) {
      spec.parallelize->mesh_dim_index = tp;
    }
    ASSIGN_OR_RETURN(plan, import::ProgramPlanOf(*spec.parallelize, mesh));
  } else if (!f.tp_plan.empty()) {
    ASSIGN_OR_RETURN(const std::string text, ReadText(f.tp_plan));
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return absl::InvalidArgumentError(f.tp_plan + " is not JSON");
    ASSIGN_OR_RETURN(plan, import::ParseHfTpPlan(j, f.prefix, tp));
  }
  if (plan.has_value()) {
    ASSIGN_OR_RETURN(layout, import::LayOutProgram(program, *plan, mesh));
  }
  out << mesh.ToString();
  if (plan.has_value()) {
    out << ", " << layout.assigned.size() << " module(s) styled on mesh dim " << plan->tp_mesh_dim
        << (layout.unmatched.empty()
                ? std::string()
                : absl::StrCat("; matching nothing: ", absl::StrJoin(layout.unmatched, ", ")));
  } else {
    out << ", no plan: every parameter replicated";
  }
  out << "\n";

  // Where the weights come from.
  std::vector<std::string> sources(program.inputs.size());
  if (!f.weights.empty()) {
    std::map<std::string, int64_t> entries;
    for (const import::ArchiveTensor& t : stored) entries[t.name] = t.entry;
    ASSIGN_OR_RETURN(const import::HfCheckpoint checkpoint, import::OpenHfCheckpoint(f.weights));
    ASSIGN_OR_RETURN(const import::WeightSources matched,
                     import::MatchCheckpoint(program, checkpoint, entries));
    for (size_t i = 0; i < sources.size(); ++i) {
      const std::string& name = matched.checkpoint_names[i];
      if (program.inputs[i].kind == import::InputKind::kUserInput) continue;
      sources[i] = name.empty() ? "archive"
                   : name == program.inputs[i].target
                       ? "checkpoint"
                       : absl::StrCat("checkpoint (tied: ", name, ")");
    }
  }

  ops::ShardingCache cache;
  ASSIGN_OR_RETURN(const import::PlannedProgram planned,
                   import::PlanExportedProgram(program, mesh, layout.inputs, cache, layout.pins));
  for (size_t i = 0; i < program.inputs.size(); ++i) {
    const import::ProgramInput& in = program.inputs[i];
    const DTensorSpec& s = planned.values[i];
    out << absl::StrFormat("  %-12s %-52s %-20s %s%s\n", import::InputKindName(in.kind), in.target,
                           absl::StrCat(DTypeName(s.dtype), ShapeToString(s.shape)),
                           PlacementsToString(s.placements),
                           sources[i].empty() ? "" : absl::StrCat("  ", sources[i]));
  }
  Traffic traffic;
  for (const import::PlannedNode& node : planned.nodes) {
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
    const DTensorSpec& s = planned.values[program.outputs[o]];
    out << "  output " << program.output_names[o] << ": " << DTypeName(s.dtype)
        << ShapeToString(s.shape) << " " << PlacementsToString(s.placements) << "\n";
  }
  return absl::OkStatus();
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
  plan.app->add_option("archive", plan.flags->archive, "the archive torch.export.save wrote")
      ->required()
      ->type_name("FILE.pt2");
  AddMeshShapeFlags(*plan.app, plan.flags->mesh, "--mesh");
  plan.app->add_option("--mesh-dim", plan.flags->mesh_dim,
                       "the tensor-parallel mesh dim (default: the last)");
  plan.app->add_option("--plan", plan.flags->plan, "a parallelize_module plan file")
      ->type_name("FILE");
  plan.app
      ->add_option("--tp-plan", plan.flags->tp_plan,
                   "a Hugging Face tp_plan: a JSON object of module pattern to style "
                   "(colwise, rowwise, ...)")
      ->type_name("FILE");
  plan.app->add_option("--prefix", plan.flags->prefix,
                       "the base model's prefix the tp_plan's patterns are under (a "
                       "base_model_tp_plan's: \"model\" for Llama)");
  plan.app
      ->add_option("--weights", plan.flags->weights,
                   "a Hugging Face checkpoint directory giving the weights, matched by name")
      ->type_name("DIR");
  group->group("Commands that need no cluster");
}

}  // namespace tessera::cli
