#include "client/tensor_commands.h"

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/tensor_files.h"
#include "core/redistribute_planner.h"
#include "core/visualize_sharding.h"
#include "tessera/tessera.h"

namespace tessera::cli {
namespace {

constexpr int64_t kProgressFrom = 4 << 20;  // transfers this large show a progress bar

absl::StatusOr<std::shared_ptr<client::Session>> Connect(const Args& args) {
  const char* address = std::getenv("TESSERA_COORDINATOR");
  const char* id = std::getenv("TESSERA_CLIENT");
  client::SessionOptions options;
  options.client_id = args.Get("client", id != nullptr ? id : "cli");
  options.keep_alive = false;
  options.timeout = absl::Seconds(10);
  return client::Session::Connect(
      args.Get("coordinator", address != nullptr ? address : "127.0.0.1:50051"), options);
}

// A progress bar with throughput on stderr, drawn for transfers of more than a few MB.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)) {}
  ~ProgressBar() {
    if (drawn_) std::cerr << "\n";
  }
  void operator()(int64_t done, int64_t total) {
    if (total < kProgressFrom) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const int filled = static_cast<int>(30 * done / total);
    std::cerr << absl::StrFormat("\r%s [%s%s] %3d%% %7.1f / %.1f MiB  %6.1f MB/s", label_,
                                 std::string(filled, '#'), std::string(30 - filled, '.'),
                                 static_cast<int>(100 * done / total), done / 1048576.0,
                                 total / 1048576.0, seconds > 0 ? done / seconds / 1e6 : 0.0);
    drawn_ = true;
  }

 private:
  std::string label_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
  bool drawn_ = false;
};

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

absl::Status Put(client::Session& session, const Args& args, std::ostream& out) {
  if (args.positionals().size() != 2) {
    return absl::InvalidArgumentError("usage: tessera tensor put FILE --mesh NAME --placements P");
  }
  TESSERA_ASSIGN(tensor, ReadTensorFile(args.positionals()[1], args.Get("tensor", "")));
  TESSERA_ASSIGN(mesh_name, args.Required("mesh"));
  TESSERA_ASSIGN(mesh, client::GetMesh(session, mesh_name));
  TESSERA_ASSIGN(placements_text, args.Required("placements"));
  TESSERA_ASSIGN(placements, ParsePlacements(placements_text));
  client::DistributeOptions options;
  options.name = args.Get("name", "");
  int64_t src = 0;
  if (args.Has("src-rank") && !absl::SimpleAtoi(args.Get("src-rank", ""), &src)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--src-rank '", args.Get("src-rank", ""), "' is not an integer"));
  }
  options.src_data_rank = src;
  ProgressBar bar("put");
  options.progress = [&bar](int64_t done, int64_t total) { bar(done, total); };
  TESSERA_ASSIGN(t, client::DistributeTensor(session, tensor, mesh, placements, options));
  t.Detach();
  PrintSummary(t.info(), out);
  return absl::OkStatus();
}

absl::Status Get(client::Session& session, const Args& args, std::ostream& out) {
  if (args.positionals().size() != 2) {
    return absl::InvalidArgumentError("usage: tessera tensor get NAME --out FILE [--rank R]");
  }
  TESSERA_ASSIGN(path, args.Required("out"));
  TESSERA_ASSIGN(t, client::GetTensor(session, args.positionals()[1]));
  HostTensor data;
  if (args.Has("rank")) {
    int64_t rank = 0;
    if (!absl::SimpleAtoi(args.Get("rank", ""), &rank)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--rank '", args.Get("rank", ""), "' is not an integer"));
    }
    TESSERA_ASSIGN(local, t.ToLocal(rank));
    data = std::move(local);
  } else {
    ProgressBar bar("get");
    TESSERA_ASSIGN(full, t.FullTensor([&bar](int64_t d, int64_t n) { bar(d, n); }));
    data = std::move(full);
  }
  const std::string shape = ShapeToString(data.shape());
  const DType dtype = data.dtype();
  if (absl::Status s = WriteTensorFile(path, t.name(), std::move(data)); !s.ok()) return s;
  out << "wrote " << DTypeName(dtype) << shape << " to " << path << "\n";
  return absl::OkStatus();
}

absl::Status Redistribute(client::Session& session, const Args& args, std::ostream& out) {
  if (args.positionals().size() != 2) {
    return absl::InvalidArgumentError(
        "usage: tessera tensor redistribute NAME --to P [--mesh M] [--name OUT] [--explain]");
  }
  TESSERA_ASSIGN(t, client::GetTensor(session, args.positionals()[1]));
  TESSERA_ASSIGN(to_text, args.Required("to"));
  TESSERA_ASSIGN(placements, ParsePlacements(to_text));
  const std::string planner = args.Get("planner", "min-cost");
  if (planner != "min-cost" && planner != "greedy") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown --planner '", planner, "'; expected min-cost or greedy"));
  }
  const std::string mesh = args.Get("mesh", "");
  const PlannerKind kind = planner == "greedy" ? PlannerKind::kGreedy : PlannerKind::kMinCost;
  auto print_plan = [&out](const RedistributePlan& plan) {
    out << (plan.steps.empty() ? "no collectives: the tensor is laid out so already\n"
                               : plan.ToString());
  };
  if (args.Has("explain")) {
    if (!mesh.empty() && mesh != t.info().mesh) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--explain plans within mesh '", t.info().mesh, "'; a move to mesh '", mesh,
          "' relays the tensor through the coordinator, with no collectives to explain"));
    }
    TESSERA_ASSIGN(plan, t.ExplainRedistribute(placements, kind));
    print_plan(plan);
    return absl::OkStatus();
  }
  TESSERA_ASSIGN(moved, t.Redistribute(placements, mesh, args.Get("name", ""), kind));
  moved.Detach();
  if (moved.info().mesh != t.info().mesh) {
    out << "moved across meshes: " << moved.relayed_bytes() << " bytes relayed\n";
  } else {
    print_plan(moved.plan());
  }
  PrintSummary(moved.info(), out);
  return absl::OkStatus();
}

absl::Status Show(client::Session& session, const Args& args, std::ostream& out) {
  if (args.positionals().size() != 2) {
    return absl::InvalidArgumentError("usage: tessera tensor show NAME");
  }
  TESSERA_ASSIGN(t, client::GetTensor(session, args.positionals()[1]));
  PrintSummary(t.info(), out);
  out << VisualizeSharding(t.spec());
  return absl::OkStatus();
}

absl::Status List(client::Session& session, const Args& args, std::ostream& out) {
  TESSERA_ASSIGN(tensors, session.ListTensors(args.Get("mesh", "")));
  if (tensors.empty()) out << "no tensors\n";
  for (const client::DTensorInfo& info : tensors) PrintSummary(info, out);
  return absl::OkStatus();
}

absl::Status Remove(client::Session& session, const Args& args, std::ostream& out) {
  if (args.positionals().size() < 2) {
    return absl::InvalidArgumentError("usage: tessera tensor rm NAME...");
  }
  for (size_t i = 1; i < args.positionals().size(); ++i) {
    TESSERA_ASSIGN(t, client::GetTensor(session, args.positionals()[i]));
    if (absl::Status s = t.Free(); !s.ok()) return s;
    out << "removed " << t.name() << "\n";
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunTensor(const Args& args, std::ostream& out) {
  if (args.positionals().empty()) {
    return absl::InvalidArgumentError("tessera tensor needs put|get|redistribute|show|list|rm");
  }
  TESSERA_ASSIGN(session, Connect(args));
  const std::string& verb = args.positionals()[0];
  if (verb == "put") return Put(*session, args, out);
  if (verb == "get") return Get(*session, args, out);
  if (verb == "redistribute") return Redistribute(*session, args, out);
  if (verb == "show") return Show(*session, args, out);
  if (verb == "list") return List(*session, args, out);
  if (verb == "rm") return Remove(*session, args, out);
  return absl::InvalidArgumentError(absl::StrCat("unknown tensor command '", verb,
                                                 "'; expected put|get|redistribute|show|list|rm"));
}

}  // namespace tessera::cli
