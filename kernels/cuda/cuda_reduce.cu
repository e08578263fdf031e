// Reduction kernels of the CUDA backend: along a dim (reductions, arg-reductions, scans and sorts,
// as kernels/cpu/cpu_reduce.cc, on kernels/dim_ops.h's rules) and the elementwise steps of
// collectives (as core/sharding/elementwise_reduce.cc, which the CPU backend calls).

#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/device_element.cuh"
#include "kernels/dim_ops.h"

namespace tessera::kernels::cuda {
namespace {

template <DeviceReduceOp kOp, typename A>
__device__ A CombineAlongDim(A acc, A v) {
  if constexpr (std::is_same_v<A, bool>) {
    return (kOp == DeviceReduceOp::kProduct || kOp == DeviceReduceOp::kMin) ? (acc && v)
                                                                            : (acc || v);
  } else if constexpr (kOp == DeviceReduceOp::kSum || kOp == DeviceReduceOp::kAvg) {
    return acc + v;
  } else if constexpr (kOp == DeviceReduceOp::kProduct) {
    return acc * v;
  } else if constexpr (kOp == DeviceReduceOp::kMax) {
    return (v > acc || IsNaNValue(v)) ? v : acc;  // NaN propagates
  } else {
    return (v < acc || IsNaNValue(v)) ? v : acc;
  }
}

// One thread per output element, summing sequentially along the dim as the CPU backend does.
template <typename T, DeviceReduceOp kOp>
__global__ void ReduceAlongDimKernel(const T* x, T* out, int64_t outer, int64_t size,
                                     int64_t inner) {
  using C = ComputeType<T>;
  constexpr bool kAccumulates =
      kOp == DeviceReduceOp::kSum || kOp == DeviceReduceOp::kAvg || kOp == DeviceReduceOp::kProduct;
  using A = std::conditional_t<kAccumulates, AccType<C>, C>;
  const int64_t n = outer * inner;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t o = i / inner, j = i % inner;
    const T* p = x + o * size * inner + j;
    auto widen = [](T v) -> A {
      if constexpr (kAccumulates) {
        return ToAcc(Load(v));
      } else {
        return Load(v);
      }
    };
    A acc = widen(p[0]);
    for (int64_t k = 1; k < size; ++k) acc = CombineAlongDim<kOp>(acc, widen(p[k * inner]));
    if constexpr (kOp == DeviceReduceOp::kAvg && std::is_floating_point_v<A>) {
      acc /= static_cast<A>(size);
    }
    out[i] = Store<T>(static_cast<C>(acc));
  }
}

// One thread per output position: the first extreme along the dim, as the CPU backend.
template <typename T, bool kMax>
__global__ void ArgReduceAlongDimKernel(const T* x, int64_t* out, int64_t outer, int64_t size,
                                        int64_t inner) {
  using C = ComputeType<T>;
  const int64_t n = outer * inner;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    const T* p = x + (i / inner) * size * inner + i % inner;
    C best = Load(p[0]);
    int64_t index = 0;
    for (int64_t k = 1; k < size; ++k) {
      const C v = Load(p[k * inner]);
      if (ArgReplaces<kMax>(best, v)) {
        best = v;
        index = k;
      }
    }
    out[i] = index;
  }
}

// One thread per line along the dim: a stable insertion sort of the line's positions by
// SortsBefore, kept in its indices, then the elements gathered in that order. Quadratic in the
// line's size.
template <typename T, bool kDescending>
__global__ void SortAlongDimKernel(const T* x, T* values, int64_t* indices, int64_t outer,
                                   int64_t size, int64_t inner) {
  using C = ComputeType<T>;
  const int64_t n = outer * inner;
  for (int64_t line = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; line < n;
       line += int64_t{blockDim.x} * gridDim.x) {
    const int64_t start = (line / inner) * size * inner + line % inner;
    const T* in = x + start;
    int64_t* order = indices + start;
    for (int64_t i = 0; i < size; ++i) {
      const C v = Load(in[i * inner]);
      int64_t k = i;
      for (; k > 0; --k) {
        const int64_t prev = order[(k - 1) * inner];
        if (!SortsBefore<kDescending>(v, Load(in[prev * inner]))) break;
        order[k * inner] = prev;
      }
      order[k * inner] = i;
    }
    for (int64_t i = 0; i < size; ++i) values[start + i * inner] = in[order[i * inner] * inner];
  }
}

// One thread per line along the dim, accumulating in order as the CPU backend.
template <typename T, bool kProduct>
__global__ void ScanAlongDimKernel(const T* x, T* out, int64_t outer, int64_t size, int64_t inner) {
  using C = ComputeType<T>;
  using A = AccType<C>;
  const int64_t n = outer * inner;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t start = (i / inner) * size * inner + i % inner;
    A acc = kProduct ? A(1) : A(0);
    for (int64_t k = 0; k < size; ++k) {
      acc = ScanStep<kProduct>(acc, ToAcc(Load(x[start + k * inner])));
      out[start + k * inner] = Store<T>(static_cast<C>(acc));
    }
  }
}

// core's Combine: std::max / std::min semantics ((a < b) ? b : a), bool as or / and.
template <DeviceReduceOp kOp, typename C>
__device__ C CombineElementwise(C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return (kOp == DeviceReduceOp::kProduct || kOp == DeviceReduceOp::kMin) ? (a && b) : (a || b);
  } else if constexpr (kOp == DeviceReduceOp::kMax) {
    return (a < b) ? b : a;
  } else if constexpr (kOp == DeviceReduceOp::kMin) {
    return (b < a) ? b : a;
  } else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return kOp == DeviceReduceOp::kProduct ? static_cast<C>(static_cast<U>(a) * static_cast<U>(b))
                                           : static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return kOp == DeviceReduceOp::kProduct ? a * b : a + b;
  }
}

template <typename T, DeviceReduceOp kOp>
__global__ void ReduceIntoKernel(T* acc, const T* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    acc[i] = Store<T>(CombineElementwise<kOp>(Load(acc[i]), Load(in[i])));
  }
}

template <typename T>
__global__ void DivideKernel(T* data, int64_t n, int64_t divisor) {
  using C = ComputeType<T>;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    if constexpr (std::is_integral_v<T>) {  // in int64: the divisor need not fit in T
      data[i] = static_cast<T>(static_cast<int64_t>(data[i]) / divisor);
    } else {
      data[i] = Store<T>(static_cast<C>(Load(data[i]) / static_cast<C>(divisor)));
    }
  }
}

template <typename F>
void ForReduceOp(DeviceReduceOp op, F&& f) {
  switch (op) {
    case DeviceReduceOp::kSum:
      return f(std::integral_constant<DeviceReduceOp, DeviceReduceOp::kSum>{});
    case DeviceReduceOp::kAvg:
      return f(std::integral_constant<DeviceReduceOp, DeviceReduceOp::kAvg>{});
    case DeviceReduceOp::kMax:
      return f(std::integral_constant<DeviceReduceOp, DeviceReduceOp::kMax>{});
    case DeviceReduceOp::kMin:
      return f(std::integral_constant<DeviceReduceOp, DeviceReduceOp::kMin>{});
    case DeviceReduceOp::kProduct:
      return f(std::integral_constant<DeviceReduceOp, DeviceReduceOp::kProduct>{});
  }
}

}  // namespace

cudaError_t LaunchReduceAlongDim(DeviceReduceOp op, DType dtype, const void* x, void* out,
                                 int64_t outer, int64_t size, int64_t inner, cudaStream_t stream) {
  const int64_t n = outer * inner;
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ForReduceOp(op, [&](auto kop) {
      ReduceAlongDimKernel<T, decltype(kop)::value><<<BlocksFor(n), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<T*>(out), outer, size, inner);
    });
  });
  return cudaGetLastError();
}

cudaError_t LaunchArgReduceAlongDim(bool is_max, DType dtype, const void* x, int64_t* out,
                                    int64_t outer, int64_t size, int64_t inner,
                                    cudaStream_t stream) {
  const int64_t n = outer * inner;
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x);
    if (is_max) {
      ArgReduceAlongDimKernel<T, true>
          <<<BlocksFor(n), kThreads, 0, stream>>>(in, out, outer, size, inner);
    } else {
      ArgReduceAlongDimKernel<T, false>
          <<<BlocksFor(n), kThreads, 0, stream>>>(in, out, outer, size, inner);
    }
  });
  return cudaGetLastError();
}

cudaError_t LaunchSortAlongDim(bool descending, DType dtype, const void* x, void* values,
                               int64_t* indices, int64_t outer, int64_t size, int64_t inner,
                               cudaStream_t stream) {
  const int64_t n = outer * inner;
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x);
    T* out = static_cast<T*>(values);
    if (descending) {
      SortAlongDimKernel<T, true>
          <<<BlocksFor(n), kThreads, 0, stream>>>(in, out, indices, outer, size, inner);
    } else {
      SortAlongDimKernel<T, false>
          <<<BlocksFor(n), kThreads, 0, stream>>>(in, out, indices, outer, size, inner);
    }
  });
  return cudaGetLastError();
}

cudaError_t LaunchScanAlongDim(bool is_product, DType dtype, const void* x, void* out,
                               int64_t outer, int64_t size, int64_t inner, cudaStream_t stream) {
  const int64_t n = outer * inner;
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      const T* in = static_cast<const T*>(x);
      T* dst = static_cast<T*>(out);
      if (is_product) {
        ScanAlongDimKernel<T, true>
            <<<BlocksFor(n), kThreads, 0, stream>>>(in, dst, outer, size, inner);
      } else {
        ScanAlongDimKernel<T, false>
            <<<BlocksFor(n), kThreads, 0, stream>>>(in, dst, outer, size, inner);
      }
    }
  });
  return cudaGetLastError();
}

cudaError_t LaunchReduceInto(DeviceReduceOp op, DType dtype, void* acc, const void* in, int64_t n,
                             cudaStream_t stream) {
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ForReduceOp(op, [&](auto kop) {
      ReduceIntoKernel<T, decltype(kop)::value><<<BlocksFor(n), kThreads, 0, stream>>>(
          static_cast<T*>(acc), static_cast<const T*>(in), n);
    });
  });
  return cudaGetLastError();
}

cudaError_t LaunchDivideInPlace(DType dtype, void* data, int64_t n, int64_t divisor,
                                cudaStream_t stream) {
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      DivideKernel<T><<<BlocksFor(n), kThreads, 0, stream>>>(static_cast<T*>(data), n, divisor);
    }
  });
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
