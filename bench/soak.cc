// The concurrency soak: N clients (threads, each its own session and channel) each make M seeded
// mixed calls against a local 4-worker cluster (bench/soak_client.h), in phases: steady (memory
// back to baseline after every client freed its tensors), a worker killed and restarted mid-run,
// and optionally the coordinator killed and restarted mid-run (from its state directory: every
// tensor acknowledged before must read back after). Prints a report per phase; exits 1
// on any unexpected outcome (a wrong byte, a wrong code, a failure no fault explains, memory not
// back), 2 on a hang (a call running past --stall_timeout).

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/soak_client.h"
#include "client/local_cluster/local_cluster.h"
#include "core/small_integer_tensor.h"
#include "tessera/tessera.h"

ABSL_FLAG(int, clients, 16, "concurrent clients, each with its own session");
ABSL_FLAG(int64_t, calls, 1000, "calls each client makes per phase");
ABSL_FLAG(uint64_t, seed, 1, "seed of every client's call mix (client i uses seed + i)");
ABSL_FLAG(std::string, phases, "steady,worker",
          "phases to run, in order: steady, worker (a worker killed and restarted mid-run), "
          "coordinator (the coordinator killed and restarted mid-run from its --state_dir; every "
          "tensor acknowledged before, that is read back whole, must read back after)");
ABSL_FLAG(absl::Duration, call_timeout, absl::Seconds(60), "deadline of every call");
ABSL_FLAG(absl::Duration, stall_timeout, absl::Seconds(150),
          "a call still running after this long is a hang: the soak reports every client's call "
          "and exits 2");
// Over the steady phase of the full soak (27,000 calls) the daemons grew by at most 1 MiB (glibc
// arenas and gRPC's caches settle in the warm-up); a leak of 600 bytes a call would pass 16 MiB.
ABSL_FLAG(int64_t, rss_tolerance_mib, 16,
          "how much a daemon's resident memory may grow over a steady phase");

namespace tessera::soak {
namespace {

constexpr int kWorkers = 4;
constexpr int kVictim = 3;  // the worker the worker phase kills: in line and grid, not in pair

int64_t RssKiB(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

// Every daemon's resident memory and each worker's shard bytes as it last reported them.
struct Memory {
  std::vector<std::pair<std::string, int64_t>> rss_kib;  // coordinator first
  std::vector<int64_t> used_bytes;                       // per worker (by worker id order)
  int64_t tensors = -1;                                  // DTensors the coordinator lists
};

Memory Measure(LocalCluster& cluster, client::Session& admin) {
  Memory m;
  m.rss_kib.push_back({"coordinator", RssKiB(cluster.coordinator_pid())});
  for (int i = 0; i < cluster.num_workers(); ++i) {
    m.rss_kib.push_back({absl::StrCat("worker", i), RssKiB(cluster.worker_pid(i))});
  }
  if (auto workers = admin.ListWorkers(); workers.ok()) {
    for (const client::WorkerInfo& w : *workers) m.used_bytes.push_back(w.used_bytes);
  }
  if (auto tensors = admin.ListTensors(); tensors.ok()) m.tensors = tensors->size();
  return m;
}

// Waits (a few heartbeats) until every worker reports no shard bytes and no DTensor is listed.
Memory SettledMemory(LocalCluster& cluster, client::Session& admin) {
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  Memory m = Measure(cluster, admin);
  while (absl::Now() < deadline) {
    bool zero = m.tensors == 0;
    for (int64_t b : m.used_bytes) zero = zero && b == 0;
    if (zero) break;
    absl::SleepFor(absl::Milliseconds(300));
    m = Measure(cluster, admin);
  }
  absl::SleepFor(absl::Seconds(1));  // let freed memory go back before reading RSS
  return Measure(cluster, admin);
}

absl::StatusOr<client::Mesh> MakeMesh(client::Session& admin, const std::string& name,
                                      const Shape& shape, std::vector<int64_t> ids) {
  client::MeshOptions options;
  options.worker_ids = std::move(ids);
  options.collective_timeout = absl::Seconds(10);
  std::vector<std::string> names;
  if (shape.size() == 2) names = {"dp", "tp"};
  absl::StatusOr<client::MeshInfo> info =
      client::InitDeviceMesh(admin, "cpu", shape, names, name, options);
  if (!info.ok()) return info.status();
  return client::Mesh(*info);
}

// Worker ids in LocalCluster index order (matched by pid).
absl::StatusOr<std::vector<int64_t>> WorkerIds(LocalCluster& cluster, client::Session& admin) {
  absl::StatusOr<std::vector<client::WorkerInfo>> workers = admin.ListWorkers();
  if (!workers.ok()) return workers.status();
  std::vector<int64_t> ids;
  for (int i = 0; i < cluster.num_workers(); ++i) {
    for (const client::WorkerInfo& w : *workers) {
      if (w.pid == cluster.worker_pid(i) && w.alive) ids.push_back(w.worker_id);
    }
  }
  if (ids.size() != static_cast<size_t>(cluster.num_workers())) {
    return absl::UnavailableError("not every worker is registered and alive");
  }
  return ids;
}

absl::StatusOr<SoakMeshes> MakeMeshes(LocalCluster& cluster, client::Session& admin) {
  absl::StatusOr<std::vector<int64_t>> ids = WorkerIds(cluster, admin);
  if (!ids.ok()) return ids.status();
  const std::vector<int64_t>& w = *ids;
  absl::StatusOr<client::Mesh> line = MakeMesh(admin, "line", {kWorkers}, w);
  if (!line.ok()) return line.status();
  absl::StatusOr<client::Mesh> grid = MakeMesh(admin, "grid", {2, 2}, w);
  if (!grid.ok()) return grid.status();
  absl::StatusOr<client::Mesh> pair = MakeMesh(admin, "pair", {2}, {w[0], w[1]});
  if (!pair.ok()) return pair.status();
  return SoakMeshes{*line, *grid, *pair};
}

// New work on `mesh` after a fault: a distribute and a read back, bit for bit.
absl::Status NewWorkSucceeds(client::Session& admin, const client::Mesh& mesh) {
  const HostTensor full = SmallIntegerTensor(DType::kFloat32, {8, 6}, 42);
  std::vector<Placement> placements(mesh.mesh.ndim(), Placement::Replicate());
  placements[0] = Placement::Shard(0);
  absl::StatusOr<client::DTensor> t = client::DistributeTensor(admin, full, mesh, placements);
  if (!t.ok()) return t.status();
  absl::StatusOr<HostTensor> back = t->FullTensor();
  if (!back.ok()) return back.status();
  if (std::memcmp(back->data(), full.data(), full.nbytes()) != 0) {
    return absl::DataLossError(absl::StrCat("new tensor on ", mesh.name, " read back wrong"));
  }
  return t->Free();
}

std::string Codes(const std::map<std::string, int64_t>& codes) {
  std::string out;
  for (const auto& [code, n] : codes) absl::StrAppend(&out, out.empty() ? "" : ", ", code, " ", n);
  return out.empty() ? "none" : out;
}

struct PhaseResult {
  bool ok = true;
};

class Soak {
 public:
  Soak(LocalCluster& cluster, client::Session& admin, SoakMeshes meshes)
      : cluster_(cluster), admin_(admin), meshes_(std::move(meshes)) {}

  // Runs one phase: clients × calls with `fault` injected at a quarter of the calls; true iff
  // nothing unexpected happened.
  bool Phase(const std::string& name, Fault fault, int clients, int64_t calls, bool check_memory) {
    std::printf("\n== phase %s: %d clients x %lld calls ==\n", name.c_str(), clients,
                static_cast<long long>(calls));
    const Memory before = SettledMemory(cluster_, admin_);
    SoakTally tally;
    SoakSignals signals;
    std::vector<std::unique_ptr<SoakProgress>> progress;
    std::vector<std::thread> threads;
    const absl::Time start = absl::Now();
    std::string victim;
    for (int i = 0; i < clients; ++i) {
      progress.push_back(std::make_unique<SoakProgress>());
      SoakClientOptions o;
      o.address = cluster_.address();
      o.index = i;
      o.calls = calls;
      o.seed = absl::GetFlag(FLAGS_seed) + static_cast<uint64_t>(i) * 7919 + phase_++ * 104729;
      o.op_stream = i % 2 == 0;
      o.call_timeout = absl::GetFlag(FLAGS_call_timeout);
      o.fault = fault;
      threads.emplace_back([o, this, &tally, &signals, p = progress.back().get()] {
        RunSoakClient(o, meshes_, tally, signals, *p);
      });
    }
    // Watches for a stall and injects the fault (from this thread: the cluster's children die
    // with the thread that started them).
    bool injected = fault == Fault::kNone, deadlock = false;
    std::string fault_log;
    while (true) {
      int64_t done = 0;
      bool finished = true;
      for (const auto& p : progress) {
        done += p->done;
        std::lock_guard<std::mutex> lock(p->mu);
        finished = finished && p->current == "done";
        // One call past every deadline a call should have (transfers have 10 minutes) is a hang.
        deadlock = deadlock || (p->current != "done" && !p->current.empty() &&
                                absl::Now() - p->since > absl::GetFlag(FLAGS_stall_timeout));
      }
      if (finished || deadlock) break;
      if (!injected && done >= clients * calls / 4) {
        injected = true;
        fault_log = Inject(fault, signals);
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    if (deadlock) {
      std::printf("HANG: a call ran past %s; every client's call:\n",
                  absl::FormatDuration(absl::GetFlag(FLAGS_stall_timeout)).c_str());
      for (size_t i = 0; i < progress.size(); ++i) {
        std::lock_guard<std::mutex> lock(progress[i]->mu);
        std::printf("  client %zu: %s, for %s\n", i, progress[i]->current.c_str(),
                    absl::FormatDuration(absl::Now() - progress[i]->since).c_str());
      }
      std::fflush(stdout);
      std::_Exit(2);
    }
    for (std::thread& t : threads) t.join();
    const absl::Duration wall = absl::Now() - start;

    bool ok = tally.unexpected.empty();
    std::string after_fault;
    if (fault != Fault::kNone) {
      // Meshes that lost a communicator (or the whole coordinator) are made again, then take work.
      after_fault = Recover(fault);
      ok = ok && after_fault.empty();
    }
    const Memory after = SettledMemory(cluster_, admin_);

    std::printf("wall time            %s\n", absl::FormatDuration(wall).c_str());
    std::printf("calls                %lld (%.0f/s)\n", static_cast<long long>(tally.calls.load()),
                tally.calls / absl::ToDoubleSeconds(wall));
    std::printf("succeeded            %lld (%lld results checked against the reference)\n",
                static_cast<long long>(tally.ok.load()),
                static_cast<long long>(tally.checked.load()));
    std::printf("refused as expected  %s\n", Codes(tally.refused_as_expected).c_str());
    if (fault != Fault::kNone) {
      std::printf("fault                %s\n", fault_log.c_str());
      std::printf("failed by the fault  %s\n", Codes(tally.fault_failures).c_str());
      std::printf("succeeded after it   %lld calls\n",
                  static_cast<long long>(tally.ok_after_fault.load()));
      if (fault == Fault::kWorkerLoss) {
        std::printf(
            "unreadable after it  %lld tensors acknowledged before (each with a block on "
            "the lost worker: line or grid, never pair)\n",
            static_cast<long long>(tally.lost_acknowledged.load()));
      } else {
        std::printf(
            "acknowledged before  %lld read back after it, bit for bit; %lld lost (must "
            "be 0)\n",
            static_cast<long long>(tally.read_back_after_fault.load()),
            static_cast<long long>(tally.lost_acknowledged.load()));
      }
      std::printf("after the fault      %s\n",
                  after_fault.empty()
                      ? (fault == Fault::kCoordinator
                             ? "new work on the recovered meshes, and on them remade, succeeds"
                             : "new work on remade meshes succeeds")
                      : after_fault.c_str());
    }
    std::printf("unexpected           %zu\n", tally.unexpected.size());
    for (size_t i = 0; i < tally.unexpected.size() && i < 30; ++i) {
      std::printf("  %s\n", tally.unexpected[i].c_str());
    }
    std::printf("memory               %-12s %12s %12s %10s\n", "daemon", "VmRSS before",
                "VmRSS after", "growth");
    const int64_t tolerance = absl::GetFlag(FLAGS_rss_tolerance_mib) * 1024;
    for (size_t i = 0; i < after.rss_kib.size() && i < before.rss_kib.size(); ++i) {
      const int64_t growth = after.rss_kib[i].second - before.rss_kib[i].second;
      // A restarted daemon is a new process: its growth says nothing about leaks.
      const bool restarted = (fault == Fault::kWorkerLoss && i == kVictim + 1) ||
                             (fault == Fault::kCoordinator && i == 0);
      const bool over = check_memory && !restarted && growth > tolerance;
      std::printf("                     %-12s %9.1f MiB %9.1f MiB %+7.1f MiB%s\n",
                  after.rss_kib[i].first.c_str(), before.rss_kib[i].second / 1024.0,
                  after.rss_kib[i].second / 1024.0, growth / 1024.0,
                  restarted ? " (restarted)"
                  : over    ? "  OVER TOLERANCE"
                            : "");
      ok = ok && !over;
    }
    std::string used;
    for (int64_t b : after.used_bytes) absl::StrAppend(&used, used.empty() ? "" : " ", b);
    std::printf("shard bytes after    %s (workers' reports); DTensors listed: %lld\n", used.c_str(),
                static_cast<long long>(after.tensors));
    // Every tensor freed, the workers hold no shard bytes. After a fault this is reported, not
    // failed: a few bytes stay on survivors (bench/RESULTS.md, "Soak"), and after a coordinator
    // restart they may hold what the old coordinator made.
    bool left = after.tensors != 0;
    for (int64_t b : after.used_bytes) left = left || b != 0;
    if (fault == Fault::kNone) ok = ok && !left;
    if (fault != Fault::kNone && left) std::printf("LEFT ON WORKERS after the fault (see above)\n");
    std::printf("phase %s: %s\n", name.c_str(), ok ? "PASS" : "FAIL");
    std::fflush(stdout);
    return ok;
  }

 private:
  std::string Inject(Fault fault, SoakSignals& signals) {
    signals.fault_started = true;
    const absl::Time t0 = absl::Now();
    std::string log;
    if (fault == Fault::kWorkerLoss) {
      const pid_t pid = cluster_.worker_pid(kVictim);
      absl::Status s = cluster_.KillWorker(kVictim);
      // Dead long enough for the coordinator to declare it (dead_after), then back.
      absl::SleepFor(absl::Seconds(3));
      if (s.ok()) s = cluster_.RestartWorker(kVictim);
      if (s.ok()) s = cluster_.WaitForAliveWorkers(kWorkers, absl::Seconds(30));
      log = absl::StrCat(
          "worker", kVictim, " (pid ", pid, ") killed with SIGKILL, restarted after ",
          absl::FormatDuration(absl::Now() - t0), s.ok() ? "" : ": ", s.ok() ? "" : s.ToString());
    } else if (fault == Fault::kCoordinator) {
      signals.meshes_back = false;
      absl::Status s = cluster_.KillCoordinator();
      absl::SleepFor(absl::Seconds(1));
      if (s.ok()) s = cluster_.RestartCoordinator();
      if (s.ok()) s = cluster_.WaitForAliveWorkers(kWorkers, absl::Seconds(30));
      // The new coordinator recovers the meshes from its state directory (they answer
      // UNAVAILABLE until then): the clients go on once all three are listed again.
      if (s.ok()) s = AwaitMeshes(absl::Seconds(60));
      signals.meshes_back = true;
      log = absl::StrCat("coordinator killed with SIGKILL, restarted, meshes recovered after ",
                         absl::FormatDuration(absl::Now() - t0), s.ok() ? "" : ": ",
                         s.ok() ? "" : s.ToString());
    }
    return log;
  }

  // Waits until the coordinator lists line, grid and pair, up to `wait`.
  absl::Status AwaitMeshes(absl::Duration wait) {
    const absl::Time deadline = absl::Now() + wait;
    absl::Status last = absl::DeadlineExceededError("the meshes were not listed");
    while (absl::Now() < deadline) {
      absl::StatusOr<std::vector<client::MeshInfo>> listed = admin_.ListMeshes();
      if (listed.ok()) {
        int found = 0;
        for (const client::MeshInfo& m : *listed) {
          found += m.ready && (m.name == "line" || m.name == "grid" || m.name == "pair");
        }
        if (found == 3) return absl::OkStatus();
        last = absl::UnavailableError(absl::StrCat(found, " of the 3 meshes listed ready"));
      } else {
        last = listed.status();
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    return last;
  }

  // After a coordinator restart checks new work on the meshes it recovered; then deletes and
  // makes again the meshes the fault broke, and checks new work on each; empty iff all went well.
  std::string Recover(Fault fault) {
    if (absl::Status s = cluster_.WaitForAliveWorkers(kWorkers, absl::Seconds(30)); !s.ok()) {
      return absl::StrCat("workers not back: ", s.ToString());
    }
    if (fault == Fault::kCoordinator) {
      for (const client::Mesh* m : {&meshes_.line, &meshes_.grid, &meshes_.pair}) {
        if (absl::Status s = NewWorkSucceeds(admin_, *m); !s.ok()) {
          return absl::StrCat("new work on the recovered ", m->name, ": ", s.ToString());
        }
      }
    }
    for (const char* name : {"line", "grid", "pair"}) {
      const absl::Status s = admin_.DeleteMesh(name);
      if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
        return absl::StrCat("delete mesh ", name, ": ", s.ToString());
      }
    }
    absl::StatusOr<SoakMeshes> again = MakeMeshes(cluster_, admin_);
    if (!again.ok()) return absl::StrCat("remaking meshes: ", again.status().ToString());
    meshes_ = *std::move(again);
    for (const client::Mesh* m : {&meshes_.line, &meshes_.grid, &meshes_.pair}) {
      if (absl::Status s = NewWorkSucceeds(admin_, *m); !s.ok()) {
        return absl::StrCat("new work on ", m->name, ": ", s.ToString());
      }
    }
    return "";
  }

  LocalCluster& cluster_;
  client::Session& admin_;
  SoakMeshes meshes_;
  uint64_t phase_ = 0;
};

int Main() {
  LocalClusterOptions options;
  options.workers = kWorkers;
  // The coordinator phase restarts the coordinator from its state directory.
  std::string state_dir;
  if (absl::StrContains(absl::GetFlag(FLAGS_phases), "coordinator")) {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera-soak-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      std::fprintf(stderr, "making a state directory: %s\n", std::strerror(errno));
      return 1;
    }
    state_dir = options.state_dir = pattern;
  }
  options.heartbeat_interval = absl::Milliseconds(200);
  options.dead_after = absl::Seconds(2);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "starting the cluster: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  client::SessionOptions session_options;
  session_options.keep_alive = false;
  absl::StatusOr<std::shared_ptr<client::Session>> admin =
      client::Session::Connect((*cluster)->address(), session_options);
  if (!admin.ok()) return 1;
  absl::StatusOr<SoakMeshes> meshes = MakeMeshes(**cluster, **admin);
  if (!meshes.ok()) {
    std::fprintf(stderr, "making the meshes: %s\n", meshes.status().ToString().c_str());
    return 1;
  }
  const int clients = absl::GetFlag(FLAGS_clients);
  const int64_t calls = absl::GetFlag(FLAGS_calls);
  std::printf("soak: %d clients x %lld calls per phase, seed %llu, 4 cpu workers, logs in %s\n",
              clients, static_cast<long long>(calls),
              static_cast<unsigned long long>(absl::GetFlag(FLAGS_seed)),
              (*cluster)->log_dir().c_str());
  Soak soak(**cluster, **admin, *std::move(meshes));
  // A short warm-up first, so that the steady phase's baseline has the threads, connections and
  // communicators a run keeps.
  bool ok = soak.Phase("warm-up", Fault::kNone, clients, std::max<int64_t>(10, calls / 10), false);
  for (absl::string_view phase : absl::StrSplit(absl::GetFlag(FLAGS_phases), ',')) {
    if (phase == "steady") {
      ok = soak.Phase("steady", Fault::kNone, clients, calls, true) && ok;
    } else if (phase == "worker") {
      ok = soak.Phase("worker restart", Fault::kWorkerLoss, clients, calls, false) && ok;
    } else if (phase == "coordinator") {
      ok = soak.Phase("coordinator restart", Fault::kCoordinator, clients, calls, false) && ok;
    } else {
      std::fprintf(stderr, "unknown phase %s\n", std::string(phase).c_str());
      return 1;
    }
  }
  std::printf("\nsoak %s in %s\n", ok ? "PASSED" : "FAILED",
              absl::FormatDuration(absl::Now() - start).c_str());
  if (ok) {
    std::error_code ignored;
    std::filesystem::remove_all((*cluster)->log_dir(), ignored);
    if (!state_dir.empty()) std::filesystem::remove_all(state_dir, ignored);
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace tessera::soak

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tessera::soak::Main();
}
