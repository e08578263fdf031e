// Local compute and data-movement benchmarks, each measured next to its peer in the same run so the
// ratio holds on a noisy shared machine:
//   sgemm through the Tessera CPU backend vs a direct cblas_sgemm on the same buffers (GFLOP/s);
//   pack / unpack of a dim-1 shard of a [4096, 4096] float32 tensor (core's CopyStrided,
//   PackBlock, UnpackBlock) vs memcpy of the same number of bytes (GB/s).
// Repetitions of every case run interleaved in random order; each case reports its best one.
// Prints a table and writes JSON (--json=PATH, default <build>/bench/results/local.json); other
// flags go to Google Benchmark (e.g. --benchmark_repetitions=N, --benchmark_min_time=S).
// OpenBLAS reads OPENBLAS_NUM_THREADS when it loads, so it is set before the process starts
// (bench/run_local.sh does).

#include <benchmark/benchmark.h>
#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_host.h"
#include "core/host_tensor.h"
#include "kernels/backend.h"
#include "kernels/tensor_view.h"

namespace tessera {
namespace {

// One row of the table: a Tessera path and its peer, doing `work` flops or bytes per iteration.
struct Comparison {
  std::string row, unit, tessera, peer;
  double work = 0;
  double target = 0;  // the ratio this row aims for
};

// Seconds per iteration of every repetition of every benchmark, by name.
class CollectingReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration) continue;
      if (run.error_occurred || run.iterations == 0) {
        std::fprintf(stderr, "%s: %s\n", run.benchmark_name().c_str(), run.error_message.c_str());
        continue;
      }
      samples_[run.run_name.function_name].push_back(run.real_accumulated_time /
                                                     static_cast<double>(run.iterations));
    }
  }
  // Best and median seconds per iteration; zeros if the benchmark did not run.
  std::pair<double, double> BestAndMedian(const std::string& name) const {
    auto it = samples_.find(name);
    if (it == samples_.end() || it->second.empty()) return {0, 0};
    std::vector<double> s = it->second;
    std::sort(s.begin(), s.end());
    return {s.front(), s[s.size() / 2]};
  }

 private:
  std::map<std::string, std::vector<double>> samples_;
};

struct GemmShape {
  int m, n, k;
  bool transpose_b;
};

HostTensor Filled(const Shape& shape, float step) {
  HostTensor t = HostTensor::Uninitialized(DType::kFloat32, shape).value();
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data_as<float>()[i] = (i % 31) * step;
  return t;
}

Comparison RegisterGemm(const GemmShape& g, kernels::KernelBackend* backend) {
  auto a = std::make_shared<HostTensor>(Filled({g.m, g.k}, 0.125f));
  auto b = std::make_shared<HostTensor>(
      Filled(g.transpose_b ? Shape{g.n, g.k} : Shape{g.k, g.n}, 0.25f));
  auto c = std::make_shared<HostTensor>(Filled({g.m, g.n}, 0.0f));
  Comparison cmp;
  cmp.row = absl::StrFormat("sgemm %dx%dx%d%s", g.m, g.n, g.k, g.transpose_b ? " (B^T)" : "");
  cmp.unit = "GFLOP/s";
  cmp.tessera = cmp.row + " tessera";
  cmp.peer = cmp.row + " cblas";
  cmp.work = 2.0 * g.m * g.n * g.k;
  cmp.target = 0.95;
  benchmark::RegisterBenchmark(cmp.tessera.c_str(), [=](benchmark::State& state) {
    const kernels::ConstTensorView va = kernels::ViewOf(std::as_const(*a));
    const kernels::ConstTensorView vb = kernels::ViewOf(std::as_const(*b));
    const kernels::TensorView vc = kernels::ViewOf(*c);
    for (auto _ : state) {
      const absl::Status s = backend->Gemm(false, g.transpose_b, 1.0, va, vb, 0.0, vc);
      if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    }
  });
  benchmark::RegisterBenchmark(cmp.peer.c_str(), [=](benchmark::State& state) {
    for (auto _ : state) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, g.transpose_b ? CblasTrans : CblasNoTrans, g.m, g.n,
                  g.k, 1.0f, a->data_as<float>(), g.k, b->data_as<float>(),
                  g.transpose_b ? g.k : g.n, 0.0f, c->data_as<float>(), g.n);
      benchmark::ClobberMemory();
    }
  });
  return cmp;
}

// Rank 0's shard of `full` split along dim 1 over `ranks`: packed into a preallocated buffer
// (CopyStrided), packed into a new tensor (PackBlock), written back (UnpackBlock), and memcpy of
// the same bytes between preallocated buffers as the peer of all three.
std::vector<Comparison> RegisterShard(std::shared_ptr<HostTensor> full, int ranks) {
  const int64_t rows = full->shape()[0], cols = full->shape()[1] / ranks;
  const std::vector<int64_t> offsets = {0, 0}, sizes = {rows, cols};
  auto block = std::make_shared<HostTensor>(PackBlock(*full, offsets, sizes).value());
  auto scratch = std::make_shared<HostTensor>(block->Clone());
  const std::string shard = absl::StrFormat("[%d, %d] shard of %d", rows, cols, ranks);
  const std::string peer = "memcpy " + shard;
  std::vector<Comparison> rows_out;
  for (const char* what : {"pack (CopyStrided)", "pack (PackBlock, allocates)", "UnpackBlock"}) {
    Comparison cmp;
    cmp.row = absl::StrCat(what, " ", shard);
    cmp.unit = "GB/s";
    cmp.tessera = cmp.row;
    cmp.peer = peer;
    cmp.work = static_cast<double>(block->nbytes());
    cmp.target = 0.5;
    rows_out.push_back(cmp);
  }
  benchmark::RegisterBenchmark(rows_out[0].tessera.c_str(), [=](benchmark::State& state) {
    const ConstStridedView src = std::as_const(*full).Block(offsets, sizes).value();
    for (auto _ : state) {
      CopyStrided(src, scratch->View());
      benchmark::ClobberMemory();
    }
  });
  benchmark::RegisterBenchmark(rows_out[1].tessera.c_str(), [=](benchmark::State& state) {
    for (auto _ : state) {
      absl::StatusOr<HostTensor> packed = PackBlock(*full, offsets, sizes);
      benchmark::DoNotOptimize(packed->data());
    }
  });
  benchmark::RegisterBenchmark(rows_out[2].tessera.c_str(), [=](benchmark::State& state) {
    for (auto _ : state) {
      const absl::Status s = UnpackBlock(*block, offsets, *full);
      if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
      benchmark::ClobberMemory();
    }
  });
  benchmark::RegisterBenchmark(peer.c_str(), [=](benchmark::State& state) {
    for (auto _ : state) {
      std::memcpy(scratch->data(), block->data(), block->nbytes());
      benchmark::ClobberMemory();
    }
  });
  return rows_out;
}

int Run(int argc, char** argv) {
  std::string json_path = std::string(TESSERA_BENCH_RESULTS_DIR) + "/local.json";
  std::string interleave = "--benchmark_enable_random_interleaving=true";
  std::string repetitions = "--benchmark_repetitions=25";
  std::string min_time = "--benchmark_min_time=0.05";
  std::vector<char*> args = {argv[0], interleave.data(), repetitions.data(), min_time.data()};
  for (int i = 1; i < argc; ++i) {
    if (absl::StartsWith(argv[i], "--json=")) {
      json_path = argv[i] + std::strlen("--json=");
    } else {
      args.push_back(argv[i]);  // later flags override the defaults above
    }
  }
  int bench_argc = static_cast<int>(args.size());
  benchmark::Initialize(&bench_argc, args.data());

  absl::StatusOr<std::unique_ptr<kernels::KernelBackend>> cpu = kernels::MakeBackend("cpu");
  if (!cpu.ok()) {
    std::fprintf(stderr, "%s\n", std::string(cpu.status().message()).c_str());
    return 1;
  }
  std::vector<Comparison> table;
  for (const GemmShape& g :
       {GemmShape{256, 256, 256, false}, GemmShape{512, 512, 512, false},
        GemmShape{1024, 1024, 1024, false}, GemmShape{2048, 1024, 1024, true}}) {
    table.push_back(RegisterGemm(g, cpu->get()));
  }
  auto full = std::make_shared<HostTensor>(Filled({4096, 4096}, 1.0f));
  for (int ranks : {2, 4}) {
    for (Comparison& cmp : RegisterShard(full, ranks)) table.push_back(std::move(cmp));
  }

  CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  const char* env_threads = std::getenv("OPENBLAS_NUM_THREADS");
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const std::string machine =
      absl::StrFormat("%ld cpus, %s", sysconf(_SC_NPROCESSORS_ONLN), bench::CpuModel());
  std::printf("Tessera local bench, %s, %s, OPENBLAS_NUM_THREADS=%s (OpenBLAS uses %d)\n", date,
              machine.c_str(), env_threads ? env_threads : "unset", openblas_get_num_threads());
  std::printf("best of repetitions; ratio = tessera / peer\n\n");
  std::printf("%-52s %8s %10s %10s %7s %7s\n", "case", "unit", "tessera", "peer", "ratio",
              "target");
  nlohmann::ordered_json cases = nlohmann::ordered_json::array();
  for (size_t i = 0; i < table.size(); ++i) {
    const Comparison& cmp = table[i];
    const auto [tessera_best, tessera_median] = reporter.BestAndMedian(cmp.tessera);
    const auto [peer_best, peer_median] = reporter.BestAndMedian(cmp.peer);
    if (tessera_best == 0 || peer_best == 0) continue;  // filtered out or failed
    const double tessera_rate = cmp.work / tessera_best * 1e-9;
    const double peer_rate = cmp.work / peer_best * 1e-9;
    const double ratio = tessera_rate / peer_rate;
    std::printf("%-52s %8s %10.2f %10.2f %7.3f %7.2f%s\n", cmp.row.c_str(), cmp.unit.c_str(),
                tessera_rate, peer_rate, ratio, cmp.target, ratio < cmp.target ? "  below" : "");
    cases.push_back({{"case", cmp.row},
                     {"unit", cmp.unit},
                     {"peer", cmp.peer},
                     {"tessera", bench::JsonNumber(tessera_rate, 4)},
                     {"peer_rate", bench::JsonNumber(peer_rate, 4)},
                     {"ratio", bench::JsonNumber(ratio, 4)},
                     {"target", bench::JsonNumber(cmp.target, 2)},
                     {"tessera_median", bench::JsonNumber(cmp.work / tessera_median * 1e-9, 4)},
                     {"peer_median", bench::JsonNumber(cmp.work / peer_median * 1e-9, 4)}});
  }
  const nlohmann::ordered_json results = {{"date", date},
                                          {"machine", machine},
                                          {"openblas_num_threads", openblas_get_num_threads()},
                                          {"cases", std::move(cases)}};
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(json_path).parent_path(), ec);
  if (absl::Status s = bench::WriteJsonFile(json_path, results); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("\nwrote %s\n", json_path.c_str());
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::Run(argc, argv); }
