// The CUDA backend's neural-network kernels: activation gradients, LayerNorm and RMSNorm with their
// gradients, embedding lookup and its gradient, the softmax rows of attention and their gradient,
// and the SGD step. Row statistics accumulate in float64 as on the CPU (kernels/cpu/cpu_norm.cc).

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_nn_launch.h"
#include "kernels/cuda/device_element.cuh"

namespace tessera::kernels::cuda {
namespace {

// Threads of the blocks that work on one row each.
constexpr int kRowThreads = 256;
constexpr int kWarps = kRowThreads / 32;

// Blocks for `rows` rows, one each (a grid-stride loop takes the rest).
unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>(rows < (int64_t{1} << 20) ? rows : (int64_t{1} << 20));
}

// The sum of every thread's `v` over the block, on every thread. `shared` holds kWarps values.
template <typename T>
__device__ T BlockSum(T v, T* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    T total = threadIdx.x < kWarps ? shared[threadIdx.x] : T(0);
    for (int o = 16; o > 0; o >>= 1) total += __shfl_down_sync(0xffffffffu, total, o);
    if (threadIdx.x == 0) shared[0] = total;
  }
  __syncthreads();
  const T total = shared[0];
  __syncthreads();  // `shared` may be reused at once
  return total;
}

// The maximum of every thread's `v` over the block, on every thread.
template <typename T>
__device__ T BlockMax(T v, T* shared) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_down_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    T m = threadIdx.x < kWarps ? shared[threadIdx.x] : shared[0];
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_down_sync(0xffffffffu, m, o));
    if (threadIdx.x == 0) shared[0] = m;
  }
  __syncthreads();
  const T m = shared[0];
  __syncthreads();
  return m;
}

// f'(v) of a smooth activation (kernels/cpu/cpu_nn.cc's ActivationDerivative).
template <Activation kF, typename T>
__device__ T ActivationDerivative(T v) {
  if constexpr (kF == Activation::kGelu) {
    const T cdf = T(0.5) * (T(1) + erf(v * T(0.70710678118654752440)));
    const T pdf = T(0.39894228040143267794) * exp(T(-0.5) * v * v);
    return cdf + v * pdf;
  } else if constexpr (kF == Activation::kGeluTanh) {
    constexpr T kSqrt2OverPi = T(0.79788456080286535588), kCubic = T(0.044715);
    const T t = tanh(kSqrt2OverPi * (v + kCubic * v * v * v));
    return T(0.5) * (T(1) + t) +
           T(0.5) * v * (T(1) - t * t) * kSqrt2OverPi * (T(1) + T(3) * kCubic * v * v);
  } else if constexpr (kF == Activation::kTanh) {
    const T t = tanh(v);
    return T(1) - t * t;
  } else {
    const T sigmoid = T(1) / (T(1) + exp(-v));
    return sigmoid * (T(1) + v * (T(1) - sigmoid));
  }
}

template <typename T, Activation kF>
__global__ void ActivateBackwardKernel(const T* x, const T* dy, T* dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    if constexpr (kF == Activation::kRelu) {
      dx[i] = x[i] <= T(0) ? T(0) : dy[i];
    } else {
      dx[i] = dy[i] * ActivationDerivative<kF>(x[i]);
    }
  }
}

template <typename T>
__global__ void NormRowsKernel(bool centered, int64_t rows, int64_t cols, double eps, const T* x,
                               const T* weight, const T* bias, T* y, float* mean_out,
                               float* rstd_out) {
  __shared__ double shared[kWarps];
  const double n = static_cast<double>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    double s = 0;
    if (centered) {
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += static_cast<double>(xr[j]);
    }
    const double mean = centered ? BlockSum(s, shared) / n : 0.0;
    double sq = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const double d = xr[j] - mean;
      sq += d * d;
    }
    const double rstd = 1.0 / sqrt(BlockSum(sq, shared) / n + eps);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const double w = weight != nullptr ? static_cast<double>(weight[j]) : 1.0;
      const double b = bias != nullptr ? static_cast<double>(bias[j]) : 0.0;
      yr[j] = static_cast<T>((xr[j] - mean) * rstd * w + b);
    }
    if (threadIdx.x == 0) {
      if (centered) mean_out[r] = static_cast<float>(mean);
      rstd_out[r] = static_cast<float>(rstd);
    }
  }
}

template <typename T>
__global__ void NormRowsBackwardKernel(bool centered, int64_t rows, int64_t cols, const T* dy,
                                       const T* x, const T* weight, const float* mean_in,
                                       const float* rstd_in, T* dx) {
  __shared__ double shared[kWarps];
  const double n = static_cast<double>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    const double mean = centered ? static_cast<double>(mean_in[r]) : 0.0;
    const double rstd = rstd_in[r];
    double sum_g = 0, sum_g_xhat = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const double w = weight != nullptr ? static_cast<double>(weight[j]) : 1.0;
      const double g = static_cast<double>(dyr[j]) * w;
      sum_g += g;
      sum_g_xhat += g * ((xr[j] - mean) * rstd);
    }
    const double mean_g = centered ? BlockSum(sum_g, shared) / n : 0.0;
    const double mean_g_xhat = BlockSum(sum_g_xhat, shared) / n;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const double w = weight != nullptr ? static_cast<double>(weight[j]) : 1.0;
      const double g = static_cast<double>(dyr[j]) * w;
      const double xhat = (xr[j] - mean) * rstd;
      dxr[j] = static_cast<T>(rstd * (g - mean_g - xhat * mean_g_xhat));
    }
  }
}

template <typename T>
__global__ void NormParameterGradsKernel(int64_t rows, int64_t cols, const T* dy, const T* x,
                                         const float* mean, const float* rstd, T* dweight,
                                         T* dbias) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < cols;
       j += int64_t{blockDim.x} * gridDim.x) {
    double w = 0, b = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double d = dy[r * cols + j];
      const double m = mean != nullptr ? static_cast<double>(mean[r]) : 0.0;
      w += d * ((x[r * cols + j] - m) * static_cast<double>(rstd[r]));
      b += d;
    }
    if (dweight != nullptr) dweight[j] += static_cast<T>(w);
    if (dbias != nullptr) dbias[j] += static_cast<T>(b);
  }
}

__global__ void FindBadIdsKernel(const int64_t* ids, int64_t count, int64_t num_embeddings,
                                 unsigned long long* first_bad) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{blockDim.x} * gridDim.x) {
    if (ids[i] < 0 || ids[i] >= num_embeddings) {
      atomicMin(first_bad, static_cast<unsigned long long>(i));
    }
  }
}

template <typename T>
__global__ void EmbeddingKernel(const int64_t* ids, int64_t count, int64_t rows, int64_t dim,
                                int64_t row_offset, const T* weight, T* out) {
  const int64_t n = count * dim;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{blockDim.x} * gridDim.x) {
    const int64_t i = e / dim, j = e % dim;
    const int64_t row = ids[i] - row_offset;
    out[e] = row >= 0 && row < rows ? weight[row * dim + j] : T(0);
  }
}

template <typename T>
__global__ void EmbeddingBackwardKernel(const int64_t* ids, int64_t count, int64_t rows,
                                        int64_t dim, int64_t row_offset, const T* dy, T* dweight) {
  const int64_t n = count * dim;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{blockDim.x} * gridDim.x) {
    const int64_t i = e / dim, j = e % dim;
    const int64_t row = ids[i] - row_offset;
    if (row >= 0 && row < rows) atomicAdd(&dweight[row * dim + j], dy[e]);
  }
}

template <typename T>
__global__ void SoftmaxRowsKernel(T* scores, int64_t count, int s, bool causal, float* rounded) {
  __shared__ T shared_max[kWarps];
  __shared__ double shared_sum[kWarps];
  for (int64_t r = blockIdx.x; r < count; r += gridDim.x) {
    T* row = scores + r * s;
    const int visible = causal ? static_cast<int>(r % s) + 1 : s;
    T m = row[0];
    for (int j = threadIdx.x; j < visible; j += blockDim.x) m = max(m, row[j]);
    m = BlockMax(m, shared_max);
    double sum = 0;
    for (int j = threadIdx.x; j < visible; j += blockDim.x) {
      row[j] = exp(row[j] - m);
      sum += static_cast<double>(row[j]);
    }
    const T inverse = static_cast<T>(1.0 / BlockSum(sum, shared_sum));
    for (int j = threadIdx.x; j < s; j += blockDim.x) {
      row[j] = j < visible ? row[j] * inverse : T(0);
      if (rounded != nullptr) rounded[r * s + j] = static_cast<float>(row[j]);
    }
  }
}

template <typename T>
__global__ void SoftmaxBackwardRowsKernel(const T* p, T* ds, int64_t count, int s) {
  __shared__ double shared[kWarps];
  for (int64_t r = blockIdx.x; r < count; r += gridDim.x) {
    const T* pr = p + r * s;
    T* dr = ds + r * s;
    double dot = 0;
    for (int j = threadIdx.x; j < s; j += blockDim.x) {
      dot += static_cast<double>(pr[j]) * static_cast<double>(dr[j]);
    }
    const T row_dot = static_cast<T>(BlockSum(dot, shared));
    for (int j = threadIdx.x; j < s; j += blockDim.x) dr[j] = pr[j] * (dr[j] - row_dot);
  }
}

template <typename T>
__global__ void SgdStepKernel(T* param, const T* grad, T* buf, int64_t n, T lr, T momentum,
                              T weight_decay, bool decay, bool first_step) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    T g = grad[i];
    if (decay) g += weight_decay * param[i];
    if (buf != nullptr) {
      buf[i] = first_step ? g : momentum * buf[i] + g;
      g = buf[i];
    }
    param[i] -= lr * g;
  }
}

// Calls f(T{}) with T float or double for `dtype` (the neural-network kernels' dtypes).
template <typename F>
void VisitFloat32Or64(DType dtype, F&& f) {
  if (dtype == DType::kFloat64) {
    f(double{});
  } else {
    f(float{});
  }
}

template <typename T, Activation kF>
void LaunchActivateBackwardTyped(const void* x, const void* dy, void* dx, int64_t n,
                                 cudaStream_t stream) {
  ActivateBackwardKernel<T, kF><<<BlocksFor(n), kThreads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dx), n);
}

}  // namespace

cudaError_t LaunchActivateBackward(Activation f, DType dtype, const void* x, const void* dy,
                                   void* dx, int64_t n, cudaStream_t stream) {
  VisitFloat32Or64(dtype, [&](auto t) {
    using T = decltype(t);
    switch (f) {
      case Activation::kRelu:
        return LaunchActivateBackwardTyped<T, Activation::kRelu>(x, dy, dx, n, stream);
      case Activation::kGelu:
        return LaunchActivateBackwardTyped<T, Activation::kGelu>(x, dy, dx, n, stream);
      case Activation::kGeluTanh:
        return LaunchActivateBackwardTyped<T, Activation::kGeluTanh>(x, dy, dx, n, stream);
      case Activation::kTanh:
        return LaunchActivateBackwardTyped<T, Activation::kTanh>(x, dy, dx, n, stream);
      case Activation::kSilu:
        return LaunchActivateBackwardTyped<T, Activation::kSilu>(x, dy, dx, n, stream);
    }
  });
  return cudaGetLastError();
}

cudaError_t LaunchNormRows(bool centered, DType dtype, int64_t rows, int64_t cols, double eps,
                           const void* x, const void* weight, const void* bias, void* y,
                           float* mean, float* rstd, cudaStream_t stream) {
  VisitFloat32Or64(dtype, [&](auto t) {
    using T = decltype(t);
    NormRowsKernel<T><<<RowBlocks(rows), kRowThreads, 0, stream>>>(
        centered, rows, cols, eps, static_cast<const T*>(x), static_cast<const T*>(weight),
        static_cast<const T*>(bias), static_cast<T*>(y), mean, rstd);
  });
  return cudaGetLastError();
}

cudaError_t LaunchNormRowsBackward(bool centered, DType dtype, int64_t rows, int64_t cols,
                                   const void* dy, const void* x, const void* weight,
                                   const float* mean, const float* rstd, void* dx,
                                   cudaStream_t stream) {
  VisitFloat32Or64(dtype, [&](auto t) {
    using T = decltype(t);
    NormRowsBackwardKernel<T><<<RowBlocks(rows), kRowThreads, 0, stream>>>(
        centered, rows, cols, static_cast<const T*>(dy), static_cast<const T*>(x),
        static_cast<const T*>(weight), mean, rstd, static_cast<T*>(dx));
  });
  return cudaGetLastError();
}

cudaError_t LaunchNormParameterGrads(DType dtype, int64_t rows, int64_t cols, const void* dy,
                                     const void* x, const float* mean, const float* rstd,
                                     void* dweight, void* dbias, cudaStream_t stream) {
  VisitFloat32Or64(dtype, [&](auto t) {
    using T = decltype(t);
    NormParameterGradsKernel<T><<<BlocksFor(cols), kThreads, 0, stream>>>(
        rows, cols, static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd,
        static_cast<T*>(dweight), static_cast<T*>(dbias));
  });
  return cudaGetLastError();
}

cudaError_t LaunchFindBadIds(const int64_t* ids, int64_t count, int64_t num_embeddings,
                             unsigned long long* first_bad, cudaStream_t stream) {
  FindBadIdsKernel<<<BlocksFor(count), kThreads, 0, stream>>>(ids, count, num_embeddings,
                                                              first_bad);
  return cudaGetLastError();
}

cudaError_t LaunchEmbedding(DType dtype, const int64_t* ids, int64_t count, int64_t rows,
                            int64_t dim, int64_t row_offset, const void* weight, void* out,
                            cudaStream_t stream) {
  VisitFloat32Or64(dtype, [&](auto t) {
    using T = decltype(t);
    EmbeddingKernel<T><<<BlocksFor(count * dim), kThreads, 0, stream>>>(
        ids, count, rows, dim, row_offset, static_cast<const T*>(weight), static_cast<T*>(out));
  });
  return cudaGetLastError();
}

cudaError_t LaunchEmbeddingBackward(DType dtype, const int64_t* ids, int64_t count, int64_t rows,
                                    int64_t dim, int64_t row_offset, const void* dy, void* dweight,
                                    cudaStream_t stream) {
  VisitFloat32Or64(dtype, [&](auto t) {
    using T = decltype(t);
    EmbeddingBackwardKernel<T><<<BlocksFor(count * dim), kThreads, 0, stream>>>(
        ids, count, rows, dim, row_offset, static_cast<const T*>(dy), static_cast<T*>(dweight));
  });
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxRows(DType dtype, void* scores, int64_t count, int s, bool causal,
                              float* rounded, cudaStream_t stream) {
  VisitFloat32Or64(dtype, [&](auto t) {
    using T = decltype(t);
    SoftmaxRowsKernel<T><<<RowBlocks(count), kRowThreads, 0, stream>>>(static_cast<T*>(scores),
                                                                       count, s, causal, rounded);
  });
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxBackwardRows(DType dtype, const void* p, void* ds, int64_t count, int s,
                                      cudaStream_t stream) {
  VisitFloat32Or64(dtype, [&](auto t) {
    using T = decltype(t);
    SoftmaxBackwardRowsKernel<T><<<RowBlocks(count), kRowThreads, 0, stream>>>(
        static_cast<const T*>(p), static_cast<T*>(ds), count, s);
  });
  return cudaGetLastError();
}

cudaError_t LaunchSgdStep(DType dtype, void* param, const void* grad, void* momentum_buf, int64_t n,
                          double lr, double momentum, double weight_decay, bool first_step,
                          cudaStream_t stream) {
  VisitFloat32Or64(dtype, [&](auto t) {
    using T = decltype(t);
    SgdStepKernel<T><<<BlocksFor(n), kThreads, 0, stream>>>(
        static_cast<T*>(param), static_cast<const T*>(grad), static_cast<T*>(momentum_buf), n,
        static_cast<T>(lr), static_cast<T>(momentum), static_cast<T>(weight_decay),
        weight_decay != 0, first_step);
  });
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
