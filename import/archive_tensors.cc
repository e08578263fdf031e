#include "import/archive_tensors.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/checked_math.h"
#include "core/json.h"
#include "core/shape.h"
#include "core/status_macros.h"
#include "import/exported_program.h"
#include "nlohmann/json.hpp"

namespace tessera::import {
namespace {

using nlohmann::json;

// The most bytes a tensors' config is read to (one entry per tensor, a few hundred bytes each).
constexpr int64_t kMaxConfigBytes = int64_t{64} << 20;

// Whether a serialized meta lays its tensor out contiguously, row-major, from offset 0.
bool RowMajorFromZero(const json& meta, const Shape& shape) {
  const json* strides = meta.contains("strides") ? &meta["strides"] : nullptr;
  const json* offset = meta.contains("storage_offset") ? &meta["storage_offset"] : nullptr;
  if (offset != nullptr &&
      !(offset->is_object() && offset->contains("as_int") && (*offset)["as_int"] == 0)) {
    return false;
  }
  if (strides == nullptr) return true;
  if (!strides->is_array() || strides->size() != shape.size()) return false;
  // An empty tensor has no bytes to lay out.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return true;
  int64_t expected = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    const json& s = (*strides)[d];
    if (!s.is_object() || !s.contains("as_int")) return false;
    const absl::StatusOr<int64_t> stride = JsonInt64(s["as_int"]);
    if (!stride.ok()) return false;
    // A dim of size 1 may carry any stride.
    if (shape[d] > 1 && *stride != expected) return false;
    const std::optional<int64_t> next = CheckedMul(expected, shape[d]);
    if (!next.has_value()) return false;
    expected = *next;
  }
  return true;
}

// The entries of one config (`folder` "weights" or "constants"), if the archive has it.
absl::Status ReadConfig(const Pt2Zip& zip, const std::string& archive, const std::string& folder,
                        const std::string& config_name, std::vector<ArchiveTensor>& out) {
  const std::string dir = absl::StrCat(archive, "/data/", folder, "/");
  const std::optional<int64_t> config = zip.Find(dir + config_name);
  if (!config.has_value()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string text, zip.Read(*config, kMaxConfigBytes));
  const std::string what = absl::StrCat(zip.name(), ": ", dir, config_name);
  absl::StatusOr<json> parsed = ParseJson(text);
  if (!parsed.ok())
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", parsed.status().message()));
  const json& j = *parsed;
  if (!j.is_object() || !j.contains("config") || !j["config"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not a tensors' config"));
  }
  for (const auto& [name, entry] : j["config"].items()) {
    const std::string where = absl::StrCat(what, ": '", name, "'");
    if (!entry.is_object() || !entry.contains("path_name") || !entry["path_name"].is_string() ||
        !entry.contains("tensor_meta")) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has no path_name and tensor_meta"));
    }
    if (entry.contains("use_pickle") && entry["use_pickle"] == true) {
      return absl::UnimplementedError(
          absl::StrCat(where, " is stored pickled; import reads raw tensor files only"));
    }
    ArchiveTensor t;
    t.name = name;
    t.is_param = entry.contains("is_param") && entry["is_param"] == true;
    t.constant = folder == "constants";
    ASSIGN_OR_RETURN(t.meta, ReadTensorMeta(entry["tensor_meta"], where));
    if (!RowMajorFromZero(entry["tensor_meta"], t.meta.shape)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " is not laid out row-major from offset 0 (", Shown(entry["tensor_meta"]), ")"));
    }
    const std::string file = dir + entry["path_name"].get<std::string>();
    const std::optional<int64_t> index = zip.Find(file);
    if (!index.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": the archive has no ", file));
    }
    t.entry = *index;
    out.push_back(std::move(t));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<ArchiveTensor>> ListArchiveTensors(const Pt2Zip& zip,
                                                              const std::string& archive) {
  if (const std::optional<int64_t> order = zip.Find(archive + "/byteorder")) {
    ASSIGN_OR_RETURN(const std::string o, zip.Read(*order, 64));
    if (absl::StripAsciiWhitespace(o) != "little") {
      return absl::UnimplementedError(
          absl::StrCat(zip.name(), ": byteorder '", o, "'; import reads little-endian archives"));
    }
  }
  std::vector<ArchiveTensor> out;
  RETURN_IF_ERROR(ReadConfig(zip, archive, "weights", "model_weights_config.json", out));
  RETURN_IF_ERROR(ReadConfig(zip, archive, "constants", "model_constants_config.json", out));
  std::sort(out.begin(), out.end(),
            [](const ArchiveTensor& a, const ArchiveTensor& b) { return a.name < b.name; });
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].name == out[i - 1].name) {
      return absl::InvalidArgumentError(
          absl::StrCat(zip.name(), ": tensor '", out[i].name, "' is stored twice"));
    }
  }
  return out;
}

absl::StatusOr<HostTensor> ReadArchiveTensor(const Pt2Zip& zip, const ArchiveTensor& tensor) {
  const std::optional<int64_t> size = CheckedMul(
      NumElements(tensor.meta.shape), static_cast<int64_t>(DTypeSize(tensor.meta.dtype)));
  if (!size.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(zip.name(), ": tensor '", tensor.name,
                                                   "' has more bytes than an int64 counts"));
  }
  const int64_t nbytes = *size;
  absl::StatusOr<std::string> bytes = zip.Read(tensor.entry, nbytes);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor.name, "' (", DTypeName(tensor.meta.dtype),
                     ShapeToString(tensor.meta.shape), "): ", bytes.status().message()));
  }
  if (static_cast<int64_t>(bytes->size()) != nbytes) {
    return absl::InvalidArgumentError(absl::StrCat(zip.name(), ": tensor '", tensor.name, "' is ",
                                                   DTypeName(tensor.meta.dtype),
                                                   ShapeToString(tensor.meta.shape), " (", nbytes,
                                                   " bytes) but its file holds ", bytes->size()));
  }
  return HostTensor::FromBytes(
      tensor.meta.dtype, tensor.meta.shape,
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes->data()), bytes->size()));
}

}  // namespace tessera::import
