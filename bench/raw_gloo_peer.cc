// raw_gloo_peer: one rank of the raw-Gloo yardstick that bench/collectives_bench runs next to the
// service. N copies rendezvous through a gloo::rendezvous::FileStore in --store and run each
// collective on float32 buffers with the algorithms GlooCommunicator uses
// (worker/comm/gloo_communicator.cc): gloo::allreduce BCUBE up to 1 MiB and RING above,
// gloo::allgather, gloo::alltoall, reduce_scatter as a gloo::alltoall followed by a local sum of
// the blocks in rank order, gloo::broadcast from rank 0. Buffers are allocated once per size and
// reused, as a hand-written Gloo program would do.
//
//   raw_gloo_peer --rank=R --size=N --store=DIR --bytes=4096,65536 --iterations=40,30
//                 --warmup=3,3 --out=FILE
//
// --bytes is the nccl-tests size (the whole array: the all_gather output, the reduce_scatter
// input). Each timed call starts after a barrier and its time is the slowest rank's (a max
// allreduce of the per-iteration times). With --bursts, each collective then also runs that many
// bursts of --iterations calls back to back (one barrier before each burst), each reported as its
// time over --iterations (nccl-tests' definition of a collective's time), on "<op>/burst" lines.
// Rank 0 writes one line per collective and size to --out:
// "<op> <bytes> <us> <us> ...", the time of every timed call.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/alltoall.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"

ABSL_FLAG(int, rank, 0, "This process's rank");
ABSL_FLAG(int, size, 2, "Number of ranks");
ABSL_FLAG(std::string, store, "", "Directory of the gloo FileStore all ranks rendezvous in");
ABSL_FLAG(std::string, bytes, "4096", "Comma-separated sizes in bytes (the whole array)");
ABSL_FLAG(std::string, iterations, "20", "Timed iterations per size, one per --bytes entry");
ABSL_FLAG(std::string, warmup, "3",
          "Untimed iterations before each collective's timed ones, "
          "one per --bytes entry");
ABSL_FLAG(std::string, out, "", "Where rank 0 writes the timings");
ABSL_FLAG(int, bursts, 0,
          "Back-to-back samples per collective and size after the per-call ones: "
          "each is --iterations calls after one barrier, over --iterations");

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kBcubeMaxBytes = size_t{1} << 20;  // as in GlooCommunicator
constexpr std::chrono::seconds kTimeout(120);

void SumFloats(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<float*>(c);
  const auto* x = static_cast<const float*>(a);
  const auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

void MaxDoubles(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<double*>(c);
  const auto* x = static_cast<const double*>(a);
  const auto* y = static_cast<const double*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = std::max(x[i], y[i]);
}

// One rank's buffers for one size: `bytes` is the whole array.
class Collectives {
 public:
  Collectives(std::shared_ptr<gloo::Context> context, size_t bytes)
      : context_(std::move(context)),
        n_(static_cast<size_t>(context_->size)),
        count_(bytes / sizeof(float)),
        block_(count_ / n_),
        full_(count_, 1.0f),
        other_(count_, 0.0f),
        part_(block_, 1.0f) {}

  // In place on `count` floats.
  void AllReduce() {
    gloo::AllreduceOptions opts(context_);
    opts.setAlgorithm(count_ * sizeof(float) <= kBcubeMaxBytes
                          ? gloo::AllreduceOptions::Algorithm::BCUBE
                          : gloo::AllreduceOptions::Algorithm::RING);
    opts.setOutput(full_.data(), count_);
    opts.setReduceFunction(SumFloats);
    Finish(opts);
    gloo::allreduce(opts);
  }
  // count/n floats from every rank into `count` floats.
  void AllGather() {
    gloo::AllgatherOptions opts(context_);
    opts.setInput(part_.data(), block_);
    opts.setOutput(full_.data(), n_ * block_);
    Finish(opts);
    gloo::allgather(opts);
  }
  // `count` floats in, count/n floats out: block r of every rank is summed on rank r.
  void ReduceScatter() {
    AllToAll();
    std::memcpy(part_.data(), other_.data(), block_ * sizeof(float));
    for (size_t r = 1; r < n_; ++r)
      SumFloats(part_.data(), part_.data(), &other_[r * block_], block_);
  }
  // `count` floats in, `count` out; block r goes to rank r.
  void AllToAll() {
    gloo::AlltoallOptions opts(context_);
    opts.setInput(full_.data(), n_ * block_);
    opts.setOutput(other_.data(), n_ * block_);
    Finish(opts);
    gloo::alltoall(opts);
  }
  // `count` floats from rank 0.
  void Broadcast() {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(full_.data(), count_);
    opts.setRoot(0);
    Finish(opts);
    gloo::broadcast(opts);
  }
  void Barrier() {
    gloo::BarrierOptions opts(context_);
    Finish(opts);
    gloo::barrier(opts);
  }
  // Replaces each times[i] by its maximum over the ranks.
  void MaxOverRanks(std::vector<double>& times) {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(times.data(), times.size());
    opts.setReduceFunction(MaxDoubles);
    Finish(opts);
    gloo::allreduce(opts);
  }

 private:
  // A fresh tag per collective, as GlooCommunicator does, and the timeout.
  template <typename Options>
  void Finish(Options& opts) {
    opts.setTag(next_tag_++);
    opts.setTimeout(kTimeout);
  }

  std::shared_ptr<gloo::Context> context_;
  size_t n_, count_, block_;
  std::vector<float> full_, other_, part_;
  uint32_t next_tag_ = 0;
};

std::vector<int64_t> ParseList(const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 0) {
      std::fprintf(stderr, "raw_gloo_peer: not a number >= 0: %s\n", std::string(part).c_str());
      std::exit(2);
    }
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
      sizes.size() != warmup.size() || size < 2 || rank < 0 || rank >= size) {
    std::fprintf(stderr,
                 "raw_gloo_peer: need --store, --size >= 2, a rank in [0, size) and one "
                 "--iterations and --warmup entry per --bytes entry\n");
    return 2;
  }
  gloo::rendezvous::FileStore file_store(absl::GetFlag(FLAGS_store));
  gloo::rendezvous::PrefixStore store("raw", file_store);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(kTimeout);
  std::shared_ptr<gloo::transport::Device> device =
      gloo::transport::tcp::CreateDevice(gloo::transport::tcp::attr("127.0.0.1"));
  context->connectFullMesh(store, device);

  FILE* out = nullptr;
  if (rank == 0) {
    out = std::fopen(absl::GetFlag(FLAGS_out).c_str(), "w");
    if (out == nullptr) {
      std::perror(absl::GetFlag(FLAGS_out).c_str());
      return 1;
    }
  }
  for (size_t s = 0; s < sizes.size(); ++s) {
    Collectives c(context, static_cast<size_t>(sizes[s]));
    const std::vector<std::pair<const char*, std::function<void()>>> ops = {
        {"all_reduce", [&] { c.AllReduce(); }},         {"all_gather", [&] { c.AllGather(); }},
        {"reduce_scatter", [&] { c.ReduceScatter(); }}, {"all_to_all", [&] { c.AllToAll(); }},
        {"broadcast", [&] { c.Broadcast(); }},
    };
    for (const auto& [name, run] : ops) {
      for (int64_t i = 0; i < warmup[s]; ++i) run();
      std::vector<double> times;
      for (int64_t i = 0; i < iterations[s]; ++i) {
        c.Barrier();
        const Clock::time_point start = Clock::now();
        run();
        times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
      // nccl-tests' time: a loop of calls with nothing between them, over the count.
      std::vector<double> bursts;
      for (int b = 0; b < absl::GetFlag(FLAGS_bursts); ++b) {
        c.Barrier();
        const Clock::time_point start = Clock::now();
        for (int64_t i = 0; i < iterations[s]; ++i) run();
        bursts.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                         static_cast<double>(std::max<int64_t>(iterations[s], 1)));
      }
      c.MaxOverRanks(times);
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
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tessera::Main();
}
