// Elementwise kernels of the CUDA backend: broadcasting binary operations and activations, with the
// semantics of the CPU backend (kernels/cpu/cpu_elementwise.cc).

#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/device_element.cuh"

namespace tessera::kernels::cuda {
namespace {

template <BinaryOp kOp, typename C>
__device__ C ApplyBinary(C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return kOp == BinaryOp::kMul ? (a && b) : (a || b);
  } else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    if constexpr (kOp == BinaryOp::kAdd)
      return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
    if constexpr (kOp == BinaryOp::kSub)
      return static_cast<C>(static_cast<U>(a) - static_cast<U>(b));
    if constexpr (kOp == BinaryOp::kMul)
      return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
    return C{0};  // kDiv is rejected for integers before launch
  } else {
    if constexpr (kOp == BinaryOp::kAdd) return a + b;
    if constexpr (kOp == BinaryOp::kSub) return a - b;
    if constexpr (kOp == BinaryOp::kMul) return a * b;
    return a / b;
  }
}

template <typename T, BinaryOp kOp>
__global__ void BinaryKernel(const T* a, const T* b, T* out, int64_t n, BroadcastIndexer ix) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    int64_t rest = i, ia = 0, ib = 0;
    for (int d = ix.rank - 1; d >= 0; --d) {
      const int64_t coord = rest % ix.shape[d];
      rest /= ix.shape[d];
      ia += coord * ix.a_strides[d];
      ib += coord * ix.b_strides[d];
    }
    out[i] = Store<T>(ApplyBinary<kOp>(Load(a[ia]), Load(b[ib])));
  }
}

template <Activation kF, typename C>
__device__ C ApplyActivation(C v) {
  if constexpr (kF == Activation::kRelu && std::is_unsigned_v<C>) {
    return v;
  } else if constexpr (kF == Activation::kRelu) {
    return v < C(0) ? C(0) : v;  // NaN stays NaN
  } else if constexpr (std::is_floating_point_v<C>) {
    if constexpr (kF == Activation::kGelu) {
      return C(0.5) * v * (C(1) + erf(v * C(0.70710678118654752440)));
    } else if constexpr (kF == Activation::kGeluTanh) {
      const C inner = C(0.79788456080286535588) * (v + C(0.044715) * v * v * v);
      return C(0.5) * v * (C(1) + tanh(inner));
    } else if constexpr (kF == Activation::kSilu) {
      return v / (C(1) + exp(-v));
    } else {
      return tanh(v);
    }
  } else {
    return v;  // rejected for integers before launch
  }
}

template <typename T, Activation kF>
__global__ void ActivateKernel(const T* x, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    out[i] = Store<T>(ApplyActivation<kF>(Load(x[i])));
  }
}

template <typename T, BinaryOp kOp>
void LaunchBinaryTyped(const void* a, const void* b, void* out, int64_t n,
                       const BroadcastIndexer& ix, cudaStream_t stream) {
  BinaryKernel<T, kOp><<<BlocksFor(n), kThreads, 0, stream>>>(
      static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n, ix);
}

template <typename T, Activation kF>
void LaunchActivateTyped(const void* x, void* out, int64_t n, cudaStream_t stream) {
  ActivateKernel<T, kF>
      <<<BlocksFor(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(out), n);
}

}  // namespace

cudaError_t LaunchBinary(BinaryOp op, DType dtype, const void* a, const void* b, void* out,
                         int64_t n, const BroadcastIndexer& ix, cudaStream_t stream) {
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (op) {
      case BinaryOp::kAdd:
        return LaunchBinaryTyped<T, BinaryOp::kAdd>(a, b, out, n, ix, stream);
      case BinaryOp::kSub:
        return LaunchBinaryTyped<T, BinaryOp::kSub>(a, b, out, n, ix, stream);
      case BinaryOp::kMul:
        return LaunchBinaryTyped<T, BinaryOp::kMul>(a, b, out, n, ix, stream);
      case BinaryOp::kDiv:
        return LaunchBinaryTyped<T, BinaryOp::kDiv>(a, b, out, n, ix, stream);
    }
  });
  return cudaGetLastError();
}

cudaError_t LaunchActivate(Activation f, DType dtype, const void* x, void* out, int64_t n,
                           cudaStream_t stream) {
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (f) {
      case Activation::kRelu:
        return LaunchActivateTyped<T, Activation::kRelu>(x, out, n, stream);
      case Activation::kGelu:
        return LaunchActivateTyped<T, Activation::kGelu>(x, out, n, stream);
      case Activation::kGeluTanh:
        return LaunchActivateTyped<T, Activation::kGeluTanh>(x, out, n, stream);
      case Activation::kTanh:
        return LaunchActivateTyped<T, Activation::kTanh>(x, out, n, stream);
      case Activation::kSilu:
        return LaunchActivateTyped<T, Activation::kSilu>(x, out, n, stream);
    }
  });
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
