#include "core/ops/op_value.h"

#include <cassert>
#include <charconv>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::ops {
namespace {

// A float as torch's printer writes it: an integral value with a trailing dot ("2."), any other in
// the shortest text that reads back ("1.5", "1e-05").
std::string DoubleToString(double value) {
  if (std::isfinite(value) && std::abs(value) < 1e10 && value == std::trunc(value)) {
    return absl::StrCat(std::signbit(value) ? "-" : "", static_cast<int64_t>(std::abs(value)), ".");
  }
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[32];
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

// An element of a tensor list: -1 is None.
std::string ListElementToString(int index) {
  return index == -1 ? "None" : absl::StrCat("%", index);
}

struct ValuePrinter {
  std::string operator()(const NoneValue&) const { return "None"; }
  std::string operator()(bool value) const { return value ? "True" : "False"; }
  std::string operator()(int64_t value) const { return absl::StrCat(value); }
  std::string operator()(double value) const { return DoubleToString(value); }
  std::string operator()(const std::vector<int64_t>& values) const {
    return absl::StrCat("[", absl::StrJoin(values, ", "), "]");
  }
  std::string operator()(DType dtype) const { return absl::StrCat("torch.", DTypeName(dtype)); }
  std::string operator()(const std::string& value) const { return absl::StrCat("'", value, "'"); }
  std::string operator()(const TensorRef& ref) const { return absl::StrCat("%", ref.index); }
  std::string operator()(const TensorList& list) const {
    return absl::StrCat(
        "[",
        absl::StrJoin(list.indices, ", ",
                      [](std::string* out, int index) { out->append(ListElementToString(index)); }),
        "]");
  }
};

}  // namespace

std::string OpValueToString(const OpValue& value) { return std::visit(ValuePrinter{}, value); }

bool IsScalar(const OpValue& value) {
  return std::holds_alternative<bool>(value) || std::holds_alternative<int64_t>(value) ||
         std::holds_alternative<double>(value);
}

double ScalarAsDouble(const OpValue& value) {
  if (const bool* b = std::get_if<bool>(&value)) return *b ? 1.0 : 0.0;
  if (const int64_t* i = std::get_if<int64_t>(&value)) return static_cast<double>(*i);
  if (const double* d = std::get_if<double>(&value)) return *d;
  assert(false && "ScalarAsDouble of a value that is not a scalar");
  return 0.0;
}

}  // namespace tessera::ops
