#include "import/pt2_archive.h"

#include <zip.h>

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/ops/op_registry.h"
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

// The whole entry `index` of `zip` as bytes, at most `limit` of them: the buffer grows with the
// bytes that arrive, never to the size the entry's header declares (a hostile archive declares
// any), and an entry larger than `limit` is refused.
absl::StatusOr<std::string> ReadEntry(zip_t* zip, zip_uint64_t index, const std::string& path,
                                      int64_t limit) {
  const char* name = zip_get_name(zip, index, 0);
  const std::string entry = name == nullptr ? absl::StrCat("entry ", index) : std::string(name);
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat_index(zip, index, 0, &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot read ", entry, ": ", zip_strerror(zip)));
  }
  if ((st.valid & ZIP_STAT_SIZE) != 0 && st.size > static_cast<zip_uint64_t>(limit)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", entry, " is ", st.size, " bytes; at most ", limit, " are read"));
  }
  std::unique_ptr<zip_file_t, FileCloser> f(zip_fopen_index(zip, index, 0));
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot open ", entry, ": ", zip_strerror(zip)));
  }
  std::string bytes;
  char chunk[64 << 10];
  while (true) {
    const zip_int64_t n = zip_fread(f.get(), chunk, sizeof(chunk));
    if (n < 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", entry, " breaks after ",
                                                     bytes.size(),
                                                     " bytes: ", zip_file_strerror(f.get())));
    }
    if (n == 0) break;
    if (static_cast<int64_t>(bytes.size()) + n > limit) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", entry, " holds more than ", limit, " bytes, all that are read"));
    }
    bytes.append(chunk, static_cast<size_t>(n));
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

namespace {

// The graph of the archive `zip` opened from `path`.
absl::StatusOr<Pt2Graph> ReadGraph(zip_t* zip, const std::string& path) {
  Pt2Graph graph;
  std::optional<zip_uint64_t> model, format;
  const zip_int64_t entries = zip_get_num_entries(zip, 0);
  for (zip_int64_t i = 0; i < entries; ++i) {
    const char* name = zip_get_name(zip, static_cast<zip_uint64_t>(i), 0);
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
    absl::StatusOr<std::string> f = ReadEntry(zip, *format, path, 64);
    if (!f.ok()) return f.status();
    if (absl::StripAsciiWhitespace(*f) != "pt2") {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": archive_format is '", *f, "', not pt2 (torch.export.save's)"));
    }
  }
  absl::StatusOr<std::string> text = ReadEntry(zip, *model, path, kMaxModelBytes);
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

}  // namespace

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
  return ReadGraph(zip.get(), path);
}

absl::StatusOr<Pt2Graph> ParsePt2Graph(std::string_view bytes, const std::string& name) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  if (source == nullptr) {
    const std::string why = zip_error_strerror(&error);
    zip_error_fini(&error);
    return absl::InternalError(absl::StrCat(name, ": ", why));
  }
  Zip zip(zip_open_from_source(source, ZIP_RDONLY, &error));
  if (zip == nullptr) {
    zip_source_free(source);
    const std::string why = zip_error_strerror(&error);
    zip_error_fini(&error);
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is not a torch.export archive (a zip): ", why));
  }
  zip_error_fini(&error);
  return ReadGraph(zip.get(), name);
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
