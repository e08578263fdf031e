#include "client/cli_args.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::cli {

absl::StatusOr<Args> Args::Parse(int argc, char** argv, int first,
                                 const std::set<std::string>& known,
                                 const std::set<std::string>& switches) {
  Args args;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (!absl::StartsWith(a, "--")) {
      args.positionals_.push_back(a);
      continue;
    }
    std::string name = a.substr(2);
    std::string value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (!known.count(name) && !switches.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag --", name, "; expected one of --", absl::StrJoin(known, ", --")));
    }
    if (switches.count(name)) {
      args.flags_[name] = inline_value ? value : "true";
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc)
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    }
    args.flags_[name] = value;
  }
  return args;
}

absl::StatusOr<std::string> Args::Required(absl::string_view name) const {
  auto it = flags_.find(std::string(name));
  if (it == flags_.end())
    return absl::InvalidArgumentError(absl::StrCat("--", name, " is required"));
  return it->second;
}

std::string Args::Get(absl::string_view name, absl::string_view fallback) const {
  auto it = flags_.find(std::string(name));
  return it == flags_.end() ? std::string(fallback) : it->second;
}

}  // namespace tessera::cli
