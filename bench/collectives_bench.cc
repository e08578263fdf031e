// collectives_bench: bus bandwidth of all_reduce, all_gather, reduce_scatter, all_to_all and
// broadcast issued by a client through the service (LocalCluster + client::Session::
// RunCollective on tensors uploaded once per size), next to raw Gloo (bench/raw_gloo_peer as N
// processes) and, given a Python with torch, torch.distributed on gloo (bench/torch_peer.py), in
// the same run so the ratios are meaningful on a noisy machine.
//
//   collectives_bench [--workers=2,4] [--bytes=4096,...] [--iterations=30,...] [--warmup=5,...]
//                     [--rounds=3] [--torch_python=PYTHON --torch_peer=bench/torch_peer.py]
//                     [--json=out.json]
//
// Sizes are nccl-tests sizes (the whole array: the all_gather output, the reduce_scatter and
// all_to_all input), float32. busbw = bytes / time x (2(n-1)/n all_reduce, (n-1)/n all_gather,
// reduce_scatter, all_to_all, 1 broadcast). Every figure is a median over all timed calls.
//
// Per size, --rounds times: the raw Gloo peer runs every collective (--warmup untimed calls, then
// --iterations timed ones, each after a barrier and timed on the slowest rank), then the service
// does the same through RunCollective (timed at the client), so slow spells of a shared machine
// fall on both. Each also runs --bursts back-to-back samples (nccl-tests' time: a burst of
// --iterations calls with nothing between them, over the count): raw Gloo calls in a loop; the
// service's calls sent on one CollectiveStream and their outcomes read after, and (reported
// beside) unary async_op calls waited for with one WaitCollectives. Then
// --rtt_calls GetMesh calls give the gRPC unary round trip of the latency aim.
// torch runs once per group size, after the others, with rounds x iterations timed calls.

#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/bench_host.h"
#include "bench/cuda_workers.h"
#include "client/local_cluster/local_cluster.h"
#include "core/host_tensor.h"
#include "core/release_mode.h"
#include "tessera/tessera.h"

ABSL_FLAG(std::string, device, "cpu",
          "cpu: Gloo workers against raw Gloo; cuda: a worker per GPU against raw NCCL");
ABSL_FLAG(std::string, workers, "2,4",
          "Comma-separated worker counts (with --device=cuda, those above the visible GPUs are "
          "dropped; if none is left, every GPU)");
ABSL_FLAG(std::string, bytes, "4096,65536,1048576,16777216,67108864",
          "Comma-separated sizes in bytes (the whole array, as nccl-tests)");
ABSL_FLAG(std::string, iterations, "30,20,10,3,3",
          "Timed calls per round, one entry per --bytes entry");
ABSL_FLAG(std::string, warmup, "5,5,3,1,1",
          "Untimed calls before each collective's timed ones, one entry per --bytes entry");
ABSL_FLAG(int, rounds, 3, "Alternations of the raw peer and the service per size");
ABSL_FLAG(int, rtt_calls, 50, "GetMesh calls per size for the gRPC round trip");
ABSL_FLAG(int, bursts, 3,
          "Back-to-back samples per collective, size and round, each a burst of "
          "--iterations calls over --iterations (nccl-tests' time); 0 skips them");
ABSL_FLAG(std::string, raw_peer, "",
          "raw_gloo_peer (cpu) or raw_nccl_peer (cuda) binary; found beside this program if empty");
ABSL_FLAG(std::string, torch_python, "", "Python with torch for the torch.distributed peer");
ABSL_FLAG(std::string, torch_peer, "", "Path of bench/torch_peer.py");
ABSL_FLAG(std::string, json, "", "Where to write the results as JSON");

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kMesh = "collectives_bench";
constexpr const char* kOps[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                "broadcast"};

// Median and minimum of timed calls, in microseconds.
struct Timing {
  double median_us = NAN;
  double min_us = NAN;
  int calls = 0;
};

// One collective at one size on one group size, measured three ways.
struct Row {
  int workers;
  std::string op;
  int64_t bytes;
  Timing tessera, raw, torch;
  Timing tessera_burst, raw_burst;  // back to back: a burst's time over its calls
  Timing tessera_async;             // back to back as async_op unary calls
  Timing torch_burst;               // back to back with async_op=True
  double rtt_us;                    // GetMesh round trip measured at this size
};

// Microseconds of every timed call, by collective and size.
using Samples = std::map<std::pair<std::string, int64_t>, std::vector<double>>;

double BusFactor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;
}

// busbw in GB/s (1e9 bytes) for `bytes` moved in `us` microseconds.
double BusBw(const Row& row, double us) {
  return static_cast<double>(row.bytes) / (us * 1e-6) / 1e9 * BusFactor(row.op, row.workers);
}

Timing Summarize(std::vector<double> us) {
  if (us.empty()) return {};
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us.front(), static_cast<int>(us.size())};
}

std::vector<int64_t> ParseList(const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 0) {
      std::fprintf(stderr, "not a number >= 0: %s\n", std::string(part).c_str());
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

// Runs every argv as a process with output to `log` and waits for all; an error names the log.
absl::Status RunProcesses(const std::vector<std::vector<std::string>>& argvs,
                          const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<pid_t> pids;
  absl::Status status;
  for (const std::vector<std::string>& args : argvs) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (int err = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ); err != 0) {
      status = absl::InternalError(absl::StrCat("cannot start ", args[0], ": ", strerror(err)));
      break;
    }
    pids.push_back(pid);
  }
  posix_spawn_file_actions_destroy(&actions);
  for (pid_t pid : pids) {
    int wstatus = 0;
    waitpid(pid, &wstatus, 0);
    if (status.ok() && !(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)) {
      status = absl::InternalError(absl::StrCat(argvs[0][0], " failed; see ", log));
    }
  }
  return status;
}

// Adds the peers' "<op> <bytes> <us> <us> ..." lines to `samples`.
absl::Status ReadPeerSamples(const std::string& path, Samples& samples) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no peer output at ", path));
  std::string line, op;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int64_t bytes = 0;
    if (!(fields >> op >> bytes)) continue;
    std::vector<double>& us = samples[{op, bytes}];
    for (double t; fields >> t;) us.push_back(t);
  }
  return absl::OkStatus();
}

// "raw Gloo" or "raw NCCL": the yardstick of --device.
std::string RawName() { return absl::GetFlag(FLAGS_device) == "cuda" ? "raw NCCL" : "raw Gloo"; }

// Runs round `round` of the raw peer (raw_gloo_peer or raw_nccl_peer, which take the same flags)
// as `n` processes on one size.
absl::Status RunRawPeer(const std::string& binary, const std::string& dir, int n, int64_t bytes,
                        int64_t iterations, int64_t warmup, int round, Samples& samples) {
  const std::string tag = absl::StrCat("raw_", n, "_", bytes, "_", round);
  const std::string store = absl::StrCat(dir, "/", tag, "_store");
  std::filesystem::create_directories(store);
  const std::string out = absl::StrCat(dir, "/", tag, ".txt");
  std::vector<std::vector<std::string>> argvs;
  for (int r = 0; r < n; ++r) {
    argvs.push_back({binary, absl::StrCat("--rank=", r), absl::StrCat("--size=", n),
                     absl::StrCat("--store=", store), absl::StrCat("--bytes=", bytes),
                     absl::StrCat("--iterations=", iterations), absl::StrCat("--warmup=", warmup),
                     absl::StrCat("--out=", out),
                     absl::StrCat("--bursts=", absl::GetFlag(FLAGS_bursts))});
  }
  if (absl::Status s = RunProcesses(argvs, absl::StrCat(dir, "/", tag, ".log")); !s.ok()) return s;
  return ReadPeerSamples(out, samples);
}

// Runs bench/torch_peer.py for `n` processes on every size, rounds x iterations timed calls each.
absl::Status RunTorch(const std::string& dir, int n, const std::vector<int64_t>& sizes,
                      std::vector<int64_t> iterations, const std::vector<int64_t>& warmup,
                      Samples& samples) {
  for (int64_t& i : iterations) i *= absl::GetFlag(FLAGS_rounds);
  const std::string out = absl::StrCat(dir, "/torch_", n, ".txt");
  std::vector<std::vector<std::string>> argvs = {
      {absl::GetFlag(FLAGS_torch_python), absl::GetFlag(FLAGS_torch_peer),
       absl::StrCat("--size=", n), absl::StrCat("--bytes=", absl::StrJoin(sizes, ",")),
       absl::StrCat("--iterations=", absl::StrJoin(iterations, ",")),
       absl::StrCat("--warmup=", absl::StrJoin(warmup, ",")), absl::StrCat("--out=", out),
       absl::StrCat("--bursts=", absl::GetFlag(FLAGS_bursts) * absl::GetFlag(FLAGS_rounds)),
       absl::StrCat("--init=", dir, "/torch_", n, "_init")}};
  if (absl::Status s = RunProcesses(argvs, absl::StrCat(dir, "/torch_", n, ".log")); !s.ok()) {
    return s;
  }
  return ReadPeerSamples(out, samples);
}

// The request of collective `op` as the bench issues it: input "x" (or "g", the all_gather
// input of bytes/n), output "y" — or, for all_reduce and broadcast, in place on "x" as
// torch.distributed and raw Gloo run them — sum, root 0.
client::CollectiveRequest Request(const std::string& op) {
  const client::ProcessGroup group{kMesh, ""};
  if (op == "all_reduce") return client::AllReduce(group, "x", "x", ReduceOp::kSum);
  if (op == "all_gather") return client::AllGather(group, "g", "y");
  if (op == "reduce_scatter") return client::ReduceScatter(group, "x", "y", ReduceOp::kSum);
  if (op == "all_to_all") return client::AllToAll(group, "x", "y");
  return client::Broadcast(group, "x", /*src=*/0, "x");
}

// Uploads `name`, `bytes` of float32 ones, to every rank.
absl::Status Upload(client::Session& session, int n, const std::string& name, int64_t bytes) {
  absl::StatusOr<HostTensor> t =
      HostTensor::Uninitialized(DType::kFloat32, {bytes / static_cast<int64_t>(sizeof(float))});
  if (!t.ok()) return t.status();
  std::fill_n(t->data_as<float>(), t->num_elements(), 1.0f);
  for (int r = 0; r < n; ++r) {
    if (absl::Status s = session.PutLocal(kMesh, r, name, *t); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// OK if `reply` is a success listing the output of all `n` ranks.
absl::Status CheckReply(const std::string& op, int n,
                        const absl::StatusOr<client::CollectiveResult>& reply) {
  if (!reply.ok()) return reply.status();
  if (static_cast<int>(reply->outputs.size()) != n) {
    return absl::InternalError(absl::StrCat(op, " wrote ", reply->outputs.size(), " outputs"));
  }
  return absl::OkStatus();
}

// Adds `iterations` timed RunCollective calls of `op` (after `warmup` untimed ones) to `us`.
absl::Status TimeService(client::Session& session, const std::string& op, int n, int64_t iterations,
                         int64_t warmup, std::vector<double>& us) {
  const client::CollectiveRequest request = Request(op);
  for (int64_t i = -warmup; i < iterations; ++i) {
    const Clock::time_point start = Clock::now();
    absl::StatusOr<client::CollectiveResult> reply = session.RunCollective(request);
    const double elapsed = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (absl::Status s = CheckReply(op, n, reply); !s.ok()) return s;
    if (i >= 0) us.push_back(elapsed);
  }
  return absl::OkStatus();
}

// Adds --bursts samples of `op` back to back to `us` and to `async_us`: each the time of
// `iterations` calls, over `iterations` — nccl-tests' time (a loop of launches and one
// synchronize), which raw_gloo_peer --bursts measures the same way. `us`: sent on one
// CollectiveStream, then every outcome read; `async_us`: unary calls with async_op (a round trip
// each), then one WaitCollectives.
absl::Status TimeServiceBursts(client::Session& session, const std::string& op, int n,
                               int64_t iterations, int64_t warmup, std::vector<double>& us,
                               std::vector<double>& async_us) {
  const client::CollectiveRequest request = Request(op);
  auto check = [&](const absl::StatusOr<client::CollectiveResult>& o) {
    return CheckReply(op, n, o);
  };
  absl::StatusOr<std::unique_ptr<client::CollectiveStream>> stream = session.OpenCollectiveStream();
  if (!stream.ok()) return stream.status();
  auto streamed = [&](int64_t calls) -> absl::StatusOr<double> {
    const Clock::time_point start = Clock::now();
    for (int64_t i = 0; i < calls; ++i) {
      // A burst longer than the stream's unread limit reads the oldest outcome first.
      if ((*stream)->outstanding() >= client::CollectiveStream::kMaxUnread) {
        if (absl::Status s = check((*stream)->Next()); !s.ok()) return s;
      }
      if (absl::Status s = (*stream)->Submit(request); !s.ok()) return s;
    }
    while ((*stream)->outstanding() > 0) {
      if (absl::Status s = check((*stream)->Next()); !s.ok()) return s;
    }
    const double elapsed = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    return elapsed / static_cast<double>(std::max<int64_t>(calls, 1));
  };
  auto async = [&](int64_t calls) -> absl::StatusOr<double> {
    const Clock::time_point start = Clock::now();
    std::vector<int64_t> works;
    for (int64_t i = 0; i < calls; ++i) {
      absl::StatusOr<client::Work> work = session.StartCollective(request);
      if (!work.ok()) return work.status();
      works.push_back(work->id());
    }
    absl::StatusOr<std::vector<absl::StatusOr<client::CollectiveResult>>> outcomes =
        session.WaitCollectives(kMesh, works);
    const double elapsed = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (!outcomes.ok()) return outcomes.status();
    for (const absl::StatusOr<client::CollectiveResult>& o : *outcomes) {
      if (absl::Status s = check(o); !s.ok()) return s;
    }
    return elapsed / static_cast<double>(std::max<int64_t>(calls, 1));
  };
  if (absl::StatusOr<double> w = streamed(warmup); !w.ok()) return w.status();
  if (absl::StatusOr<double> w = async(warmup); !w.ok()) return w.status();
  for (int b = 0; b < absl::GetFlag(FLAGS_bursts); ++b) {
    absl::StatusOr<double> t = streamed(iterations);
    if (!t.ok()) return t.status();
    us.push_back(*t);
    t = async(iterations);
    if (!t.ok()) return t.status();
    async_us.push_back(*t);
  }
  return absl::OkStatus();
}

absl::StatusOr<Timing> TimeRoundTrip(client::Session& session) {
  std::vector<double> us;
  for (int i = -5; i < absl::GetFlag(FLAGS_rtt_calls); ++i) {
    const Clock::time_point start = Clock::now();
    absl::StatusOr<client::MeshInfo> mesh = client::GetMesh(session, kMesh);
    const double elapsed = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (!mesh.ok()) return mesh.status();
    if (i >= 0) us.push_back(elapsed);
  }
  return Summarize(std::move(us));
}

// Measures every size on a fresh cluster of `n` workers, the raw peer first at each size.
absl::StatusOr<std::vector<Row>> MeasureGroup(int n, const std::string& dir,
                                              const std::string& raw_peer) {
  LocalClusterOptions options;
  options.device = absl::GetFlag(FLAGS_device);
  options.workers = n;
  options.log_dir = absl::StrCat(dir, "/cluster_", n);
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  client::SessionOptions session_options;
  session_options.keep_alive = false;
  absl::StatusOr<std::shared_ptr<client::Session>> session =
      client::Session::Connect((*cluster)->address(), session_options);
  if (!session.ok()) return session.status();
  client::Session& c = **session;
  client::MeshOptions mesh_options;
  mesh_options.collective_timeout = absl::Seconds(120);
  absl::StatusOr<client::MeshInfo> mesh =
      client::InitDeviceMesh(c, absl::GetFlag(FLAGS_device), {n}, {}, kMesh, mesh_options);
  if (!mesh.ok()) return mesh.status();

  const std::vector<int64_t> sizes = ParseList(absl::GetFlag(FLAGS_bytes));
  const std::vector<int64_t> iterations = ParseList(absl::GetFlag(FLAGS_iterations));
  const std::vector<int64_t> warmup = ParseList(absl::GetFlag(FLAGS_warmup));
  Samples raw, tessera, torch;
  std::map<int64_t, double> rtt_us;
  for (size_t s = 0; s < sizes.size(); ++s) {
    const int64_t bytes = sizes[s];
    if (absl::Status st = Upload(c, n, "x", bytes); !st.ok()) return st;
    if (absl::Status st = Upload(c, n, "g", bytes / n); !st.ok()) return st;
    for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
      if (absl::Status st =
              RunRawPeer(raw_peer, dir, n, bytes, iterations[s], warmup[s], round, raw);
          !st.ok()) {
        return st;
      }
      for (const char* op : kOps) {
        if (absl::Status st = TimeService(c, op, n, iterations[s], warmup[s], tessera[{op, bytes}]);
            !st.ok()) {
          return st;
        }
        if (absl::Status st = TimeServiceBursts(c, op, n, iterations[s], warmup[s],
                                                tessera[{absl::StrCat(op, "/burst"), bytes}],
                                                tessera[{absl::StrCat(op, "/async"), bytes}]);
            !st.ok()) {
          return st;
        }
      }
    }
    absl::StatusOr<Timing> rtt = TimeRoundTrip(c);
    if (!rtt.ok()) return rtt.status();
    rtt_us[bytes] = rtt->median_us;
    for (const char* name : {"x", "g", "y"}) {
      if (absl::Status st = c.DeleteLocal(kMesh, name); !st.ok()) return st;
    }
    std::fprintf(stderr, "  %d workers, %lld bytes done\n", n, static_cast<long long>(bytes));
  }
  if (!absl::GetFlag(FLAGS_torch_python).empty()) {
    if (absl::Status st = RunTorch(dir, n, sizes, iterations, warmup, torch); !st.ok()) return st;
  }
  std::vector<Row> rows;
  for (int64_t bytes : sizes) {
    for (const char* op : kOps) {
      const std::string burst = absl::StrCat(op, "/burst");
      rows.push_back({n, op, bytes, Summarize(tessera[{op, bytes}]), Summarize(raw[{op, bytes}]),
                      Summarize(torch[{op, bytes}]), Summarize(tessera[{burst, bytes}]),
                      Summarize(raw[{burst, bytes}]),
                      Summarize(tessera[{absl::StrCat(op, "/async"), bytes}]),
                      Summarize(torch[{burst, bytes}]), rtt_us[bytes]});
    }
  }
  (void)c.DeleteMesh(kMesh);
  return rows;
}

std::string SizeName(int64_t bytes) {
  if (bytes % (1 << 20) == 0) return absl::StrCat(bytes >> 20, "M");
  if (bytes % (1 << 10) == 0) return absl::StrCat(bytes >> 10, "K");
  return absl::StrCat(bytes);
}

void PrintTable(const std::vector<Row>& rows, bool torch) {
  std::printf("%-2s %-14s %5s %5s | %10s %10s %10s | %8s %8s %8s | %7s %7s | %7s\n", "n", "op",
              "size", "calls", "raw us", "tessera us", "torch us", "raw GB/s", "tess GB/s",
              "trch GB/s", "tess/raw", "trch/raw", "rtt us");
  for (const Row& r : rows) {
    std::printf(
        "%-2d %-14s %5s %5d | %10.1f %10.1f %10.1f | %8.3f %8.3f %8.3f | %7.2fx %7.2fx | %7.1f\n",
        r.workers, r.op.c_str(), SizeName(r.bytes).c_str(), r.tessera.calls, r.raw.median_us,
        r.tessera.median_us, r.torch.median_us, BusBw(r, r.raw.median_us),
        BusBw(r, r.tessera.median_us), BusBw(r, r.torch.median_us),
        r.raw.median_us / r.tessera.median_us, torch ? r.raw.median_us / r.torch.median_us : NAN,
        r.rtt_us);
  }
  std::printf(
      "\nBack to back (nccl-tests' time: a burst of calls, started without waiting, then "
      "one wait, over the calls)\n");
  std::printf(
      "(tessera: on one CollectiveStream; async: async_op unary calls, a round trip each, "
      "then one WaitCollectives; torch: async_op=True, then wait on each)\n");
  std::printf("%-2s %-14s %5s | %10s %10s %10s %10s | %8s %8s | %7s %7s | %10s %7s\n", "n", "op",
              "size", "raw us", "tessera us", "async us", "torch us", "raw GB/s", "tess GB/s",
              "tess/raw", "trch/raw", "over us", "rtt us");
  for (const Row& r : rows) {
    std::printf(
        "%-2d %-14s %5s | %10.1f %10.1f %10.1f %10.1f | %8.3f %8.3f | %7.2fx %7.2fx | %10.1f "
        "%7.1f\n",
        r.workers, r.op.c_str(), SizeName(r.bytes).c_str(), r.raw_burst.median_us,
        r.tessera_burst.median_us, r.tessera_async.median_us, r.torch_burst.median_us,
        BusBw(r, r.raw_burst.median_us), BusBw(r, r.tessera_burst.median_us),
        r.raw_burst.median_us / r.tessera_burst.median_us,
        r.raw_burst.median_us / r.torch_burst.median_us,
        r.tessera_burst.median_us - r.raw_burst.median_us, r.rtt_us);
  }
  int64_t smallest = rows.front().bytes, largest = rows.front().bytes;
  for (const Row& r : rows) {
    smallest = std::min(smallest, r.bytes);
    largest = std::max(largest, r.bytes);
  }
  std::printf("\nAims: at %s busbw >= 0.9x %s; at %s latency <= raw + one gRPC round trip\n",
              SizeName(largest).c_str(), RawName().c_str(), SizeName(smallest).c_str());
  for (const Row& r : rows) {
    if (r.bytes == largest) {
      const double ratio = r.raw.median_us / r.tessera.median_us;
      std::printf("  n=%d %-14s %s busbw ratio %.2fx: %s\n", r.workers, r.op.c_str(),
                  SizeName(r.bytes).c_str(), ratio, ratio >= 0.9 ? "met" : "MISSED");
    }
  }
  for (const Row& r : rows) {
    if (r.bytes == smallest) {
      const double over = r.tessera_burst.median_us - r.raw_burst.median_us;
      const double sync_over = r.tessera.median_us - r.raw.median_us;
      std::printf(
          "  n=%d %-14s %s back to back: overhead %.0f us vs rtt %.0f us (%.1f rtt): %s; "
          "one synchronous call: overhead %.0f us (%.1f rtt)\n",
          r.workers, r.op.c_str(), SizeName(r.bytes).c_str(), over, r.rtt_us, over / r.rtt_us,
          over <= r.rtt_us ? "met" : "MISSED", sync_over, sync_over / r.rtt_us);
    }
  }
}

absl::Status WriteJson(const std::string& path, const std::vector<Row>& rows,
                       const std::string& load_at_start) {
  nlohmann::ordered_json json_rows = nlohmann::ordered_json::array();
  for (const Row& r : rows) {
    json_rows.push_back(
        {{"workers", r.workers},
         {"op", r.op},
         {"bytes", r.bytes},
         {"calls", r.tessera.calls},
         {"tessera_median_us", bench::JsonNumber(r.tessera.median_us)},
         {"tessera_min_us", bench::JsonNumber(r.tessera.min_us)},
         {"raw_median_us", bench::JsonNumber(r.raw.median_us)},
         {"raw_min_us", bench::JsonNumber(r.raw.min_us)},
         {"torch_median_us", bench::JsonNumber(r.torch.median_us)},
         {"tessera_busbw_gbps", bench::JsonNumber(BusBw(r, r.tessera.median_us))},
         {"raw_busbw_gbps", bench::JsonNumber(BusBw(r, r.raw.median_us))},
         {"torch_busbw_gbps", bench::JsonNumber(BusBw(r, r.torch.median_us))},
         {"tessera_over_raw", bench::JsonNumber(r.raw.median_us / r.tessera.median_us)},
         {"torch_over_raw", bench::JsonNumber(r.raw.median_us / r.torch.median_us)},
         {"tessera_stream_burst_us", bench::JsonNumber(r.tessera_burst.median_us)},
         {"tessera_async_burst_us", bench::JsonNumber(r.tessera_async.median_us)},
         {"torch_burst_us", bench::JsonNumber(r.torch_burst.median_us)},
         {"raw_burst_us", bench::JsonNumber(r.raw_burst.median_us)},
         {"grpc_rtt_us", bench::JsonNumber(r.rtt_us)}});
  }
  const nlohmann::ordered_json results = {
      {"benchmark", "collectives_bench"},
      {"date", bench::LocalDate()},
      {"machine", bench::MachineJson(load_at_start)},
      {"device", absl::GetFlag(FLAGS_device)},
      {"raw_peer", RawName()},
      {"dtype", "float32"},
      {"bytes", ParseList(absl::GetFlag(FLAGS_bytes))},
      {"iterations_per_round", ParseList(absl::GetFlag(FLAGS_iterations))},
      {"warmup", ParseList(absl::GetFlag(FLAGS_warmup))},
      {"rounds", absl::GetFlag(FLAGS_rounds)},
      {"rows", std::move(json_rows)}};
  return bench::WriteJsonFile(path, results);
}

int Main() {
  std::vector<int64_t> workers = ParseList(absl::GetFlag(FLAGS_workers));
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "cpu" && device != "cuda") {
    std::fprintf(stderr, "--device must be cpu or cuda, not '%s'\n", device.c_str());
    return 2;
  }
  if (device == "cuda") {
    const std::optional<int> gpus = bench::CudaWorkersOrSkip("collectives_bench", "");
    if (!gpus.has_value()) return 0;
    const int64_t visible = *gpus;
    std::erase_if(workers, [&](int64_t n) { return n > visible; });
    if (workers.empty()) workers = {visible};
    if (!absl::GetFlag(FLAGS_torch_python).empty()) {
      std::fprintf(stderr, "the torch peer runs gloo on the CPU: not run with --device=cuda\n");
      absl::SetFlag(&FLAGS_torch_python, "");
    }
  }
  const size_t sizes = ParseList(absl::GetFlag(FLAGS_bytes)).size();
  if (sizes == 0 || ParseList(absl::GetFlag(FLAGS_iterations)).size() != sizes ||
      ParseList(absl::GetFlag(FLAGS_warmup)).size() != sizes || absl::GetFlag(FLAGS_rounds) < 1) {
    std::fprintf(stderr, "--iterations and --warmup need one entry per --bytes entry\n");
    return 2;
  }
  const bool torch = !absl::GetFlag(FLAGS_torch_python).empty();
  if (torch && absl::GetFlag(FLAGS_torch_peer).empty()) {
    std::fprintf(stderr, "--torch_python needs --torch_peer\n");
    return 2;
  }
  std::string raw_peer = absl::GetFlag(FLAGS_raw_peer);
  if (raw_peer.empty()) {
    raw_peer = SelfDirectory() + (device == "cuda" ? "/raw_nccl_peer" : "/raw_gloo_peer");
  }
  std::string dir =
      (std::filesystem::temp_directory_path() / "tessera-collectives-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string load_at_start = bench::LoadAverage();
  std::fprintf(stderr, "scheduler %s, load average %s\n", bench::Scheduler().c_str(),
               load_at_start.c_str());
  std::vector<Row> rows;
  for (int64_t n : workers) {
    std::fprintf(stderr, "measuring %lld workers (logs in %s)\n", static_cast<long long>(n),
                 dir.c_str());
    absl::StatusOr<std::vector<Row>> group = MeasureGroup(static_cast<int>(n), dir, raw_peer);
    if (!group.ok()) {
      std::fprintf(stderr, "%s\n", group.status().ToString().c_str());
      return 1;
    }
    rows.insert(rows.end(), group->begin(), group->end());
  }
  PrintTable(rows, torch);
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    if (absl::Status s = WriteJson(path, rows, load_at_start); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  tessera::UseReleaseMutexes();
  absl::ParseCommandLine(argc, argv);
  return tessera::Main();
}
