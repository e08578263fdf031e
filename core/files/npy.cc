#include "core/files/npy.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/files/file_bytes.h"
#include "core/shape.h"
#include "core/status_context.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

static_assert(std::endian::native == std::endian::little,
              "npy data is read and written little-endian without byte swapping");

constexpr absl::string_view kMagic = "\x93NUMPY";
constexpr size_t kArrayAlign = 64;
// numpy pads the header so that shape[0] can grow to this many digits in place.
constexpr size_t kGrowthAxisMaxDigits = 21;

// The keys of an npy header dict.
struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("npy: ", message));
}

// Up to `max` bytes of `text`, non-printing ones as \xNN, for error messages.
std::string Printable(absl::string_view text, size_t max = 24) {
  std::string out;
  for (char c : text.substr(0, max)) {
    if (absl::ascii_isprint(static_cast<unsigned char>(c))) {
      out += c;
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", static_cast<unsigned char>(c));
    }
  }
  if (text.size() > max) out += "...";
  return out;
}

// Reads the Python dict literal numpy writes: {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), }. Keys in any order, either quote style, any spacing, trailing commas.
class NpyHeaderParser {
 public:
  explicit NpyHeaderParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<NpyHeader> Parse() {
    NpyHeader header;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    if (!Consume('{')) return Error("expected '{'");
    while (!Consume('}')) {
      ASSIGN_OR_RETURN(std::string key, ParseString());
      if (!Consume(':')) return Error(absl::StrCat("expected ':' after '", key, "'"));
      if (key == "descr") {
        RETURN_IF_ERROR(Once(seen_descr, key));
        RETURN_IF_ERROR(ParseDescrValue(header.descr));
      } else if (key == "fortran_order") {
        RETURN_IF_ERROR(Once(seen_order, key));
        RETURN_IF_ERROR(ParseBool(header.fortran_order));
      } else if (key == "shape") {
        RETURN_IF_ERROR(Once(seen_shape, key));
        RETURN_IF_ERROR(ParseShapeTuple(header.shape));
      } else {
        return Invalid(absl::StrCat("header has the unexpected key '", key,
                                    "'; expected 'descr', 'fortran_order' and 'shape'"));
      }
      if (Consume('}')) break;
      if (!Consume(',')) return Error("expected ',' or '}'");
    }
    SkipWhitespace();
    if (pos_ != text_.size()) return Error("unexpected text after the header dict");
    for (auto [seen, name] :
         {std::pair{seen_descr, "descr"}, std::pair{seen_order, "fortran_order"},
          std::pair{seen_shape, "shape"}}) {
      if (!seen) return Invalid(absl::StrCat("header has no '", name, "' key"));
    }
    return header;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return Invalid(absl::StrCat("malformed header dict: ", what, " at offset ", pos_, " (found '",
                                Printable(text_.substr(pos_)), "')"));
  }

  static absl::Status Once(bool& seen, absl::string_view key) {
    if (seen) return Invalid(absl::StrCat("header has the key '", key, "' twice"));
    seen = true;
    return absl::OkStatus();
  }

  void SkipWhitespace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }

  bool Consume(char c) {
    SkipWhitespace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  // A Python string literal in single or double quotes, without escapes.
  absl::StatusOr<std::string> ParseString() {
    SkipWhitespace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      return Error("expected a quoted string");
    }
    const char quote = text_[pos_];
    const size_t close = text_.find(quote, pos_ + 1);
    if (close == absl::string_view::npos) return Error("unterminated string");
    std::string value(text_.substr(pos_ + 1, close - pos_ - 1));
    if (value.find('\\') != std::string::npos) return Error("escape in string");
    pos_ = close + 1;
    return value;
  }

  absl::Status ParseDescrValue(std::string& descr) {
    SkipWhitespace();
    if (pos_ < text_.size() && text_[pos_] == '[') {
      return Invalid("structured (record) dtypes are not supported; descr is a list");
    }
    ASSIGN_OR_RETURN(descr, ParseString());
    return absl::OkStatus();
  }

  absl::Status ParseBool(bool& value) {
    SkipWhitespace();
    const absl::string_view rest = text_.substr(pos_);
    if (absl::StartsWith(rest, "True")) {
      value = true;
      pos_ += 4;
    } else if (absl::StartsWith(rest, "False")) {
      value = false;
      pos_ += 5;
    } else {
      return Error("expected True or False for 'fortran_order'");
    }
    return absl::OkStatus();
  }

  // A tuple of integers: "()", "(3,)", "(2, 3)", "(2, 3,)"; Python 2's "3L" is accepted.
  absl::Status ParseShapeTuple(Shape& shape) {
    if (!Consume('(')) return Error("expected a tuple for 'shape'");
    while (!Consume(')')) {
      SkipWhitespace();
      const size_t start = pos_;
      while (pos_ < text_.size() &&
             absl::string_view(",) \t\n").find(text_[pos_]) == absl::string_view::npos) {
        ++pos_;
      }
      absl::string_view token = text_.substr(start, pos_ - start);
      absl::ConsumeSuffix(&token, "L");
      int64_t dim;
      if (!absl::SimpleAtoi(token, &dim)) {
        return Invalid(absl::StrCat("header 'shape' has '", Printable(token),
                                    "', which is not an int64 dimension"));
      }
      shape.push_back(dim);
      if (Consume(')')) break;
      if (!Consume(',')) return Error("expected ',' or ')' in 'shape'");
    }
    return absl::OkStatus();
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

// The dtype a descr stands for; INVALID_ARGUMENT naming the descr if it is unknown, big-endian,
// or claims no byte order for a multi-byte type.
absl::StatusOr<DType> DTypeFromDescr(absl::string_view descr) {
  char order = '=';
  absl::string_view type = descr;
  if (!type.empty() && absl::string_view("<>=|").find(type[0]) != absl::string_view::npos) {
    order = type[0];
    type.remove_prefix(1);
  }
  std::optional<DType> dtype;
  for (DType d : kAllDTypes) {
    absl::StatusOr<absl::string_view> known = NpyDescr(d);
    if (known.ok() && known->substr(1) == type) dtype = d;
  }
  if (!dtype) {
    return Invalid(absl::StrCat("unsupported dtype descr '", descr,
                                "'; expected one of <f4, <f8, <f2, |i1, |u1, <i4, <i8, |b1"));
  }
  if (DTypeSize(*dtype) > 1 && order == '>') {
    return Invalid(absl::StrCat("big-endian descr '", descr,
                                "' is not supported; save the array as little-endian ('<')"));
  }
  if (DTypeSize(*dtype) > 1 && order == '|') {
    return Invalid(absl::StrCat("descr '", descr, "' gives no byte order for a ", DTypeSize(*dtype),
                                "-byte type"));
  }
  return *dtype;
}

// "24", or a bound when `elements` × `element_size` does not fit in 64 bits.
std::string NeededBytes(uint64_t elements, size_t element_size) {
  if (elements > std::numeric_limits<uint64_t>::max() / element_size) {
    return absl::StrCat("more than ", std::numeric_limits<uint64_t>::max());
  }
  return absl::StrCat(elements * element_size);
}

// Little-endian unsigned integer of `size` bytes at `p`.
uint32_t ReadLittleEndian(const std::byte* p, size_t size) {
  uint32_t value = 0;
  for (size_t i = 0; i < size; ++i) value |= std::to_integer<uint32_t>(p[i]) << (8 * i);
  return value;
}

// numpy's repr of a shape tuple: "()", "(3,)", "(2, 3)".
std::string ShapeTuple(const Shape& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

}  // namespace

absl::StatusOr<absl::string_view> NpyDescr(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "<f4";
    case DType::kFloat64:
      return "<f8";
    case DType::kFloat16:
      return "<f2";
    case DType::kInt8:
      return "|i1";
    case DType::kUInt8:
      return "|u1";
    case DType::kInt32:
      return "<i4";
    case DType::kInt64:
      return "<i8";
    case DType::kBool:
      return "|b1";
    case DType::kBFloat16:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("npy: numpy has no ", DTypeName(dtype),
                                                 " dtype; write it as safetensors (BF16) instead"));
}

namespace {

// Where an npy file's header ends, from its first bytes (`prefix`, at least the 12-byte preamble or
// the whole file) and its size, checking the magic, version and header length.
absl::StatusOr<size_t> NpyHeaderEnd(std::span<const std::byte> prefix, uint64_t file_size) {
  const absl::string_view text(reinterpret_cast<const char*>(prefix.data()), prefix.size());
  if (!absl::StartsWith(text, kMagic)) {
    return Invalid(absl::StrCat("bad magic '", Printable(text.substr(0, kMagic.size())),
                                "'; an npy file starts with '\\x93NUMPY'"));
  }
  if (prefix.size() < kMagic.size() + 2) {
    return Invalid(absl::StrCat("file is ", file_size, " bytes, too short for a version"));
  }
  const int major = std::to_integer<int>(prefix[6]), minor = std::to_integer<int>(prefix[7]);
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    return Invalid(absl::StrCat("unsupported format version ", major, ".", minor,
                                "; expected 1.0, 2.0 or 3.0"));
  }
  const size_t length_size = major == 1 ? 2 : 4;
  const size_t preamble = kMagic.size() + 2 + length_size;
  if (prefix.size() < preamble) {
    return Invalid(absl::StrCat("file is ", file_size, " bytes, too short for the ", preamble,
                                "-byte preamble of version ", major, ".0"));
  }
  const size_t header_size = ReadLittleEndian(prefix.data() + kMagic.size() + 2, length_size);
  if (header_size > file_size - preamble) {
    return Invalid(absl::StrCat("header length ", header_size, " runs past the end of the file (",
                                file_size - preamble, " bytes follow the preamble)"));
  }
  return preamble + header_size;
}

// An npy file's dtype, shape and where its data starts.
struct NpyLayout {
  DType dtype;
  Shape shape;
  size_t data_offset = 0;
};

// The layout of the npy file whose first bytes are `prefix` (through its header at least) and
// whose size is `file_size`, checking that the data the header declares is what the file holds.
absl::StatusOr<NpyLayout> ParseNpyLayout(std::span<const std::byte> prefix, uint64_t file_size) {
  ASSIGN_OR_RETURN(const size_t header_end, NpyHeaderEnd(prefix, file_size));
  const absl::string_view text(reinterpret_cast<const char*>(prefix.data()), prefix.size());
  const size_t preamble = prefix[6] == std::byte{1} ? 10 : 12;
  ASSIGN_OR_RETURN(NpyHeader header,
                   NpyHeaderParser(text.substr(preamble, header_end - preamble)).Parse());
  ASSIGN_OR_RETURN(DType dtype, DTypeFromDescr(header.descr));
  if (header.fortran_order) {
    return Invalid(
        "fortran_order True (column-major) arrays are not supported; save a C-order "
        "array (np.ascontiguousarray)");
  }
  if (absl::Status s = ValidateShape(header.shape); !s.ok()) {
    return Invalid(absl::StrCat("header: ", s.message()));
  }
  const uint64_t data_size = file_size - header_end;
  const uint64_t elements = static_cast<uint64_t>(NumElements(header.shape));
  if (data_size % DTypeSize(dtype) != 0 || data_size / DTypeSize(dtype) != elements) {
    return Invalid(absl::StrCat("shape ", ShapeToString(header.shape), " of '", header.descr,
                                "' needs ", NeededBytes(elements, DTypeSize(dtype)),
                                " bytes, but the file has ", data_size, " bytes of data"));
  }
  return NpyLayout{dtype, std::move(header.shape), header_end};
}

}  // namespace

absl::StatusOr<HostTensor> ParseNpy(std::span<const std::byte> bytes) {
  ASSIGN_OR_RETURN(NpyLayout layout, ParseNpyLayout(bytes, bytes.size()));
  return HostTensor::FromBytes(layout.dtype, std::move(layout.shape),
                               bytes.subspan(layout.data_offset));
}

absl::StatusOr<std::vector<std::byte>> SerializeNpy(const HostTensor& tensor) {
  ASSIGN_OR_RETURN(absl::string_view descr, NpyDescr(tensor.dtype()));
  std::string dict =
      absl::StrCat("{'descr': '", descr,
                   "', 'fortran_order': False, 'shape': ", ShapeTuple(tensor.shape()), ", }");
  if (!tensor.shape().empty()) {
    dict.append(kGrowthAxisMaxDigits - absl::StrCat(tensor.shape()[0]).size(), ' ');
  }
  // As numpy: pad with spaces and a final '\n' to the next multiple of 64 (a full 64 if aligned).
  size_t length_size = 2;
  size_t padded = 0;
  for (; length_size <= 4; length_size += 2) {
    const size_t unpadded = kMagic.size() + 2 + length_size + dict.size() + 1;
    padded = dict.size() + 1 + kArrayAlign - unpadded % kArrayAlign;
    if (length_size == 4 || padded <= 0xFFFF) break;
  }
  dict.resize(padded - 1, ' ');
  dict += '\n';

  std::vector<std::byte> out;
  out.reserve(kMagic.size() + 2 + length_size + dict.size() + tensor.nbytes());
  auto append = [&out](const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  };
  append(kMagic.data(), kMagic.size());
  const uint8_t version[2] = {static_cast<uint8_t>(length_size == 2 ? 1 : 2), 0};
  append(version, 2);
  const uint32_t header_size = static_cast<uint32_t>(dict.size());
  append(&header_size, length_size);
  append(dict.data(), dict.size());
  append(tensor.data(), tensor.nbytes());
  return out;
}

absl::StatusOr<HostTensor> ReadNpyFile(absl::string_view path) {
  // A parse error names the file.
  const auto named = [path](const absl::Status& s) { return WithContext(path, s); };
  const auto as_bytes = [](const std::string& s) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(s.data()), s.size());
  };
  // The header first, checked against the file's size, so that the data is read only when it is
  // what the header declares.
  ASSIGN_OR_RETURN(const uint64_t size, FileSize(path));
  ASSIGN_OR_RETURN(const std::string preamble,
                   ReadFileRange(path, 0, static_cast<size_t>(std::min<uint64_t>(size, 12))));
  absl::StatusOr<size_t> header_end = NpyHeaderEnd(as_bytes(preamble), size);
  if (!header_end.ok()) return named(header_end.status());
  ASSIGN_OR_RETURN(const std::string header, ReadFileRange(path, 0, *header_end));
  if (absl::Status s = ParseNpyLayout(as_bytes(header), size).status(); !s.ok()) return named(s);
  ASSIGN_OR_RETURN(std::vector<std::byte> bytes, ReadFileBytes(path));
  absl::StatusOr<HostTensor> tensor = ParseNpy(bytes);
  if (!tensor.ok()) return named(tensor.status());
  return tensor;
}

absl::Status WriteNpyFile(absl::string_view path, const HostTensor& tensor) {
  ASSIGN_OR_RETURN(std::vector<std::byte> bytes, SerializeNpy(tensor));
  return WriteFileBytes(path, bytes);
}

}  // namespace tessera
