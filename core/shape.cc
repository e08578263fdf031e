#include "core/shape.h"

#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/checked_math.h"
#include "core/status_macros.h"

namespace tessera {

int64_t NumElements(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(std::span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::vector<int64_t> ContiguousStrides(std::span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * shape[i + 1];
  }
  return strides;
}

absl::Status ValidateShape(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeToString(shape), " has size ",
                                                     shape[i], " at dim ", i,
                                                     "; sizes must be >= 0"));
    }
    if (shape[i] != 0 && n > std::numeric_limits<int64_t>::max() / shape[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeToString(shape), " has more elements than fit in int64"));
    }
    n *= shape[i];
  }
  return absl::OkStatus();
}

absl::StatusOr<int> NormalizeDim(int64_t dim, int rank) {
  const int64_t d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank) {
    return absl::InvalidArgumentError(absl::StrCat("dim ", dim, " is out of range for a tensor of ",
                                                   rank, " dims (expected ", -rank, " to ",
                                                   rank - 1, ")"));
  }
  return static_cast<int>(d);
}

absl::StatusOr<Shape> ParseShape(absl::string_view text) {
  absl::string_view body = absl::StripAsciiWhitespace(text);
  const bool square = absl::ConsumePrefix(&body, "[");
  if (square || absl::ConsumePrefix(&body, "(")) {
    if (!absl::ConsumeSuffix(&body, square ? "]" : ")")) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape '", text, "' has no closing '", square ? "]" : ")", "'"));
    }
  }
  Shape shape;
  if (absl::StripAsciiWhitespace(body).empty()) return shape;
  std::vector<absl::string_view> parts = absl::StrSplit(body, ',');
  for (size_t i = 0; i < parts.size(); ++i) {
    absl::string_view part = absl::StripAsciiWhitespace(parts[i]);
    if (part.empty() && i > 0 && i + 1 == parts.size()) break;  // a trailing comma: "(4,)"
    int64_t v;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape '", text, "' has '", part, "', which is not an integer"));
    }
    shape.push_back(v);
  }
  RETURN_IF_ERROR(ValidateShape(shape));
  return shape;
}

absl::Status ValidateTensorShape(DType dtype, std::span<const int64_t> shape) {
  RETURN_IF_ERROR(ValidateShape(shape));
  if (!CheckedMul(NumElements(shape), static_cast<int64_t>(DTypeSize(dtype)))) {
    return absl::InvalidArgumentError(absl::StrCat("a ", DTypeName(dtype), " tensor of shape ",
                                                   ShapeToString(shape),
                                                   " has more bytes than fit in int64"));
  }
  return absl::OkStatus();
}

}  // namespace tessera
