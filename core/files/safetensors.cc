#include "core/files/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/files/file_bytes.h"
#include "core/json.h"
#include "core/shape.h"
#include "core/status_context.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and is copied without byte swapping");

constexpr absl::string_view kMetadataKey = "__metadata__";
constexpr size_t kLengthFieldSize = 8;

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors: ", message));
}

std::string OffsetsToString(uint64_t begin, uint64_t end) {
  return absl::StrCat("[", begin, ", ", end, "]");
}

// "24", or a bound when shape × element size does not fit in 64 bits.
std::string NeededBytes(int64_t num_elements, size_t element_size) {
  const uint64_t n = static_cast<uint64_t>(num_elements);
  if (n > std::numeric_limits<uint64_t>::max() / element_size) {
    return absl::StrCat("more than ", std::numeric_limits<uint64_t>::max());
  }
  return absl::StrCat(n * element_size);
}

// The field `key` of the tensor entry `object`, which must exist and be of type `type`.
absl::StatusOr<const nlohmann::json*> RequireField(const nlohmann::json& object,
                                                   absl::string_view key,
                                                   nlohmann::json::value_t type,
                                                   absl::string_view tensor) {
  const auto it = object.find(key);
  if (it == object.end()) {
    return Invalid(absl::StrCat("tensor '", tensor, "' has no \"", key, "\" field"));
  }
  if (it->type() != type) {
    return Invalid(absl::StrCat("tensor '", tensor, "' has a \"", key, "\" that is ",
                                JsonTypeName(*it), ", expected ",
                                JsonTypeName(nlohmann::json(type))));
  }
  return &*it;
}

// The integers of an array; INVALID_ARGUMENT naming `key` if an element is not an int64.
absl::StatusOr<std::vector<int64_t>> IntegerArray(const nlohmann::json& array,
                                                  absl::string_view key, absl::string_view tensor) {
  std::vector<int64_t> values;
  for (const nlohmann::json& v : array) {
    absl::StatusOr<int64_t> value = JsonInt64(v);
    if (!value.ok()) {
      return Invalid(absl::StrCat("tensor '", tensor, "' has a bad element in \"", key,
                                  "\": ", value.status().message()));
    }
    values.push_back(*value);
  }
  return values;
}

// Decodes and checks one tensor entry against a data buffer of `buffer_size` bytes.
absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name, const nlohmann::json& value,
                                            uint64_t buffer_size) {
  if (!value.is_object()) {
    return Invalid(
        absl::StrCat("tensor '", name, "' is ", JsonTypeName(value), ", expected an object"));
  }
  ASSIGN_OR_RETURN(const nlohmann::json* dtype,
                   RequireField(value, "dtype", nlohmann::json::value_t::string, name));
  ASSIGN_OR_RETURN(const nlohmann::json* shape,
                   RequireField(value, "shape", nlohmann::json::value_t::array, name));
  ASSIGN_OR_RETURN(const nlohmann::json* offsets,
                   RequireField(value, "data_offsets", nlohmann::json::value_t::array, name));

  SafetensorsEntry entry;
  entry.name = name;
  absl::StatusOr<DType> d = ParseSafetensorsDType(dtype->get_ref<const std::string&>());
  if (!d.ok()) return Invalid(absl::StrCat("tensor '", name, "': ", d.status().message()));
  entry.dtype = *d;

  ASSIGN_OR_RETURN(entry.shape, IntegerArray(*shape, "shape", name));
  if (absl::Status s = ValidateShape(entry.shape); !s.ok()) {
    return Invalid(absl::StrCat("tensor '", name, "': ", s.message()));
  }

  ASSIGN_OR_RETURN(std::vector<int64_t> range, IntegerArray(*offsets, "data_offsets", name));
  if (range.size() != 2) {
    return Invalid(absl::StrCat("tensor '", name, "' has ", range.size(),
                                " data_offsets, expected 2 ([begin, end])"));
  }
  const int64_t begin = range[0], end = range[1];
  if (begin < 0 || end < 0 || begin > end || static_cast<uint64_t>(end) > buffer_size) {
    return Invalid(absl::StrCat("tensor '", name, "' has data_offsets [", begin, ", ", end,
                                "], which is not a range inside the ", buffer_size,
                                "-byte data buffer"));
  }
  entry.begin = static_cast<uint64_t>(begin);
  entry.end = static_cast<uint64_t>(end);

  const size_t element_size = DTypeSize(entry.dtype);
  const uint64_t span = entry.end - entry.begin;
  const uint64_t n = static_cast<uint64_t>(NumElements(entry.shape));
  if (span % element_size != 0 || span / element_size != n) {
    return Invalid(absl::StrCat("tensor '", name, "': shape ", ShapeToString(entry.shape), " of ",
                                SafetensorsDTypeName(entry.dtype), " needs ",
                                NeededBytes(NumElements(entry.shape), element_size),
                                " bytes, but data_offsets ",
                                OffsetsToString(entry.begin, entry.end), " span ", span, " bytes"));
  }
  return entry;
}

// The "__metadata__" object as a string map.
absl::StatusOr<std::map<std::string, std::string>> ParseMetadata(const nlohmann::json& value) {
  if (!value.is_object()) {
    return Invalid(absl::StrCat("\"__metadata__\" is ", JsonTypeName(value),
                                ", expected an object of strings"));
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) {
      return Invalid(absl::StrCat("\"__metadata__\" key '", key, "' has ", JsonTypeName(v),
                                  " value, expected a string"));
    }
    metadata.emplace(key, v.get<std::string>());
  }
  return metadata;
}

// OK iff no two non-empty tensors share a byte; otherwise names both.
absl::Status CheckNoOverlap(std::vector<const SafetensorsEntry*> entries) {
  std::erase_if(entries, [](const SafetensorsEntry* e) { return e->begin == e->end; });
  std::sort(entries.begin(), entries.end(),
            [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
              return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
            });
  const SafetensorsEntry* reach = nullptr;  // the entry seen so far that ends last
  for (const SafetensorsEntry* e : entries) {
    if (reach != nullptr && e->begin < reach->end) {
      return Invalid(absl::StrCat("tensors '", reach->name, "' ",
                                  OffsetsToString(reach->begin, reach->end), " and '", e->name,
                                  "' ", OffsetsToString(e->begin, e->end), " overlap"));
    }
    if (reach == nullptr || e->end > reach->end) reach = e;
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "F32";
    case DType::kFloat64:
      return "F64";
    case DType::kFloat16:
      return "F16";
    case DType::kBFloat16:
      return "BF16";
    case DType::kInt8:
      return "I8";
    case DType::kUInt8:
      return "U8";
    case DType::kInt32:
      return "I32";
    case DType::kInt64:
      return "I64";
    case DType::kBool:
      return "BOOL";
  }
  return "invalid";
}

absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name) {
  for (DType d : kAllDTypes) {
    if (SafetensorsDTypeName(d) == name) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", name, "'; expected one of F32, F64, F16, BF16, I8, U8, I32, I64, BOOL"));
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::span<const std::byte> prefix,
                                                         uint64_t file_size) {
  if (file_size < kLengthFieldSize || prefix.size() < kLengthFieldSize) {
    return Invalid(
        absl::StrCat("file is ", file_size, " bytes, too short for the 8-byte header length"));
  }
  uint64_t header_size = 0;
  std::memcpy(&header_size, prefix.data(), kLengthFieldSize);
  const uint64_t after_length = file_size - kLengthFieldSize;
  if (header_size > after_length) {
    return Invalid(absl::StrCat("header length ", header_size, " runs past the end of the file (",
                                after_length, " bytes follow the length)"));
  }
  if (prefix.size() - kLengthFieldSize < header_size) {
    return Invalid(absl::StrCat("only ", prefix.size() - kLengthFieldSize, " of the header's ",
                                header_size, " bytes were read"));
  }
  const absl::string_view header(reinterpret_cast<const char*>(prefix.data()) + kLengthFieldSize,
                                 header_size);
  const uint64_t buffer_size = after_length - header_size;

  absl::StatusOr<nlohmann::json> json = ParseJson(header);
  if (!json.ok()) return Invalid(absl::StrCat("header: ", json.status().message()));
  if (!json->is_object()) {
    return Invalid(absl::StrCat("header is ", JsonTypeName(*json), ", expected an object"));
  }

  // ParseJson refuses repeated keys, so names are unique.
  SafetensorsHeader out;
  out.data_offset = kLengthFieldSize + header_size;
  for (const auto& [key, value] : json->items()) {
    if (key == kMetadataKey) {
      ASSIGN_OR_RETURN(out.metadata, ParseMetadata(value));
      continue;
    }
    ASSIGN_OR_RETURN(SafetensorsEntry entry, ParseEntry(key, value, buffer_size));
    out.tensors.push_back(std::move(entry));
  }
  std::vector<const SafetensorsEntry*> entries;
  for (const SafetensorsEntry& e : out.tensors) entries.push_back(&e);
  RETURN_IF_ERROR(CheckNoOverlap(entries));
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
  return out;
}

absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(absl::string_view path) {
  ASSIGN_OR_RETURN(const uint64_t size, FileSize(path));
  absl::StatusOr<SafetensorsHeader> header = [&]() -> absl::StatusOr<SafetensorsHeader> {
    if (size < kLengthFieldSize) return ParseSafetensorsHeader({}, size);
    ASSIGN_OR_RETURN(const std::string length, ReadFileRange(path, 0, kLengthFieldSize));
    uint64_t header_size = 0;
    std::memcpy(&header_size, length.data(), kLengthFieldSize);
    const uint64_t readable = std::min<uint64_t>(header_size, size - kLengthFieldSize);
    ASSIGN_OR_RETURN(const std::string prefix,
                     ReadFileRange(path, 0, static_cast<size_t>(kLengthFieldSize + readable)));
    return ParseSafetensorsHeader(
        {reinterpret_cast<const std::byte*>(prefix.data()), prefix.size()}, size);
  }();
  if (!header.ok() && absl::IsInvalidArgument(header.status())) {
    return WithContext(path, header.status());
  }
  return header;
}

absl::StatusOr<SafetensorsFile> ParseSafetensors(std::span<const std::byte> bytes) {
  ASSIGN_OR_RETURN(SafetensorsHeader header, ParseSafetensorsHeader(bytes, bytes.size()));
  const std::span<const std::byte> buffer = bytes.subspan(header.data_offset);
  SafetensorsFile file;
  file.metadata = std::move(header.metadata);
  for (SafetensorsEntry& e : header.tensors) {
    ASSIGN_OR_RETURN(HostTensor t, HostTensor::FromBytes(e.dtype, std::move(e.shape),
                                                         buffer.subspan(e.begin, e.end - e.begin)));
    file.tensors.emplace(e.name, std::move(t));
  }
  return file;
}

absl::StatusOr<std::vector<std::byte>> SerializeSafetensors(const SafetensorsFile& file) {
  // The header's members in order, built as a list since ordered_json's own insertion looks up
  // every earlier key; names are unique, being the keys of `file.tensors`.
  std::vector<std::pair<std::string, nlohmann::ordered_json>> members;
  if (!file.metadata.empty()) {
    nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
    for (const auto& [key, value] : file.metadata) metadata[key] = value;
    members.emplace_back(kMetadataKey, std::move(metadata));
  }
  uint64_t offset = 0;
  for (const auto& [name, tensor] : file.tensors) {
    if (name == kMetadataKey) {
      return Invalid("a tensor cannot be named \"__metadata__\"; that key holds the metadata");
    }
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(SafetensorsDTypeName(tensor.dtype()));
    entry["shape"] = tensor.shape();
    entry["data_offsets"] = {offset, offset + tensor.nbytes()};
    members.emplace_back(name, std::move(entry));
    offset += tensor.nbytes();
  }
  absl::StatusOr<std::string> header =
      DumpJson(nlohmann::ordered_json::object_t(members.begin(), members.end()));
  if (!header.ok()) return Invalid(absl::StrCat("header: ", header.status().message()));
  header->resize((header->size() + 7) / 8 * 8, ' ');

  std::vector<std::byte> out(kLengthFieldSize + header->size() + offset);
  const uint64_t header_size = header->size();
  std::memcpy(out.data(), &header_size, kLengthFieldSize);
  std::memcpy(out.data() + kLengthFieldSize, header->data(), header->size());
  std::byte* data = out.data() + kLengthFieldSize + header->size();
  for (const auto& [name, tensor] : file.tensors) {
    if (tensor.nbytes() > 0) std::memcpy(data, tensor.data(), tensor.nbytes());
    data += tensor.nbytes();
  }
  return out;
}

absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(absl::string_view path) {
  // The header first, checked against the file's size, before the data is read.
  RETURN_IF_ERROR(ReadSafetensorsHeader(path).status());
  ASSIGN_OR_RETURN(std::vector<std::byte> bytes, ReadFileBytes(path));
  absl::StatusOr<SafetensorsFile> file = ParseSafetensors(bytes);
  if (!file.ok()) {
    return WithContext(path, file.status());
  }
  return file;
}

absl::Status WriteSafetensorsFile(absl::string_view path, const SafetensorsFile& file) {
  ASSIGN_OR_RETURN(std::vector<std::byte> bytes, SerializeSafetensors(file));
  return WriteFileBytes(path, bytes);
}

}  // namespace tessera
