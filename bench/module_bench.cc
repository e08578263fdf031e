// module_bench: modules through the service (tessera/module.h on a LocalCluster of 2 CPU workers,
// each with one BLAS thread) next to their yardsticks in the same run: the same computation in
// this process on one BLAS thread (bench/single_process_modules.h, the kernels' CPU backend) and,
// given a Python with torch, PyTorch's parallelize_module on gloo (bench/torch_tp_peer.py, 2
// processes of one thread).
//
//   module_bench [--iterations=20] [--rounds=5] [--block_iterations=4] [--infer_seconds=3]
//                [--torch_python=PYTHON --torch_peer=bench/torch_tp_peer.py] [--json=out.json]
//                [--sections=mlp,step,block,infer] [--mlp_hidden=8 (the service's fixed cost)]
//                [--coordinator_binary=... --worker_binary=... (another build's daemons, for A/B)]
//
// What is timed (client wall clock, float32, every figure a median over --rounds alternations of
// the service and its in-process yardstick):
//   mlp forward   Module::Forward of MLP(1024 -> 4096 -> 1024; net1 ColwiseParallel, ReLU, net2
//                 RowwiseParallel) on a full [64, 1024] input, full output back; on the CPU also
//                 against a plain one-thread cblas_sgemm program of the same MLP (PlainBlasMlp),
//                 timed right after.
//   mlp step      Module::Step (loss output.sum(), SGD lr 0.25) of the same MLP.
//   block         Module::Forward of a pre-norm transformer block (dim 512, 8 heads, MLP 4x, seq
//                 128; Megatron's plan) at batch 1 and 32.
//   infer         ModelInfer on the coordinator's KServe v2 endpoint for the MLP published with
//                 Module::Publish, with dynamic batching off and on, at 1, 4 and 16 clients sending
//                 requests of --infer_batch rows back to back; beside Module::Forward of one
//                 request's rows.
// Every service output is first compared with the in-process one (max |difference| / max |value|).
//
// With --device=cuda the workers are GPU workers (cuda:0 and cuda:1, or one where one GPU is
// visible) and the yardstick runs the same kernel calls through the CUDA backend on cuda:0
// (cuBLAS): single-GPU against tensor-parallel on GPUs. The torch peer (gloo, CPU) is not run.
// Without a usable GPU it prints why and exits 0.

#include <cblas.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_host.h"
#include "bench/cuda_workers.h"
#include "bench/infer_load.h"
#include "bench/single_process_modules.h"
#include "client/local_cluster/local_cluster.h"
#include "core/host_tensor.h"
#include "core/release_mode.h"
#include "core/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cpu/blas_config.h"
#include "tessera/tessera.h"

ABSL_FLAG(std::string, device, "cpu",
          "cpu: CPU workers against one CPU process; cuda: GPU workers against one GPU");
ABSL_FLAG(int, workers, 2, "Workers of the tp mesh (with --device=cuda, at most the GPUs visible)");
ABSL_FLAG(int, iterations, 20, "Timed MLP forwards and steps per side and round");
ABSL_FLAG(int, rounds, 5, "Alternations of the service and the in-process yardstick");
ABSL_FLAG(int, warmup, 3, "Untimed calls per side before the rounds");
ABSL_FLAG(int, block_iterations, 4, "Timed block forwards per side and round");
ABSL_FLAG(std::string, block_batches, "1,32", "Batches of the transformer block");
ABSL_FLAG(int, mlp_batch, 64, "Rows of the MLP's input");
ABSL_FLAG(int, mlp_hidden, 4096, "Hidden features of the MLP");
ABSL_FLAG(std::string, infer_clients, "1,4,16", "Concurrent KServe clients");
ABSL_FLAG(int, infer_batch, 1, "Rows of each ModelInfer request");
ABSL_FLAG(double, infer_seconds, 3, "Timed seconds per KServe load");
ABSL_FLAG(int, max_batch_size, 64, "Dynamic batching: rows per batch at most");
ABSL_FLAG(int, max_queue_delay_us, 500, "Dynamic batching: the oldest request waits at most");
ABSL_FLAG(std::string, sections, "mlp,step,block,infer", "What to measure");
ABSL_FLAG(std::string, torch_python, "", "Python with torch for the torch peer");
ABSL_FLAG(std::string, torch_peer, "", "Path of bench/torch_tp_peer.py");
ABSL_FLAG(int, torch_iterations, 50, "Timed forwards and steps of the torch peer");
ABSL_FLAG(std::string, json, "", "Where to write the results as JSON");
ABSL_FLAG(bool, keep_logs, false, "Keep the cluster's and the peer's logs");
ABSL_FLAG(std::string, coordinator_binary, "", "tessera-coordinator to run; found if empty");
ABSL_FLAG(std::string, worker_binary, "", "tessera-worker to run; found if empty");

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using bench::Parameters;

// Workers of the tp mesh.
int Workers() { return absl::GetFlag(FLAGS_workers); }

bool OnCuda() { return absl::GetFlag(FLAGS_device) == "cuda"; }
constexpr const char* kMesh = "module_bench";
constexpr int64_t kMlpIn = 1024;
constexpr double kLr = 0.25;
constexpr int64_t kBlockDim = 512, kBlockHeads = 8, kBlockSeq = 128;

std::string MlpSpec() {
  return absl::StrFormat(R"({"type": "Module", "input": {"dtype": "float32", "shape": [-1, %d]},
  "children": [
    {"name": "net1", "type": "Linear", "in_features": %d, "out_features": %d},
    {"name": "relu", "type": "ReLU"},
    {"name": "net2", "type": "Linear", "in_features": %d, "out_features": %d}]})",
                         kMlpIn, kMlpIn, absl::GetFlag(FLAGS_mlp_hidden),
                         absl::GetFlag(FLAGS_mlp_hidden), kMlpIn);
}
constexpr char kMlpPlan[] = R"({"plan": {"net1": "ColwiseParallel", "net2": "RowwiseParallel"}})";

std::string BlockSpec() {
  return absl::StrFormat(
      R"({"type": "Module", "input": {"dtype": "float32", "shape": [-1, -1, %d]},
  "children": [
    {"name": "attn", "type": "Module", "residual": true, "children": [
      {"name": "norm", "type": "LayerNorm", "normalized_shape": %d},
      {"name": "attention", "type": "Attention", "dim": %d, "n_heads": %d}]},
    {"name": "mlp", "type": "Module", "residual": true, "children": [
      {"name": "norm", "type": "LayerNorm", "normalized_shape": %d},
      {"name": "net1", "type": "Linear", "in_features": %d, "out_features": %d},
      {"name": "act", "type": "GELU", "approximate": "tanh"},
      {"name": "net2", "type": "Linear", "in_features": %d, "out_features": %d}]}]})",
      kBlockDim, kBlockDim, kBlockDim, kBlockHeads, kBlockDim, kBlockDim, 4 * kBlockDim,
      4 * kBlockDim, kBlockDim);
}
constexpr char kMegatronPlan[] = R"({"plan": {
  "attn.attention.[qkv]": "ColwiseParallel", "attn.attention.o": "RowwiseParallel",
  "mlp.net1": "ColwiseParallel", "mlp.net2": "RowwiseParallel"}})";

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// Median, 99th percentile, mean and minimum of timed calls, in microseconds.
struct Stats {
  double p50 = NAN, p99 = NAN, mean = NAN, min = NAN;
  int calls = 0;
};

Stats Summarize(std::vector<double> us) {
  if (us.empty()) return {};
  std::sort(us.begin(), us.end());
  const size_t n = us.size();
  return {us[n / 2], us[std::min(n - 1, static_cast<size_t>(std::ceil(0.99 * n)) - 1)],
          std::accumulate(us.begin(), us.end(), 0.0) / n, us.front(), static_cast<int>(n)};
}

// The value of `name` in the environment of process `pid`; "(unset)" if absent.
std::string EnvironmentOf(pid_t pid, const std::string& name) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/environ"));
  std::string entry;
  while (std::getline(in, entry, '\0')) {
    if (entry.rfind(name + "=", 0) == 0) return entry.substr(name.size() + 1);
  }
  return "(unset)";
}

// CPU milliseconds of the coordinator and of both workers together, per call of a phase.
struct Cpu {
  double coordinator = NAN, workers = NAN;
};

struct Processes {
  pid_t coordinator = -1;
  std::vector<pid_t> workers;
  Cpu Now() const {
    Cpu c{bench::CpuMillis(coordinator), 0};
    for (pid_t w : workers) c.workers += bench::CpuMillis(w);
    return c;
  }
};

// A service call next to its in-process yardstick.
struct Comparison {
  Stats service, reference;
  Cpu service_cpu;              // per service call
  double max_difference = NAN;  // max |service - reference| / max |reference| of an output
  double Ratio() const { return reference.p50 / service.p50; }  // > 1: the service is faster
};

// Times `service` and `reference` alternately: --warmup calls each, then `rounds` rounds of
// `iterations` calls of each; CPU time of the cluster's processes per service call.
absl::Status Alternate(int rounds, int iterations, const Processes& processes,
                       const std::function<absl::Status()>& service,
                       const std::function<absl::Status()>& reference, Comparison& out) {
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) {
    RETURN_IF_ERROR(service());
    RETURN_IF_ERROR(reference());
  }
  std::vector<double> s, r;
  Cpu cpu{0, 0};
  for (int round = 0; round < rounds; ++round) {
    const Cpu before = processes.Now();
    for (int i = 0; i < iterations; ++i) {
      const Clock::time_point start = Clock::now();
      RETURN_IF_ERROR(service());
      s.push_back(MicrosSince(start));
    }
    const Cpu after = processes.Now();
    cpu.coordinator += after.coordinator - before.coordinator;
    cpu.workers += after.workers - before.workers;
    for (int i = 0; i < iterations; ++i) {
      const Clock::time_point start = Clock::now();
      RETURN_IF_ERROR(reference());
      r.push_back(MicrosSince(start));
    }
  }
  out.service = Summarize(std::move(s));
  out.reference = Summarize(std::move(r));
  const double calls = static_cast<double>(rounds) * iterations;
  out.service_cpu = {cpu.coordinator / calls, cpu.workers / calls};
  return absl::OkStatus();
}

// One KServe load: a model, a number of clients.
struct InferRow {
  bool batching = false;
  int clients = 0;
  Stats latency;
  int64_t requests = 0;
  double per_second = NAN;
};

// Everything the bench reports; figures not measured stay NaN.
struct Results {
  std::string yardstick;  // what the single-process figures ran on
  std::string openblas_workers, openblas_bench;
  std::string blas_core_workers, blas_core_bench;
  Comparison mlp_forward, mlp_step;
  Stats mlp_forward_plain_blas;         // PlainBlasMlp, timed right after mlp_forward (CPU only)
  std::map<int64_t, Comparison> block;  // by batch
  Stats direct_forward;                 // Module::Forward of one request's rows
  std::vector<InferRow> infer;
  std::map<std::string, double> torch;
  std::map<std::string, std::string> load;  // the load average as each section started
  double Torch(const std::string& key) const {
    auto it = torch.find(key);
    return it == torch.end() ? NAN : it->second;
  }
};

bool Wants(const std::string& section) {
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sections), ',')) {
    if (s == section) return true;
  }
  return false;
}

std::vector<int64_t> IntList(const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view s : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (absl::SimpleAtoi(s, &v) && v > 0) out.push_back(v);
  }
  return out;
}

// A float32 tensor of `shape` uniform in [-1, 1).
absl::StatusOr<HostTensor> RandomInput(Shape shape, uint64_t seed) {
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::KernelBackend> k, kernels::MakeBackend("cpu"));
  ASSIGN_OR_RETURN(HostTensor t, HostTensor::Uninitialized(DType::kFloat32, shape));
  const std::vector<int64_t> offset(shape.size(), 0);
  RETURN_IF_ERROR(
      k->RandomFill(kernels::Distribution::kUniform, seed, shape, offset, kernels::ViewOf(t)));
  for (int64_t i = 0; i < t.num_elements(); ++i)
    t.data_as<float>()[i] = 2 * t.data_as<float>()[i] - 1;
  return t;
}

// The module `name` from `spec`, initialized from `seed`, parallelized by `plan` on the mesh.
absl::StatusOr<client::Module> LoadParallel(client::Session& session, const client::Mesh& mesh,
                                            const std::string& name, const std::string& spec,
                                            uint64_t seed, const std::string& plan) {
  ASSIGN_OR_RETURN(client::Module m, client::LoadModule(session, spec, mesh, name, {.seed = seed}));
  return client::ParallelizeModule(m, kMesh, plan);
}

// The module's parameters, copied into the yardstick's memory.
absl::StatusOr<Parameters> StateDict(kernels::KernelBackend& k, const client::Module& m) {
  ASSIGN_OR_RETURN(auto pairs, m.StateDict());
  std::map<std::string, HostTensor> host;
  for (auto& [name, t] : pairs) host.emplace(name, std::move(t));
  return bench::UploadParameters(k, host);
}

// The yardstick's result, read back to the host.
absl::StatusOr<HostTensor> ToHost(kernels::KernelBackend& k,
                                  absl::StatusOr<kernels::DeviceTensor> t) {
  if (!t.ok()) return t.status();
  return k.Download(std::as_const(*t).View());
}

// OK once the yardstick's queued work is done (a GPU's included), so that it can be timed.
absl::Status Finished(kernels::KernelBackend& k, absl::StatusOr<kernels::DeviceTensor> t) {
  if (!t.ok()) return t.status();
  return k.Synchronize();
}

absl::StatusOr<HostTensor> FullOutput(absl::StatusOr<client::ModuleOutput> out) {
  if (!out.ok()) return out.status();
  if (!out->full.has_value()) return absl::InternalError("the forward gave no full output");
  return *std::move(out->full);
}

// The MLP forward as a plain program writes it: cblas_sgemm (OpenBLAS, one thread) for x W1^T and
// h W2^T, loops for the biases and the ReLU; the issue's single-process one-thread BLAS reference.
class PlainBlasMlp {
 public:
  static absl::StatusOr<PlainBlasMlp> From(const client::Module& m) {
    ASSIGN_OR_RETURN(auto pairs, m.StateDict());
    std::map<std::string, HostTensor> state;
    for (auto& [name, t] : pairs) state.emplace(name, std::move(t));
    PlainBlasMlp mlp;
    for (auto [name, slot] : {std::pair{"net1.weight", &mlp.w1_},
                              {"net1.bias", &mlp.b1_},
                              {"net2.weight", &mlp.w2_},
                              {"net2.bias", &mlp.b2_}}) {
      auto it = state.find(name);
      if (it == state.end() || it->second.dtype() != DType::kFloat32) {
        return absl::NotFoundError(absl::StrCat("no float32 ", name, " in the MLP's state_dict"));
      }
      *slot = std::move(it->second);
    }
    return mlp;
  }

  // y = relu(x W1^T + b1) W2^T + b2 for x [rows, in].
  std::vector<float> Forward(const HostTensor& x) const {
    const int rows = static_cast<int>(x.shape()[0]), in = static_cast<int>(w1_.shape()[1]);
    const int hidden = static_cast<int>(w1_.shape()[0]), out = static_cast<int>(w2_.shape()[0]);
    std::vector<float> h(static_cast<size_t>(rows) * hidden), y(static_cast<size_t>(rows) * out);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, hidden, in, 1.0f, x.data_as<float>(),
                in, w1_.data_as<float>(), in, 0.0f, h.data(), hidden);
    const float* b1 = b1_.data_as<float>();
    for (int i = 0; i < rows; ++i) {
      for (int j = 0; j < hidden; ++j) {
        h[i * hidden + j] = std::max(h[i * hidden + j] + b1[j], 0.0f);
      }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, hidden, 1.0f, h.data(), hidden,
                w2_.data_as<float>(), hidden, 0.0f, y.data(), out);
    const float* b2 = b2_.data_as<float>();
    for (int i = 0; i < rows; ++i) {
      for (int j = 0; j < out; ++j) y[i * out + j] += b2[j];
    }
    return y;
  }

 private:
  HostTensor w1_, b1_, w2_, b2_;
};

// Times the plain BLAS MLP forward as Alternate times a yardstick: `rounds` x `iterations` calls.
Stats TimePlainBlasMlp(const PlainBlasMlp& mlp, const HostTensor& x) {
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) mlp.Forward(x);
  std::vector<double> us;
  for (int i = 0; i < absl::GetFlag(FLAGS_rounds) * absl::GetFlag(FLAGS_iterations); ++i) {
    const Clock::time_point start = Clock::now();
    mlp.Forward(x);
    us.push_back(MicrosSince(start));
  }
  return Summarize(std::move(us));
}

absl::Status MeasureMlpForward(client::Session& session, const client::Mesh& mesh,
                               kernels::KernelBackend& k, const Processes& processes, Results& r) {
  ASSIGN_OR_RETURN(client::Module m, LoadParallel(session, mesh, "mlp", MlpSpec(), 1, kMlpPlan));
  ASSIGN_OR_RETURN(Parameters p, StateDict(k, m));
  ASSIGN_OR_RETURN(HostTensor x, RandomInput({absl::GetFlag(FLAGS_mlp_batch), kMlpIn}, 7));
  ASSIGN_OR_RETURN(kernels::DeviceTensor xk, k.Upload(x));
  ASSIGN_OR_RETURN(HostTensor service, FullOutput(m.Forward(x)));
  ASSIGN_OR_RETURN(HostTensor reference, ToHost(k, bench::MlpForward(k, p, xk)));
  r.mlp_forward.max_difference = bench::MaxRelativeDifference(service, reference);
  RETURN_IF_ERROR(Alternate(
      absl::GetFlag(FLAGS_rounds), absl::GetFlag(FLAGS_iterations), processes,
      [&] { return m.Forward(x).status(); },
      [&] { return Finished(k, bench::MlpForward(k, p, xk)); }, r.mlp_forward));
  if (OnCuda()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const PlainBlasMlp plain, PlainBlasMlp::From(m));
  r.mlp_forward_plain_blas = TimePlainBlasMlp(plain, x);
  return absl::OkStatus();
}

absl::Status MeasureMlpStep(client::Session& session, const client::Mesh& mesh,
                            kernels::KernelBackend& k, const Processes& processes, Results& r) {
  ASSIGN_OR_RETURN(client::Module m,
                   LoadParallel(session, mesh, "mlp_train", MlpSpec(), 1, kMlpPlan));
  ASSIGN_OR_RETURN(Parameters p, StateDict(k, m));
  ASSIGN_OR_RETURN(HostTensor x, RandomInput({absl::GetFlag(FLAGS_mlp_batch), kMlpIn}, 8));
  ASSIGN_OR_RETURN(kernels::DeviceTensor xk, k.Upload(x));
  const client::StepOptions options{.sgd = client::SgdOptions{.lr = kLr}};
  // The first step's output, then the second's (after the first update), against the reference.
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(client::StepResult step, m.Step(x, options));
    if (!step.output.full.has_value()) return absl::InternalError("the step gave no output");
    ASSIGN_OR_RETURN(HostTensor reference, ToHost(k, bench::MlpStep(k, p, xk, kLr)));
    r.mlp_step.max_difference = bench::MaxRelativeDifference(*step.output.full, reference);
  }
  // Timed steps go on from there; the loss is unbounded, so values run off (as torch's do).
  return Alternate(
      absl::GetFlag(FLAGS_rounds), absl::GetFlag(FLAGS_iterations), processes,
      [&] { return m.Step(x, options).status(); },
      [&] { return Finished(k, bench::MlpStep(k, p, xk, kLr)); }, r.mlp_step);
}

absl::Status MeasureBlock(client::Session& session, const client::Mesh& mesh,
                          kernels::KernelBackend& k, const Processes& processes, Results& r) {
  ASSIGN_OR_RETURN(client::Module m,
                   LoadParallel(session, mesh, "block", BlockSpec(), 2, kMegatronPlan));
  ASSIGN_OR_RETURN(Parameters p, StateDict(k, m));
  for (int64_t batch : IntList(absl::GetFlag(FLAGS_block_batches))) {
    std::fprintf(stderr, "block forward, batch %lld\n", static_cast<long long>(batch));
    ASSIGN_OR_RETURN(HostTensor x, RandomInput({batch, kBlockSeq, kBlockDim}, 9));
    ASSIGN_OR_RETURN(kernels::DeviceTensor xk, k.Upload(x));
    Comparison& c = r.block[batch];
    ASSIGN_OR_RETURN(HostTensor service, FullOutput(m.Forward(x)));
    ASSIGN_OR_RETURN(HostTensor reference,
                     ToHost(k, bench::BlockForward(k, p, xk, kBlockHeads, false)));
    c.max_difference = bench::MaxRelativeDifference(service, reference);
    RETURN_IF_ERROR(Alternate(
        absl::GetFlag(FLAGS_rounds), absl::GetFlag(FLAGS_block_iterations), processes,
        [&] { return m.Forward(x).status(); },
        [&] { return Finished(k, bench::BlockForward(k, p, xk, kBlockHeads, false)); }, c));
  }
  return absl::OkStatus();
}

absl::Status MeasureInfer(client::Session& session, const client::Mesh& mesh,
                          const std::string& address, Results& r) {
  absl::StatusOr<client::Module> found = client::GetModule(session, "mlp");
  client::Module m;
  if (found.ok()) {
    m = *found;
  } else {
    ASSIGN_OR_RETURN(m, LoadParallel(session, mesh, "mlp", MlpSpec(), 1, kMlpPlan));
  }
  RETURN_IF_ERROR(m.Publish({.model = "mlp"}).status());
  RETURN_IF_ERROR(
      m.Publish({.model = "mlp_batched",
                 .max_batch_size = absl::GetFlag(FLAGS_max_batch_size),
                 .max_queue_delay = absl::Microseconds(absl::GetFlag(FLAGS_max_queue_delay_us))})
          .status());
  const int64_t rows = absl::GetFlag(FLAGS_infer_batch);
  ASSIGN_OR_RETURN(HostTensor x, RandomInput({rows, kMlpIn}, 10));
  std::vector<double> direct;
  for (int i = -absl::GetFlag(FLAGS_warmup); i < 10 * absl::GetFlag(FLAGS_iterations); ++i) {
    const Clock::time_point start = Clock::now();
    RETURN_IF_ERROR(m.Forward(x).status());
    if (i >= 0) direct.push_back(MicrosSince(start));
  }
  r.direct_forward = Summarize(std::move(direct));
  const absl::Duration duration = absl::Seconds(absl::GetFlag(FLAGS_infer_seconds));
  for (bool batching : {false, true}) {
    for (int64_t clients : IntList(absl::GetFlag(FLAGS_infer_clients))) {
      std::fprintf(stderr, "ModelInfer, batching %s, %lld clients\n", batching ? "on" : "off",
                   static_cast<long long>(clients));
      ASSIGN_OR_RETURN(
          bench::InferLoad load,
          bench::RunInferLoad(address, batching ? "mlp_batched" : "mlp", x, rows * kMlpIn,
                              static_cast<int>(clients), absl::GetFlag(FLAGS_warmup), duration));
      InferRow row{
          batching, static_cast<int>(clients), {}, load.requests, load.requests / load.seconds};
      row.latency = Summarize(std::move(load.latency_us));
      r.infer.push_back(row);
    }
  }
  return absl::OkStatus();
}

// Runs the torch peer and reads the JSON line it prints last.
absl::Status RunTorch(const std::string& dir, Results& r) {
  const std::string log = dir + "/torch_tp_peer.log";
  const std::string command =
      absl::StrCat("'", absl::GetFlag(FLAGS_torch_python), "' '", absl::GetFlag(FLAGS_torch_peer),
                   "' --dim ", kMlpIn, " --hidden ", absl::GetFlag(FLAGS_mlp_hidden), " --batch ",
                   absl::GetFlag(FLAGS_mlp_batch), " --world ", Workers(), " --iterations ",
                   absl::GetFlag(FLAGS_torch_iterations), " 2>'", log, "'");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError("cannot start the torch peer");
  std::string out, last;
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
  const int status = pclose(pipe);
  if (status != 0) return absl::InternalError(absl::StrCat("the torch peer failed; see ", log));
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipWhitespace()))
    last = std::string(line);
  const nlohmann::json json = nlohmann::json::parse(last, nullptr, false);
  if (!json.is_object()) return absl::DataLossError(absl::StrCat("torch peer printed: ", out));
  for (const auto& [key, value] : json.items()) {
    if (value.is_number()) r.torch[key] = value.get<double>();
  }
  return absl::OkStatus();
}

void PrintComparison(const char* name, const Comparison& c, double torch_us) {
  std::printf("%-34s | %9.2f %9.2f | %9.2f %9.2f | %6.2fx | %9.2f %6.2fx | %7.2f %7.2f | %.2g\n",
              name, c.service.p50 / 1e3, c.service.min / 1e3, c.reference.p50 / 1e3,
              c.reference.min / 1e3, c.Ratio(), torch_us / 1e3, torch_us / c.service.p50,
              c.service_cpu.coordinator, c.service_cpu.workers, c.max_difference);
}

std::string Verdict(double ratio, double aim) {
  if (std::isnan(ratio)) return "not measured";
  return absl::StrFormat("%.2fx, aim >= %.1fx: %s", ratio, aim, ratio >= aim ? "met" : "NOT MET");
}

void PrintResults(const Results& r) {
  std::printf("device %s, %d workers; single-process yardstick: %s\n",
              absl::GetFlag(FLAGS_device).c_str(), Workers(), r.yardstick.c_str());
  std::printf("OPENBLAS_NUM_THREADS: workers %s, bench %s\n", r.openblas_workers.c_str(),
              r.openblas_bench.c_str());
  std::printf("OpenBLAS kernels: workers' OPENBLAS_CORETYPE %s, bench %s\n\n",
              r.blas_core_workers.c_str(), r.blas_core_bench.c_str());
  std::printf("%-34s | %9s %9s | %9s %9s | %7s | %9s %7s | %7s %7s | %s\n", "measure", "svc ms",
              "svc min", "1proc ms", "1p min", "1p/svc", "torch ms", "t/svc", "coordCPU", "wrkCPU",
              "rel.diff");
  const int64_t batch = absl::GetFlag(FLAGS_mlp_batch);
  if (r.mlp_forward.service.calls > 0) {
    PrintComparison(absl::StrFormat("mlp forward, batch %d", batch).c_str(), r.mlp_forward,
                    r.Torch("forward_us"));
  }
  if (r.mlp_forward_plain_blas.calls > 0) {
    std::printf("%-34s   plain cblas_sgemm one-thread reference %.2f ms (min %.2f): %.2fx\n", "",
                r.mlp_forward_plain_blas.p50 / 1e3, r.mlp_forward_plain_blas.min / 1e3,
                r.mlp_forward_plain_blas.p50 / r.mlp_forward.service.p50);
  }
  if (r.mlp_step.service.calls > 0) {
    PrintComparison(absl::StrFormat("mlp step (sum, SGD), batch %d", batch).c_str(), r.mlp_step,
                    r.Torch("step_us"));
  }
  for (const auto& [b, c] : r.block) {
    PrintComparison(absl::StrFormat("block forward, batch %d", b).c_str(), c, NAN);
    const double tokens = static_cast<double>(b * kBlockSeq);
    std::printf("%-34s   service %.0f tokens/s, single process %.0f tokens/s\n", "",
                tokens / (c.service.p50 * 1e-6), tokens / (c.reference.p50 * 1e-6));
  }
  std::printf(
      "(ms: medians and minima per call; 1p/svc and t/svc: single-process or torch time / service "
      "time, > 1 means the service is faster; CPU: ms per service call of the coordinator and of "
      "both workers together; rel.diff: max |service - single process| / max |single process|)\n");
  if (!r.infer.empty()) {
    const int64_t rows = absl::GetFlag(FLAGS_infer_batch);
    std::printf(
        "\nModelInfer (KServe v2), requests of %lld rows; Module::Forward of %lld rows: "
        "p50 %.2f ms, p99 %.2f ms\n",
        static_cast<long long>(rows), static_cast<long long>(rows), r.direct_forward.p50 / 1e3,
        r.direct_forward.p99 / 1e3);
    std::printf("%-9s %7s | %9s %9s | %10s %10s | %8s\n", "batching", "clients", "p50 ms", "p99 ms",
                "req/s", "rows/s", "requests");
    for (const InferRow& row : r.infer) {
      std::printf("%-9s %7d | %9.2f %9.2f | %10.1f %10.1f | %8lld\n", row.batching ? "on" : "off",
                  row.clients, row.latency.p50 / 1e3, row.latency.p99 / 1e3, row.per_second,
                  row.per_second * rows, static_cast<long long>(row.requests));
    }
  }
  std::printf("\nAims:\n");
  std::printf("  mlp forward >= 1.8x the single process (the same kernel calls): %s\n",
              Verdict(r.mlp_forward.Ratio(), 1.8).c_str());
  std::printf("  mlp forward >= 1.8x the plain one-thread cblas_sgemm reference: %s\n",
              Verdict(r.mlp_forward_plain_blas.p50 / r.mlp_forward.service.p50, 1.8).c_str());
  std::printf("  mlp forward >= 1.3x torch parallelize_module: %s\n",
              Verdict(r.Torch("forward_us") / r.mlp_forward.service.p50, 1.3).c_str());
}

nlohmann::ordered_json StatsJson(const Stats& s) {
  return {{"p50_us", bench::JsonNumber(s.p50)},
          {"p99_us", bench::JsonNumber(s.p99)},
          {"mean_us", bench::JsonNumber(s.mean)},
          {"min_us", bench::JsonNumber(s.min)},
          {"calls", s.calls}};
}

nlohmann::ordered_json ComparisonJson(const Comparison& c, double torch_us) {
  return {{"service", StatsJson(c.service)},
          {"single_process", StatsJson(c.reference)},
          {"single_process_over_service", bench::JsonNumber(c.Ratio())},
          {"torch_us", bench::JsonNumber(torch_us)},
          {"torch_over_service", bench::JsonNumber(torch_us / c.service.p50)},
          {"service_cpu_ms_per_call",
           {{"coordinator", bench::JsonNumber(c.service_cpu.coordinator)},
            {"workers", bench::JsonNumber(c.service_cpu.workers)}}},
          {"max_relative_difference", bench::JsonNumber(c.max_difference, 9)}};
}

absl::Status WriteJson(const std::string& path, const Results& r, const std::string& load) {
  nlohmann::ordered_json torch = nlohmann::ordered_json::object();
  for (const auto& [key, value] : r.torch) torch[key] = bench::JsonNumber(value);
  nlohmann::ordered_json block = nlohmann::ordered_json::array();
  for (const auto& [b, c] : r.block) {
    nlohmann::ordered_json j = ComparisonJson(c, NAN);
    j["batch"] = b;
    block.push_back(std::move(j));
  }
  nlohmann::ordered_json infer = nlohmann::ordered_json::array();
  for (const InferRow& row : r.infer) {
    infer.push_back({{"batching", row.batching},
                     {"clients", row.clients},
                     {"latency", StatsJson(row.latency)},
                     {"requests", row.requests},
                     {"requests_per_s", bench::JsonNumber(row.per_second)}});
  }
  nlohmann::ordered_json loads = nlohmann::ordered_json::object();
  for (const auto& [section, l] : r.load) loads[section] = l;
  const nlohmann::ordered_json results = {
      {"benchmark", "module_bench"},
      {"date", bench::LocalDate()},
      {"machine", bench::MachineJson(load)},
      {"loadavg_at_section_start", std::move(loads)},
      {"device", absl::GetFlag(FLAGS_device)},
      {"yardstick", r.yardstick},
      {"workers", Workers()},
      {"openblas_num_threads", {{"workers", r.openblas_workers}, {"bench", r.openblas_bench}}},
      {"openblas_core", {{"workers", r.blas_core_workers}, {"bench", r.blas_core_bench}}},
      {"dtype", "float32"},
      {"mlp",
       {{"in", kMlpIn},
        {"hidden", absl::GetFlag(FLAGS_mlp_hidden)},
        {"batch", absl::GetFlag(FLAGS_mlp_batch)}}},
      {"mlp_forward", ComparisonJson(r.mlp_forward, r.Torch("forward_us"))},
      {"mlp_forward_plain_cblas_reference", StatsJson(r.mlp_forward_plain_blas)},
      {"mlp_step", ComparisonJson(r.mlp_step, r.Torch("step_us"))},
      {"block",
       {{"dim", kBlockDim},
        {"heads", kBlockHeads},
        {"seq", kBlockSeq},
        {"runs", std::move(block)}}},
      {"infer",
       {{"request_rows", absl::GetFlag(FLAGS_infer_batch)},
        {"max_batch_size", absl::GetFlag(FLAGS_max_batch_size)},
        {"max_queue_delay_us", absl::GetFlag(FLAGS_max_queue_delay_us)},
        {"direct_forward", StatsJson(r.direct_forward)},
        {"loads", std::move(infer)}}},
      {"torch", std::move(torch)}};
  return bench::WriteJsonFile(path, results);
}

absl::Status Run(const std::string& dir, Results& r) {
  // OpenBLAS reads this as it loads, so it must be in the workers' environment before they start.
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  openblas_set_num_threads(1);
  r.openblas_bench = absl::StrCat(openblas_get_num_threads());
  r.blas_core_bench = kernels::CurrentBlasConfig().core;
  // The yardstick: this process's CPU, or the first GPU.
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::KernelBackend> k,
                   kernels::MakeBackend(OnCuda() ? "cuda:0" : "cpu"));
  r.yardstick = OnCuda() ? absl::StrCat("one GPU (", k->device_name(), ", cuBLAS)")
                         : "one process, one BLAS thread";

  LocalClusterOptions options;
  options.device = absl::GetFlag(FLAGS_device);
  options.workers = Workers();
  options.log_dir = dir + "/cluster";
  options.coordinator_binary = absl::GetFlag(FLAGS_coordinator_binary);
  options.worker_binary = absl::GetFlag(FLAGS_worker_binary);
  ASSIGN_OR_RETURN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(options));
  Processes processes;
  ASSIGN_OR_RETURN(processes.coordinator, bench::ChildNamed("tessera-coordinator"));
  for (int i = 0; i < Workers(); ++i) processes.workers.push_back(cluster->worker_pid(i));
  for (pid_t w : processes.workers) {
    absl::StrAppend(&r.openblas_workers, r.openblas_workers.empty() ? "" : ", ",
                    EnvironmentOf(w, "OPENBLAS_NUM_THREADS"));
    absl::StrAppend(&r.blas_core_workers, r.blas_core_workers.empty() ? "" : ", ",
                    EnvironmentOf(w, "OPENBLAS_CORETYPE"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<client::Session> session,
                   client::Session::Connect(cluster->address()));
  RETURN_IF_ERROR(
      client::InitDeviceMesh(*session, absl::GetFlag(FLAGS_device), {Workers()}, {"tp"}, kMesh)
          .status());
  ASSIGN_OR_RETURN(client::Mesh mesh, client::GetMesh(*session, kMesh));

  const auto section = [&](const char* name) {
    std::fprintf(stderr, "%s (load %s)\n", name, bench::LoadAverage().c_str());
    r.load[name] = bench::LoadAverage();
  };
  if (Wants("mlp")) {
    section("mlp");
    RETURN_IF_ERROR(MeasureMlpForward(*session, mesh, *k, processes, r));
  }
  if (Wants("infer")) {
    section("infer");
    RETURN_IF_ERROR(MeasureInfer(*session, mesh, cluster->address(), r));
  }
  if (Wants("step")) {
    section("step");
    RETURN_IF_ERROR(MeasureMlpStep(*session, mesh, *k, processes, r));
  }
  if (Wants("block")) {
    section("block");
    RETURN_IF_ERROR(MeasureBlock(*session, mesh, *k, processes, r));
  }
  session.reset();
  cluster->Stop();
  if (!absl::GetFlag(FLAGS_torch_python).empty()) {
    section("torch");
    return RunTorch(dir, r);
  }
  std::fprintf(stderr, "no --torch_python: torch is not measured\n");
  return absl::OkStatus();
}

int Main() {
  if (!absl::GetFlag(FLAGS_torch_python).empty() && absl::GetFlag(FLAGS_torch_peer).empty()) {
    std::fprintf(stderr, "--torch_python needs --torch_peer\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_device) != "cpu" && !OnCuda()) {
    std::fprintf(stderr, "--device must be cpu or cuda, not '%s'\n",
                 absl::GetFlag(FLAGS_device).c_str());
    return 2;
  }
  if (Workers() < 1) {
    std::fprintf(stderr, "--workers must be at least 1\n");
    return 2;
  }
  if (OnCuda()) {
    const std::optional<int> gpus =
        bench::CudaWorkersOrSkip("module_bench", absl::GetFlag(FLAGS_worker_binary));
    if (!gpus.has_value()) return 0;
    absl::SetFlag(&FLAGS_workers, std::min(Workers(), *gpus));
    if (!absl::GetFlag(FLAGS_torch_python).empty()) {
      std::fprintf(stderr, "the torch peer runs gloo on the CPU: not run with --device=cuda\n");
      absl::SetFlag(&FLAGS_torch_python, "");
    }
  }
  std::string dir = (std::filesystem::temp_directory_path() / "tessera-module-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string load = bench::LoadAverage();
  std::fprintf(stderr, "scheduler %s, load average %s, logs in %s\n", bench::Scheduler().c_str(),
               load.c_str(), dir.c_str());
  Results r;
  if (absl::Status s = Run(dir, r); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  PrintResults(r);
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    if (absl::Status s = WriteJson(path, r, load); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  if (!absl::GetFlag(FLAGS_keep_logs)) std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  // The single process runs the BLAS kernels the workers pick for this CPU (worker_main.cc).
  const std::string blas_core_choice = tessera::kernels::UsePreferredBlasCore(argv);
  std::fprintf(stderr, "BLAS kernels: %s (%s)\n",
               tessera::kernels::CurrentBlasConfig().core.c_str(), blas_core_choice.c_str());
  tessera::UseReleaseMutexes();
  absl::ParseCommandLine(argc, argv);
  return tessera::Main();
}
