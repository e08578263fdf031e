#include "import/program_parallel.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/json.h"
#include "core/sharding/dtensor_spec.h"
#include "core/status_context.h"
#include "core/status_macros.h"

namespace tessera::import {
namespace {

using Kind = ModuleStyle::Kind;

// What a module is, for the styles: its class's last name.
enum class ModuleClass { kLinear, kConv1D, kEmbedding, kOther };

ModuleClass ClassOf(const std::string& type) {
  const absl::string_view name = absl::string_view(type).substr(type.rfind('.') + 1);
  if (name == "Linear") return ModuleClass::kLinear;
  if (name == "Conv1D") return ModuleClass::kConv1D;
  if (name == "Embedding") return ModuleClass::kEmbedding;
  return ModuleClass::kOther;
}

// Whether module `fqn` lies under `root` (or is it); every module lies under the root "".
bool Under(const std::string& fqn, const std::string& root) {
  return root.empty() || fqn == root ||
         (absl::StartsWith(fqn, root) && fqn.size() > root.size() && fqn[root.size()] == '.');
}

// Whether `pattern` names module `fqn`, token by token as parallelize_module walks the tree.
bool Matches(const std::string& pattern, const std::string& fqn) {
  if (pattern.empty() || fqn.empty()) return pattern.empty() && fqn.empty();
  const std::vector<absl::string_view> p = absl::StrSplit(pattern, '.');
  const std::vector<absl::string_view> f = absl::StrSplit(fqn, '.');
  if (p.size() != f.size()) return false;
  for (size_t i = 0; i < p.size(); ++i) {
    if (!FnMatch(p[i], f[i])) return false;
  }
  return true;
}

// The placement on the tp dim of parameter `leaf` ("weight", "bias") of a module of class `c`
// under a style of `kind`.
Placement ParameterPlacement(Kind kind, ModuleClass c, const std::string& leaf) {
  const bool weight = leaf == "weight";
  switch (kind) {
    case Kind::kColwise:
      if (c == ModuleClass::kEmbedding) return Placement::Shard(1);
      if (c == ModuleClass::kConv1D) return Placement::Shard(weight ? 1 : 0);
      return Placement::Shard(0);
    case Kind::kRowwise:
      if (c == ModuleClass::kEmbedding) return Placement::Shard(0);
      if (!weight) return Placement::Replicate();
      return Placement::Shard(c == ModuleClass::kConv1D ? 0 : 1);
    case Kind::kSequenceParallel:
    case Kind::kReplicate:
      return Placement::Replicate();
  }
  return Placement::Replicate();
}

ModuleStyle Style(Kind kind, std::optional<Placement> output, std::string name) {
  return ModuleStyle{kind, output, std::move(name)};
}

}  // namespace

absl::StatusOr<ProgramPlan> ProgramPlanOf(const ParallelizePlan& plan, const DeviceMesh& mesh) {
  ProgramPlan out;
  if (!plan.mesh_dim_name.empty()) {
    ASSIGN_OR_RETURN(out.tp_mesh_dim, mesh.DimIndex(plan.mesh_dim_name));
  } else {
    out.tp_mesh_dim = plan.mesh_dim_index;
  }
  if (out.tp_mesh_dim < 0 || out.tp_mesh_dim >= mesh.ndim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("mesh dim ", out.tp_mesh_dim, " of a ", mesh.ndim(), "-dim mesh"));
  }
  for (const auto& [pattern, style] : plan.styles) {
    const std::string name(StyleKindName(style.kind));
    const std::optional<Placement> output =
        style.output_layouts.empty() ? std::nullopt : style.output_layouts[0];
    switch (style.kind) {
      case StyleKind::kColwise:
        out.styles.emplace_back(pattern, Style(Kind::kColwise, output, name));
        break;
      case StyleKind::kRowwise:
        out.styles.emplace_back(pattern, Style(Kind::kRowwise, output, name));
        break;
      case StyleKind::kSequenceParallel:
        out.styles.emplace_back(
            pattern, Style(Kind::kSequenceParallel, Placement::Shard(style.sequence_dim), name));
        break;
      case StyleKind::kPrepareModuleInput:
      case StyleKind::kPrepareModuleOutput:
        return absl::UnimplementedError(absl::StrCat(
            "'", pattern, "': ", name,
            " on an exported program (Colwise, Rowwise and SequenceParallel are taken)"));
    }
  }
  return out;
}

absl::StatusOr<ProgramPlan> ParseHfTpPlan(const nlohmann::json& tp_plan, const std::string& prefix,
                                          int tp_mesh_dim) {
  if (!tp_plan.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a tp_plan is an object of module pattern to style, not ", Shown(tp_plan)));
  }
  static const auto* const styles = new std::map<std::string, ModuleStyle>{
      {"colwise", Style(Kind::kColwise, Placement::Shard(-1), "colwise")},
      {"colwise_rep", Style(Kind::kColwise, Placement::Replicate(), "colwise_rep")},
      {"colwise_gather_output",
       Style(Kind::kColwise, Placement::Replicate(), "colwise_gather_output")},
      {"rowwise", Style(Kind::kRowwise, Placement::Replicate(), "rowwise")},
      {"rowwise_rep", Style(Kind::kRowwise, Placement::Replicate(), "rowwise_rep")},
      {"rowwise_split_input", Style(Kind::kRowwise, Placement::Replicate(), "rowwise_split_input")},
      {"embedding_rowwise", Style(Kind::kRowwise, Placement::Replicate(), "embedding_rowwise")},
      {"embedding_colwise", Style(Kind::kColwise, Placement::Replicate(), "embedding_colwise")},
      {"sequence_parallel",
       Style(Kind::kSequenceParallel, Placement::Shard(1), "sequence_parallel")},
      {"replicate", Style(Kind::kReplicate, std::nullopt, "replicate")},
      {"replicated_with_grad_allreduce",
       Style(Kind::kReplicate, std::nullopt, "replicated_with_grad_allreduce")},
  };
  ProgramPlan out;
  out.tp_mesh_dim = tp_mesh_dim;
  for (const auto& [pattern, value] : tp_plan.items()) {
    if (!value.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tp_plan '", pattern, "': the style ", Shown(value), " is not a string"));
    }
    const std::string name = value.get<std::string>();
    if (name == "packed_colwise" || name == "packed_rowwise") {
      return absl::UnimplementedError(
          absl::StrCat("tp_plan '", pattern, "': ", name,
                       " shards each packed part of a fused weight on its own, a layout no "
                       "placement here expresses yet"));
    }
    auto it = styles->find(name);
    if (it == styles->end()) {
      std::string known;
      for (const auto& [k, v] : *styles) absl::StrAppend(&known, known.empty() ? "" : ", ", k);
      return absl::InvalidArgumentError(
          absl::StrCat("tp_plan '", pattern, "': unknown style '", name, "' (known: ", known, ")"));
    }
    const std::string full =
        prefix.empty() ? pattern : (pattern.empty() ? prefix : absl::StrCat(prefix, ".", pattern));
    out.styles.emplace_back(full, it->second);
  }
  return out;
}

absl::StatusOr<ProgramLayout> LayOutProgram(const ExportedProgram& program, const ProgramPlan& plan,
                                            const DeviceMesh& mesh) {
  if (plan.tp_mesh_dim < 0 || plan.tp_mesh_dim >= mesh.ndim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan's mesh dim ", plan.tp_mesh_dim, " is not one of a ", mesh.ndim(), "-dim mesh's"));
  }
  ProgramLayout out;
  out.inputs.assign(program.inputs.size(),
                    std::vector<Placement>(mesh.ndim(), Placement::Replicate()));
  out.pins.resize(program.num_values());
  // Module FQN -> the pattern that landed on it, in the plan's order.
  std::map<std::string, int> landed;
  for (size_t p = 0; p < plan.styles.size(); ++p) {
    const std::string& pattern = plan.styles[p].first;
    bool any = false;
    for (const auto& [fqn, type] : program.module_types) {
      if (!Matches(pattern, fqn)) continue;
      any = true;
      auto [it, inserted] = landed.emplace(fqn, static_cast<int>(p));
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat("module '", fqn, "' is matched by both '",
                                                       plan.styles[it->second].first, "' and '",
                                                       pattern, "'"));
      }
    }
    if (!any) out.unmatched.push_back(pattern);
  }
  // Which module each value is written in, and which values each module's outside reads.
  std::vector<const std::string*> written_in(program.num_values(), nullptr);
  for (const ProgramNode& node : program.nodes) {
    for (int v : node.outputs) written_in[v] = &node.module;
  }
  // Inner modules first: where a styled module holds another and they share an output value,
  // the outer one's layout is the last applied, as torch runs the outer module's output hook last.
  std::vector<std::pair<std::string, int>> order(landed.begin(), landed.end());
  auto depth = [](const std::string& fqn) {
    return fqn.empty() ? 0 : 1 + static_cast<int>(std::count(fqn.begin(), fqn.end(), '.'));
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](const auto& a, const auto& b) { return depth(a.first) > depth(b.first); });
  for (const auto& [landed_fqn, p] : order) {
    const std::string& fqn = landed_fqn;  // a variable the lambdas below can capture
    const ModuleStyle& style = plan.styles[p].second;
    const std::string& type = program.module_types.at(fqn);
    const ModuleClass c = ClassOf(type);
    if ((style.kind == Kind::kColwise || style.kind == Kind::kRowwise) &&
        c == ModuleClass::kOther) {
      return absl::InvalidArgumentError(
          absl::StrCat("module '", fqn, "' is a ", type, ": ", style.name,
                       " lays out a Linear, a Conv1D or an Embedding"));
    }
    out.assigned.emplace_back(fqn, style.name);
    for (size_t i = 0; i < program.inputs.size(); ++i) {
      const ProgramInput& in = program.inputs[i];
      if (in.kind != InputKind::kParameter) continue;
      const size_t dot = in.target.rfind('.');
      const std::string owner = dot == std::string::npos ? "" : in.target.substr(0, dot);
      if (owner != fqn) continue;
      const std::string leaf = dot == std::string::npos ? in.target : in.target.substr(dot + 1);
      std::vector<Placement> placements(mesh.ndim(), Placement::Replicate());
      placements[plan.tp_mesh_dim] = ParameterPlacement(style.kind, c, leaf);
      absl::StatusOr<std::vector<Placement>> normalized = NormalizePlacements(
          mesh, placements, static_cast<int>(program.value_metas[i].shape.size()));
      if (!normalized.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("parameter '", in.target, "' of ", fqn, " (",
                                                       style.name,
                                                       "): ", normalized.status().message()));
      }
      out.inputs[i] = *std::move(normalized);
    }
    if (!style.output.has_value()) continue;
    // The module's outputs: values written inside it and read outside it, or returned.
    std::set<int> outputs;
    for (const ProgramNode& node : program.nodes) {
      if (Under(node.module, fqn)) continue;
      for (const ops::NamedValue& arg : node.args) {
        auto take = [&](int v) {
          if (v >= 0 && written_in[v] != nullptr && Under(*written_in[v], fqn)) outputs.insert(v);
        };
        if (const auto* t = std::get_if<ops::TensorRef>(&arg.value)) take(t->index);
        if (const auto* l = std::get_if<ops::TensorList>(&arg.value)) {
          for (int v : l->indices) take(v);
        }
      }
    }
    for (int v : program.outputs) {
      if (written_in[v] != nullptr && Under(*written_in[v], fqn)) outputs.insert(v);
    }
    for (int v : outputs) {
      Placement pin = *style.output;
      const int rank = static_cast<int>(program.value_metas[v].shape.size());
      if (pin.is_shard() && pin.dim < 0) pin.dim += rank;
      if (pin.is_shard() && (pin.dim < 0 || pin.dim >= rank)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "module '", fqn, "' (", style.name, "): its output '", program.value_names[v], "' has ",
            rank, " dims, too few for ", PlacementToString(*style.output)));
      }
      out.pins[v].assign(mesh.ndim(), std::nullopt);
      out.pins[v][plan.tp_mesh_dim] = pin;
    }
  }
  return out;
}

absl::StatusOr<std::optional<ProgramPlan>> ProgramPlanFromText(const std::string& plan_json,
                                                               const std::string& tp_plan_json,
                                                               const std::string& prefix,
                                                               int mesh_dim,
                                                               const DeviceMesh& mesh) {
  if (mesh_dim < -1 || mesh_dim >= mesh.ndim()) {
    return absl::InvalidArgumentError(absl::StrCat("mesh dim ", mesh_dim, ": the mesh ",
                                                   mesh.ToString(), " has ", mesh.ndim(), " dims"));
  }
  if (!plan_json.empty() && !tp_plan_json.empty()) {
    return absl::InvalidArgumentError(
        "a parallelize_module plan and a tp_plan are both given; give one");
  }
  const int tp = mesh_dim >= 0 ? mesh_dim : mesh.ndim() - 1;
  if (!plan_json.empty()) {
    absl::StatusOr<PlanSpec> spec = ParsePlanSpec(plan_json);
    if (!spec.ok()) return WithContext("plan", spec.status());
    if (!spec->parallelize.has_value()) {
      return absl::InvalidArgumentError(
          "the plan is a distribute_module partition; give a parallelize plan");
    }
    if (mesh_dim >= 0) {
      spec->parallelize->mesh_dim_name.clear();
      spec->parallelize->mesh_dim_index = mesh_dim;
    } else if (spec->parallelize->mesh_dim_name.empty()) {
      spec->parallelize->mesh_dim_index = tp;
    }
    ASSIGN_OR_RETURN(ProgramPlan plan, ProgramPlanOf(*spec->parallelize, mesh));
    return plan;
  }
  if (!tp_plan_json.empty()) {
    absl::StatusOr<nlohmann::json> j = ParseJson(tp_plan_json);
    if (!j.ok()) return WithContext("tp_plan", j.status());
    ASSIGN_OR_RETURN(ProgramPlan plan, ParseHfTpPlan(*j, prefix, tp));
    return plan;
  }
  return std::nullopt;
}

}  // namespace tessera::import
