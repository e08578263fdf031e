#include "client/cli/ops_commands.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "core/ops/op_registry.h"

namespace tessera::cli {
namespace {

struct ListFlags {
  std::string filter;
  std::string family;
  bool schemas = false;
};

absl::Status List(const ListFlags& f, std::ostream& out) {
  int shown = 0;
  for (const ops::OpDef* op : ops::Registry().ops()) {
    const absl::string_view family = ops::OpFamilyName(op->family);
    if (!f.filter.empty() && !absl::StrContains(op->name(), f.filter)) continue;
    if (!f.family.empty() && family != f.family) continue;
    ++shown;
    out << absl::StrFormat("%-34s %-9s %s\n", op->name(), family, op->implementation);
    if (f.schemas) out << "    schema:      " << op->schema.text << "\n";
    out << "    strategies:  " << op->strategy_text << "\n";
    out << "    derivative:  " << (op->derivative.empty() ? "-" : op->derivative) << "\n";
  }
  out << shown << " of " << ops::Registry().ops().size() << " ops\n";
  return absl::OkStatus();
}

}  // namespace

void AddOpsCommands(CLI::App& app, Action* action) {
  CLI::App* ops = app.add_subcommand(
      "ops", "the op set: every ATen op a DTensor or module runs, with its sharding strategies");
  ops->require_subcommand(1);
  auto list = AddCommand(*ops, "list",
                         "each op: family, implementation (kernel or decomposition), sharding "
                         "strategies and derivative",
                         List, action);
  list.app->add_option("filter", list.flags->filter, "only ops whose name contains this")
      ->type_name("TEXT");
  list.app->add_option("--family", list.flags->family,
                       "pointwise, reduction, matmul, view, tensor or nn");
  list.app->add_flag("--schemas", list.flags->schemas, "print each op's torch schema too");
  ops->group("Commands that need no cluster");
}

}  // namespace tessera::cli
