// Reduction kernels of the CUDA backend: along a dim (as kernels/cpu/cpu_reduce.cc) and the
// elementwise steps of collectives (as core/sharding/elementwise_reduce.cc, which the CPU backend
// calls).

#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/device_element.cuh"

namespace tessera::kernels::cuda {
namespace {

template <typename C>
__device__ bool IsNaN(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return v != v;
  } else {
    return false;
  }
}

// Accumulator of a sum or product along a dim: double for floating types, uint64 (wrapping) for
// integers, bool for bool; the same as the CPU backend, so both sum in the same order and type.
template <typename C>
using AccType = std::conditional_t<std::is_floating_point_v<C>, double,
                                   std::conditional_t<std::is_same_v<C, bool>, bool, uint64_t>>;

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
    return (v > acc || IsNaN(v)) ? v : acc;  // NaN propagates
  } else {
    return (v < acc || IsNaN(v)) ? v : acc;
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
      if constexpr (kAccumulates && std::is_integral_v<C> && !std::is_same_v<C, bool>) {
        return static_cast<uint64_t>(static_cast<int64_t>(Load(v)));
      } else {
        return static_cast<A>(Load(v));
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
