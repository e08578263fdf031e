#include "client/cli/ops_commands.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/cli_session.h"
#include "core/ops/op_registry.h"
#include "core/status_macros.h"
#include "import/exported_program.h"
#include "import/pt2_archive.h"
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

struct CoverageFlags {
  std::string archive;
  bool remote = false;
  ClusterFlags cluster;
};

// Every op the graph of a torch.export archive calls, with its count and whether the registry
// (this binary's, or the cluster's) holds it or import answers it itself; UNIMPLEMENTED listing
// the ones neither does.
absl::Status Coverage(const CoverageFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(const import::Pt2Graph graph, import::ReadPt2Graph(f.archive));
  std::set<std::string> remote;
  if (f.remote) {
    ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
    ASSIGN_OR_RETURN(const std::vector<client::OpInfo> all, session->ListOps());
    for (const client::OpInfo& op : all) remote.insert(op.name);
  }
  // By the exact name (import::Registered): a default overload is the bare name in both.
  auto registered = [&](const std::string& op) {
    return f.remote ? remote.contains(op) : import::Registered(op);
  };
  out << graph.model << " (torch " << (graph.torch_version.empty() ? "?" : graph.torch_version)
      << ", schema " << graph.schema_version << "): " << graph.targets.size() << " nodes\n";
  int64_t nodes_missing = 0;
  std::vector<std::string> missing;
  const std::map<std::string, int64_t> counts = import::CountOps(graph);
  for (const auto& [op, count] : counts) {
    const char* resolved = import::ResolvedByImport(op);
    const bool ok = resolved != nullptr || registered(op);
    out << absl::StrFormat("  %-44s %5d  %s\n", op, count,
                           resolved != nullptr ? absl::StrCat("import: ", resolved)
                           : ok                ? std::string("registered")
                                               : std::string("NOT REGISTERED"));
    if (!ok) {
      nodes_missing += count;
      missing.push_back(absl::StrCat(op, " (", count, ")"));
    }
  }
  out << counts.size() - missing.size() << " of " << counts.size() << " ops covered ("
      << graph.targets.size() - nodes_missing << " of " << graph.targets.size() << " nodes)"
      << (f.remote ? " on the cluster" : "") << "\n";
  if (missing.empty()) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      f.archive,
      " calls ops the registry does not hold (nodes each): ", absl::StrJoin(missing, ", ")));
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
  auto coverage = AddCommand(*ops, "coverage",
                             "the ops a torch.export archive (.pt2) calls, each with how many "
                             "nodes call it and whether the registry holds it; exits 1 "
                             "(UNIMPLEMENTED) naming those it does not",
                             Coverage, action);
  coverage.app
      ->add_option("archive", coverage.flags->archive, "the archive torch.export.save wrote")
      ->required()
      ->type_name("FILE.pt2");
  coverage.app->add_flag("--remote", coverage.flags->remote,
                         "against the cluster's registry (ListOps) instead of this binary's");
  AddClusterFlags(*coverage.app, coverage.flags->cluster, /*with_client=*/true);
  ops->group("Commands that need no cluster");
}

}  // namespace tessera::cli
