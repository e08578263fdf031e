#include "client/cli/tensor_commands.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/cli_session.h"
#include "client/cli/op_arg_text.h"
#include "client/cli/progress_bar.h"
#include "client/cli/tensor_files.h"
#include "core/ops/op_registry.h"
#include "core/sharding/redistribute_planner.h"
#include "core/sharding/visualize_sharding.h"
#include "core/status_macros.h"
#include "tessera/tessera.h"

namespace tessera::cli {
namespace {

// How long put and redistribute wait for the workers to write their tensor.
constexpr absl::Duration kWriteTimeout = absl::Hours(1);

std::string StateName(client::TensorState s) {
  switch (s) {
    case client::TensorState::kReady:
      return "ready";
    case client::TensorState::kPending:
      return "pending";
    case client::TensorState::kFailed:
      return "FAILED";
    default:
      return "?";
  }
}

void PrintSummary(const client::DTensorInfo& info, std::ostream& out) {
  const DTensorSpec& spec = info.spec;
  out << absl::StrFormat("%-16s %-8s %-9s %-16s %-20s %10d B  %-8s owner %s\n", info.name,
                         info.mesh, DTypeName(spec.dtype), ShapeToString(spec.shape),
                         PlacementsToString(spec.placements), info.nbytes, StateName(info.state),
                         info.owner);
  if (!info.error.empty()) out << "    error: " << info.error << "\n";
}

// The tensor a put or redistribute made, once the workers have written it (or at once with
// `async`), detached so that it stays. If the workers failed, it returns their error and `t`'s
// handle frees the tensor.
absl::StatusOr<client::DTensorInfo> Keep(client::DTensor t, bool async) {
  client::DTensorInfo info = t.info();
  if (!async) {
    if (absl::Status s = t.Synchronize(kWriteTimeout); !s.ok()) return s;
    ASSIGN_OR_RETURN(auto fresh, t.Refresh());
    info = std::move(fresh);
  }
  t.Detach();
  return info;
}

// --async on `cmd`.
void AddAsyncFlag(CLI::App& cmd, bool& async) {
  cmd.add_flag("--async", async,
               "return once the coordinator has accepted the work, without waiting for the "
               "workers (tessera tensor show tells how it ended)");
}

struct PutFlags {
  ClusterFlags cluster;
  std::string file;
  std::string mesh;
  std::string placements;
  std::string name;
  std::string tensor;
  int64_t src_rank = 0;
  bool async = false;
};

absl::Status Put(const PutFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  ASSIGN_OR_RETURN(auto tensor, ReadTensorFile(f.file, f.tensor));
  ASSIGN_OR_RETURN(auto mesh, client::GetMesh(*session, f.mesh));
  ASSIGN_OR_RETURN(auto placements, ParsePlacements(f.placements));
  client::DistributeOptions options;
  options.name = f.name;
  options.src_data_rank = f.src_rank;
  ProgressBar bar("put");
  options.progress = [&bar](int64_t done, int64_t total) { bar(done, total); };
  ASSIGN_OR_RETURN(auto t, client::DistributeTensor(*session, tensor, mesh, placements, options));
  ASSIGN_OR_RETURN(auto info, Keep(std::move(t), f.async));
  PrintSummary(info, out);
  return absl::OkStatus();
}

struct GetFlags {
  ClusterFlags cluster;
  std::string name;
  std::string out;
  std::optional<int64_t> rank;
};

absl::Status Get(const GetFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  ASSIGN_OR_RETURN(auto t, client::GetTensor(*session, f.name));
  HostTensor data;
  if (f.rank.has_value()) {
    ASSIGN_OR_RETURN(auto local, t.ToLocal(*f.rank));
    data = std::move(local);
  } else {
    ProgressBar bar("get");
    ASSIGN_OR_RETURN(auto full, t.FullTensor([&bar](int64_t d, int64_t n) { bar(d, n); }));
    data = std::move(full);
  }
  const std::string shape = ShapeToString(data.shape());
  const DType dtype = data.dtype();
  if (absl::Status s = WriteTensorFile(f.out, t.name(), std::move(data)); !s.ok()) return s;
  out << "wrote " << DTypeName(dtype) << shape << " to " << f.out << "\n";
  return absl::OkStatus();
}

struct RedistributeFlags {
  ClusterFlags cluster;
  std::string name;
  std::string to;
  std::string mesh;
  std::string output;
  bool explain = false;
  std::string planner;
  bool async = false;
};

absl::Status Redistribute(const RedistributeFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  ASSIGN_OR_RETURN(auto t, client::GetTensor(*session, f.name));
  ASSIGN_OR_RETURN(auto placements, ParsePlacements(f.to));
  const PlannerKind planner = PlannerNamed(f.planner);
  auto print_plan = [&out](const RedistributePlan& plan) {
    out << (plan.steps.empty() ? "no collectives: the tensor is laid out so already\n"
                               : plan.ToString());
  };
  if (f.explain) {
    if (!f.mesh.empty() && f.mesh != t.info().mesh) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--explain plans within mesh '", t.info().mesh, "'; a move to mesh '", f.mesh,
          "' relays the tensor through the coordinator, with no collectives to explain"));
    }
    ASSIGN_OR_RETURN(auto plan, t.ExplainRedistribute(placements, planner));
    print_plan(plan);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(auto moved, t.Redistribute(placements, f.mesh, f.output, planner));
  if (moved.info().mesh != t.info().mesh) {
    out << "moved across meshes: " << moved.relayed_bytes() << " bytes relayed\n";
  } else {
    print_plan(moved.plan());
  }
  ASSIGN_OR_RETURN(auto info, Keep(std::move(moved), f.async));
  PrintSummary(info, out);
  return absl::OkStatus();
}

struct ShowFlags {
  ClusterFlags cluster;
  std::string name;
};

absl::Status Show(const ShowFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  ASSIGN_OR_RETURN(auto t, client::GetTensor(*session, f.name));
  PrintSummary(t.info(), out);
  out << VisualizeSharding(t.spec());
  return absl::OkStatus();
}

struct ListFlags {
  ClusterFlags cluster;
  std::string mesh;
};

absl::Status List(const ListFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  ASSIGN_OR_RETURN(auto tensors, session->ListTensors(f.mesh));
  if (tensors.empty()) out << "no tensors\n";
  for (const client::DTensorInfo& info : tensors) PrintSummary(info, out);
  return absl::OkStatus();
}

struct RemoveFlags {
  ClusterFlags cluster;
  std::vector<std::string> names;
};

absl::Status Remove(const RemoveFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  for (const std::string& name : f.names) {
    ASSIGN_OR_RETURN(auto t, client::GetTensor(*session, name));
    if (absl::Status s = t.Free(); !s.ok()) return s;
    out << "removed " << t.name() << "\n";
  }
  return absl::OkStatus();
}

struct OpFlags {
  ClusterFlags cluster;
  std::string op;
  std::vector<std::string> args;
  std::string output;
  bool async = false;
};

void PrintRedistributions(const std::vector<client::InputRedistribution>& moved,
                          std::ostream& out) {
  if (moved.empty()) {
    out << "no redistribution: the inputs are laid out as the op's strategy needs\n";
  }
  for (const client::InputRedistribution& r : moved) {
    out << "redistributed " << r.input << ": " << PlacementsToString(r.from) << " -> "
        << PlacementsToString(r.to) << "\n"
        << r.plan.ToString();
  }
}

absl::Status Op(const OpFlags& f, std::ostream& out) {
  // One unary RunOp: it returns once the coordinator accepted the op, with the redistributions the
  // coordinator's plan inserted.
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster, /*op_stream=*/false));
  std::map<std::string, client::DTensor> tensors;
  const TensorLookup lookup = [&](const std::string& name) -> absl::StatusOr<client::DTensor> {
    if (auto it = tensors.find(name); it != tensors.end()) return it->second;
    ASSIGN_OR_RETURN(client::DTensor t, client::GetTensor(*session, name));
    tensors.emplace(name, t);
    return t;
  };
  std::vector<client::OpArg> args;
  for (const std::string& token : f.args) {
    ASSIGN_OR_RETURN(client::OpArg arg, ParseOpArg(token, lookup));
    args.push_back(std::move(arg));
  }
  absl::StatusOr<const ops::OpDef*> def =
      ops::Registry().Find(f.op.find("::") == std::string::npos ? "aten::" + f.op : f.op);
  if (def.ok() && (*def)->more_outputs != nullptr) {
    // Several outputs, named by the coordinator: each printed in order.
    if (!f.output.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--output names one tensor, and ", (*def)->name(), " gives several; leave it out"));
    }
    ASSIGN_OR_RETURN(std::vector<client::DTensor> outs, client::CallOutputs(f.op, args));
    PrintRedistributions(outs[0].redistributions(), out);
    for (size_t k = 0; k < outs.size(); ++k) {
      ASSIGN_OR_RETURN(auto info, Keep(std::move(outs[k]), f.async));
      out << "output " << k << ":\n";
      PrintSummary(info, out);
      out << VisualizeSharding(info.spec);
    }
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(client::DTensor t, client::Call(f.op, args, f.output));
  PrintRedistributions(t.redistributions(), out);
  ASSIGN_OR_RETURN(auto info, Keep(std::move(t), f.async));
  PrintSummary(info, out);
  out << VisualizeSharding(info.spec);
  return absl::OkStatus();
}

// The tensor's name as the first positional of `cmd`.
void AddNameArgument(CLI::App& cmd, std::string& name) {
  cmd.add_option("name", name, "the tensor's name")->required()->type_name("NAME");
}

void AddPutCommand(CLI::App& tensor, Action* action) {
  auto put = AddCommand(tensor, "put",
                        "distribute a .npy or .safetensors file over a mesh and wait until the "
                        "workers hold it",
                        Put, action);
  AddClusterFlags(*put.app, put.flags->cluster, /*with_client=*/true);
  put.app->add_option("file", put.flags->file, "FILE.npy or FILE.safetensors")
      ->required()
      ->type_name("FILE");
  put.app->add_option("--mesh", put.flags->mesh, "the mesh's name")->required()->type_name("NAME");
  put.app->add_option("--placements", put.flags->placements, "one per mesh dim, e.g. S(0),R")
      ->required()
      ->type_name("PLACEMENTS");
  put.app->add_option("--name", put.flags->name, "the new tensor's name (default: one is made)")
      ->type_name("NAME");
  put.app
      ->add_option("--tensor", put.flags->tensor,
                   "which tensor of a .safetensors file (default: its only one)")
      ->type_name("KEY");
  put.app
      ->add_option("--src-rank", put.flags->src_rank,
                   "the rank whose data counts for replicated placements (src_data_rank)")
      ->type_name("R")
      ->capture_default_str();
  AddAsyncFlag(*put.app, put.flags->async);
}

void AddGetCommand(CLI::App& tensor, Action* action) {
  auto get =
      AddCommand(tensor, "get", "write a tensor, or one rank's shard, to a file", Get, action);
  AddClusterFlags(*get.app, get.flags->cluster, /*with_client=*/true);
  AddNameArgument(*get.app, get.flags->name);
  get.app->add_option("--out", get.flags->out, "FILE.npy or FILE.safetensors")
      ->required()
      ->type_name("FILE");
  GetFlags* get_flags = get.flags;
  get.app
      ->add_option_function<int64_t>(
          "--rank", [get_flags](const int64_t& rank) { get_flags->rank = rank; },
          "write only this rank's shard (to_local) instead of the whole tensor")
      ->type_name("R");
}

void AddRedistributeCommand(CLI::App& tensor, Action* action) {
  auto redistribute = AddCommand(tensor, "redistribute",
                                 "redistribute a tensor to new placements (or another mesh) as a "
                                 "new tensor, and wait until the workers hold it",
                                 Redistribute, action);
  AddClusterFlags(*redistribute.app, redistribute.flags->cluster, /*with_client=*/true);
  AddNameArgument(*redistribute.app, redistribute.flags->name);
  redistribute.app->add_option("--to", redistribute.flags->to, "the placements it gets, e.g. R")
      ->required()
      ->type_name("PLACEMENTS");
  redistribute.app
      ->add_option("--mesh", redistribute.flags->mesh,
                   "move it to this mesh (default: the one it is on)")
      ->type_name("NAME");
  redistribute.app
      ->add_option("--name", redistribute.flags->output,
                   "the new tensor's name (default: one is made)")
      ->type_name("OUT");
  redistribute.app->add_flag("--explain", redistribute.flags->explain,
                             "print the plan without running it");
  AddPlannerFlag(*redistribute.app, redistribute.flags->planner);
  AddAsyncFlag(*redistribute.app, redistribute.flags->async);
}

void AddOpCommand(CLI::App& tensor, Action* action) {
  auto op = AddCommand(tensor, "op",
                       "run an op of the registry (tessera ops list) on tensors as a new tensor, "
                       "print the redistributions it needed, and wait until the workers hold it",
                       Op, action);
  AddClusterFlags(*op.app, op.flags->cluster, /*with_client=*/true);
  op.app
      ->add_option("op", op.flags->op,
                   "the op's ATen name: aten::softmax.int, softmax.int, or softmax for its "
                   "default or only overload")
      ->required()
      ->type_name("OP");
  // The op's arguments are every other word, as written: not parsed by CLI11, whose own list
  // syntax would split "[1,0]" and whose flags would take "-1".
  op.app->allow_extras();
  op.app->footer(
      "ARG...: the op's arguments in schema order, then key=value by name: %name (a tensor), "
      "integers, numbers, true/false, none, [0,1], [%a,%b], dtypes (float32, torch.int64), "
      "'strings' (quoted for the op, inside the shell's quotes)");
  op.app->parse_complete_callback(
      [app = op.app, flags = op.flags] { flags->args = app->remaining(); });
  op.app->add_option("--output", op.flags->output, "the new tensor's name (default: one is made)")
      ->type_name("NAME");
  AddAsyncFlag(*op.app, op.flags->async);
}

void AddShowCommand(CLI::App& tensor, Action* action) {
  auto show =
      AddCommand(tensor, "show", "a tensor's metadata and its layout per rank", Show, action);
  AddClusterFlags(*show.app, show.flags->cluster, /*with_client=*/true);
  AddNameArgument(*show.app, show.flags->name);
}

void AddListCommand(CLI::App& tensor, Action* action) {
  auto list = AddCommand(tensor, "list", "every tensor: mesh, dtype, shape, placements, state",
                         List, action);
  AddClusterFlags(*list.app, list.flags->cluster, /*with_client=*/true);
  list.app->add_option("--mesh", list.flags->mesh, "only the tensors of this mesh")
      ->type_name("NAME");
}

void AddRemoveCommand(CLI::App& tensor, Action* action) {
  auto rm = AddCommand(tensor, "rm", "free tensors on every rank", Remove, action);
  AddClusterFlags(*rm.app, rm.flags->cluster, /*with_client=*/true);
  rm.app->add_option("names", rm.flags->names, "the tensors' names")
      ->required()
      ->type_name("NAME...");
}

}  // namespace

void AddTensorCommands(CLI::App& app, Action* action) {
  CLI::App* tensor = app.add_subcommand(
      "tensor",
      "DTensors on the cluster: distribute a file, read it back whole or one rank's shard, "
      "redistribute it (or print the plan), run ops on it, draw its layout per rank");
  tensor->require_subcommand(1);
  AddPutCommand(*tensor, action);
  AddGetCommand(*tensor, action);
  AddRedistributeCommand(*tensor, action);
  AddOpCommand(*tensor, action);
  AddShowCommand(*tensor, action);
  AddListCommand(*tensor, action);
  AddRemoveCommand(*tensor, action);
  // Set last: subcommands take their group from their parent when they are added.
  tensor->group(
      "Commands that run or talk to a cluster (--coordinator HOST:PORT, default "
      "$TESSERA_COORDINATOR)");
}

}  // namespace tessera::cli
