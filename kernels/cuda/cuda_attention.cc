// The CUDA backend's scaled dot-product attention, forward and backward: per batch, the heads'
// products as cuBLAS strided-batched GEMMs (head h's features are columns [h*D, (h+1)*D) of the
// [S, H*D] rows, leading dimension H*D), softmax rows in between (cuda_nn_kernels.cu). float64
// computes its probabilities in a float64 scratch and rounds them into the float32 `probs`, as the
// CPU backend.

#include <cublas_v2.h>

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/cuda_nn_launch.h"

namespace tessera::kernels {
namespace {

// Row-major C_i = alpha * op(A_i) op(B_i) + beta * C_i for i < count, op(A) [m, k] and op(B)
// [k, n], each matrix `stride` elements after the previous: the column-major product
// C^T = op(B)^T op(A)^T.
cublasStatus_t RowMajorBatched(cublasHandle_t h, bool ta, bool tb, int m, int n, int k, float alpha,
                               const float* a, int lda, long long stride_a, const float* b, int ldb,
                               long long stride_b, float* c, int ldc, long long stride_c,
                               int count) {
  const float beta = 0;
  return cublasSgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb,
                                   stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, count);
}
cublasStatus_t RowMajorBatched(cublasHandle_t h, bool ta, bool tb, int m, int n, int k,
                               double alpha, const double* a, int lda, long long stride_a,
                               const double* b, int ldb, long long stride_b, double* c, int ldc,
                               long long stride_c, int count) {
  const double beta = 0;
  return cublasDgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb,
                                   stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, count);
}

absl::Status Blas(cublasStatus_t status, const std::string& device, absl::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(device, ": ", what, ": ", cublasGetStatusName(status),
                                          " (", static_cast<int>(status), ")"));
}

absl::Status Launched(cudaError_t err, const std::string& device, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(device, ": ", what, ": ", cudaGetErrorName(err), " (",
                                          static_cast<int>(err), "): ", cudaGetErrorString(err)));
}

// The sizes of one attention call as cuBLAS takes them.
struct Heads {
  int seq, head_dim, features, heads;
  int64_t batch;
  long long square() const { return static_cast<long long>(seq) * seq; }
  // Where batch b starts in q/k/v/out ([B, S, H*D]) and in probs ([B, H, S, S]).
  int64_t Features(int64_t b) const { return b * seq * static_cast<int64_t>(features); }
  int64_t Probs(int64_t b) const { return b * heads * square(); }
};

template <typename Args>
Heads HeadsOf(const Args& a) {
  return Heads{static_cast<int>(a.seq), static_cast<int>(a.head_dim),
               static_cast<int>(a.heads * a.head_dim), static_cast<int>(a.heads), a.batch};
}

}  // namespace

absl::Status CudaBackend::DoAttention(const AttentionArgs& a) {
  RETURN_IF_ERROR(UseDevice());
  const Heads l = HeadsOf(a);
  const std::string name = device();
  const auto run = [&](auto zero) -> absl::Status {
    using T = decltype(zero);
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
    const T* q = reinterpret_cast<const T*>(a.q);
    const T* k = reinterpret_cast<const T*>(a.k);
    const T* v = reinterpret_cast<const T*>(a.v);
    T* out = reinterpret_cast<T*>(a.out);
    float* probs = reinterpret_cast<float*>(a.probs);
    // float32 computes in probs itself; float64 in a scratch rounded into probs.
    DeviceTensor scratch;
    T* p = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      p = probs;
    } else {
      ASSIGN_OR_RETURN(scratch, Allocate(DType::kFloat64, {a.batch * a.heads * a.seq * a.seq}));
      p = reinterpret_cast<T*>(scratch.data());
    }
    for (int64_t b = 0; b < l.batch; ++b) {
      RETURN_IF_ERROR(
          Blas(RowMajorBatched(cublas_, false, true, l.seq, l.seq, l.head_dim, scale,
                               q + l.Features(b), l.features, l.head_dim, k + l.Features(b),
                               l.features, l.head_dim, p + l.Probs(b), l.seq, l.square(), l.heads),
               name, "attention scores"));
    }
    RETURN_IF_ERROR(
        Launched(cuda::LaunchSoftmaxRows(a.dtype, p, a.batch * a.heads * a.seq, l.seq, a.causal,
                                         std::is_same_v<T, float> ? nullptr : probs, stream_),
                 name, "attention softmax launch"));
    for (int64_t b = 0; b < l.batch; ++b) {
      RETURN_IF_ERROR(
          Blas(RowMajorBatched(cublas_, false, false, l.seq, l.head_dim, l.seq, T(1),
                               p + l.Probs(b), l.seq, l.square(), v + l.Features(b), l.features,
                               l.head_dim, out + l.Features(b), l.features, l.head_dim, l.heads),
               name, "attention output"));
    }
    return absl::OkStatus();
  };
  return a.dtype == DType::kFloat64 ? run(double{}) : run(float{});
}

// With P the probabilities and dO the output's gradient of a head: dV = P^T dO, dP = dO V^T,
// dS = P * (dP - rowsum(P * dP)), dQ = scale * dS K, dK = scale * dS^T Q.
absl::Status CudaBackend::DoAttentionBackward(const AttentionBackwardArgs& a) {
  RETURN_IF_ERROR(UseDevice());
  const Heads l = HeadsOf(a);
  const std::string name = device();
  const int64_t squares = a.batch * a.heads * a.seq * a.seq;
  const auto run = [&](auto zero) -> absl::Status {
    using T = decltype(zero);
    constexpr DType kDType = std::is_same_v<T, float> ? DType::kFloat32 : DType::kFloat64;
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
    const T* q = reinterpret_cast<const T*>(a.q);
    const T* k = reinterpret_cast<const T*>(a.k);
    const T* v = reinterpret_cast<const T*>(a.v);
    const T* dout = reinterpret_cast<const T*>(a.dout);
    T* dq = reinterpret_cast<T*>(a.dq);
    T* dk = reinterpret_cast<T*>(a.dk);
    T* dv = reinterpret_cast<T*>(a.dv);
    DeviceTensor widened;
    const T* p = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      p = reinterpret_cast<const float*>(a.probs);
    } else {
      ASSIGN_OR_RETURN(widened, Allocate(DType::kFloat64, {squares}));
      RETURN_IF_ERROR(Launched(cuda::LaunchCast(DType::kFloat32, a.probs, DType::kFloat64,
                                                widened.data(), squares, stream_),
                               name, "widening the probabilities"));
      p = reinterpret_cast<const T*>(widened.data());
    }
    ASSIGN_OR_RETURN(DeviceTensor ds_tensor, Allocate(kDType, {squares}));
    T* ds = reinterpret_cast<T*>(ds_tensor.data());
    for (int64_t b = 0; b < l.batch; ++b) {
      const int64_t f = l.Features(b), s = l.Probs(b);
      RETURN_IF_ERROR(Blas(RowMajorBatched(cublas_, true, false, l.seq, l.head_dim, l.seq, T(1),
                                           p + s, l.seq, l.square(), dout + f, l.features,
                                           l.head_dim, dv + f, l.features, l.head_dim, l.heads),
                           name, "attention dV"));
      RETURN_IF_ERROR(Blas(RowMajorBatched(cublas_, false, true, l.seq, l.seq, l.head_dim, T(1),
                                           dout + f, l.features, l.head_dim, v + f, l.features,
                                           l.head_dim, ds + s, l.seq, l.square(), l.heads),
                           name, "attention dP"));
    }
    RETURN_IF_ERROR(Launched(
        cuda::LaunchSoftmaxBackwardRows(a.dtype, p, ds, a.batch * a.heads * a.seq, l.seq, stream_),
        name, "attention softmax backward launch"));
    for (int64_t b = 0; b < l.batch; ++b) {
      const int64_t f = l.Features(b), s = l.Probs(b);
      RETURN_IF_ERROR(Blas(RowMajorBatched(cublas_, false, false, l.seq, l.head_dim, l.seq, scale,
                                           ds + s, l.seq, l.square(), k + f, l.features, l.head_dim,
                                           dq + f, l.features, l.head_dim, l.heads),
                           name, "attention dQ"));
      RETURN_IF_ERROR(Blas(RowMajorBatched(cublas_, true, false, l.seq, l.head_dim, l.seq, scale,
                                           ds + s, l.seq, l.square(), q + f, l.features, l.head_dim,
                                           dk + f, l.features, l.head_dim, l.heads),
                           name, "attention dK"));
    }
    return absl::OkStatus();
  };
  return a.dtype == DType::kFloat64 ? run(double{}) : run(float{});
}

}  // namespace tessera::kernels
