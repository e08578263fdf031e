// dtensor_bench: the DTensor path through the service (client::DistributeTensor, FullTensor, Add,
// Redistribute on a LocalCluster of 2 CPU workers) next to its yardsticks in the same run: a raw
// gRPC server (bench/raw_grpc_peer, bench/raw_peer.proto) moving the same bytes in the same 1 MiB
// messages, raw Gloo (bench/raw_gloo_peer as 2 processes) and, given a Python with torch, torch
// DTensor on gloo (bench/torch_dtensor_peer.py as 2 processes). With --device=cuda the mesh is
// of GPU workers (cuda:0, cuda:1, or one where one GPU is visible) and the collective yardstick is
// raw NCCL (bench/raw_nccl_peer); without a GPU it prints why and exits 0.
//
//   dtensor_bench [--transfer_bytes=268435456] [--memory_bytes=1073741824]
//                 [--redistribute_bytes=67108864] [--latency_iterations=1000] [--rounds=3] ...
//                 [--torch_python=PYTHON --torch_peer=bench/torch_dtensor_peer.py]
//                 [--json=out.json]
//
// What is timed (client wall clock, float32, Shard(0) on a 1-D mesh of 2 workers):
//   transfer     distribute_tensor of --transfer_bytes (the call, and the call + Synchronize) and
//                full_tensor, against a raw Sink (client -> server) and Source (server -> client)
//                stream of the same bytes; --rounds alternations, median. distribute and
//                full_tensor go on the direct path (client <-> workers, the default) and again
//                relayed through the coordinator (direct_data off), against the same Sink/Source.
//   memory       the coordinator's peak RSS growth (VmHWM after - VmRSS before, the peak reset
//                through /proc/<pid>/clear_refs) while distributing --memory_bytes, first thing on
//                a fresh cluster.
//   tiny op      Add of two --tiny_elements tensors: the call (it returns once planned), the call
//                + Synchronize, interleaved with raw unary Pings of the same bytes; then
//                --pipelined_ops Adds back to back (each output dropped, so freed, as the next
//                arrives) and one Synchronize; then the same keeping every output to the end.
//   redistribute Shard(0) -> Replicate of --redistribute_bytes, call + Synchronize, against
//                raw Gloo all_gather of the same output bytes; --rounds alternations, median.
//   program      MixedProgram, 20 eager registry ops (views, pointwise, reductions, two matmuls,
//                a Partial left by a reduction over the sharded dim) on a [64, 32] Shard(0) input:
//                one program + Synchronize of its result (latency), and --program_iterations
//                programs back to back then one Synchronize (throughput); torch's DTensor runs
//                the same ATen ops.

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_host.h"
#include "bench/cuda_workers.h"
#include "client/local_cluster/local_cluster.h"
#include "core/host_tensor.h"
#include "core/release_mode.h"
#include "core/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "raw_peer.grpc.pb.h"
#include "tessera/tessera.h"

ABSL_FLAG(std::string, device, "cpu",
          "cpu: CPU workers, raw Gloo all_gather; cuda: GPU workers, raw NCCL all_gather");
ABSL_FLAG(int, workers, 2, "Workers of the mesh (with --device=cuda, at most the GPUs visible)");
ABSL_FLAG(int64_t, transfer_bytes, int64_t{256} << 20, "distribute/full_tensor size");
ABSL_FLAG(int64_t, memory_bytes, int64_t{1} << 30, "Size distributed for the coordinator RSS");
ABSL_FLAG(int64_t, redistribute_bytes, int64_t{64} << 20, "Shard(0) -> Replicate size");
ABSL_FLAG(int, redistribute_iterations, 3, "Timed redistributes (and all_gathers) per round");
ABSL_FLAG(int, rounds, 5, "Alternations of the yardstick and the service for transfers");
ABSL_FLAG(int, tiny_elements, 256, "float32 elements of the tiny add");
ABSL_FLAG(int, latency_iterations, 1000, "Timed tiny adds (and pings) per mode");
ABSL_FLAG(int, pipelined_ops, 1000, "Adds issued back to back before one Synchronize");
ABSL_FLAG(int, warmup, 50, "Untimed tiny adds and pings first");
ABSL_FLAG(int, program_iterations, 200, "Timed 20-op programs per mode");
ABSL_FLAG(int64_t, worker_budget_bytes, int64_t{6} << 30, "Memory budget of each worker");
ABSL_FLAG(std::string, raw_grpc_peer, "", "raw_grpc_peer binary; beside this program if empty");
ABSL_FLAG(std::string, raw_gloo_peer, "",
          "raw_gloo_peer (cpu) or raw_nccl_peer (cuda) binary; beside this program if empty");
ABSL_FLAG(std::string, torch_python, "", "Python with torch for the torch DTensor peer");
ABSL_FLAG(std::string, torch_peer, "", "Path of bench/torch_dtensor_peer.py");
ABSL_FLAG(std::string, json, "", "Where to write the results as JSON");

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using client::DTensor;

// Workers of the mesh: 2, or 1 with --device=cuda on a machine with one GPU.
int Workers() { return absl::GetFlag(FLAGS_workers); }
constexpr size_t kMessageBytes = size_t{1} << 20;
constexpr const char* kMesh = "dtensor_bench";

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// Median, mean and minimum of timed calls, in microseconds.
struct Stats {
  double p50 = NAN, mean = NAN, min = NAN;
  int calls = 0;
};

Stats Summarize(std::vector<double> us) {
  if (us.empty()) return {};
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], std::accumulate(us.begin(), us.end(), 0.0) / us.size(), us.front(),
          static_cast<int>(us.size())};
}

// GB/s (1e9 bytes) for `bytes` in `us` microseconds.
double Gbps(int64_t bytes, double us) { return static_cast<double>(bytes) / (us * 1e3); }

// CPU milliseconds (user + system) of the client, the coordinator and the workers.
struct Cpu {
  double client = 0, coordinator = 0, workers = 0;
};

// The processes whose CPU time a phase reports.
struct Pids {
  pid_t coordinator = -1;
  std::vector<pid_t> workers;
};

Cpu CpuNow(const Pids& pids) {
  Cpu c{bench::CpuMillis(getpid()), bench::CpuMillis(pids.coordinator), 0};
  for (pid_t w : pids.workers) c.workers += bench::CpuMillis(w);
  return c;
}

// Adds (now - start) / calls to `total`.
void AddCpuSince(const Cpu& start, const Pids& pids, int calls, Cpu& total) {
  const Cpu now = CpuNow(pids);
  total.client += (now.client - start.client) / calls;
  total.coordinator += (now.coordinator - start.coordinator) / calls;
  total.workers += (now.workers - start.workers) / calls;
}

// Everything the bench reports; torch fields stay NaN without torch.
struct Results {
  int64_t transfer_bytes = 0, memory_bytes = 0, redistribute_bytes = 0;
  Stats sink, source, distribute_call, distribute, full_tensor;
  Stats distribute_relayed;   // the same distribute with SessionOptions::direct_data off
  Stats full_tensor_relayed;  // the same full_tensor with SessionOptions::direct_data off
  double rss_before_mib = NAN, hwm_after_mib = NAN, rss_after_mib = NAN, memory_distribute_us = NAN;
  bool hwm_reset = false;
  Stats ping, add_call, add_sync;
  Stats unary_add_call, unary_add_sync;  // through a session without the op stream
  double pipelined_ops_per_s = NAN, pipelined_kept_ops_per_s = NAN;
  Stats program;                           // one 20-op program + Synchronize
  double programs_per_s = NAN;             // back to back, one Synchronize
  Cpu program_cpu;                         // per program, back to back
  double pipelined_unary_ops_per_s = NAN;  // one RunOp and one FreeTensor call per op
  Stats all_gather, redistribute;
  Cpu distribute_cpu, full_tensor_cpu, add_cpu;  // per call
  Cpu sink_cpu, source_cpu;                      // per call; `coordinator` is the raw peer
  std::map<std::string, double> torch;
  double Torch(const std::string& key) const {
    auto it = torch.find(key);
    return it == torch.end() ? NAN : it->second;
  }
};

// Starts `argv` with stdout and stderr appended to `log`.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& args, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0)
    return absl::InternalError(absl::StrCat("cannot start ", args[0], ": ", strerror(err)));
  return pid;
}

// Runs every argv as a process logging to `log` and waits for all; an error names the log.
absl::Status RunProcesses(const std::vector<std::vector<std::string>>& argvs,
                          const std::string& log) {
  std::vector<pid_t> pids;
  absl::Status status;
  for (const std::vector<std::string>& args : argvs) {
    absl::StatusOr<pid_t> pid = Spawn(args, log);
    if (!pid.ok()) {
      status = pid.status();
      break;
    }
    pids.push_back(*pid);
  }
  for (pid_t pid : pids) {
    int wstatus = 0;
    waitpid(pid, &wstatus, 0);
    if (status.ok() && !(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)) {
      status = absl::InternalError(absl::StrCat(argvs[0][0], " failed; see ", log));
    }
  }
  return status;
}

// A field of /proc/<pid>/status in MiB (VmRSS, VmHWM).
double ProcStatusMib(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::stod(line.substr(field.size() + 1)) / 1024.0;  // kB
    }
  }
  return NAN;
}

// The raw gRPC yardstick: a raw_grpc_peer child and a stub on it with the client's channel args.
class RawPeerClient {
 public:
  static absl::StatusOr<std::unique_ptr<RawPeerClient>> Start(const std::string& binary,
                                                              const std::string& dir) {
    const std::string port_file = dir + "/raw_grpc_peer.port";
    absl::StatusOr<pid_t> pid =
        Spawn({binary, "--port_file=" + port_file}, dir + "/raw_grpc_peer.log");
    if (!pid.ok()) return pid.status();
    std::unique_ptr<RawPeerClient> peer(new RawPeerClient(*pid));
    int port = 0;
    for (int i = 0; i < 200 && port == 0; ++i) {
      std::ifstream(port_file) >> port;
      if (port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (port == 0) return absl::UnavailableError("raw_grpc_peer did not start; see its log");
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetMaxSendMessageSize(64 << 20);
    auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                             grpc::InsecureChannelCredentials(), args);
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(30))) {
      return absl::UnavailableError("cannot reach raw_grpc_peer");
    }
    peer->stub_ = bench::RawPeer::NewStub(channel);
    return peer;
  }
  pid_t pid() const { return pid_; }
  ~RawPeerClient() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }

  // Streams `bytes` of `data` to Sink in 1 MiB messages, as DistributeTensor does.
  absl::Status Sink(const std::byte* data, size_t bytes) {
    grpc::ClientContext context;
    bench::Ack ack;
    auto writer = stub_->Sink(&context, &ack);
    bench::Blob blob;
    for (size_t offset = 0; offset < bytes;) {
      const size_t n = std::min(kMessageBytes, bytes - offset);
      blob.set_data(reinterpret_cast<const char*>(data) + offset, n);
      offset += n;
      if (!writer->Write(blob)) break;
    }
    writer->WritesDone();
    if (grpc::Status s = writer->Finish(); !s.ok()) return absl::InternalError(s.error_message());
    if (ack.bytes() != static_cast<int64_t>(bytes)) return absl::DataLossError("short Sink");
    return absl::OkStatus();
  }
  // Receives `bytes` from Source into a new buffer, as FullTensor does.
  absl::Status Source(int64_t bytes) {
    grpc::ClientContext context;
    bench::Size size;
    size.set_bytes(bytes);
    auto reader = stub_->Source(&context, size);
    std::unique_ptr<char[]> out(new char[bytes]);
    bench::Blob blob;
    int64_t got = 0;
    while (reader->Read(&blob)) {
      if (got + static_cast<int64_t>(blob.data().size()) > bytes) break;
      std::memcpy(out.get() + got, blob.data().data(), blob.data().size());
      got += static_cast<int64_t>(blob.data().size());
    }
    if (grpc::Status s = reader->Finish(); !s.ok()) return absl::InternalError(s.error_message());
    if (got != bytes) return absl::DataLossError("short Source");
    return absl::OkStatus();
  }
  absl::Status Ping(const bench::Blob& blob) {
    grpc::ClientContext context;
    bench::Blob reply;
    if (grpc::Status s = stub_->Ping(&context, blob, &reply); !s.ok()) {
      return absl::InternalError(s.error_message());
    }
    return absl::OkStatus();
  }

 private:
  explicit RawPeerClient(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  std::unique_ptr<bench::RawPeer::Stub> stub_;
};

absl::StatusOr<HostTensor> Ones(int64_t bytes) {
  absl::StatusOr<HostTensor> t =
      HostTensor::Uninitialized(DType::kFloat32, {bytes / static_cast<int64_t>(sizeof(float))});
  if (t.ok()) std::fill_n(t->data_as<float>(), t->num_elements(), 1.0f);
  return t;
}

// Peak RSS growth of the coordinator `pid` while distributing memory_bytes (then freed).
absl::Status MeasureMemory(client::Session& session, const client::Mesh& mesh, pid_t pid,
                           Results& r) {
  absl::StatusOr<HostTensor> t = Ones(r.memory_bytes);
  if (!t.ok()) return t.status();
  r.hwm_reset = static_cast<bool>(std::ofstream(absl::StrCat("/proc/", pid, "/clear_refs")) << "5");
  r.rss_before_mib = ProcStatusMib(pid, "VmRSS");
  const Clock::time_point start = Clock::now();
  absl::StatusOr<DTensor> d = client::DistributeTensor(session, *t, mesh, {client::Shard(0)});
  if (!d.ok()) return d.status();
  if (absl::Status s = d->Synchronize(); !s.ok()) return s;
  r.memory_distribute_us = MicrosSince(start);
  r.hwm_after_mib = ProcStatusMib(pid, "VmHWM");
  r.rss_after_mib = ProcStatusMib(pid, "VmRSS");
  return absl::OkStatus();
}

// distribute_tensor / full_tensor next to raw Sink / Source, --rounds alternations.
// `session` takes the direct path where it can (the default); `relayed` never does.
absl::Status MeasureTransfer(client::Session& session, client::Session& relayed,
                             const client::Mesh& mesh, RawPeerClient& raw, const Pids& pids,
                             Results& r) {
  const int rounds = absl::GetFlag(FLAGS_rounds);
  absl::StatusOr<HostTensor> t = Ones(r.transfer_bytes);
  if (!t.ok()) return t.status();
  std::vector<double> sink, source, call, distribute, full, through_coordinator, full_relayed;
  for (int round = -1; round < rounds; ++round) {  // round -1 warms up
    const Pids peer{raw.pid(), {}};
    Cpu cpu = CpuNow(peer);
    Clock::time_point start = Clock::now();
    if (absl::Status s = raw.Sink(t->data(), t->nbytes()); !s.ok()) return s;
    if (round >= 0) {
      sink.push_back(MicrosSince(start));
      AddCpuSince(cpu, peer, rounds, r.sink_cpu);
    }
    cpu = CpuNow(peer);
    start = Clock::now();
    if (absl::Status s = raw.Source(r.transfer_bytes); !s.ok()) return s;
    if (round >= 0) {
      source.push_back(MicrosSince(start));
      AddCpuSince(cpu, peer, rounds, r.source_cpu);
    }

    cpu = CpuNow(pids);
    start = Clock::now();
    absl::StatusOr<DTensor> d = client::DistributeTensor(session, *t, mesh, {client::Shard(0)});
    if (!d.ok()) return d.status();
    const double call_us = MicrosSince(start);
    if (absl::Status s = d->Synchronize(); !s.ok()) return s;
    const double distribute_us = MicrosSince(start);
    if (round >= 0) AddCpuSince(cpu, pids, rounds, r.distribute_cpu);
    cpu = CpuNow(pids);
    start = Clock::now();
    absl::StatusOr<HostTensor> back = d->FullTensor();
    if (!back.ok()) return back.status();
    const double full_us = MicrosSince(start);
    if (round >= 0) AddCpuSince(cpu, pids, rounds, r.full_tensor_cpu);
    if (back->nbytes() != t->nbytes() || std::memcmp(back->data(), t->data(), t->nbytes()) != 0) {
      return absl::DataLossError("full_tensor differs from the distributed tensor");
    }
    if (absl::Status s = d->Free(); !s.ok()) return s;  // before the relayed copy is made
    start = Clock::now();
    absl::StatusOr<DTensor> rd = client::DistributeTensor(relayed, *t, mesh, {client::Shard(0)});
    if (!rd.ok()) return rd.status();
    if (absl::Status s = rd->Synchronize(); !s.ok()) return s;
    const double relayed_us = MicrosSince(start);
    double full_relayed_us = 0;
    {
      start = Clock::now();
      absl::StatusOr<HostTensor> relayed_back = rd->FullTensor();
      if (!relayed_back.ok()) return relayed_back.status();
      full_relayed_us = MicrosSince(start);
      if (relayed_back->nbytes() != t->nbytes() ||
          std::memcmp(relayed_back->data(), t->data(), t->nbytes()) != 0) {
        return absl::DataLossError("relayed full_tensor differs from the distributed tensor");
      }
    }
    if (absl::Status s = rd->Free(); !s.ok()) return s;
    if (round >= 0) {
      through_coordinator.push_back(relayed_us);
      full_relayed.push_back(full_relayed_us);
      call.push_back(call_us);
      distribute.push_back(distribute_us);
      full.push_back(full_us);
    }
  }
  r.sink = Summarize(sink);
  r.source = Summarize(source);
  r.distribute_call = Summarize(call);
  r.distribute = Summarize(distribute);
  r.distribute_relayed = Summarize(through_coordinator);
  r.full_tensor = Summarize(full);
  r.full_tensor_relayed = Summarize(full_relayed);
  return absl::OkStatus();
}

// Tiny Add (call; call + Synchronize) interleaved with raw Pings, then pipelined Adds.
// `ops` Adds of a and b back to back, each output dropped (so freed) as the next arrives, and a
// Synchronize of the last; ops per second.
absl::StatusOr<double> PipelinedAdds(const DTensor& a, const DTensor& b, int ops) {
  const Clock::time_point start = Clock::now();
  DTensor last;
  for (int i = 0; i < ops; ++i) {
    absl::StatusOr<DTensor> c = client::Add(a, b);
    if (!c.ok()) return c.status();
    last = *std::move(c);  // drops, so frees, the previous output
  }
  RETURN_IF_ERROR(last.Synchronize());
  return ops / (MicrosSince(start) * 1e-6);
}

absl::Status MeasureTinyOp(client::Session& session, client::Session& unary,
                           const client::Mesh& mesh, RawPeerClient& raw, const Pids& pids,
                           Results& r) {
  const int64_t bytes = int64_t{absl::GetFlag(FLAGS_tiny_elements)} * 4;
  absl::StatusOr<HostTensor> t = Ones(bytes);
  if (!t.ok()) return t.status();
  absl::StatusOr<DTensor> a = client::DistributeTensor(session, *t, mesh, {client::Shard(0)});
  if (!a.ok()) return a.status();
  absl::StatusOr<DTensor> b = client::DistributeTensor(session, *t, mesh, {client::Shard(0)});
  if (!b.ok()) return b.status();
  ASSIGN_OR_RETURN(client::Mesh unary_mesh, client::GetMesh(unary, mesh.name));
  ASSIGN_OR_RETURN(DTensor ua, client::DistributeTensor(unary, *t, unary_mesh, {client::Shard(0)}));
  ASSIGN_OR_RETURN(DTensor ub, client::DistributeTensor(unary, *t, unary_mesh, {client::Shard(0)}));
  bench::Blob blob;
  blob.set_data(std::string(static_cast<size_t>(bytes), '\x01'));
  std::vector<double> ping, call, sync, unary_call, unary_sync;
  const int iterations = absl::GetFlag(FLAGS_latency_iterations);
  for (int i = -absl::GetFlag(FLAGS_warmup); i < iterations; ++i) {
    Clock::time_point start = Clock::now();
    if (absl::Status s = raw.Ping(blob); !s.ok()) return s;
    const double ping_us = MicrosSince(start);
    double call_us = 0, sync_us = 0;
    {
      start = Clock::now();
      absl::StatusOr<DTensor> c = client::Add(*a, *b);
      call_us = MicrosSince(start);
      if (!c.ok()) return c.status();
    }
    {
      start = Clock::now();
      absl::StatusOr<DTensor> c = client::Add(*a, *b);
      if (!c.ok()) return c.status();
      if (absl::Status s = c->Synchronize(); !s.ok()) return s;
      sync_us = MicrosSince(start);
    }
    double unary_call_us = 0, unary_sync_us = 0;
    {  // the same through the session without the op stream
      start = Clock::now();
      absl::StatusOr<DTensor> c = client::Add(ua, ub);
      unary_call_us = MicrosSince(start);
      if (!c.ok()) return c.status();
      if (absl::Status s = c->Synchronize(); !s.ok()) return s;
      unary_sync_us = MicrosSince(start);
    }
    if (i >= 0) {
      ping.push_back(ping_us);
      call.push_back(call_us);
      sync.push_back(sync_us);
      unary_call.push_back(unary_call_us);
      unary_sync.push_back(unary_sync_us);
    }
  }
  r.ping = Summarize(ping);
  r.add_call = Summarize(call);
  r.add_sync = Summarize(sync);
  r.unary_add_call = Summarize(unary_call);
  r.unary_add_sync = Summarize(unary_sync);

  const int ops = absl::GetFlag(FLAGS_pipelined_ops);
  ASSIGN_OR_RETURN(r.pipelined_ops_per_s, PipelinedAdds(*a, *b, ops));
  // The same through the session without the op stream.
  ASSIGN_OR_RETURN(r.pipelined_unary_ops_per_s, PipelinedAdds(ua, ub, ops));

  std::vector<DTensor> kept;  // the same with every output kept until the end: no FreeTensor
  kept.reserve(static_cast<size_t>(ops));
  const Cpu cpu = CpuNow(pids);
  const Clock::time_point kept_start = Clock::now();
  for (int i = 0; i < ops; ++i) {
    absl::StatusOr<DTensor> c = client::Add(*a, *b);
    if (!c.ok()) return c.status();
    kept.push_back(*std::move(c));
  }
  if (absl::Status s = kept.back().Synchronize(); !s.ok()) return s;
  r.pipelined_kept_ops_per_s = ops / (MicrosSince(kept_start) * 1e-6);
  AddCpuSince(cpu, pids, ops, r.add_cpu);
  return absl::OkStatus();
}

// The 20 ATen ops of the program section (torch_dtensor_peer.py's mixed_program runs the same):
// x [64, 32] Shard(0), w [32, 32] and b [32] Replicate. Its result is a Partial(sum) scalar.
absl::StatusOr<DTensor> MixedProgram(const DTensor& x, const DTensor& w, const DTensor& b) {
  using client::Call;
  ASSIGN_OR_RETURN(DTensor h, Call("mm", {x, w}));                       // 1
  ASSIGN_OR_RETURN(h, Call("add.Tensor", {h, b}));                       // 2
  ASSIGN_OR_RETURN(h, Call("relu", {h}));                                // 3
  ASSIGN_OR_RETURN(DTensor y, Call("mul.Scalar", {h, 0.5}));             // 4
  ASSIGN_OR_RETURN(DTensor e, Call("exp", {y}));                         // 5
  ASSIGN_OR_RETURN(DTensor s, Call("sum.dim_IntList", {e, {1}, true}));  // 6
  ASSIGN_OR_RETURN(DTensor p, Call("div.Tensor", {e, s}));               // 7
  ASSIGN_OR_RETURN(DTensor t, Call("transpose.int", {p, 0, 1}));         // 8
  ASSIGN_OR_RETURN(DTensor v, Call("view", {x, {64, 4, 8}}));            // 9
  ASSIGN_OR_RETURN(v, Call("permute", {v, {1, 0, 2}}));                  // 10
  ASSIGN_OR_RETURN(DTensor partial, Call("sum.dim_IntList", {v, {1}}));  // 11: P(sum)
  ASSIGN_OR_RETURN(DTensor q, Call("sub.Tensor", {p, x}));               // 12
  ASSIGN_OR_RETURN(q, Call("tanh", {q}));                                // 13
  ASSIGN_OR_RETURN(DTensor r, Call("mm", {q, w}));                       // 14
  ASSIGN_OR_RETURN(r, Call("neg", {r}));                                 // 15
  ASSIGN_OR_RETURN(r, Call("add.Tensor", {r, h}));                       // 16
  ASSIGN_OR_RETURN(DTensor m, Call("mean.dim", {r, {1}}));               // 17
  ASSIGN_OR_RETURN(m, Call("unsqueeze", {m, 1}));                        // 18
  ASSIGN_OR_RETURN(DTensor z, Call("mul.Tensor", {r, m}));               // 19
  (void)t;
  (void)partial;
  return Call("sum", {z});  // 20
}

absl::Status MeasureProgram(client::Session& session, const client::Mesh& mesh, const Pids& pids,
                            Results& r) {
  auto values = [](Shape shape) {
    std::vector<float> v(static_cast<size_t>(NumElements(shape)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 7) / 7.0f;
    return HostTensor::FromValues<float>(DType::kFloat32, std::move(shape), v);
  };
  ASSIGN_OR_RETURN(DTensor x,
                   client::DistributeTensor(session, values({64, 32}), mesh, {client::Shard(0)}));
  ASSIGN_OR_RETURN(
      DTensor w, client::DistributeTensor(session, values({32, 32}), mesh, {client::Replicate()}));
  ASSIGN_OR_RETURN(DTensor b,
                   client::DistributeTensor(session, values({32}), mesh, {client::Replicate()}));
  const int iterations = absl::GetFlag(FLAGS_program_iterations);
  std::vector<double> one;
  for (int i = -10; i < iterations; ++i) {
    const Clock::time_point start = Clock::now();
    ASSIGN_OR_RETURN(DTensor out, MixedProgram(x, w, b));
    RETURN_IF_ERROR(out.Synchronize());
    if (i >= 0) one.push_back(MicrosSince(start));
  }
  r.program = Summarize(one);
  const Cpu cpu = CpuNow(pids);
  const Clock::time_point start = Clock::now();
  DTensor last;
  for (int i = 0; i < iterations; ++i) {
    ASSIGN_OR_RETURN(last, MixedProgram(x, w, b));
  }
  RETURN_IF_ERROR(last.Synchronize());
  r.programs_per_s = iterations / (MicrosSince(start) * 1e-6);
  AddCpuSince(cpu, pids, iterations, r.program_cpu);
  return absl::OkStatus();
}

// Adds the all_gather times of one raw_gloo_peer or raw_nccl_peer run (a process per worker) to
// `us`.
absl::Status RunRawGloo(const std::string& binary, const std::string& dir, int64_t bytes, int round,
                        std::vector<double>& us) {
  const std::string store = absl::StrCat(dir, "/gloo_store_", round);
  std::filesystem::create_directories(store);
  const std::string out = absl::StrCat(dir, "/gloo_", round, ".txt");
  std::vector<std::vector<std::string>> argvs;
  for (int rank = 0; rank < Workers(); ++rank) {
    argvs.push_back({binary, absl::StrCat("--rank=", rank), absl::StrCat("--size=", Workers()),
                     "--store=" + store, absl::StrCat("--bytes=", bytes),
                     absl::StrCat("--iterations=", absl::GetFlag(FLAGS_redistribute_iterations)),
                     "--warmup=1", "--out=" + out});
  }
  if (absl::Status s = RunProcesses(argvs, dir + "/raw_gloo_peer.log"); !s.ok()) return s;
  std::ifstream in(out);
  std::string line, op;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int64_t size = 0;
    if (!(fields >> op >> size) || op != "all_gather") continue;
    for (double t; fields >> t;) us.push_back(t);
  }
  return absl::OkStatus();
}

// Redistribute Shard(0) -> Replicate next to raw Gloo all_gather, --rounds alternations.
absl::Status MeasureRedistribute(client::Session& session, const client::Mesh& mesh,
                                 const std::string& gloo_peer, const std::string& dir, Results& r) {
  absl::StatusOr<HostTensor> t = Ones(r.redistribute_bytes);
  if (!t.ok()) return t.status();
  absl::StatusOr<DTensor> x = client::DistributeTensor(session, *t, mesh, {client::Shard(0)});
  if (!x.ok()) return x.status();
  if (absl::Status s = x->Synchronize(); !s.ok()) return s;
  std::vector<double> gloo, service;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    if (absl::Status s = RunRawGloo(gloo_peer, dir, r.redistribute_bytes, round, gloo); !s.ok()) {
      return s;
    }
    for (int i = -1; i < absl::GetFlag(FLAGS_redistribute_iterations); ++i) {
      const Clock::time_point start = Clock::now();
      absl::StatusOr<DTensor> y = x->Redistribute({client::Replicate()});
      if (!y.ok()) return y.status();
      if (absl::Status s = y->Synchronize(); !s.ok()) return s;
      if (i >= 0) service.push_back(MicrosSince(start));
    }
  }
  r.all_gather = Summarize(gloo);
  r.redistribute = Summarize(service);
  return absl::OkStatus();
}

// Reads the flat JSON object of numbers torch_dtensor_peer.py writes; empty if the file is
// missing or not such an object.
std::map<std::string, double> ReadFlatJson(const std::string& path) {
  std::ifstream in(path);
  const nlohmann::json json = nlohmann::json::parse(in, /*cb=*/nullptr, /*allow_exceptions=*/false);
  std::map<std::string, double> out;
  if (!json.is_object()) return out;
  for (const auto& [key, value] : json.items()) {
    if (value.is_number()) out[key] = value.get<double>();
  }
  return out;
}

absl::Status RunTorch(const std::string& dir, Results& r) {
  const std::string out = dir + "/torch_dtensor.json";
  std::vector<std::vector<std::string>> argvs = {
      {absl::GetFlag(FLAGS_torch_python), absl::GetFlag(FLAGS_torch_peer),
       absl::StrCat("--size=", Workers()), absl::StrCat("--transfer_bytes=", r.transfer_bytes),
       absl::StrCat("--transfer_iterations=", absl::GetFlag(FLAGS_rounds)),
       absl::StrCat("--tiny_elements=", absl::GetFlag(FLAGS_tiny_elements)),
       absl::StrCat("--latency_iterations=", absl::GetFlag(FLAGS_latency_iterations)),
       absl::StrCat("--pipelined_ops=", absl::GetFlag(FLAGS_pipelined_ops)),
       absl::StrCat("--warmup=", absl::GetFlag(FLAGS_warmup)),
       absl::StrCat("--program_iterations=", absl::GetFlag(FLAGS_program_iterations)),
       absl::StrCat("--redistribute_bytes=", r.redistribute_bytes),
       absl::StrCat("--redistribute_iterations=",
                    absl::GetFlag(FLAGS_rounds) * absl::GetFlag(FLAGS_redistribute_iterations)),
       "--out=" + out}};
  if (absl::Status s = RunProcesses(argvs, dir + "/torch_dtensor.log"); !s.ok()) return s;
  r.torch = ReadFlatJson(out);
  if (r.torch.empty()) return absl::DataLossError("no torch results in " + out);
  return absl::OkStatus();
}

std::string Verdict(bool met) { return met ? "met" : "NOT MET"; }

void PrintTable(const Results& r) {
  const double mib = 1 << 20;
  std::printf("%-44s | %11s %11s | %11s %11s | %7s %8s\n", "measure", "tessera", "yardstick",
              "tess GB/s", "yard GB/s", "ratio", "torch");
  auto transfer = [&](const char* name, const Stats& t, const Stats& y, double torch_us) {
    std::printf("%-44s | %9.1fms %9.1fms | %11.3f %11.3f | %6.2fx %6.1fms\n", name, t.p50 / 1e3,
                y.p50 / 1e3, Gbps(r.transfer_bytes, t.p50), Gbps(r.transfer_bytes, y.p50),
                y.p50 / t.p50, torch_us / 1e3);
  };
  const std::string size = absl::StrFormat("%.0f MiB", r.transfer_bytes / mib);
  transfer(("distribute_tensor " + size + " (+sync) / Sink").c_str(), r.distribute, r.sink,
           r.Torch("distribute_us"));
  transfer(("distribute_tensor " + size + " (call) / Sink").c_str(), r.distribute_call, r.sink,
           NAN);
  transfer(("distribute relayed " + size + " (+sync) / Sink").c_str(), r.distribute_relayed, r.sink,
           NAN);
  transfer(("full_tensor " + size + " / Source").c_str(), r.full_tensor, r.source,
           r.Torch("full_tensor_us"));
  transfer(("full_tensor relayed " + size + " / Source").c_str(), r.full_tensor_relayed, r.source,
           NAN);
  std::printf("%-44s | %9.1fus %9.1fus | %11s %11s | %6.2fx %6.1fus\n",
              "add 1 KiB, call p50 / Ping p50", r.add_call.p50, r.ping.p50, "", "",
              r.add_call.p50 / r.ping.p50, r.Torch("add_call_p50_us"));
  std::printf("%-44s | %9.1fus %9.1fus | %11s %11s | %6.2fx %6.1fus\n",
              "add 1 KiB, call mean / Ping mean", r.add_call.mean, r.ping.mean, "", "",
              r.add_call.mean / r.ping.mean, r.Torch("add_call_mean_us"));
  std::printf("%-44s | %9.1fus %9.1fus | %11s %11s | %6.2fx %6.1fus\n",
              "add 1 KiB + Synchronize p50 / Ping p50", r.add_sync.p50, r.ping.p50, "", "",
              r.add_sync.p50 / r.ping.p50, r.Torch("add_sync_p50_us"));
  std::printf("%-44s | %9.1fus %9.1fus | %11s %11s | %6.2fx %6.1fus\n",
              "add 1 KiB + Synchronize mean / Ping mean", r.add_sync.mean, r.ping.mean, "", "",
              r.add_sync.mean / r.ping.mean, r.Torch("add_sync_mean_us"));
  std::printf("%-44s | %9.1fus %9.1fus | %11s %11s | %6.2fx %8s\n",
              "add 1 KiB one call each: call p50, + sync p50", r.unary_add_call.p50,
              r.unary_add_sync.p50, "", "", r.unary_add_sync.p50 / r.ping.p50, "");
  std::printf("%-44s | %9.0f/s %11s | %11s %11s | %7s %6.0f/s\n", "add 1 KiB pipelined ops/s",
              r.pipelined_ops_per_s, "", "", "", "", r.Torch("pipelined_ops_per_s"));
  std::printf("%-44s | %9.0f/s %11s | %11s %11s | %7s %8s\n",
              "add 1 KiB pipelined, outputs kept, ops/s", r.pipelined_kept_ops_per_s, "", "", "",
              "", "");
  std::printf("%-44s | %9.0f/s %11s | %11s %11s | %6.2fx %8s\n",
              "add 1 KiB pipelined, one call each, ops/s", r.pipelined_unary_ops_per_s, "", "", "",
              r.pipelined_ops_per_s / r.pipelined_unary_ops_per_s, "");
  const double half = static_cast<double>(Workers() - 1) / Workers();
  std::printf(
      "%-44s | %9.1fms %9.1fms | %5.3f/%5.3f %5.3f/%5.3f | %6.2fx %6.1fms\n",
      absl::StrFormat("redistribute S(0)->R %.0f MiB / all_gather", r.redistribute_bytes / mib)
          .c_str(),
      r.redistribute.p50 / 1e3, r.all_gather.p50 / 1e3,
      Gbps(r.redistribute_bytes, r.redistribute.p50),
      Gbps(r.redistribute_bytes, r.redistribute.p50) * half,
      Gbps(r.redistribute_bytes, r.all_gather.p50),
      Gbps(r.redistribute_bytes, r.all_gather.p50) * half, r.all_gather.p50 / r.redistribute.p50,
      r.Torch("redistribute_us") / 1e3);
  std::printf("%-44s | %9.1fus %11s | %11s %11s | %6.2fx %6.1fus\n",
              "20-op program + Synchronize p50 (torch)", r.program.p50, "", "", "",
              r.Torch("program_p50_us") / r.program.p50, r.Torch("program_p50_us"));
  std::printf("%-44s | %9.0f/s %11s | %11s %11s | %6.2fx %6.0f/s\n",
              "20-op programs back to back, programs/s", r.programs_per_s, "", "", "",
              r.programs_per_s / r.Torch("programs_per_s"), r.Torch("programs_per_s"));
  std::printf(
      "(ratio: yardstick time / Tessera time for transfers and redistribute, Tessera time /"
      " Ping time for add; redistribute GB/s: algbw/busbw; torch: torch's figure for the "
      "row)\n");

  const double growth = r.hwm_after_mib - r.rss_before_mib;
  std::printf(
      "\ncoordinator while distributing %.0f MiB (%.1f GB/s incl. sync): VmRSS before "
      "%.1f MiB, VmHWM after %.1f MiB%s, VmRSS after %.1f MiB: peak growth %.1f MiB\n",
      r.memory_bytes / mib, Gbps(r.memory_bytes, r.memory_distribute_us), r.rss_before_mib,
      r.hwm_after_mib, r.hwm_reset ? " (peak reset first)" : "", r.rss_after_mib, growth);

  std::printf(
      "\nCPU ms per call (client / coordinator / both workers): distribute_tensor "
      "%.0f / %.0f / %.0f, full_tensor %.0f / %.0f / %.0f, pipelined add (outputs kept) "
      "%.3f / %.3f / %.3f\n",
      r.distribute_cpu.client, r.distribute_cpu.coordinator, r.distribute_cpu.workers,
      r.full_tensor_cpu.client, r.full_tensor_cpu.coordinator, r.full_tensor_cpu.workers,
      r.add_cpu.client, r.add_cpu.coordinator, r.add_cpu.workers);
  std::printf(
      "CPU ms per 20-op program back to back (client / coordinator / both workers): "
      "%.3f / %.3f / %.3f\n",
      r.program_cpu.client, r.program_cpu.coordinator, r.program_cpu.workers);
  std::printf("CPU ms per call (client / raw gRPC server): Sink %.0f / %.0f, Source %.0f / %.0f\n",
              r.sink_cpu.client, r.sink_cpu.coordinator, r.source_cpu.client,
              r.source_cpu.coordinator);

  std::printf("\nAims:\n");
  const double d = r.sink.p50 / r.distribute.p50, f = r.source.p50 / r.full_tensor.p50;
  std::printf(
      "  distribute_tensor >= 0.8x raw gRPC stream: %.2fx (%.2fx call only; relayed %.2fx): %s\n",
      d, r.sink.p50 / r.distribute_call.p50, r.sink.p50 / r.distribute_relayed.p50,
      Verdict(d >= 0.8).c_str());
  std::printf("  full_tensor >= 0.8x raw gRPC stream: %.2fx: %s\n", f, Verdict(f >= 0.8).c_str());
  std::printf("  coordinator peak RSS growth <= 64 MiB: %.1f MiB: %s\n", growth,
              Verdict(growth <= 64).c_str());
  const double l = r.add_call.p50 / r.ping.p50;
  std::printf("  tiny add call <= 1.5x gRPC Ping: %.2fx p50 (%.2fx mean): %s\n", l,
              r.add_call.mean / r.ping.mean, Verdict(l <= 1.5).c_str());
  const double g = r.all_gather.p50 / r.redistribute.p50;
  std::printf("  redistribute >= 0.9x raw %s all_gather: %.2fx: %s\n",
              absl::GetFlag(FLAGS_device) == "cuda" ? "NCCL" : "Gloo", g,
              Verdict(g >= 0.9).c_str());
  if (!r.torch.empty()) {
    std::printf(
        "\nTessera / torch DTensor (time ratio torch/Tessera; > 1 means Tessera is faster): "
        "distribute %.2fx, full_tensor %.2fx, add call %.2fx, add + sync %.2fx, "
        "pipelined %.2fx (ops/s Tessera/torch), redistribute %.2fx, 20-op program %.2fx, "
        "programs back to back %.2fx\n",
        r.Torch("distribute_us") / r.distribute.p50, r.Torch("full_tensor_us") / r.full_tensor.p50,
        r.Torch("add_call_p50_us") / r.add_call.p50, r.Torch("add_sync_p50_us") / r.add_sync.p50,
        r.pipelined_ops_per_s / r.Torch("pipelined_ops_per_s"),
        r.Torch("redistribute_us") / r.redistribute.p50, r.Torch("program_p50_us") / r.program.p50,
        r.programs_per_s / r.Torch("programs_per_s"));
  }
}

nlohmann::ordered_json CpuJson(const Cpu& c) {
  return {{"client_ms", bench::JsonNumber(c.client)},
          {"coordinator_ms", bench::JsonNumber(c.coordinator)},
          {"workers_ms", bench::JsonNumber(c.workers)}};
}

nlohmann::ordered_json RawCpuJson(const Cpu& c) {
  return {{"client_ms", bench::JsonNumber(c.client)},
          {"server_ms", bench::JsonNumber(c.coordinator)}};
}

nlohmann::ordered_json StatsJson(const Stats& s) {
  return {{"p50_us", bench::JsonNumber(s.p50)},
          {"mean_us", bench::JsonNumber(s.mean)},
          {"min_us", bench::JsonNumber(s.min)},
          {"calls", s.calls}};
}

absl::Status WriteJson(const std::string& path, const Results& r, const std::string& load) {
  nlohmann::ordered_json torch = nlohmann::ordered_json::object();
  for (const auto& [key, value] : r.torch) torch[key] = bench::JsonNumber(value);
  const nlohmann::ordered_json results = {
      {"benchmark", "dtensor_bench"},
      {"date", bench::LocalDate()},
      {"machine", bench::MachineJson(load)},
      {"device", absl::GetFlag(FLAGS_device)},
      {"workers", Workers()},
      {"dtype", "float32"},
      {"transfer",
       {{"bytes", r.transfer_bytes},
        {"distribute_sync", StatsJson(r.distribute)},
        {"distribute_call", StatsJson(r.distribute_call)},
        {"distribute_relayed_sync", StatsJson(r.distribute_relayed)},
        {"full_tensor", StatsJson(r.full_tensor)},
        {"full_tensor_relayed", StatsJson(r.full_tensor_relayed)},
        {"raw_sink", StatsJson(r.sink)},
        {"raw_source", StatsJson(r.source)},
        {"distribute_cpu_per_call", CpuJson(r.distribute_cpu)},
        {"full_tensor_cpu_per_call", CpuJson(r.full_tensor_cpu)},
        {"raw_sink_cpu_per_call", RawCpuJson(r.sink_cpu)},
        {"raw_source_cpu_per_call", RawCpuJson(r.source_cpu)}}},
      {"coordinator_memory",
       {{"bytes", r.memory_bytes},
        {"vmrss_before_mib", bench::JsonNumber(r.rss_before_mib)},
        {"vmhwm_after_mib", bench::JsonNumber(r.hwm_after_mib)},
        {"vmrss_after_mib", bench::JsonNumber(r.rss_after_mib)},
        {"peak_reset", r.hwm_reset},
        {"peak_growth_mib", bench::JsonNumber(r.hwm_after_mib - r.rss_before_mib)},
        {"distribute_sync_us", bench::JsonNumber(r.memory_distribute_us)}}},
      {"tiny_add",
       {{"elements", absl::GetFlag(FLAGS_tiny_elements)},
        {"call", StatsJson(r.add_call)},
        {"call_sync", StatsJson(r.add_sync)},
        {"raw_ping", StatsJson(r.ping)},
        {"pipelined_ops", absl::GetFlag(FLAGS_pipelined_ops)},
        {"pipelined_ops_per_s", bench::JsonNumber(r.pipelined_ops_per_s)},
        {"pipelined_outputs_kept_ops_per_s", bench::JsonNumber(r.pipelined_kept_ops_per_s)},
        {"pipelined_unary_ops_per_s", bench::JsonNumber(r.pipelined_unary_ops_per_s)},
        {"kept_cpu_per_op", CpuJson(r.add_cpu)}}},
      {"program",
       {{"ops", 20},
        {"one_sync", StatsJson(r.program)},
        {"iterations", absl::GetFlag(FLAGS_program_iterations)},
        {"back_to_back_programs_per_s", bench::JsonNumber(r.programs_per_s)},
        {"back_to_back_cpu_per_program", CpuJson(r.program_cpu)}}},
      {"redistribute",
       {{"bytes", r.redistribute_bytes},
        {"shard0_to_replicate_sync", StatsJson(r.redistribute)},
        {"raw_gloo_all_gather", StatsJson(r.all_gather)}}},
      {"torch", std::move(torch)}};
  return bench::WriteJsonFile(path, results);
}

absl::Status Run(const std::string& dir, Results& r) {
  std::string grpc_peer = absl::GetFlag(FLAGS_raw_grpc_peer);
  if (grpc_peer.empty()) grpc_peer = SelfDirectory() + "/raw_grpc_peer";
  std::string gloo_peer = absl::GetFlag(FLAGS_raw_gloo_peer);
  const std::string device = absl::GetFlag(FLAGS_device);
  if (gloo_peer.empty()) {
    gloo_peer = SelfDirectory() + (device == "cuda" ? "/raw_nccl_peer" : "/raw_gloo_peer");
  }
  absl::StatusOr<std::unique_ptr<RawPeerClient>> raw = RawPeerClient::Start(grpc_peer, dir);
  if (!raw.ok()) return raw.status();

  LocalClusterOptions options;
  options.device = device;
  options.workers = Workers();
  options.memory_budget_bytes = absl::GetFlag(FLAGS_worker_budget_bytes);
  options.log_dir = dir + "/cluster";
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  absl::StatusOr<pid_t> coordinator = bench::ChildNamed("tessera-coordinator");
  if (!coordinator.ok()) return coordinator.status();
  Pids pids{*coordinator, {}};
  for (int i = 0; i < Workers(); ++i) pids.workers.push_back((*cluster)->worker_pid(i));
  absl::StatusOr<std::shared_ptr<client::Session>> session =
      client::Session::Connect((*cluster)->address());
  if (!session.ok()) return session.status();
  client::SessionOptions unary_options;
  unary_options.op_stream = false;
  absl::StatusOr<std::shared_ptr<client::Session>> unary =
      client::Session::Connect((*cluster)->address(), unary_options);
  if (!unary.ok()) return unary.status();
  client::SessionOptions relayed_options;
  relayed_options.direct_data = client::DirectData::kOff;
  absl::StatusOr<std::shared_ptr<client::Session>> relayed =
      client::Session::Connect((*cluster)->address(), relayed_options);
  if (!relayed.ok()) return relayed.status();
  absl::StatusOr<client::Mesh> mesh =
      client::InitDeviceMesh(**session, device, {Workers()}, {}, kMesh);
  if (!mesh.ok()) return mesh.status();

  std::fprintf(stderr, "coordinator memory (%lld bytes)\n", static_cast<long long>(r.memory_bytes));
  if (absl::Status s = MeasureMemory(**session, *mesh, *coordinator, r); !s.ok()) return s;
  std::fprintf(stderr, "transfers (%lld bytes)\n", static_cast<long long>(r.transfer_bytes));
  if (absl::Status s = MeasureTransfer(**session, **relayed, *mesh, **raw, pids, r); !s.ok())
    return s;
  std::fprintf(stderr, "tiny add\n");
  if (absl::Status s = MeasureTinyOp(**session, **unary, *mesh, **raw, pids, r); !s.ok()) return s;
  std::fprintf(stderr, "20-op program\n");
  if (absl::Status s = MeasureProgram(**session, *mesh, pids, r); !s.ok()) return s;
  std::fprintf(stderr, "redistribute (%lld bytes)\n", static_cast<long long>(r.redistribute_bytes));
  if (absl::Status s = MeasureRedistribute(**session, *mesh, gloo_peer, dir, r); !s.ok()) return s;
  session->reset();
  unary->reset();
  (*cluster)->Stop();
  raw->reset();
  if (!absl::GetFlag(FLAGS_torch_python).empty()) {
    std::fprintf(stderr, "torch DTensor\n");
    return RunTorch(dir, r);
  }
  std::fprintf(stderr, "no --torch_python: torch DTensor is not measured\n");
  return absl::OkStatus();
}

int Main() {
  if (!absl::GetFlag(FLAGS_torch_python).empty() && absl::GetFlag(FLAGS_torch_peer).empty()) {
    std::fprintf(stderr, "--torch_python needs --torch_peer\n");
    return 2;
  }
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "cpu" && device != "cuda") {
    std::fprintf(stderr, "--device must be cpu or cuda, not '%s'\n", device.c_str());
    return 2;
  }
  if (Workers() < (device == "cuda" ? 1 : 2)) {
    std::fprintf(stderr, "--workers must be at least %d\n", device == "cuda" ? 1 : 2);
    return 2;
  }
  if (device == "cuda") {
    const std::optional<int> gpus = bench::CudaWorkersOrSkip("dtensor_bench", "");
    if (!gpus.has_value()) return 0;
    absl::SetFlag(&FLAGS_workers, std::min(Workers(), *gpus));
    if (!absl::GetFlag(FLAGS_torch_python).empty()) {
      std::fprintf(stderr,
                   "the torch DTensor peer runs gloo on the CPU: not run with --device=cuda\n");
      absl::SetFlag(&FLAGS_torch_python, "");
    }
  }
  Results r;
  r.transfer_bytes = absl::GetFlag(FLAGS_transfer_bytes);
  r.memory_bytes = absl::GetFlag(FLAGS_memory_bytes);
  r.redistribute_bytes = absl::GetFlag(FLAGS_redistribute_bytes);
  for (int64_t bytes : {r.transfer_bytes, r.memory_bytes, r.redistribute_bytes,
                        int64_t{absl::GetFlag(FLAGS_tiny_elements)} * 4}) {
    if (bytes <= 0 || bytes % (4 * Workers()) != 0) {
      std::fprintf(stderr, "sizes must be positive multiples of %d bytes\n", 4 * Workers());
      return 2;
    }
  }
  std::string dir = (std::filesystem::temp_directory_path() / "tessera-dtensor-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string load = bench::LoadAverage();
  std::fprintf(stderr, "scheduler %s, load average %s, logs in %s\n", bench::Scheduler().c_str(),
               load.c_str(), dir.c_str());
  if (absl::Status s = Run(dir, r); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  PrintTable(r);
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    if (absl::Status s = WriteJson(path, r, load); !s.ok()) {
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
