#include "core/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/file_bytes.h"
#include "core/json_reader.h"
#include "core/shape.h"

namespace tessera {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and is copied without byte swapping");

constexpr absl::string_view kMetadataKey = "__metadata__";
constexpr size_t kLengthFieldSize = 8;

// One tensor's header entry, validated against the data buffer.
struct TensorEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

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

// The member named `key` of `object`; nullptr if absent. INVALID_ARGUMENT if present twice.
absl::StatusOr<const JsonValue*> FindField(const JsonValue& object, absl::string_view key,
                                           absl::string_view tensor) {
  const JsonValue* found = nullptr;
  for (const JsonMember& m : object.members) {
    if (m.key != key) continue;
    if (found != nullptr) {
      return Invalid(absl::StrCat("tensor '", tensor, "' has the field \"", key, "\" twice"));
    }
    found = &m.value;
  }
  return found;
}

// The field `key` of `object`, which must exist and have kind `kind`.
absl::StatusOr<const JsonValue*> RequireField(const JsonValue& object, absl::string_view key,
                                              JsonValue::Kind kind, absl::string_view tensor) {
  absl::StatusOr<const JsonValue*> field = FindField(object, key, tensor);
  if (!field.ok()) return field.status();
  if (*field == nullptr) {
    return Invalid(absl::StrCat("tensor '", tensor, "' has no \"", key, "\" field"));
  }
  if ((*field)->kind != kind) {
    return Invalid(absl::StrCat("tensor '", tensor, "' has a \"", key, "\" that is a ",
                                JsonKindName((*field)->kind), ", expected a ", JsonKindName(kind)));
  }
  return field;
}

// The integers of an array; INVALID_ARGUMENT naming `key` if an element is not an integer.
absl::StatusOr<std::vector<int64_t>> IntegerArray(const JsonValue& array, absl::string_view key,
                                                  absl::string_view tensor) {
  std::vector<int64_t> values;
  for (const JsonValue& v : array.array) {
    if (v.kind != JsonValue::Kind::kInteger) {
      return Invalid(absl::StrCat("tensor '", tensor, "' has a ", JsonKindName(v.kind), " in \"",
                                  key, "\", expected integers"));
    }
    values.push_back(v.integer);
  }
  return values;
}

// Decodes and checks one tensor entry against a data buffer of `buffer_size` bytes.
absl::StatusOr<TensorEntry> ParseEntry(const std::string& name, const JsonValue& value,
                                       uint64_t buffer_size) {
  if (value.kind != JsonValue::Kind::kObject) {
    return Invalid(absl::StrCat("tensor '", name, "' is a ", JsonKindName(value.kind),
                                ", expected an object"));
  }
  absl::StatusOr<const JsonValue*> dtype =
      RequireField(value, "dtype", JsonValue::Kind::kString, name);
  if (!dtype.ok()) return dtype.status();
  absl::StatusOr<const JsonValue*> shape =
      RequireField(value, "shape", JsonValue::Kind::kArray, name);
  if (!shape.ok()) return shape.status();
  absl::StatusOr<const JsonValue*> offsets =
      RequireField(value, "data_offsets", JsonValue::Kind::kArray, name);
  if (!offsets.ok()) return offsets.status();

  TensorEntry entry;
  entry.name = name;
  absl::StatusOr<DType> d = ParseSafetensorsDType((*dtype)->string);
  if (!d.ok()) return Invalid(absl::StrCat("tensor '", name, "': ", d.status().message()));
  entry.dtype = *d;

  absl::StatusOr<std::vector<int64_t>> dims = IntegerArray(**shape, "shape", name);
  if (!dims.ok()) return dims.status();
  entry.shape = *std::move(dims);
  if (absl::Status s = ValidateShape(entry.shape); !s.ok()) {
    return Invalid(absl::StrCat("tensor '", name, "': ", s.message()));
  }

  absl::StatusOr<std::vector<int64_t>> range = IntegerArray(**offsets, "data_offsets", name);
  if (!range.ok()) return range.status();
  if (range->size() != 2) {
    return Invalid(absl::StrCat("tensor '", name, "' has ", range->size(),
                                " data_offsets, expected 2 ([begin, end])"));
  }
  const int64_t begin = (*range)[0], end = (*range)[1];
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
absl::StatusOr<std::map<std::string, std::string>> ParseMetadata(const JsonValue& value) {
  if (value.kind != JsonValue::Kind::kObject) {
    return Invalid(absl::StrCat("\"__metadata__\" is a ", JsonKindName(value.kind),
                                ", expected an object of strings"));
  }
  std::map<std::string, std::string> metadata;
  for (const JsonMember& m : value.members) {
    if (m.value.kind != JsonValue::Kind::kString) {
      return Invalid(absl::StrCat("\"__metadata__\" key '", m.key, "' has a ",
                                  JsonKindName(m.value.kind), " value, expected a string"));
    }
    if (!metadata.emplace(m.key, m.value.string).second) {
      return Invalid(absl::StrCat("\"__metadata__\" has the key '", m.key, "' twice"));
    }
  }
  return metadata;
}

// OK iff no two non-empty tensors share a byte; otherwise names both.
absl::Status CheckNoOverlap(std::vector<const TensorEntry*> entries) {
  std::erase_if(entries, [](const TensorEntry* e) { return e->begin == e->end; });
  std::sort(entries.begin(), entries.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  const TensorEntry* reach = nullptr;  // the entry seen so far that ends last
  for (const TensorEntry* e : entries) {
    if (reach != nullptr && e->begin < reach->end) {
      return Invalid(absl::StrCat("tensors '", reach->name, "' ",
                                  OffsetsToString(reach->begin, reach->end), " and '", e->name,
                                  "' ", OffsetsToString(e->begin, e->end), " overlap"));
    }
    if (reach == nullptr || e->end > reach->end) reach = e;
  }
  return absl::OkStatus();
}

// `text` as a JSON string literal: quotes added, '"', '\' and control characters escaped.
std::string JsonQuote(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
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

absl::StatusOr<SafetensorsFile> ParseSafetensors(std::span<const std::byte> bytes) {
  if (bytes.size() < kLengthFieldSize) {
    return Invalid(
        absl::StrCat("file is ", bytes.size(), " bytes, too short for the 8-byte header length"));
  }
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), kLengthFieldSize);
  const uint64_t after_length = bytes.size() - kLengthFieldSize;
  if (header_size > after_length) {
    return Invalid(absl::StrCat("header length ", header_size, " runs past the end of the file (",
                                after_length, " bytes follow the length)"));
  }
  const absl::string_view header(reinterpret_cast<const char*>(bytes.data()) + kLengthFieldSize,
                                 header_size);
  const std::span<const std::byte> buffer = bytes.subspan(kLengthFieldSize + header_size);

  absl::StatusOr<JsonValue> json = ParseJson(header);
  if (!json.ok()) return Invalid(absl::StrCat("header: ", json.status().message()));
  if (json->kind != JsonValue::Kind::kObject) {
    return Invalid(
        absl::StrCat("header is a JSON ", JsonKindName(json->kind), ", expected an object"));
  }

  SafetensorsFile file;
  std::vector<TensorEntry> entries;
  bool seen_metadata = false;
  for (const JsonMember& m : json->members) {
    if (m.key == kMetadataKey) {
      if (seen_metadata) return Invalid("\"__metadata__\" appears twice in the header");
      seen_metadata = true;
      absl::StatusOr<std::map<std::string, std::string>> metadata = ParseMetadata(m.value);
      if (!metadata.ok()) return metadata.status();
      file.metadata = *std::move(metadata);
      continue;
    }
    absl::StatusOr<TensorEntry> entry = ParseEntry(m.key, m.value, buffer.size());
    if (!entry.ok()) return entry.status();
    entries.push_back(*std::move(entry));
  }

  std::vector<const TensorEntry*> by_name;
  for (const TensorEntry& e : entries) by_name.push_back(&e);
  std::sort(by_name.begin(), by_name.end(),
            [](const TensorEntry* a, const TensorEntry* b) { return a->name < b->name; });
  for (size_t i = 1; i < by_name.size(); ++i) {
    if (by_name[i]->name == by_name[i - 1]->name) {
      return Invalid(
          absl::StrCat("tensor name '", by_name[i]->name, "' appears twice in the header"));
    }
  }
  if (absl::Status s = CheckNoOverlap(by_name); !s.ok()) return s;

  for (TensorEntry& e : entries) {
    absl::StatusOr<HostTensor> t = HostTensor::FromBytes(e.dtype, std::move(e.shape),
                                                         buffer.subspan(e.begin, e.end - e.begin));
    if (!t.ok()) return t.status();
    file.tensors.emplace(e.name, *std::move(t));
  }
  return file;
}

absl::StatusOr<std::vector<std::byte>> SerializeSafetensors(const SafetensorsFile& file) {
  std::vector<std::string> fields;
  if (!file.metadata.empty()) {
    std::vector<std::string> pairs;
    for (const auto& [key, value] : file.metadata) {
      pairs.push_back(absl::StrCat(JsonQuote(key), ":", JsonQuote(value)));
    }
    fields.push_back(absl::StrCat(JsonQuote(kMetadataKey), ":{", absl::StrJoin(pairs, ","), "}"));
  }
  uint64_t offset = 0;
  for (const auto& [name, tensor] : file.tensors) {
    if (name == kMetadataKey) {
      return Invalid("a tensor cannot be named \"__metadata__\"; that key holds the metadata");
    }
    fields.push_back(absl::StrCat(JsonQuote(name), ":{\"dtype\":\"",
                                  SafetensorsDTypeName(tensor.dtype()), "\",\"shape\":[",
                                  absl::StrJoin(tensor.shape(), ","), "],\"data_offsets\":[",
                                  offset, ",", offset + tensor.nbytes(), "]}"));
    offset += tensor.nbytes();
  }
  std::string header = absl::StrCat("{", absl::StrJoin(fields, ","), "}");
  header.resize((header.size() + 7) / 8 * 8, ' ');

  std::vector<std::byte> out(kLengthFieldSize + header.size() + offset);
  const uint64_t header_size = header.size();
  std::memcpy(out.data(), &header_size, kLengthFieldSize);
  std::memcpy(out.data() + kLengthFieldSize, header.data(), header.size());
  std::byte* data = out.data() + kLengthFieldSize + header.size();
  for (const auto& [name, tensor] : file.tensors) {
    if (tensor.nbytes() > 0) std::memcpy(data, tensor.data(), tensor.nbytes());
    data += tensor.nbytes();
  }
  return out;
}

absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(absl::string_view path) {
  absl::StatusOr<std::vector<std::byte>> bytes = ReadFileBytes(path);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<SafetensorsFile> file = ParseSafetensors(*bytes);
  if (!file.ok()) {
    return absl::Status(file.status().code(), absl::StrCat(path, ": ", file.status().message()));
  }
  return file;
}

absl::Status WriteSafetensorsFile(absl::string_view path, const SafetensorsFile& file) {
  absl::StatusOr<std::vector<std::byte>> bytes = SerializeSafetensors(file);
  if (!bytes.ok()) return bytes.status();
  return WriteFileBytes(path, *bytes);
}

}  // namespace tessera
