// raw_nccl_peer: one rank of the raw-NCCL yardstick that bench/collectives_bench --device=cuda
// runs next to the service, the GPU counterpart of raw_gloo_peer. N copies, rank r on cuda:r,
// share an ncclUniqueId through a file in --store (rank 0 writes it, the others wait for it) and
// run each collective on float32 device buffers allocated once per size, on one stream, with the
// calls NcclCommunicator makes (worker/comm/nccl_communicator.cc): ncclAllReduce in place,
// ncclAllGather, ncclReduceScatter, all_to_all as grouped ncclSend/ncclRecv, ncclBroadcast from
// rank 0 in place.
//
//   raw_nccl_peer --rank=R --size=N --store=DIR --bytes=4096,65536 --iterations=40,30
//                 --warmup=3,3 --out=FILE [--bursts=B]
//
// Timing and output are raw_gloo_peer's: each timed call starts after a barrier (a one-float
// ncclAllReduce and a stream synchronize) and ends when its stream is synchronized; its time is
// the slowest rank's. --bursts samples are nccl-tests' time: --iterations calls queued back to
// back, one synchronize, over --iterations. Rank 0 writes "<op> <bytes> <us> <us> ..." lines.

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

ABSL_FLAG(int, rank, 0, "This process's rank; it uses cuda:<rank>");
ABSL_FLAG(int, size, 1, "Number of ranks");
ABSL_FLAG(std::string, store, "", "Directory where rank 0 leaves the ncclUniqueId");
ABSL_FLAG(std::string, bytes, "4096", "Comma-separated sizes in bytes (the whole array)");
ABSL_FLAG(std::string, iterations, "20", "Timed iterations per size, one per --bytes entry");
ABSL_FLAG(std::string, warmup, "3",
          "Untimed iterations before each collective's timed ones, one per --bytes entry");
ABSL_FLAG(std::string, out, "", "Where rank 0 writes the timings");
ABSL_FLAG(int, bursts, 0,
          "Back-to-back samples per collective and size after the per-call ones: each is "
          "--iterations calls after one barrier, over --iterations");

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::seconds kRendezvousTimeout(120);

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "raw_nccl_peer: %s\n", what.c_str());
  std::exit(1);
}

void Check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) Fail(absl::StrCat(call, ": ", cudaGetErrorString(e)));
}

void Check(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) Fail(absl::StrCat(call, ": ", ncclGetErrorString(r)));
}

// Rank 0 creates the id and publishes it by rename; the others wait for the file.
ncclUniqueId ShareId(const std::string& store, int rank) {
  const std::filesystem::path path = std::filesystem::path(store) / "nccl_id";
  ncclUniqueId id{};
  if (rank == 0) {
    Check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const std::filesystem::path tmp = path.string() + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id.internal, sizeof(id.internal));
    std::filesystem::rename(tmp, path);
    return id;
  }
  const Clock::time_point give_up = Clock::now() + kRendezvousTimeout;
  while (!std::filesystem::exists(path)) {
    if (Clock::now() > give_up) Fail(absl::StrCat("no ", path.string(), " from rank 0"));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in.read(id.internal, sizeof(id.internal))) Fail(absl::StrCat("short ", path.string()));
  return id;
}

// One rank's device buffers for one size: `bytes` is the whole array.
class Collectives {
 public:
  Collectives(ncclComm_t comm, cudaStream_t stream, int n, size_t bytes)
      : comm_(comm),
        stream_(stream),
        n_(n),
        count_(bytes / sizeof(float)),
        block_(count_ / static_cast<size_t>(n)) {
    Check(cudaMalloc(&full_, std::max<size_t>(count_, 1) * sizeof(float)), "cudaMalloc");
    Check(cudaMalloc(&other_, std::max<size_t>(count_, 1) * sizeof(float)), "cudaMalloc");
    Check(cudaMalloc(&part_, std::max<size_t>(block_, 1) * sizeof(float)), "cudaMalloc");
    Check(cudaMalloc(&flag_, sizeof(double)), "cudaMalloc");
    Check(cudaMemset(full_, 0, std::max<size_t>(count_, 1) * sizeof(float)), "cudaMemset");
    Check(cudaMemset(part_, 0, std::max<size_t>(block_, 1) * sizeof(float)), "cudaMemset");
  }
  ~Collectives() {
    cudaFree(full_);
    cudaFree(other_);
    cudaFree(part_);
    cudaFree(flag_);
  }
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  void AllReduce() {
    Check(ncclAllReduce(full_, full_, count_, ncclFloat32, ncclSum, comm_, stream_),
          "ncclAllReduce");
  }
  void AllGather() {
    Check(ncclAllGather(part_, full_, block_, ncclFloat32, comm_, stream_), "ncclAllGather");
  }
  void ReduceScatter() {
    Check(ncclReduceScatter(full_, part_, block_, ncclFloat32, ncclSum, comm_, stream_),
          "ncclReduceScatter");
  }
  void AllToAll() {
    Check(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < n_; ++r) {
      Check(ncclSend(full_ + r * block_, block_, ncclFloat32, r, comm_, stream_), "ncclSend");
      Check(ncclRecv(other_ + r * block_, block_, ncclFloat32, r, comm_, stream_), "ncclRecv");
    }
    Check(ncclGroupEnd(), "ncclGroupEnd");
  }
  void Broadcast() {
    Check(ncclBroadcast(full_, full_, count_, ncclFloat32, 0, comm_, stream_), "ncclBroadcast");
  }
  void Synchronize() { Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  void Barrier() {
    Check(ncclAllReduce(flag_, flag_, 1, ncclFloat64, ncclSum, comm_, stream_), "barrier");
    Synchronize();
  }
  // Replaces each times[i] by its maximum over the ranks.
  void MaxOverRanks(std::vector<double>& times) {
    double* device = nullptr;
    const size_t bytes = times.size() * sizeof(double);
    Check(cudaMalloc(&device, bytes), "cudaMalloc");
    Check(cudaMemcpy(device, times.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    Check(ncclAllReduce(device, device, times.size(), ncclFloat64, ncclMax, comm_, stream_),
          "ncclAllReduce(max)");
    Synchronize();
    Check(cudaMemcpy(times.data(), device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    cudaFree(device);
  }

 private:
  ncclComm_t comm_;
  cudaStream_t stream_;
  int n_;
  size_t count_, block_;
  float* full_ = nullptr;
  float* other_ = nullptr;
  float* part_ = nullptr;
  double* flag_ = nullptr;
};

std::vector<int64_t> ParseList(const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 0) Fail(absl::StrCat("not a number >= 0: ", part));
    out.push_back(v);
  }
  return out;
}

int Main() {
  const int rank = absl::GetFlag(FLAGS_rank);
  const int size = absl::GetFlag(FLAGS_size);
  const std::vector<int64_t> sizes = ParseList(absl::GetFlag(FLAGS_bytes));
  const std::vector<int64_t> iterations = ParseList(absl::GetFlag(FLAGS_iterations));
  const std::vector<int64_t> warmup = ParseList(absl::GetFlag(FLAGS_warmup));
  if (absl::GetFlag(FLAGS_store).empty() || sizes.size() != iterations.size() ||
      sizes.size() != warmup.size() || size < 1 || rank < 0 || rank >= size) {
    std::fprintf(stderr,
                 "raw_nccl_peer: need --store, --size >= 1, a rank in [0, size) and one "
                 "--iterations and --warmup entry per --bytes entry\n");
    return 2;
  }
  int devices = 0;
  Check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (rank >= devices)
    Fail(absl::StrCat("rank ", rank, " needs cuda:", rank, "; ", devices, " visible"));
  Check(cudaSetDevice(rank), "cudaSetDevice");
  const ncclUniqueId id = ShareId(absl::GetFlag(FLAGS_store), rank);
  ncclComm_t comm = nullptr;
  Check(ncclCommInitRank(&comm, size, id, rank), "ncclCommInitRank");
  cudaStream_t stream = nullptr;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  FILE* out = nullptr;
  if (rank == 0) {
    out = std::fopen(absl::GetFlag(FLAGS_out).c_str(), "w");
    if (out == nullptr) Fail(absl::StrCat("cannot write ", absl::GetFlag(FLAGS_out)));
  }
  for (size_t s = 0; s < sizes.size(); ++s) {
    Collectives c(comm, stream, size, static_cast<size_t>(sizes[s]));
    const std::vector<std::pair<const char*, std::function<void()>>> ops = {
        {"all_reduce", [&] { c.AllReduce(); }},         {"all_gather", [&] { c.AllGather(); }},
        {"reduce_scatter", [&] { c.ReduceScatter(); }}, {"all_to_all", [&] { c.AllToAll(); }},
        {"broadcast", [&] { c.Broadcast(); }},
    };
    for (const auto& [name, run] : ops) {
      for (int64_t i = 0; i < warmup[s]; ++i) run();
      c.Synchronize();
      std::vector<double> times;
      for (int64_t i = 0; i < iterations[s]; ++i) {
        c.Barrier();
        const Clock::time_point start = Clock::now();
        run();
        c.Synchronize();
        times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
      std::vector<double> bursts;
      for (int b = 0; b < absl::GetFlag(FLAGS_bursts); ++b) {
        c.Barrier();
        const Clock::time_point start = Clock::now();
        for (int64_t i = 0; i < iterations[s]; ++i) run();
        c.Synchronize();
        bursts.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                         static_cast<double>(std::max<int64_t>(iterations[s], 1)));
      }
      if (!times.empty()) c.MaxOverRanks(times);
      if (!bursts.empty()) c.MaxOverRanks(bursts);
      if (out != nullptr) {
        std::fprintf(out, "%s %lld", name, static_cast<long long>(sizes[s]));
        for (double t : times) std::fprintf(out, " %.3f", t);
        std::fprintf(out, "\n");
        if (!bursts.empty()) {
          std::fprintf(out, "%s/burst %lld", name, static_cast<long long>(sizes[s]));
          for (double t : bursts) std::fprintf(out, " %.3f", t);
          std::fprintf(out, "\n");
        }
        std::fflush(out);
      }
    }
  }
  if (out != nullptr) std::fclose(out);
  cudaStreamDestroy(stream);
  ncclCommDestroy(comm);
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tessera::Main();
}
