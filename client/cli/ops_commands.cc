#include "client/cli/ops_commands.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "client/cli/cli_session.h"
#include "core/ops/op_registry.h"
#include "core/status_macros.h"
#include "tessera/session.h"

namespace tessera::cli {
namespace {

struct ListFlags {
  std::string filter;
  std::string family;
  bool schemas = false;
  bool remote = false;
  ClusterFlags cluster;
};

// The registry this binary was built with, as ListOps describes it.
std::vector<client::OpInfo> LocalOps() {
  std::vector<client::OpInfo> out;
  for (const ops::OpDef* op : ops::Registry().ops()) {
    out.push_back({op->name(), op->schema.text, std::string(ops::OpFamilyName(op->family)),
                   op->strategy_text, op->implementation, op->derivative});
  }
  return out;
}

absl::Status List(const ListFlags& f, std::ostream& out) {
  std::vector<client::OpInfo> all;
  if (f.remote) {
    ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
    ASSIGN_OR_RETURN(all, session->ListOps());
  } else {
    all = LocalOps();
  }
  int shown = 0;
  for (const client::OpInfo& op : all) {
    if (!f.filter.empty() && !absl::StrContains(op.name, f.filter)) continue;
    if (!f.family.empty() && op.family != f.family) continue;
    ++shown;
    out << absl::StrFormat("%-34s %-9s %s\n", op.name, op.family, op.implementation);
    if (f.schemas) out << "    schema:      " << op.schema << "\n";
    out << "    strategies:  " << op.strategies << "\n";
    out << "    derivative:  " << (op.derivative.empty() ? "-" : op.derivative) << "\n";
  }
  out << shown << " of " << all.size() << " ops" << (f.remote ? " on the cluster" : "") << "\n";
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
  list.app->add_flag("--remote", list.flags->remote,
                     "the registry of the cluster's coordinator (ListOps) instead of this "
                     "binary's");
  AddClusterFlags(*list.app, list.flags->cluster, /*with_client=*/true);
  ops->group("Commands that need no cluster");
}

}  // namespace tessera::cli
