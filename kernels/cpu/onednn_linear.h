#ifndef TESSERA_KERNELS_CPU_ONEDNN_LINEAR_H_
#define TESSERA_KERNELS_CPU_ONEDNN_LINEAR_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace tessera::kernels {

// The float32 product of a Linear layer's forward, y[m, n] = x[m, k] w[n, k]^T (all row-major,
// contiguous), on oneDNN's matmul. Which library runs which GEMM on the CPU: this product on
// oneDNN (its brgemm kernels beat OpenBLAS's, and more so with the weight packed once); every other
// GEMM (Gemm: backward products, float64, attention's per-head products) on OpenBLAS.
//
// oneDNN runs on OpenMP: each call first bounds the calling thread's OpenMP threads to OpenBLAS's
// current thread count (SetBlasThreads, the worker's --threads), so that neither library computes
// on more threads than the worker was given; with one thread oneDNN starts none.
//
// Primitives are made once per shape and thread count and kept; thread-compatible, as the backend.
class OnednnLinear {
 public:
  OnednnLinear();
  ~OnednnLinear();
  OnednnLinear(const OnednnLinear&) = delete;
  OnednnLinear& operator=(const OnednnLinear&) = delete;

  // y = x w^T; `prepared` (Pack's, of w) is read where the matmul oneDNN prefers for m rows reads
  // its layout, else w as it is.
  absl::Status Product(const float* x, const float* w, const PreparedWeight* prepared, float* y,
                       int m, int n, int k);

  // w [n, k] reordered into the layout oneDNN's matmul prefers for x of m rows (with its brgemm
  // kernels, the same for any m).
  static absl::StatusOr<std::shared_ptr<const PreparedWeight>> Pack(const float* w, int m, int n,
                                                                    int k);

 private:
  struct Primitives;
  std::unique_ptr<Primitives> primitives_;
};

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_ONEDNN_LINEAR_H_
