// Softmax kernels of the CUDA backend, on kernels/dim_ops.h's rules (as the CPU backend,
// kernels/cpu/cpu_softmax.cc): a block per line for long contiguous lines (the last dim), whose
// threads combine partial maxima and float64 sums in shared memory, and a thread per line
// otherwise (short lines, or lines along an inner dim, where neighbouring threads read neighbouring
// elements).

#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/device_element.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/dim_ops.h"

namespace tessera::kernels::cuda {
namespace {

// Contiguous lines at least this long get a block each.
constexpr int64_t kBlockLineSize = 64;

// Every thread's `value` combined by `combine` over the block (blockDim.x a power of two, at most
// kThreads), through `shared`; every thread gets the result.
template <typename V, typename F>
__device__ V BlockCombine(V* shared, V value, F combine) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      shared[threadIdx.x] = combine(shared[threadIdx.x], shared[threadIdx.x + stride]);
    }
    __syncthreads();
  }
  const V result = shared[0];
  __syncthreads();  // every thread has read it before `shared` is written again
  return result;
}

template <typename T>
__global__ void SoftmaxRowsKernel(SoftmaxKind kind, const T* x, T* y, int64_t rows, int64_t size) {
  using C = ComputeType<T>;
  __shared__ C maxima[kThreads];
  __shared__ double sums[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* in = x + row * size;
    T* out = y + row * size;
    C max = Load(in[0]);
    for (int64_t k = threadIdx.x; k < size; k += blockDim.x) max = LineMax(max, Load(in[k]));
    max = BlockCombine(maxima, max, [](C a, C b) { return LineMax(a, b); });
    double sum = 0;
    for (int64_t k = threadIdx.x; k < size; k += blockDim.x) {
      sum += static_cast<double>(DeviceMath::Exp(Load(in[k]) - max));
    }
    sum = BlockCombine(sums, sum, [](double a, double b) { return a + b; });
    const C norm = SoftmaxNorm<DeviceMath, C>(kind, sum);
    for (int64_t k = threadIdx.x; k < size; k += blockDim.x) {
      out[k] = Store<T>(SoftmaxOutput<DeviceMath>(kind, Load(in[k]), max, norm));
    }
  }
}

template <typename T>
__global__ void SoftmaxBackwardRowsKernel(SoftmaxKind kind, const T* y, const T* dy, T* dx,
                                          int64_t rows, int64_t size) {
  using C = ComputeType<T>;
  __shared__ double sums[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t start = row * size;
    double sum = 0;
    for (int64_t k = threadIdx.x; k < size; k += blockDim.x) {
      sum += SoftmaxBackwardTerm(kind, Load(y[start + k]), Load(dy[start + k]));
    }
    const C s = static_cast<C>(BlockCombine(sums, sum, [](double a, double b) { return a + b; }));
    for (int64_t k = threadIdx.x; k < size; k += blockDim.x) {
      dx[start + k] =
          Store<T>(SoftmaxGradient<DeviceMath>(kind, Load(y[start + k]), Load(dy[start + k]), s));
    }
  }
}

template <typename T>
__global__ void SoftmaxLinesKernel(SoftmaxKind kind, const T* x, T* y, int64_t outer, int64_t size,
                                   int64_t inner) {
  using C = ComputeType<T>;
  const int64_t n = outer * inner;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t start = (i / inner) * size * inner + i % inner;
    SoftmaxLine<DeviceMath, C>(
        kind, size, [&](int64_t k) { return Load(x[start + k * inner]); },
        [&](int64_t k, C v) { y[start + k * inner] = Store<T>(v); });
  }
}

template <typename T>
__global__ void SoftmaxBackwardLinesKernel(SoftmaxKind kind, const T* y, const T* dy, T* dx,
                                           int64_t outer, int64_t size, int64_t inner) {
  using C = ComputeType<T>;
  const int64_t n = outer * inner;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t start = (i / inner) * size * inner + i % inner;
    SoftmaxBackwardLine<DeviceMath, C>(
        kind, size, [&](int64_t k) { return Load(y[start + k * inner]); },
        [&](int64_t k) { return Load(dy[start + k * inner]); },
        [&](int64_t k, C v) { dx[start + k * inner] = Store<T>(v); });
  }
}

// A block per line when lines are contiguous and long.
bool BlockPerLine(int64_t size, int64_t inner) { return inner == 1 && size >= kBlockLineSize; }

// Blocks for a grid-stride loop over `lines` lines, one block each.
unsigned BlocksForLines(int64_t lines) {
  return static_cast<unsigned>(lines < 65535 ? lines : 65535);
}

}  // namespace

cudaError_t LaunchSoftmaxAlongDim(SoftmaxKind kind, DType dtype, const void* x, void* y,
                                  int64_t outer, int64_t size, int64_t inner, cudaStream_t stream) {
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloating<T>) {
      const T* in = static_cast<const T*>(x);
      T* out = static_cast<T*>(y);
      if (BlockPerLine(size, inner)) {
        SoftmaxRowsKernel<T>
            <<<BlocksForLines(outer), kThreads, 0, stream>>>(kind, in, out, outer, size);
      } else {
        SoftmaxLinesKernel<T>
            <<<BlocksFor(outer * inner), kThreads, 0, stream>>>(kind, in, out, outer, size, inner);
      }
    }
  });
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxBackward(SoftmaxKind kind, DType dtype, const void* y, const void* dy,
                                  void* dx, int64_t outer, int64_t size, int64_t inner,
                                  cudaStream_t stream) {
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloating<T>) {
      const T* yt = static_cast<const T*>(y);
      const T* dyt = static_cast<const T*>(dy);
      T* dxt = static_cast<T*>(dx);
      if (BlockPerLine(size, inner)) {
        SoftmaxBackwardRowsKernel<T>
            <<<BlocksForLines(outer), kThreads, 0, stream>>>(kind, yt, dyt, dxt, outer, size);
      } else {
        SoftmaxBackwardLinesKernel<T><<<BlocksFor(outer * inner), kThreads, 0, stream>>>(
            kind, yt, dyt, dxt, outer, size, inner);
      }
    }
  });
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
