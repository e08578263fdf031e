// ParsePlanSpec and PlanSpecToJson of core/modules/parallel_plan.h: plan files as JSON.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/json.h"
#include "core/modules/parallel_plan.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

using nlohmann::ordered_json;

constexpr StyleKind kAllStyleKinds[] = {
    StyleKind::kColwise, StyleKind::kRowwise, StyleKind::kSequenceParallel,
    StyleKind::kPrepareModuleInput, StyleKind::kPrepareModuleOutput};

// The JSON value as text for a message; never throws.
std::string ValueText(const ordered_json& value) {
  return value.dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false,
                    ordered_json::error_handler_t::replace);
}

absl::string_view TypeName(const ordered_json& value) {
  return JsonTypeName(nlohmann::json(value.type()));
}

// INVALID_ARGUMENT naming the path and value.
absl::Status BadValue(absl::string_view path, const ordered_json& value, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("plan spec: ", path, " = ", ValueText(value), ": ", why));
}

// `plan["layers.*.net1"]`: a pattern's place in the file.
std::string PatternPath(absl::string_view section, absl::string_view pattern) {
  return absl::StrCat(section, "[\"", pattern, "\"]");
}

// The arguments a style of `kind` takes (besides "style"), in the order the writer puts them.
std::vector<absl::string_view> StyleArguments(StyleKind kind) {
  switch (kind) {
    case StyleKind::kColwise:
    case StyleKind::kRowwise:
      return {"input_layouts", "output_layouts", "use_local_output"};
    case StyleKind::kSequenceParallel:
      return {"sequence_dim", "use_local_output"};
    case StyleKind::kPrepareModuleInput:
      return {"input_layouts", "desired_input_layouts", "use_local_output"};
    case StyleKind::kPrepareModuleOutput:
      return {"output_layouts", "desired_output_layouts", "use_local_output"};
  }
  return {};
}

absl::StatusOr<StyleKind> ReadStyleKind(const ordered_json& value, absl::string_view path) {
  if (value.is_string()) {
    for (StyleKind kind : kAllStyleKinds) {
      if (StyleKindName(kind) == value.get<std::string>()) return kind;
    }
  }
  std::vector<absl::string_view> names;
  for (StyleKind kind : kAllStyleKinds) names.push_back(StyleKindName(kind));
  return BadValue(path, value,
                  absl::StrCat("unknown style; expected one of ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<Placement> ReadPlacement(const ordered_json& value, absl::string_view path) {
  if (!value.is_string()) {
    return BadValue(path, value,
                    absl::StrCat("expected a placement such as \"Shard(0)\" or \"R\", found ",
                                 TypeName(value)));
  }
  absl::StatusOr<Placement> placement = ParsePlacement(value.get<std::string>());
  if (!placement.ok()) return BadValue(path, value, placement.status().message());
  return *placement;
}

// A layout argument of PrepareModuleInput/Output: one placement, null (torch's None), or a list
// of them.
absl::StatusOr<std::vector<Layout>> ReadLayoutList(const ordered_json& value,
                                                   absl::string_view path) {
  if (value.is_null()) return std::vector<Layout>{std::nullopt};
  if (!value.is_array()) {
    ASSIGN_OR_RETURN(Placement placement, ReadPlacement(value, path));
    return std::vector<Layout>{placement};
  }
  if (value.empty()) return BadValue(path, value, "expected at least one layout");
  std::vector<Layout> layouts;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i].is_null()) {
      layouts.push_back(std::nullopt);
      continue;
    }
    ASSIGN_OR_RETURN(Placement placement, ReadPlacement(value[i], absl::StrCat(path, "[", i, "]")));
    layouts.push_back(placement);
  }
  return layouts;
}

// A layout argument of ColwiseParallel/RowwiseParallel: one placement (or a list of one); null
// keeps torch's default, as `input_layouts or Replicate()` does.
absl::Status ReadSingleLayout(const ordered_json& value, absl::string_view path,
                              std::vector<Layout>& layouts) {
  if (value.is_null()) return absl::OkStatus();
  if (value.is_array()) {
    if (value.size() != 1) {
      return BadValue(path, value, "this style takes one layout (its module has one input)");
    }
    ASSIGN_OR_RETURN(Placement placement, ReadPlacement(value[0], absl::StrCat(path, "[0]")));
    layouts = {placement};
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Placement placement, ReadPlacement(value, path));
  layouts = {placement};
  return absl::OkStatus();
}

absl::StatusOr<bool> ReadBool(const ordered_json& value, absl::string_view path) {
  if (!value.is_boolean()) {
    return BadValue(path, value, absl::StrCat("expected true or false, found ", TypeName(value)));
  }
  return value.get<bool>();
}

// Sets the argument `key` (one of StyleArguments(style.kind)) of `style` from `value`.
absl::Status ReadStyleArgument(absl::string_view key, const ordered_json& value,
                               absl::string_view path, ParallelStyle& style) {
  const bool single = style.kind == StyleKind::kColwise || style.kind == StyleKind::kRowwise;
  if (key == "use_local_output") {
    ASSIGN_OR_RETURN(style.use_local_output, ReadBool(value, path));
  } else if (key == "sequence_dim") {
    absl::StatusOr<int64_t> dim = JsonInt64(value);
    if (!dim.ok()) return BadValue(path, value, dim.status().message());
    if (*dim < -64 || *dim > 64) return BadValue(path, value, "not a tensor dim");
    style.sequence_dim = static_cast<int>(*dim);
    const Placement sharded = Placement::Shard(style.sequence_dim);
    style.input_layouts = style.desired_input_layouts = style.output_layouts = {sharded};
  } else if (single && key == "input_layouts") {
    RETURN_IF_ERROR(ReadSingleLayout(value, path, style.input_layouts));
  } else if (single && key == "output_layouts") {
    RETURN_IF_ERROR(ReadSingleLayout(value, path, style.output_layouts));
  } else if (key == "input_layouts") {
    ASSIGN_OR_RETURN(style.input_layouts, ReadLayoutList(value, path));
  } else if (key == "desired_input_layouts") {
    ASSIGN_OR_RETURN(style.desired_input_layouts, ReadLayoutList(value, path));
  } else if (key == "output_layouts") {
    ASSIGN_OR_RETURN(style.output_layouts, ReadLayoutList(value, path));
  } else if (key == "desired_output_layouts") {
    ASSIGN_OR_RETURN(style.desired_output_layouts, ReadLayoutList(value, path));
  } else {
    return absl::InternalError(absl::StrCat("plan spec: no reader for style argument ", key));
  }
  return absl::OkStatus();
}

// INVALID_ARGUMENT unless a PrepareModuleInput/Output style has both its layout lists, of one
// length.
absl::Status CheckPrepareLayouts(const ParallelStyle& style, absl::string_view path) {
  const bool input = style.kind == StyleKind::kPrepareModuleInput;
  if (!input && style.kind != StyleKind::kPrepareModuleOutput) return absl::OkStatus();
  const std::vector<Layout>& from = input ? style.input_layouts : style.output_layouts;
  const std::vector<Layout>& to =
      input ? style.desired_input_layouts : style.desired_output_layouts;
  const absl::string_view from_key = input ? "input_layouts" : "output_layouts";
  const absl::string_view to_key = input ? "desired_input_layouts" : "desired_output_layouts";
  if (from.empty() || to.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("plan spec: ", path, ": ",
                                                   StyleKindName(style.kind), " needs ", from_key,
                                                   " and ", to_key));
  }
  if (from.size() != to.size()) {
    return absl::InvalidArgumentError(absl::StrCat("plan spec: ", path, ": ", from_key, " has ",
                                                   from.size(), " layouts but ", to_key, " has ",
                                                   to.size()));
  }
  return absl::OkStatus();
}

// A style: its name alone, or {"style": name, <arguments>}.
absl::StatusOr<ParallelStyle> ReadStyle(const ordered_json& value, const std::string& path) {
  if (value.is_string()) {
    ASSIGN_OR_RETURN(StyleKind kind, ReadStyleKind(value, path));
    ParallelStyle style = MakeStyle(kind);
    RETURN_IF_ERROR(CheckPrepareLayouts(style, path));
    return style;
  }
  if (!value.is_object()) {
    return BadValue(path, value,
                    absl::StrCat("expected a style name or {\"style\": ..., <arguments>}, found ",
                                 TypeName(value)));
  }
  const auto kind_value = value.find("style");
  if (kind_value == value.end()) {
    return BadValue(path, value, "no \"style\" naming the style");
  }
  ASSIGN_OR_RETURN(StyleKind kind, ReadStyleKind(*kind_value, absl::StrCat(path, ".style")));
  ParallelStyle style = MakeStyle(kind);
  const std::vector<absl::string_view> arguments = StyleArguments(kind);
  for (const auto& [key, argument] : value.items()) {
    if (key == "style") continue;
    const std::string key_path = absl::StrCat(path, ".", key);
    if (absl::StrContains(key, "kwarg")) {
      return BadValue(key_path, argument,
                      "keyword-argument layouts are not supported: a module here takes one "
                      "positional input; use input_layouts");
    }
    if (std::find(arguments.begin(), arguments.end(), key) == arguments.end()) {
      return BadValue(key_path, argument,
                      absl::StrCat("not an argument of ", StyleKindName(kind), " (it takes ",
                                   absl::StrJoin(arguments, ", "), ")"));
    }
    RETURN_IF_ERROR(ReadStyleArgument(key, argument, key_path, style));
  }
  RETURN_IF_ERROR(CheckPrepareLayouts(style, path));
  return style;
}

// INVALID_ARGUMENT if a non-empty pattern has an empty name between dots.
absl::Status CheckPattern(absl::string_view pattern, absl::string_view path) {
  if (pattern.empty()) return absl::OkStatus();
  for (absl::string_view token : absl::StrSplit(pattern, '.')) {
    if (token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("plan spec: ", path, ": the pattern '",
                                                     pattern, "' has an empty name between dots"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ParallelizePlan> ReadParallelizePlan(const ordered_json& plan,
                                                    const ordered_json* mesh_dim) {
  ParallelizePlan out;
  if (mesh_dim != nullptr) {
    if (mesh_dim->is_string() && !mesh_dim->get<std::string>().empty()) {
      out.mesh_dim_name = mesh_dim->get<std::string>();
    } else {
      absl::StatusOr<int64_t> index = JsonInt64(*mesh_dim);
      if (!index.ok() || *index < 0 || *index > 64) {
        return BadValue("mesh_dim", *mesh_dim,
                        "expected a mesh dim name such as \"tp\" or an index >= 0");
      }
      out.mesh_dim_index = static_cast<int>(*index);
    }
  }
  if (plan.is_string()) {
    ASSIGN_OR_RETURN(ParallelStyle style, ReadStyle(plan, "plan"));
    out.styles.emplace_back("", std::move(style));
    return out;
  }
  if (!plan.is_object()) {
    return BadValue(
        "plan", plan,
        absl::StrCat("expected a style name or {pattern: style, ...}, found ", TypeName(plan)));
  }
  for (const auto& [pattern, value] : plan.items()) {
    const std::string path = PatternPath("plan", pattern);
    RETURN_IF_ERROR(CheckPattern(pattern, path));
    ASSIGN_OR_RETURN(ParallelStyle style, ReadStyle(value, path));
    out.styles.emplace_back(pattern, std::move(style));
  }
  return out;
}

absl::StatusOr<DistributePlan> ReadDistributePlan(const ordered_json& plan) {
  if (!plan.is_object()) {
    return BadValue("distribute", plan,
                    absl::StrCat("expected {pattern: placements, ...}, found ", TypeName(plan)));
  }
  DistributePlan out;
  for (const auto& [pattern, value] : plan.items()) {
    const std::string path = PatternPath("distribute", pattern);
    if (pattern.empty()) {
      return BadValue(path, value, "an empty pattern names no parameter");
    }
    RETURN_IF_ERROR(CheckPattern(pattern, path));
    std::vector<Placement> placements;
    if (value.is_string()) {
      absl::StatusOr<std::vector<Placement>> parsed = ParsePlacements(value.get<std::string>());
      if (!parsed.ok()) return BadValue(path, value, parsed.status().message());
      placements = *std::move(parsed);
    } else if (value.is_array() && !value.empty()) {
      for (size_t i = 0; i < value.size(); ++i) {
        ASSIGN_OR_RETURN(Placement p, ReadPlacement(value[i], absl::StrCat(path, "[", i, "]")));
        placements.push_back(p);
      }
    } else {
      return BadValue(path, value, "expected placements, one per mesh dim, e.g. [\"Shard(0)\"]");
    }
    for (const Placement& p : placements) {
      if (p.is_partial()) {
        return BadValue(path, value,
                        "a parameter is distributed as Shard or Replicate, not Partial");
      }
    }
    out.placements.emplace_back(pattern, std::move(placements));
  }
  return out;
}

ordered_json LayoutsJson(const std::vector<Layout>& layouts) {
  ordered_json out = ordered_json::array();
  for (const Layout& layout : layouts) {
    if (layout.has_value()) {
      out.push_back(PlacementToString(*layout));
    } else {
      out.push_back(nullptr);
    }
  }
  return out;
}

ordered_json StyleJson(const ParallelStyle& style) {
  ordered_json out = ordered_json::object();
  out["style"] = std::string(StyleKindName(style.kind));
  for (absl::string_view key : StyleArguments(style.kind)) {
    if (key == "input_layouts") out["input_layouts"] = LayoutsJson(style.input_layouts);
    if (key == "desired_input_layouts") {
      out["desired_input_layouts"] = LayoutsJson(style.desired_input_layouts);
    }
    if (key == "output_layouts") out["output_layouts"] = LayoutsJson(style.output_layouts);
    if (key == "desired_output_layouts") {
      out["desired_output_layouts"] = LayoutsJson(style.desired_output_layouts);
    }
    if (key == "sequence_dim") out["sequence_dim"] = style.sequence_dim;
    if (key == "use_local_output") out["use_local_output"] = style.use_local_output;
  }
  return out;
}

}  // namespace

absl::StatusOr<PlanSpec> ParsePlanSpec(absl::string_view text) {
  absl::StatusOr<ordered_json> value = ParseOrderedJson(text);
  if (!value.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("plan spec: ", value.status().message()));
  }
  if (!value->is_object()) {
    return BadValue("the top level", *value,
                    absl::StrCat("expected an object with \"plan\" or \"distribute\", found ",
                                 TypeName(*value)));
  }
  for (const auto& [key, v] : value->items()) {
    if (key != "plan" && key != "distribute" && key != "mesh_dim") {
      return BadValue(key, v, "unknown key (a plan file has plan and mesh_dim, or distribute)");
    }
  }
  const auto plan = value->find("plan");
  const auto distribute = value->find("distribute");
  const auto mesh_dim = value->find("mesh_dim");
  const bool has_plan = plan != value->end();
  const bool has_distribute = distribute != value->end();
  if (has_plan == has_distribute) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan spec: expected exactly one of \"plan\" and \"distribute\", found ",
                     has_plan ? "both" : "neither"));
  }
  PlanSpec spec;
  if (has_distribute) {
    if (mesh_dim != value->end()) {
      return BadValue("mesh_dim", *mesh_dim,
                      "a distribute plan places parameters on every mesh dim; give no mesh_dim");
    }
    ASSIGN_OR_RETURN(spec.distribute, ReadDistributePlan(*distribute));
    return spec;
  }
  ASSIGN_OR_RETURN(spec.parallelize,
                   ReadParallelizePlan(*plan, mesh_dim == value->end() ? nullptr : &*mesh_dim));
  return spec;
}

std::string PlanSpecToJson(const PlanSpec& plan) {
  ordered_json out = ordered_json::object();
  if (plan.parallelize.has_value()) {
    if (plan.parallelize->mesh_dim_name.empty()) {
      out["mesh_dim"] = plan.parallelize->mesh_dim_index;
    } else {
      out["mesh_dim"] = plan.parallelize->mesh_dim_name;
    }
    ordered_json styles = ordered_json::object();
    for (const auto& [pattern, style] : plan.parallelize->styles)
      styles[pattern] = StyleJson(style);
    out["plan"] = std::move(styles);
  }
  if (plan.distribute.has_value()) {
    ordered_json placements = ordered_json::object();
    for (const auto& [pattern, list] : plan.distribute->placements) {
      ordered_json names = ordered_json::array();
      for (const Placement& p : list) names.push_back(PlacementToString(p));
      placements[pattern] = std::move(names);
    }
    out["distribute"] = std::move(placements);
  }
  return out.dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false,
                  ordered_json::error_handler_t::replace);
}

}  // namespace tessera
