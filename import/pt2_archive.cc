#include "import/pt2_archive.h"

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/json.h"
#include "core/ops/op_registry.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace tessera::import {
namespace {

// The JSON member `key` of `j`, an object: INVALID_ARGUMENT naming `what` without it.
absl::StatusOr<const nlohmann::json*> Member(const nlohmann::json& j, const char* key,
                                             const std::string& what) {
  if (!j.is_object() || !j.contains(key)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has no '", key, "'"));
  }
  return &j.at(key);
}

}  // namespace

std::string RegistryName(absl::string_view target) {
  absl::string_view op = target;
  if (!absl::ConsumePrefix(&op, "torch.ops.aten.")) return std::string(target);
  absl::ConsumeSuffix(&op, ".default");
  return absl::StrCat("aten::", op);
}

absl::StatusOr<ArchiveModel> ReadArchiveModel(const Pt2Zip& zip) {
  const std::string& path = zip.name();
  ArchiveModel out;
  std::optional<int64_t> model, format;
  for (int64_t i = 0; i < zip.num_entries(); ++i) {
    const std::string name = zip.EntryName(i);
    const absl::string_view n(name);
    const size_t slash = n.find('/');
    if (slash == absl::string_view::npos) continue;
    const absl::string_view rest = n.substr(slash + 1);
    // The first model (an archive may hold more, by name; torch.export.save writes "model").
    if (!model.has_value() && absl::StartsWith(rest, "models/") && absl::EndsWith(rest, ".json")) {
      model = i;
      out.archive = std::string(n.substr(0, slash));
      out.model = name;
    }
  }
  if (!model.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " holds no <name>/models/*.json: not an archive torch.export.save wrote"));
  }
  // The format of the model's own folder.
  format = zip.Find(out.archive + "/archive_format");
  if (format.has_value()) {
    ASSIGN_OR_RETURN(const std::string f, zip.Read(*format, 64));
    if (absl::StripAsciiWhitespace(f) != "pt2") {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": archive_format is '", f, "', not pt2 (torch.export.save's)"));
    }
  }
  ASSIGN_OR_RETURN(const std::string text, zip.Read(*model, kMaxModelBytes));
  absl::StatusOr<nlohmann::json> parsed = ParseJson(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", out.model, " is not JSON: ", parsed.status().message()));
  }
  out.json = *std::move(parsed);
  return out;
}

absl::StatusOr<const nlohmann::json*> GraphNodes(const nlohmann::json& model,
                                                 const std::string& what) {
  ASSIGN_OR_RETURN(const nlohmann::json* module, Member(model, "graph_module", what));
  ASSIGN_OR_RETURN(const nlohmann::json* g, Member(*module, "graph", what + "'s graph_module"));
  ASSIGN_OR_RETURN(const nlohmann::json* nodes, Member(*g, "nodes", what + "'s graph"));
  if (!nodes->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the graph's nodes are not a list"));
  }
  return nodes;
}

namespace {

// The graph of the archive `zip`.
absl::StatusOr<Pt2Graph> ReadGraph(const Pt2Zip& zip) {
  ASSIGN_OR_RETURN(const ArchiveModel m, ReadArchiveModel(zip));
  Pt2Graph graph;
  graph.archive = m.archive;
  graph.model = m.model;
  const nlohmann::json& j = m.json;
  const std::string what = absl::StrCat(zip.name(), ": ", graph.model);
  if (j.contains("schema_version") && j["schema_version"].is_object()) {
    const nlohmann::json& v = j["schema_version"];
    if (v.contains("major") && v.contains("minor")) {
      const absl::StatusOr<int64_t> major = JsonInt64(v["major"]);
      const absl::StatusOr<int64_t> minor = JsonInt64(v["minor"]);
      if (major.ok() && minor.ok()) graph.schema_version = absl::StrCat(*major, ".", *minor);
    }
  }
  if (j.contains("torch_version") && j["torch_version"].is_string()) {
    graph.torch_version = j["torch_version"].get<std::string>();
  }
  ASSIGN_OR_RETURN(const nlohmann::json* nodes, GraphNodes(j, what));
  for (size_t k = 0; k < nodes->size(); ++k) {
    const nlohmann::json& node = (*nodes)[k];
    if (!node.is_object() || !node.contains("target") || !node["target"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": node ", k, " has no target (the op it calls)"));
    }
    graph.targets.push_back(RegistryName(node["target"].get<std::string>()));
  }
  return graph;
}

}  // namespace

absl::StatusOr<Pt2Graph> ReadPt2Graph(const std::string& path) {
  ASSIGN_OR_RETURN(const Pt2Zip zip, Pt2Zip::Open(path));
  return ReadGraph(zip);
}

absl::StatusOr<Pt2Graph> ParsePt2Graph(std::string_view bytes, const std::string& name) {
  ASSIGN_OR_RETURN(const Pt2Zip zip, Pt2Zip::FromBytes(bytes, name));
  return ReadGraph(zip);
}

bool Registered(const std::string& op) {
  absl::StatusOr<const ops::OpDef*> def = ops::Registry().Find(op);
  return def.ok() && (*def)->name() == op;
}

std::map<std::string, int64_t> CountOps(const Pt2Graph& graph) {
  std::map<std::string, int64_t> counts;
  for (const std::string& t : graph.targets) ++counts[t];
  return counts;
}

}  // namespace tessera::import
