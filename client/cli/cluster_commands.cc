#include "client/cli/cluster_commands.h"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/cli_session.h"
#include "client/cli/cluster_selfcheck.h"
#include "client/cli/dtensor_selfcheck.h"
#include "client/cli/metrics_summary.h"
#include "client/cli/module_selfcheck.h"
#include "client/local_cluster/local_cluster.h"
#include "client/local_cluster/throwaway_certs.h"
#include "core/shape.h"
#include "daemon_support/daemon_flags.h"
#include "tessera/tessera.h"

namespace tessera::cli {
namespace {

// A session without a lease: these commands make no tensors.
absl::StatusOr<std::shared_ptr<client::Session>> Connect(const ClusterFlags& f) {
  client::SessionOptions options = SecureSessionOptions(f);
  options.keep_alive = false;
  options.timeout = absl::Seconds(10);
  return client::Session::Connect(f.coordinator, options);
}

// The dims of a mesh as listed: their names, or their indices for a mesh made without names.
std::string DimLabels(const DeviceMesh& mesh) {
  if (!mesh.dim_names().empty()) return absl::StrJoin(mesh.dim_names(), ", ");
  std::vector<int> indices(static_cast<size_t>(mesh.ndim()));
  std::iota(indices.begin(), indices.end(), 0);
  return absl::StrJoin(indices, ", ");
}

void PrintMesh(const client::MeshInfo& m, std::ostream& out) {
  out << absl::StrFormat("  %-12s %-5s shape [%s] dims (%s) workers [%s] %s%s\n", m.name,
                         m.mesh.device_type(), absl::StrJoin(m.mesh.shape(), ", "),
                         DimLabels(m.mesh), absl::StrJoin(m.mesh.ranks(), ", "),
                         m.ready ? "ready" : "BROKEN: ", m.broken_reason);
  if (!m.tensors.empty())
    out << "               tensors: " << absl::StrJoin(m.tensors, ", ") << "\n";
}

// `bytes` in MiB for display; "?" where unknown (negative).
std::string Bytes(int64_t bytes) {
  if (bytes < 0) return "?";
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

struct UpFlags {
  std::string device = "cpu";
  int workers = 0;  // 0: 4 on cpu, one per visible GPU on cuda
  int port = 0;
  bool selfcheck = false;
  ImportSelfcheck selfcheck_model;  // --selfcheck-model and its files
  bool metrics = true;
  bool tls = false;
  absl::Duration heartbeat_interval = LocalClusterOptions().heartbeat_interval;
  absl::Duration dead_after = LocalClusterOptions().dead_after;
  std::string state_dir;            // empty: <run dir>/state
  std::string checkpoint_root;      // empty: <run dir>/checkpoints
  bool restart_coordinator = true;  // a coordinator that ends is started again
};

// A coordinator that ends sooner than this after its restart is not restarted again.
constexpr absl::Duration kRestartedCoordinatorMinLife = absl::Seconds(10);

// Waits for SIGINT or SIGTERM (blocked in `stop`) while the coordinator of `cluster` runs,
// reporting each worker that ends (the cluster serves on without it). With `restart`, a
// coordinator that ends is started again with the same flags (its --state_dir brings back what it
// held; the workers keep their shards), unless it ended within kRestartedCoordinatorMinLife of its
// last restart. OK on a signal; FAILED_PRECONDITION naming the coordinator's end otherwise.
absl::Status ServeUntilStopped(LocalCluster& cluster, const sigset_t& stop, bool restart,
                               std::ostream& out) {
  const timespec poll = {0, 200'000'000};
  absl::Time restarted = absl::InfinitePast();
  while (true) {
    const int signal = sigtimedwait(&stop, nullptr, &poll);
    if (signal > 0) {
      out << "tessera up: stopping (signal " << signal << ")" << std::endl;
      return absl::OkStatus();
    }
    for (const absl::Status& ended : cluster.ReapEnded()) {
      if (cluster.coordinator_pid() >= 0) {
        out << "tessera up: " << ended.message() << "; the others serve on" << std::endl;
        continue;
      }
      if (!restart) return ended;
      if (absl::Now() - restarted < kRestartedCoordinatorMinLife) {
        return absl::FailedPreconditionError(
            absl::StrCat(ended.message(), "; it ended within ",
                         absl::FormatDuration(kRestartedCoordinatorMinLife),
                         " of its restart, so it is not restarted again"));
      }
      out << "tessera up: " << ended.message() << "; restarting it with the same flags"
          << std::endl;
      if (absl::Status s = cluster.RestartCoordinator(); !s.ok()) return s;
      restarted = absl::Now();
      out << "tessera up: coordinator restarted at " << cluster.address() << " (pid "
          << cluster.coordinator_pid() << "); the workers keep their shards" << std::endl;
    }
  }
}

// Mutual TLS on every link of a local cluster with a throwaway CA and certificates in
// `options`' log dir (made now: a temporary one when unset), and a random bearer token for
// clients, returned in `token`.
absl::Status UseThrowawayTls(LocalClusterOptions& options, std::string* token) {
  if (options.log_dir.empty()) {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::PermissionDeniedError("cannot create a run directory");
    }
    options.log_dir = pattern;
  }
  const std::string dir = options.log_dir + "/tls";
  if (absl::Status s = MakeThrowawayCertificates(dir); !s.ok()) return s;
  absl::BitGen gen;
  *token =
      absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen), absl::Uniform<uint64_t>(gen));
  std::ofstream(dir + "/tokens") << "local " << *token << "\n";
  options.coordinator_flags = {"--tls_cert=" + dir + "/coordinator.pem",
                               "--tls_key=" + dir + "/coordinator.key",
                               "--tls_ca=" + dir + "/ca.pem", "--worker_identity=tessera-worker",
                               "--tokens_file=" + dir + "/tokens"};
  options.worker_flags = {"--tls_cert=" + dir + "/worker.pem", "--tls_key=" + dir + "/worker.key",
                          "--tls_ca=" + dir + "/ca.pem",
                          "--coordinator_identity=tessera-coordinator"};
  options.tls_ca_file = dir + "/ca.pem";
  options.tls_cert_file = dir + "/client.pem";
  options.tls_key_file = dir + "/client.key";
  options.token = *token;
  return absl::OkStatus();
}

// The local cluster's options as `f` gives them; an error for flags that cannot start one.
absl::StatusOr<LocalClusterOptions> UpOptions(const UpFlags& f) {
  LocalClusterOptions options;
  options.device = f.device;
  options.workers = f.workers > 0 ? f.workers : (f.device == "cpu" ? 4 : 0);
  options.coordinator_port = f.port;
  options.metrics = f.metrics;
  options.heartbeat_interval = f.heartbeat_interval;
  options.dead_after = f.dead_after;
  options.state_dir = f.state_dir;
  options.checkpoint_root = f.checkpoint_root;
  options.keep_state = true;
  // A state from an earlier run names workers that are gone (the workers start afresh each run).
  if (!f.state_dir.empty() && std::filesystem::exists(f.state_dir + "/state.db")) {
    return absl::FailedPreconditionError(
        absl::StrCat("--state_dir ", f.state_dir,
                     " holds the state of an earlier run (state.db), whose workers are gone; give "
                     "a new directory or remove that one"));
  }
  if (options.dead_after <= options.heartbeat_interval) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dead_after ", absl::FormatDuration(options.dead_after),
                     " must be longer than --heartbeat_interval ",
                     absl::FormatDuration(options.heartbeat_interval)));
  }
  return options;
}

// A session on `cluster` with the TLS files and token of `options`.
absl::StatusOr<std::shared_ptr<client::Session>> ConnectToLocal(
    const LocalCluster& cluster, const LocalClusterOptions& options) {
  client::SessionOptions session_options;
  session_options.keep_alive = false;
  session_options.timeout = absl::Seconds(60);
  session_options.tls_ca_file = options.tls_ca_file;
  session_options.tls_cert_file = options.tls_cert_file;
  session_options.tls_key_file = options.tls_key_file;
  session_options.token = options.token;
  return client::Session::Connect(cluster.address(), session_options);
}

// `up --selfcheck`: the cluster, DTensor and module self-checks (the last two on 4 or more
// workers), then the metrics summary.
absl::Status RunUpSelfchecks(const LocalCluster& cluster, client::Session& session,
                             const LocalClusterOptions& options, const UpFlags& f,
                             std::ostream& out) {
  out << "tessera up: coordinator at " << cluster.address() << " with " << options.workers << " "
      << f.device << " workers; running the self-check workload\n";
  if (absl::Status s = RunClusterSelfcheck(session, options.workers, f.device, out); !s.ok())
    return s;
  if (options.workers < 4) return absl::OkStatus();
  out << "\n";
  if (absl::Status s = RunDTensorSelfcheck(cluster.address(), f.device,
                                           cluster.checkpoint_root() + "/selfcheck-y", out);
      !s.ok())
    return s;
  out << "\n";
  if (absl::Status s =
          RunModuleSelfcheck(cluster.address(), cluster.log_dir() + "/selfcheck", f.device, out);
      !s.ok())
    return s;
  if (!f.selfcheck_model.archive.empty()) {
    out << "\n";
    if (absl::Status s = RunImportSelfcheck(cluster.address(), f.selfcheck_model, f.device, out);
        !s.ok())
      return s;
  }
  if (!options.metrics) return absl::OkStatus();
  out << "\n";
  return PrintMetricsSummary(cluster, out);
}

// Where the served cluster is: its address and exports, logs, state, checkpoints and metrics.
void PrintServing(const LocalCluster& cluster, const LocalClusterOptions& options, const UpFlags& f,
                  const std::string& token, std::ostream& out) {
  out << "tessera up: coordinator at " << cluster.address() << ", " << options.workers << " "
      << f.device << " workers, mesh 'world' ready\n"
      << "  export TESSERA_COORDINATOR=" << cluster.address() << "\n";
  if (f.tls) {
    out << "  export TESSERA_TLS_CA=" << options.tls_ca_file
        << " TESSERA_TLS_CERT=" << options.tls_cert_file
        << " TESSERA_TLS_KEY=" << options.tls_key_file << " TESSERA_TOKEN=" << token << "\n";
  }
  out << "  logs in " << cluster.log_dir() << "\n"
      << "  state in " << cluster.state_dir() << "\n"
      << "  checkpoints in " << cluster.checkpoint_root() << " (relative paths go there)\n";
  if (options.metrics) {
    out << "  metrics: coordinator " << cluster.coordinator_metrics_url() << "\n";
    for (int i = 0; i < cluster.num_workers(); ++i) {
      out << "           worker " << i << " " << cluster.worker_metrics_url(i) << "\n";
    }
  }
  out << "Ctrl-C stops everything"
      << (f.restart_coordinator ? "; a coordinator that ends is restarted."
                                : "; so does the coordinator's end.")
      << std::endl;
}

absl::Status RunUp(const UpFlags& f, std::ostream& out) {
  absl::StatusOr<LocalClusterOptions> up_options = UpOptions(f);
  if (!up_options.ok()) return up_options.status();
  LocalClusterOptions options = *std::move(up_options);
  std::string token;
  if (f.tls) {
    if (f.selfcheck) {
      return absl::InvalidArgumentError("--tls and --selfcheck cannot be combined yet");
    }
    if (absl::Status s = UseThrowawayTls(options, &token); !s.ok()) return s;
  }
  // Block the stop signals before any thread or child exists, so sigwait below receives them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  options.workers = (*cluster)->num_workers();
  absl::StatusOr<std::shared_ptr<client::Session>> session = ConnectToLocal(**cluster, options);
  if (!session.ok()) return session.status();
  if (f.selfcheck) return RunUpSelfchecks(**cluster, **session, options, f, out);
  absl::StatusOr<client::MeshInfo> world =
      client::InitDeviceMesh(**session, f.device, {options.workers}, {"world"}, "world");
  if (!world.ok()) return world.status();
  PrintServing(**cluster, options, f, token, out);
  absl::Status served = ServeUntilStopped(**cluster, stop, f.restart_coordinator, out);
  if (!served.ok()) {
    out << "tessera up: " << served.message() << "; stopping the workers" << std::endl;
  }
  (*cluster)->Stop();
  return served;
}

struct StatusFlags {
  ClusterFlags cluster;
};

absl::Status RunStatus(const StatusFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(std::shared_ptr<client::Session> session, Connect(f.cluster));
  ASSIGN_OR_RETURN(const std::vector<client::WorkerInfo> workers, session->ListWorkers());
  out << "coordinator " << session->address() << "\nworkers:\n";
  for (const client::WorkerInfo& w : workers) {
    out << absl::StrFormat(
        "  %-3d %-8s %-22s %-5s %10d / %d bytes  pid %d on %s, heartbeat %d ms ago\n", w.worker_id,
        w.device, w.address, w.alive ? "alive" : "DEAD", w.used_bytes, w.memory_budget_bytes, w.pid,
        w.hostname, absl::ToInt64Milliseconds(w.last_heartbeat_age));
    if (!w.device_name.empty() || w.device_total_bytes >= 0) {
      out << absl::StrFormat("      %s: %s used by the worker, %s free of %s\n",
                             w.device_name.empty() ? w.device : w.device_name,
                             Bytes(w.device_allocated_bytes), Bytes(w.device_free_bytes),
                             Bytes(w.device_total_bytes));
    }
  }
  ASSIGN_OR_RETURN(const std::vector<client::MeshInfo> meshes, session->ListMeshes());
  out << "meshes:\n";
  for (const client::MeshInfo& m : meshes) PrintMesh(m, out);
  ASSIGN_OR_RETURN(const std::vector<client::DTensorInfo> tensors, session->ListTensors());
  int64_t bytes = 0, pending = 0, failed = 0;
  for (const client::DTensorInfo& t : tensors) {
    bytes += t.nbytes;
    pending += t.state == client::TensorState::kPending;
    failed += t.state == client::TensorState::kFailed;
  }
  out << absl::StrFormat("dtensors: %d (%d bytes), %d pending, %d failed; tessera tensor list\n",
                         tensors.size(), bytes, pending, failed);
  return absl::OkStatus();
}

struct MeshCreateFlags {
  ClusterFlags cluster;
  std::string name;
  MeshShapeFlags mesh;
};

absl::Status RunMeshCreate(const MeshCreateFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto shape, ParseShape(f.mesh.shape));
  ASSIGN_OR_RETURN(auto session, Connect(f.cluster));
  ASSIGN_OR_RETURN(
      auto mesh, client::InitDeviceMesh(*session, f.mesh.device, shape, DimNames(f.mesh), f.name));
  PrintMesh(mesh, out);
  return absl::OkStatus();
}

struct MeshListFlags {
  ClusterFlags cluster;
};

absl::Status RunMeshList(const MeshListFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, Connect(f.cluster));
  ASSIGN_OR_RETURN(auto meshes, session->ListMeshes());
  for (const client::MeshInfo& m : meshes) PrintMesh(m, out);
  return absl::OkStatus();
}

struct MeshDeleteFlags {
  ClusterFlags cluster;
  std::string name;
};

absl::Status RunMeshDelete(const MeshDeleteFlags& f, std::ostream&) {
  ASSIGN_OR_RETURN(auto session, Connect(f.cluster));
  return session->DeleteMesh(f.name);
}

}  // namespace

void AddClusterCommands(CLI::App& app, Action* action) {
  const std::string group =
      "Commands that run or talk to a cluster (--coordinator HOST:PORT, default "
      "$TESSERA_COORDINATOR)";
  auto up = AddCommand(app, "up",
                       "start a coordinator and N cpu workers (or one per GPU) on loopback, with "
                       "the mesh 'world' over them; Ctrl-C stops them all",
                       RunUp, action);
  up.app->group(group);
  up.app
      ->add_option("--device", up.flags->device,
                   "cpu, or cuda: a worker per visible GPU, worker i serving cuda:i (an error "
                   "naming the reason when there is none)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  up.app
      ->add_option("--workers", up.flags->workers,
                   "workers to start (default: 4 on cpu, every visible GPU on cuda)")
      ->check(CLI::Range(1, 256));
  up.app->add_option("--port", up.flags->port, "the coordinator's port (default: a free one)")
      ->check(CLI::Range(1, 65535));
  daemon::AddDurationFlag(*up.app, "--heartbeat_interval", &up.flags->heartbeat_interval,
                          "how often workers heartbeat", absl::Milliseconds(10), absl::Minutes(1));
  daemon::AddDurationFlag(*up.app, "--dead_after", &up.flags->dead_after,
                          "a worker silent for this long is dead and its meshes are broken",
                          absl::Milliseconds(20), absl::Hours(1));
  up.app->add_option("--state_dir", up.flags->state_dir,
                     "the coordinator's --state_dir: what it must not forget (meshes, tensors, "
                     "modules), kept across its restarts (default: state/ in the run directory)");
  up.app
      ->add_option("--checkpoint_root", up.flags->checkpoint_root,
                   "the workers' --checkpoint_root: every checkpoint path lies inside it, a "
                   "relative one is taken relative to it (default: checkpoints/ in the run "
                   "directory)")
      ->check(CLI::ExistingDirectory);
  up.app->add_flag("--restart_coordinator,!--no-restart_coordinator", up.flags->restart_coordinator,
                   "when the coordinator ends, start it again with the same flags (its state "
                   "comes back from --state_dir, the workers keep their shards) instead of "
                   "stopping everything");
  up.app->add_flag("--selfcheck", up.flags->selfcheck,
                   "run collectives and a tensor-parallel MLP against a local reference, then "
                   "stop");
  CLI::Option* model =
      up.app
          ->add_option("--selfcheck-model", up.flags->selfcheck_model.archive,
                       "with --selfcheck: also load this torch.export archive onto 4 workers and "
                       "check its forward against one process")
          ->type_name("MODEL.pt2")
          ->check(CLI::ExistingFile)
          ->needs("--selfcheck");
  up.app
      ->add_option("--selfcheck-model-inputs", up.flags->selfcheck_model.inputs,
                   "its user inputs by name, and optionally \"logits\" to compare with")
      ->type_name("IO.safetensors")
      ->check(CLI::ExistingFile)
      ->needs(model);
  model->needs("--selfcheck-model-inputs");
  up.app
      ->add_option("--selfcheck-model-tp-plan", up.flags->selfcheck_model.tp_plan,
                   "lay it out by this Hugging Face tp_plan")
      ->type_name("TP.json")
      ->needs(model);
  up.app
      ->add_option("--selfcheck-model-weights", up.flags->selfcheck_model.weights,
                   "its weights from this Hugging Face checkpoint directory")
      ->type_name("DIR")
      ->needs(model);
  up.app->add_flag("--metrics,!--no-metrics", up.flags->metrics,
                   "serve Prometheus metrics on /metrics of every daemon, each on a free port "
                   "(printed)");
  up.app->add_flag("--tls", up.flags->tls,
                   "mutual TLS on every link with a throwaway CA and certificates made by openssl "
                   "in the run directory, and a random bearer token for clients (printed)");

  auto status =
      AddCommand(app, "status", "workers, devices, liveness, memory; meshes and their tensors",
                 RunStatus, action);
  status.app->group(group);
  AddClusterFlags(*status.app, status.flags->cluster, /*with_client=*/false);

  CLI::App* mesh = app.add_subcommand("mesh", "device meshes on the cluster");
  mesh->require_subcommand(1);
  auto create =
      AddCommand(*mesh, "create", "init_device_mesh over live workers", RunMeshCreate, action);
  AddClusterFlags(*create.app, create.flags->cluster, /*with_client=*/false);
  create.app->add_option("name", create.flags->name, "the mesh's name")->required();
  AddMeshShapeFlags(*create.app, create.flags->mesh, "--shape");
  auto list = AddCommand(*mesh, "list", "every mesh: shape, dims, workers, readiness, tensors",
                         RunMeshList, action);
  AddClusterFlags(*list.app, list.flags->cluster, /*with_client=*/false);
  auto remove = AddCommand(*mesh, "delete", "delete a mesh", RunMeshDelete, action);
  AddClusterFlags(*remove.app, remove.flags->cluster, /*with_client=*/false);
  remove.app->add_option("name", remove.flags->name, "the mesh's name")->required();
  mesh->group(group);  // set last: subcommands take their group from their parent when added
}

}  // namespace tessera::cli
