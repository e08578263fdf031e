#include "client/cli/op_arg_text.h"

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/status_macros.h"

namespace tessera::cli {
namespace {

constexpr absl::string_view kForms =
    "%name (a tensor), an integer, a number, true, false, none, [integers], [%tensors], a dtype "
    "(float32, torch.int64, ...) or a 'quoted string'";

bool IsIdentifier(absl::string_view text) {
  if (text.empty() || absl::ascii_isdigit(static_cast<unsigned char>(text[0]))) return false;
  for (const char c : text) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

bool IsNone(absl::string_view text) { return text == "none" || text == "None"; }

// An optional sign, then digits only.
bool IsIntegerText(absl::string_view text) {
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) text.remove_prefix(1);
  if (text.empty()) return false;
  for (const char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

absl::StatusOr<int64_t> ParseInteger(absl::string_view text, absl::string_view token) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("op argument '", token, "': ", text, " does not fit in int64"));
  }
  return value;
}

absl::StatusOr<client::DTensor> Tensor(absl::string_view text, absl::string_view token,
                                       const TensorLookup& lookup) {
  const absl::string_view name = text.substr(1);
  if (name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("op argument '", token, "': % names no tensor (write %name)"));
  }
  return lookup(std::string(name));
}

// `[...]`: integers, or tensors with none among them.
absl::StatusOr<client::OpArg> ParseList(absl::string_view text, absl::string_view token,
                                        const TensorLookup& lookup) {
  const absl::string_view inner = absl::StripAsciiWhitespace(text.substr(1, text.size() - 2));
  std::vector<absl::string_view> items;
  if (!inner.empty()) {
    for (absl::string_view item : absl::StrSplit(inner, ',')) {
      items.push_back(absl::StripAsciiWhitespace(item));
    }
  }
  bool tensors = !items.empty();
  for (absl::string_view item : items) tensors &= IsNone(item) || absl::StartsWith(item, "%");
  bool any_tensor = false;
  for (absl::string_view item : items) any_tensor |= absl::StartsWith(item, "%");
  if (tensors || any_tensor) {
    client::OpArg::TensorList list;
    for (absl::string_view item : items) {
      if (IsNone(item)) {
        list.push_back(std::nullopt);
        continue;
      }
      if (!absl::StartsWith(item, "%")) {
        return absl::InvalidArgumentError(
            absl::StrCat("op argument '", token,
                         "': a list of tensors holds %name and none only, not '", item, "'"));
      }
      ASSIGN_OR_RETURN(client::DTensor t, Tensor(item, token, lookup));
      list.push_back(std::move(t));
    }
    return client::OpArg(std::move(list));
  }
  std::vector<int64_t> ints;
  for (absl::string_view item : items) {
    if (!IsIntegerText(item)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "op argument '", token, "': a list holds integers or %tensors, not '", item, "'"));
    }
    ASSIGN_OR_RETURN(const int64_t value, ParseInteger(item, token));
    ints.push_back(value);
  }
  return client::OpArg(std::move(ints));
}

absl::StatusOr<client::OpArg> ParseValue(absl::string_view text, absl::string_view token,
                                         const TensorLookup& lookup) {
  if (text.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("op argument '", token, "' has no value; write one of ", kForms));
  }
  if (text[0] == '%') {
    ASSIGN_OR_RETURN(client::DTensor t, Tensor(text, token, lookup));
    return client::OpArg(t);
  }
  if (text.size() >= 2 && (text[0] == '\'' || text[0] == '"') && text.back() == text[0]) {
    return client::OpArg(std::string(text.substr(1, text.size() - 2)));
  }
  if (text.front() == '[' && text.back() == ']') return ParseList(text, token, lookup);
  if (text == "true" || text == "True") return client::OpArg(true);
  if (text == "false" || text == "False") return client::OpArg(false);
  if (IsNone(text)) return client::OpArg(std::nullopt);
  if (IsIntegerText(text)) {
    ASSIGN_OR_RETURN(const int64_t value, ParseInteger(text, token));
    return client::OpArg(value);
  }
  if (double value = 0; absl::SimpleAtod(text, &value)) return client::OpArg(value);
  absl::string_view dtype = text;
  const bool torch = absl::ConsumePrefix(&dtype, "torch.");
  absl::StatusOr<DType> d = ParseDType(dtype);
  if (d.ok()) return client::OpArg(*d);
  if (torch) {
    return absl::InvalidArgumentError(
        absl::StrCat("op argument '", token, "': ", d.status().message()));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("op argument '", token, "': expected ", kForms,
                   " (a string's quotes go inside the shell's: \"'tanh'\")"));
}

}  // namespace

absl::StatusOr<client::OpArg> ParseOpArg(const std::string& token, const TensorLookup& lookup) {
  const size_t equals = token.find('=');
  if (equals != std::string::npos && IsIdentifier(absl::string_view(token).substr(0, equals))) {
    ASSIGN_OR_RETURN(client::OpArg value,
                     ParseValue(absl::string_view(token).substr(equals + 1), token, lookup));
    return client::Arg(token.substr(0, equals), std::move(value));
  }
  return ParseValue(token, token, lookup);
}

}  // namespace tessera::cli
