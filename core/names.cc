#include "core/names.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera {
namespace {

struct Rule {
  const char* what;      // the kind, in messages
  size_t max;            // bytes at most
  const char* extra;     // bytes allowed besides letters and digits
  const char* first;     // bytes allowed besides letters (and digits unless digit_first) first
  bool digit_first;      // whether the first byte may be a digit
  bool no_double_dot;    // whether ".." is refused
  const char* describe;  // the rule, in messages
};

const Rule& RuleOf(NameKind kind) {
  static const Rule kMesh{
      "mesh name", 100, "_-", "_-", true, false, "1 to 100 letters, digits, '_' and '-'"};
  static const Rule kModule{
      "module name", 100, "_-", "_-", true, false, "1 to 100 letters, digits, '_' and '-'"};
  static const Rule kModel{"model name",
                           100,
                           "_-.",
                           "_-",
                           true,
                           false,
                           "1 to 100 letters, digits, '_', '-' and '.', not starting with '.'"};
  static const Rule kDim{"mesh dim name",
                         64,
                         "_-",
                         "_",
                         false,
                         false,
                         "1 to 64 letters, digits, '_' and '-', not starting with a digit or '-'"};
  static const Rule kTensor{"tensor name",
                            200,
                            "_-.",
                            "_-",
                            true,
                            true,
                            "1 to 200 letters, digits, '_', '-' and '.', not starting with '.' "
                            "and without '..'"};
  static const Rule kChild{
      "child name", 64, "_-", "_-", true, false, "1 to 64 letters, digits, '_' and '-'"};
  static const Rule kClient{"client id",
                            128,
                            "_-.:@",
                            "_-.:@",
                            true,
                            false,
                            "1 to 128 letters, digits and '_', '-', '.', ':', '@'"};
  switch (kind) {
    case NameKind::kMesh:
      return kMesh;
    case NameKind::kModule:
      return kModule;
    case NameKind::kModel:
      return kModel;
    case NameKind::kMeshDim:
      return kDim;
    case NameKind::kTensor:
      return kTensor;
    case NameKind::kChild:
      return kChild;
    case NameKind::kClient:
      return kClient;
  }
  return kTensor;
}

bool Allowed(char c, const char* extra) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         (c != '\0' && absl::string_view(extra).find(c) != absl::string_view::npos);
}

}  // namespace

absl::Status CheckName(NameKind kind, absl::string_view name) {
  const Rule& rule = RuleOf(kind);
  bool ok = !name.empty() && name.size() <= rule.max;
  for (size_t i = 0; ok && i < name.size(); ++i) ok = Allowed(name[i], rule.extra);
  if (ok) {
    const char c = name[0];
    ok = absl::ascii_isalpha(static_cast<unsigned char>(c)) ||
         (rule.digit_first && absl::ascii_isdigit(static_cast<unsigned char>(c))) ||
         (c != '\0' && absl::string_view(rule.first).find(c) != absl::string_view::npos);
  }
  if (ok && rule.no_double_dot) ok = name.find("..") == absl::string_view::npos;
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(rule.what, " ", QuotedName(name), " must be ", rule.describe));
}

std::string QuotedName(absl::string_view text, size_t max) {
  std::string out = "'";
  size_t shown = 0;
  for (; shown < text.size() && shown < max; ++shown) {
    const unsigned char c = static_cast<unsigned char>(text[shown]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", c));
    }
  }
  out.push_back('\'');
  if (shown < text.size()) absl::StrAppend(&out, "... (", text.size(), " bytes)");
  return out;
}

}  // namespace tessera
