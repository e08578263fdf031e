#ifndef TESSERA_CLIENT_CLI_ARGS_H_
#define TESSERA_CLIENT_CLI_ARGS_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

// Declares `lhs` from an absl::StatusOr expression, returning its status from the enclosing
// function if it failed.
#define TESSERA_ASSIGN(lhs, expr)               \
  auto lhs##_or = (expr);                       \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = *std::move(lhs##_or)

namespace tessera::cli {

// Command-line arguments of one subcommand: positionals and "--name value" / "--name=value" flags.
class Args {
 public:
  // Parses argv[first..]; flags must be in `known` (INVALID_ARGUMENT naming an unknown one).
  // Flags in `switches` take no value.
  static absl::StatusOr<Args> Parse(int argc, char** argv, int first,
                                    const std::set<std::string>& known,
                                    const std::set<std::string>& switches = {});

  const std::vector<std::string>& positionals() const { return positionals_; }
  bool Has(absl::string_view name) const { return flags_.count(std::string(name)) > 0; }
  // The flag's value; INVALID_ARGUMENT naming the flag if it is missing.
  absl::StatusOr<std::string> Required(absl::string_view name) const;
  std::string Get(absl::string_view name, absl::string_view fallback) const;

 private:
  std::vector<std::string> positionals_;
  std::map<std::string, std::string> flags_;
};

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_CLI_ARGS_H_
