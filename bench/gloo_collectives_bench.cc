// Measures Gloo's allreduce algorithms on N ranks run as threads of this process over loopback TCP,
// the measurement behind GlooCommunicator's choice (worker/comm/gloo_communicator.cc), and the
// communicator's own AllReduce and ReduceScatter in the same run so the ratios are meaningful on a
// noisy machine.
//
//   gloo_collectives_bench [--ranks 2,4] [--bytes 4096,67108864] [--seconds 1.5] [--rounds 3]
//                          [--only SUBSTR] [--json out.json]
//
// For every (ranks, bytes, algorithm) it builds a fresh Gloo context, times the first call on that
// fresh connection, then repeats the call for about --seconds and takes the median. Each timed call
// starts after a barrier and its time is the slowest rank's. Every round measures every case once,
// interleaved, and the table reports the median over rounds of the first call and of the median,
// and the best round's median: on a shared machine the best round is the least disturbed one.

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_host.h"
#include "core/dtype.h"
#include "core/sharding/placement.h"
#include "gloo/allreduce.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/barrier.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "worker/comm/gloo_communicator.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  int ranks;
  int64_t bytes;
  std::string algorithm;
  double first_ms;
  double median_ms;
  int iterations;
};

// One case over all rounds.
struct Summary {
  Result last;
  std::vector<double> first_ms;
  std::vector<double> median_ms;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One collective on `count` floats in `data` (in place, or into `out`, which also holds `count`
// floats and is allocated and touched before timing), given this rank's context or communicator.
struct Algorithm {
  std::string name;
  std::function<void(const std::shared_ptr<gloo::Context>&, comm::Communicator*, float* data,
                     float* out, int64_t count)>
      run;
  bool uses_communicator = false;
};

void Check(const absl::Status& s) {
  if (!s.ok()) std::fprintf(stderr, "%s\n", s.ToString().c_str()), std::abort();
}

void NewStyle(const std::shared_ptr<gloo::Context>& ctx, float* data, int64_t count,
              gloo::AllreduceOptions::Algorithm algorithm) {
  gloo::AllreduceOptions opts(ctx);
  opts.setAlgorithm(algorithm);
  opts.setOutput(data, static_cast<size_t>(count));
  opts.setReduceFunction([](void* c, const void* a, const void* b, size_t n) {
    auto* out = static_cast<float*>(c);
    const auto* x = static_cast<const float*>(a);
    const auto* y = static_cast<const float*>(b);
    for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
  });
  gloo::allreduce(opts);
}

std::vector<Algorithm> Algorithms() {
  return {
      {"gloo::AllreduceRingChunked",
       [](const auto& ctx, comm::Communicator*, float* data, float*, int64_t count) {
         gloo::AllreduceRingChunked<float>(ctx, {data}, static_cast<int>(count)).run();
       }},
      {"gloo::AllreduceHalvingDoubling",
       [](const auto& ctx, comm::Communicator*, float* data, float*, int64_t count) {
         gloo::AllreduceHalvingDoubling<float>(ctx, {data}, static_cast<int>(count)).run();
       }},
      {"gloo::allreduce RING",
       [](const auto& ctx, comm::Communicator*, float* data, float*, int64_t count) {
         NewStyle(ctx, data, count, gloo::AllreduceOptions::Algorithm::RING);
       }},
      {"gloo::allreduce BCUBE",
       [](const auto& ctx, comm::Communicator*, float* data, float*, int64_t count) {
         NewStyle(ctx, data, count, gloo::AllreduceOptions::Algorithm::BCUBE);
       }},
      {"GlooCommunicator::AllReduce",
       [](const auto&, comm::Communicator* communicator, float* data, float* out, int64_t count) {
         (void)out;
         Check(communicator->AllReduce(data, count, DType::kFloat32, ReduceOp::kSum));
       },
       true},
      {"GlooCommunicator::ReduceScatter",
       [](const auto&, comm::Communicator* communicator, float* data, float* out, int64_t count) {
         Check(communicator->ReduceScatter(data, out, count / communicator->size(), DType::kFloat32,
                                           ReduceOp::kSum));
       },
       true},
      {"GlooCommunicator::AllToAll",
       [](const auto&, comm::Communicator* communicator, float* data, float* out, int64_t count) {
         Check(communicator->AllToAll(data, out, count / communicator->size(), DType::kFloat32));
       },
       true},
  };
}

// Runs `algorithm` on `ranks` threads and returns rank 0's view of the timings.
Result Measure(gloo::rendezvous::Store& store, int group, int ranks, int64_t bytes,
               const Algorithm& algorithm, double seconds) {
  const int64_t count = bytes / static_cast<int64_t>(sizeof(float));
  std::vector<std::vector<double>> times(ranks);
  std::vector<double> first(ranks);
  std::barrier sync(ranks);
  std::vector<std::thread> threads;
  int iterations = 0;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      const std::string prefix = absl::StrFormat("bench/%d", group);
      std::shared_ptr<gloo::Context> ctx;
      std::unique_ptr<comm::Communicator> communicator;
      if (algorithm.uses_communicator) {
        comm::GlooCommunicatorOptions options;
        communicator = comm::GlooCommunicator::Create(store, prefix, r, ranks, options).value();
      } else {
        gloo::transport::tcp::attr attr("127.0.0.1");
        auto device = gloo::transport::tcp::CreateDevice(attr);
        gloo::rendezvous::PrefixStore prefixed(prefix, store);
        auto rctx = std::make_shared<gloo::rendezvous::Context>(r, ranks);
        rctx->setTimeout(std::chrono::seconds(60));
        rctx->connectFullMesh(prefixed, device);
        ctx = rctx;
      }
      std::vector<float> data(static_cast<size_t>(count), 1.0f);
      std::vector<float> out(static_cast<size_t>(count), 0.0f);
      auto run_once = [&] {
        sync.arrive_and_wait();
        const auto t0 = Clock::now();
        algorithm.run(ctx, communicator.get(), data.data(), out.data(), count);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        return ms;
      };
      first[r] = run_once();
      // Rank 0 decides the iteration count from the first call so every rank runs the same.
      if (r == 0) {
        iterations =
            std::clamp(static_cast<int>(seconds * 1000.0 / std::max(first[0], 0.01)), 3, 2000);
      }
      sync.arrive_and_wait();
      for (int i = 0; i < iterations; ++i) times[r].push_back(run_once());
      // No rank closes its connections while a peer may still be reading from them.
      sync.arrive_and_wait();
    });
  }
  for (auto& t : threads) t.join();
  std::vector<double> slowest(static_cast<size_t>(iterations), 0.0);
  for (int r = 0; r < ranks; ++r) {
    for (int i = 0; i < iterations; ++i) slowest[i] = std::max(slowest[i], times[r][i]);
  }
  std::sort(slowest.begin(), slowest.end());
  const double first_ms = *std::max_element(first.begin(), first.end());
  return {ranks, bytes, algorithm.name, first_ms, slowest[slowest.size() / 2], iterations};
}

std::vector<int64_t> ParseList(const char* text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v)) {
      std::fprintf(stderr, "not a number: %s\n", std::string(part).c_str());
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using namespace tessera;
  std::vector<int64_t> ranks_list = {2, 4};
  std::vector<int64_t> bytes_list = {4096, 64 << 20};
  double seconds = 1.5;
  int rounds = 3;
  std::string json_path;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--ranks") {
      ranks_list = ParseList(argv[i + 1]);
    } else if (flag == "--bytes") {
      bytes_list = ParseList(argv[i + 1]);
    } else if (flag == "--seconds") {
      seconds = std::atof(argv[i + 1]);
    } else if (flag == "--rounds") {
      rounds = std::max(1, std::atoi(argv[i + 1]));
    } else if (flag == "--only") {
      only = argv[i + 1];
    } else if (flag == "--json") {
      json_path = argv[i + 1];
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  gloo::rendezvous::HashStore store;
  std::vector<Summary> summaries;
  int group = 0;
  for (int round = 0; round < rounds; ++round) {
    size_t index = 0;
    for (int64_t ranks : ranks_list) {
      for (int64_t bytes : bytes_list) {
        for (const Algorithm& algorithm : Algorithms()) {
          if (algorithm.name.find(only) == std::string::npos) continue;
          Result r = Measure(store, group++, static_cast<int>(ranks), bytes, algorithm, seconds);
          if (index == summaries.size()) summaries.push_back({r, {}, {}});
          Summary& summary = summaries[index++];
          summary.last = r;
          summary.first_ms.push_back(r.first_ms);
          summary.median_ms.push_back(r.median_ms);
        }
      }
    }
    std::fprintf(stderr, "round %d of %d done\n", round + 1, rounds);
  }
  std::printf("%-5s %-10s %-34s %10s %10s %10s\n", "ranks", "bytes", "algorithm", "first ms",
              "median ms", "best ms");
  for (const Summary& s : summaries) {
    std::printf("%-5d %-10lld %-34s %10.3f %10.3f %10.3f\n", s.last.ranks,
                static_cast<long long>(s.last.bytes), s.last.algorithm.c_str(), Median(s.first_ms),
                Median(s.median_ms), *std::min_element(s.median_ms.begin(), s.median_ms.end()));
  }
  if (!json_path.empty()) {
    nlohmann::ordered_json results = nlohmann::ordered_json::array();
    for (const Summary& s : summaries) {
      results.push_back(
          {{"ranks", s.last.ranks},
           {"bytes", s.last.bytes},
           {"algorithm", s.last.algorithm},
           {"rounds", rounds},
           {"first_ms", bench::JsonNumber(Median(s.first_ms), 4)},
           {"median_ms", bench::JsonNumber(Median(s.median_ms), 4)},
           {"best_ms",
            bench::JsonNumber(*std::min_element(s.median_ms.begin(), s.median_ms.end()), 4)}});
    }
    if (absl::Status s = bench::WriteJsonFile(json_path, results); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
