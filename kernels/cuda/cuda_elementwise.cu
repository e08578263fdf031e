// Elementwise kernels of the CUDA backend: broadcasting binary operations, unary operations (and so
// activations) and where, on the semantics of kernels/elementwise_ops.h that the CPU backend
// (kernels/cpu/cpu_elementwise.cc) instantiates too.

#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/device_element.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/elementwise_ops.h"

namespace tessera::kernels::cuda {
namespace {

template <typename T, BinaryOp kOp>
using BinaryOut = std::conditional_t<GivesBool(kOp), bool, T>;
template <typename T, UnaryOp kOp>
using UnaryOut = std::conditional_t<GivesBool(kOp), bool, T>;

template <typename T, BinaryOp kOp>
__global__ void BinaryKernel(const T* a, const T* b, BinaryOut<T, kOp>* out, int64_t n,
                             BroadcastIndexer ix) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    int64_t rest = i, ia = 0, ib = 0;
    for (int d = ix.rank - 1; d >= 0; --d) {
      const int64_t coord = rest % ix.shape[d];
      rest /= ix.shape[d];
      ia += coord * ix.a_strides[d];
      ib += coord * ix.b_strides[d];
    }
    out[i] = Store<BinaryOut<T, kOp>>(ApplyBinary<DeviceMath, kOp>(Load(a[ia]), Load(b[ib])));
  }
}

template <typename T, UnaryOp kOp>
__global__ void UnaryKernel(const T* x, UnaryOut<T, kOp>* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    out[i] = Store<UnaryOut<T, kOp>>(ApplyUnary<DeviceMath, kOp>(Load(x[i])));
  }
}

// Moves `Word`s (elements of its size): out[i] = cond[ic] ? a[ia] : b[ib].
template <typename Word>
__global__ void WhereKernel(const bool* cond, const Word* a, const Word* b, Word* out, int64_t n,
                            BroadcastIndexer3 ix) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    int64_t rest = i, offset[3] = {0, 0, 0};
    for (int d = ix.rank - 1; d >= 0; --d) {
      const int64_t coord = rest % ix.shape[d];
      rest /= ix.shape[d];
      for (int k = 0; k < 3; ++k) offset[k] += coord * ix.strides[k][d];
    }
    out[i] = cond[offset[0]] ? a[offset[1]] : b[offset[2]];
  }
}

template <typename Word>
void LaunchWhereTyped(const bool* cond, const void* a, const void* b, void* out, int64_t n,
                      const BroadcastIndexer3& ix, cudaStream_t stream) {
  WhereKernel<Word><<<BlocksFor(n), kThreads, 0, stream>>>(cond, static_cast<const Word*>(a),
                                                           static_cast<const Word*>(b),
                                                           static_cast<Word*>(out), n, ix);
}

}  // namespace

cudaError_t LaunchBinary(BinaryOp op, DType dtype, const void* a, const void* b, void* out,
                         int64_t n, const BroadcastIndexer& ix, cudaStream_t stream) {
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    VisitBinaryOp(op, [&](auto kop) {
      constexpr BinaryOp kOp = decltype(kop)::value;
      BinaryKernel<T, kOp><<<BlocksFor(n), kThreads, 0, stream>>>(
          static_cast<const T*>(a), static_cast<const T*>(b), static_cast<BinaryOut<T, kOp>*>(out),
          n, ix);
    });
  });
  return cudaGetLastError();
}

cudaError_t LaunchUnary(UnaryOp op, DType dtype, const void* x, void* out, int64_t n,
                        cudaStream_t stream) {
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    VisitUnaryOp(op, [&](auto kop) {
      constexpr UnaryOp kOp = decltype(kop)::value;
      UnaryKernel<T, kOp><<<BlocksFor(n), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<UnaryOut<T, kOp>*>(out), n);
    });
  });
  return cudaGetLastError();
}

cudaError_t LaunchWhere(const bool* cond, const void* a, const void* b, void* out, int64_t n,
                        const BroadcastIndexer3& ix, int element_size, cudaStream_t stream) {
  switch (element_size) {
    case 1:
      LaunchWhereTyped<uint8_t>(cond, a, b, out, n, ix, stream);
      break;
    case 2:
      LaunchWhereTyped<uint16_t>(cond, a, b, out, n, ix, stream);
      break;
    case 4:
      LaunchWhereTyped<uint32_t>(cond, a, b, out, n, ix, stream);
      break;
    default:
      LaunchWhereTyped<uint64_t>(cond, a, b, out, n, ix, stream);
      break;
  }
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
