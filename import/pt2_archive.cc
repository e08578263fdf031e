#include "import/pt2_archive.h"

#include <zip.h>

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace tessera::import {
namespace {

struct ZipCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
};
using Zip = std::unique_ptr<zip_t, ZipCloser>;

struct FileCloser {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};

// The whole entry `index` of `zip` as bytes.
absl::StatusOr<std::string> ReadEntry(zip_t* zip, zip_uint64_t index, const std::string& path) {
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat_index(zip, index, 0, &st) != 0 || (st.valid & ZIP_STAT_SIZE) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot read entry ", index, ": ", zip_strerror(zip)));
  }
  std::unique_ptr<zip_file_t, FileCloser> f(zip_fopen_index(zip, index, 0));
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot open ", zip_get_name(zip, index, 0), ": ", zip_strerror(zip)));
  }
  std::string bytes(static_cast<size_t>(st.size), '\0');
  zip_int64_t got = 0;
  while (got < static_cast<zip_int64_t>(bytes.size())) {
    const zip_int64_t n = zip_fread(f.get(), bytes.data() + got, bytes.size() - got);
    if (n <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", zip_get_name(zip, index, 0),
                                                     " ends after ", got, " of ", bytes.size(),
                                                     " bytes: ", zip_file_strerror(f.get())));
    }
    got += n;
  }
  return bytes;
}

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

absl::StatusOr<Pt2Graph> ReadPt2Graph(const std::string& path) {
  int error = 0;
  Zip zip(zip_open(path.c_str(), ZIP_RDONLY, &error));
  if (zip == nullptr) {
    zip_error_t e;
    zip_error_init_with_code(&e, error);
    const std::string why = zip_error_strerror(&e);
    zip_error_fini(&e);
    if (error == ZIP_ER_NOENT) return absl::NotFoundError(absl::StrCat(path, ": ", why));
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a torch.export archive (a zip): ", why));
  }
  Pt2Graph graph;
  std::optional<zip_uint64_t> model, format;
  const zip_int64_t entries = zip_get_num_entries(zip.get(), 0);
  for (zip_int64_t i = 0; i < entries; ++i) {
    const char* name = zip_get_name(zip.get(), static_cast<zip_uint64_t>(i), 0);
    if (name == nullptr) continue;
    const absl::string_view n(name);
    const size_t slash = n.find('/');
    if (slash == absl::string_view::npos) continue;
    const absl::string_view rest = n.substr(slash + 1);
    if (rest == "archive_format") format = static_cast<zip_uint64_t>(i);
    // The first model (an archive may hold more, by name; torch.export.save writes "model").
    if (!model.has_value() && absl::StartsWith(rest, "models/") && absl::EndsWith(rest, ".json")) {
      model = static_cast<zip_uint64_t>(i);
      graph.archive = std::string(n.substr(0, slash));
      graph.model = std::string(n);
    }
  }
  if (!model.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " holds no <name>/models/*.json: not an archive torch.export.save wrote"));
  }
  if (format.has_value()) {
    absl::StatusOr<std::string> f = ReadEntry(zip.get(), *format, path);
    if (!f.ok()) return f.status();
    if (absl::StripAsciiWhitespace(*f) != "pt2") {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": archive_format is '", *f, "', not pt2 (torch.export.save's)"));
    }
  }
  absl::StatusOr<std::string> text = ReadEntry(zip.get(), *model, path);
  if (!text.ok()) return text.status();
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  const std::string what = absl::StrCat(path, ": ", graph.model);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(what, " is not JSON"));
  if (j.contains("schema_version") && j["schema_version"].is_object()) {
    const nlohmann::json& v = j["schema_version"];
    if (v.contains("major") && v.contains("minor")) {
      graph.schema_version = absl::StrCat(v["major"].dump(), ".", v["minor"].dump());
    }
  }
  if (j.contains("torch_version") && j["torch_version"].is_string()) {
    graph.torch_version = j["torch_version"].get<std::string>();
  }
  absl::StatusOr<const nlohmann::json*> module = Member(j, "graph_module", what);
  if (!module.ok()) return module.status();
  absl::StatusOr<const nlohmann::json*> g = Member(**module, "graph", what + "'s graph_module");
  if (!g.ok()) return g.status();
  absl::StatusOr<const nlohmann::json*> nodes = Member(**g, "nodes", what + "'s graph");
  if (!nodes.ok()) return nodes.status();
  if (!(*nodes)->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the graph's nodes are not a list"));
  }
  for (size_t k = 0; k < (*nodes)->size(); ++k) {
    const nlohmann::json& node = (**nodes)[k];
    if (!node.is_object() || !node.contains("target") || !node["target"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": node ", k, " has no target (the op it calls)"));
    }
    graph.targets.push_back(RegistryName(node["target"].get<std::string>()));
  }
  return graph;
}

std::map<std::string, int64_t> CountOps(const Pt2Graph& graph) {
  std::map<std::string, int64_t> counts;
  for (const std::string& t : graph.targets) ++counts[t];
  return counts;
}

}  // namespace tessera::import
