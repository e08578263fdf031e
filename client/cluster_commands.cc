#include "client/cluster_commands.h"

#include <signal.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cluster_selfcheck.h"
#include "client/dtensor_selfcheck.h"
#include "client/local_cluster.h"
#include "core/shape.h"
#include "tessera/tessera.h"

namespace tessera::cli {
namespace {

// A session without a lease: these commands make no tensors.
absl::StatusOr<std::shared_ptr<client::Session>> Connect(const std::string& address,
                                                         absl::Duration timeout) {
  client::SessionOptions options;
  options.keep_alive = false;
  options.timeout = timeout;
  return client::Session::Connect(address, options);
}

absl::StatusOr<std::shared_ptr<client::Session>> ConnectFromArgs(const Args& args) {
  const char* env = std::getenv("TESSERA_COORDINATOR");
  return Connect(args.Get("coordinator", env != nullptr ? env : "127.0.0.1:50051"),
                 absl::Seconds(10));
}

absl::StatusOr<int> PositiveInt(const Args& args, const std::string& name, int fallback) {
  int v = fallback;
  if (args.Has(name) && (!absl::SimpleAtoi(args.Get(name, ""), &v) || v < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " '", args.Get(name, ""), "' is not a positive integer"));
  }
  return v;
}

void PrintMesh(const client::MeshInfo& m, std::ostream& out) {
  out << absl::StrFormat(
      "  %-12s %-5s shape [%s] dims (%s) workers [%s] %s%s\n", m.name, m.mesh.device_type(),
      absl::StrJoin(m.mesh.shape(), ", "), absl::StrJoin(m.mesh.dim_names(), ", "),
      absl::StrJoin(m.mesh.ranks(), ", "), m.ready ? "ready" : "BROKEN: ", m.broken_reason);
  if (!m.tensors.empty())
    out << "               tensors: " << absl::StrJoin(m.tensors, ", ") << "\n";
}

}  // namespace

absl::Status RunUp(const Args& args, std::ostream& out) {
  LocalClusterOptions options;
  absl::StatusOr<int> workers = PositiveInt(args, "workers", 4);
  if (!workers.ok()) return workers.status();
  options.workers = *workers;
  absl::StatusOr<int> port = PositiveInt(args, "port", 50051);
  if (!port.ok()) return port.status();
  options.coordinator_port = args.Has("port") ? *port : 0;
  // Block the stop signals before any thread or child exists, so sigwait below receives them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  absl::StatusOr<std::shared_ptr<client::Session>> session =
      Connect((*cluster)->address(), absl::Seconds(60));
  if (!session.ok()) return session.status();
  if (args.Has("selfcheck")) {
    out << "tessera up: coordinator at " << (*cluster)->address() << " with " << options.workers
        << " cpu workers; running the self-check workload\n";
    if (absl::Status s = RunClusterSelfcheck(**session, options.workers, out); !s.ok()) return s;
    if (options.workers < 4) return absl::OkStatus();
    out << "\n";
    return RunDTensorSelfcheck((*cluster)->address(), out);
  }
  absl::StatusOr<client::MeshInfo> world =
      client::InitDeviceMesh(**session, "cpu", {options.workers}, {"world"}, "world");
  if (!world.ok()) return world.status();
  out << "tessera up: coordinator at " << (*cluster)->address() << ", " << options.workers
      << " cpu workers, mesh 'world' ready\n"
      << "  export TESSERA_COORDINATOR=" << (*cluster)->address() << "\n"
      << "  logs in " << (*cluster)->log_dir() << "\n"
      << "Ctrl-C stops everything." << std::endl;
  int signal = 0;
  sigwait(&stop, &signal);
  out << "tessera up: stopping (signal " << signal << ")" << std::endl;
  (*cluster)->Stop();
  return absl::OkStatus();
}

absl::Status RunStatus(const Args& args, std::ostream& out) {
  absl::StatusOr<std::shared_ptr<client::Session>> session = ConnectFromArgs(args);
  if (!session.ok()) return session.status();
  absl::StatusOr<std::vector<client::WorkerInfo>> workers = (*session)->ListWorkers();
  if (!workers.ok()) return workers.status();
  out << "coordinator " << (*session)->address() << "\nworkers:\n";
  for (const client::WorkerInfo& w : *workers) {
    out << absl::StrFormat(
        "  %-3d %-8s %-22s %-5s %10d / %d bytes  pid %d on %s, heartbeat %d ms ago\n", w.worker_id,
        w.device, w.address, w.alive ? "alive" : "DEAD", w.used_bytes, w.memory_budget_bytes, w.pid,
        w.hostname, absl::ToInt64Milliseconds(w.last_heartbeat_age));
  }
  absl::StatusOr<std::vector<client::MeshInfo>> meshes = (*session)->ListMeshes();
  if (!meshes.ok()) return meshes.status();
  out << "meshes:\n";
  for (const client::MeshInfo& m : *meshes) PrintMesh(m, out);
  absl::StatusOr<std::vector<client::DTensorInfo>> tensors = (*session)->ListTensors();
  if (!tensors.ok()) return tensors.status();
  int64_t bytes = 0, pending = 0, failed = 0;
  for (const client::DTensorInfo& t : *tensors) {
    bytes += t.nbytes;
    pending += t.state == client::TensorState::kPending;
    failed += t.state == client::TensorState::kFailed;
  }
  out << absl::StrFormat("dtensors: %d (%d bytes), %d pending, %d failed; tessera tensor list\n",
                         tensors->size(), bytes, pending, failed);
  return absl::OkStatus();
}

absl::Status RunMesh(const Args& args, std::ostream& out) {
  const std::vector<std::string>& pos = args.positionals();
  if (pos.empty()) return absl::InvalidArgumentError("usage: tessera mesh create|list|delete ...");
  absl::StatusOr<std::shared_ptr<client::Session>> session = ConnectFromArgs(args);
  if (!session.ok()) return session.status();
  if (pos[0] == "list") {
    absl::StatusOr<std::vector<client::MeshInfo>> meshes = (*session)->ListMeshes();
    if (!meshes.ok()) return meshes.status();
    for (const client::MeshInfo& m : *meshes) PrintMesh(m, out);
    return absl::OkStatus();
  }
  if (pos.size() != 2)
    return absl::InvalidArgumentError(absl::StrCat("usage: tessera mesh ", pos[0], " NAME"));
  if (pos[0] == "delete") return (*session)->DeleteMesh(pos[1]);
  if (pos[0] != "create") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown mesh command '", pos[0], "'; expected create, list or delete"));
  }
  absl::StatusOr<std::string> shape_text = args.Required("shape");
  if (!shape_text.ok()) return shape_text.status();
  absl::StatusOr<Shape> shape = ParseShape(*shape_text);
  if (!shape.ok()) return shape.status();
  std::vector<std::string> names;
  if (args.Has("names")) names = absl::StrSplit(args.Get("names", ""), ',');
  absl::StatusOr<client::MeshInfo> mesh =
      client::InitDeviceMesh(**session, args.Get("device", "cpu"), *shape, names, pos[1]);
  if (!mesh.ok()) return mesh.status();
  PrintMesh(*mesh, out);
  return absl::OkStatus();
}

}  // namespace tessera::cli
