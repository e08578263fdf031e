#ifndef TESSERA_IMPORT_PT2_ARCHIVE_H_
#define TESSERA_IMPORT_PT2_ARCHIVE_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "import/pt2_zip.h"
#include "nlohmann/json.hpp"

namespace tessera::import {

// The graph of an archive written by torch.export.save (a zip: <name>/archive_format "pt2",
// <name>/models/<model>.json the serialized ExportedProgram, <name>/data/ its weights and
// constants), as far as reading which ops it calls needs.
struct Pt2Graph {
  std::string archive;         // the folder every entry is under ("llama")
  std::string model;           // the model's entry ("llama/models/model.json")
  std::string schema_version;  // the serializer's ("8.13")
  std::string torch_version;   // torch's, when the archive says ("2.15.0+cu132")
  // Every node's target in graph order, as the registry names ATen ops ("aten::add.Tensor",
  // "aten::embedding" for the default overload); other targets as written ("_operator.getitem",
  // "torch.ops.higher_order.wrap_with_set_grad_enabled").
  std::vector<std::string> targets;
};

// The most bytes of an archive's model JSON that are read (torch.export's for a model of
// thousands of nodes, stack traces and all, is tens of MB).
inline constexpr int64_t kMaxModelBytes = int64_t{256} << 20;

// An archive's model: the folder every entry is under, the model's entry and its JSON (the
// serialized ExportedProgram).
struct ArchiveModel {
  std::string archive;
  std::string model;
  nlohmann::json json;
};
// The first <name>/models/*.json of `zip`, parsed. INVALID_ARGUMENT naming the archive where
// there is none, archive_format says another format than pt2, or the model is not JSON or is
// larger than kMaxModelBytes.
absl::StatusOr<ArchiveModel> ReadArchiveModel(const Pt2Zip& zip);
// The graph's node list of a model JSON (`what` names it in messages): INVALID_ARGUMENT naming
// the member it lacks.
absl::StatusOr<const nlohmann::json*> GraphNodes(const nlohmann::json& model,
                                                 const std::string& what);

// Reads the graph of the torch.export archive at `path`. INVALID_ARGUMENT naming the file where
// it is not a zip, holds no <name>/models/*.json, says another archive_format than pt2, or its
// model is not the JSON of an ExportedProgram (naming what is missing); NOT_FOUND where there is
// no such file. A model JSON past kMaxModelBytes is INVALID_ARGUMENT too, before it is read
// whole.
absl::StatusOr<Pt2Graph> ReadPt2Graph(const std::string& path);
// The same from the archive's bytes (`name` names it in messages): the reader fuzz/pt2_fuzz.cc
// drives.
absl::StatusOr<Pt2Graph> ParsePt2Graph(std::string_view bytes, const std::string& name);

// A serialized node target ("torch.ops.aten.softmax.int", "torch.ops.aten.mm.default") as the
// registry names the op ("aten::softmax.int", "aten::mm"); any other target as it is.
std::string RegistryName(absl::string_view target);

// Whether the registry holds the op a node calls, `op` as RegistryName gives it: by that exact
// name (the registry's Find also takes "aten::var" for its only overload, var.correction, which
// is another op than torch's var.default).
bool Registered(const std::string& op);

// How many nodes call each op (by RegistryName), sorted by name.
std::map<std::string, int64_t> CountOps(const Pt2Graph& graph);

}  // namespace tessera::import

#endif  // TESSERA_IMPORT_PT2_ARCHIVE_H_
