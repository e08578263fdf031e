// What the benchmarks run with --device=cuda share: how many GPU workers a machine can start.
#ifndef TESSERA_BENCH_CUDA_WORKERS_H_
#define TESSERA_BENCH_CUDA_WORKERS_H_

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/local_cluster/local_cluster.h"

namespace tessera::bench {

// The GPUs `worker_binary` (tessera-worker, found beside the bench if empty) can serve. Where there
// is none, prints "<bench> --device=cuda skipped: <why>" and returns nothing: the bench then exits
// 0.
inline std::optional<int> CudaWorkersOrSkip(const char* bench, const std::string& worker_binary) {
  absl::StatusOr<std::string> worker =
      worker_binary.empty() ? FindDaemonBinary("tessera-worker") : worker_binary;
  absl::StatusOr<std::vector<std::string>> gpus =
      worker.ok() ? ListWorkerCudaDevices(*worker) : worker.status();
  if (!gpus.ok()) {
    std::printf("%s --device=cuda skipped: %s\n", bench,
                std::string(gpus.status().message()).c_str());
    return std::nullopt;
  }
  return static_cast<int>(gpus->size());
}

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_CUDA_WORKERS_H_
