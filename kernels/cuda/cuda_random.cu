// Random fill kernel of the CUDA backend: the Philox mapping of kernels/philox.h, as on the CPU.

#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/device_element.cuh"
#include "kernels/philox.h"

namespace tessera::kernels::cuda {
namespace {

template <typename T>
__device__ T RandomElement(Distribution dist, uint64_t seed, uint64_t index) {
  const Philox4x32 r = PhiloxForElement(seed, index);
  if (dist == Distribution::kNormal) return Store<T>(static_cast<ComputeType<T>>(NormalValue(r)));
  if constexpr (std::is_same_v<T, float>) return UniformFloat32(r);
  if constexpr (std::is_same_v<T, double>) return UniformFloat64(r);
  if constexpr (std::is_same_v<T, __half>) return Store<T>(UniformFloat16(r));
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return Store<T>(UniformBFloat16(r));
  return T{};
}

template <typename T>
__global__ void RandomFillKernel(Distribution dist, uint64_t seed, ShardIndexer shard, T* out,
                                 int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    int64_t rest = i, global = shard.start;
    for (int d = shard.rank - 1; d >= 0; --d) {
      global += (rest % shard.shape[d]) * shard.global_strides[d];
      rest /= shard.shape[d];
    }
    out[i] = RandomElement<T>(dist, seed, static_cast<uint64_t>(global));
  }
}

}  // namespace

cudaError_t LaunchRandomFill(Distribution dist, DType dtype, uint64_t seed,
                             const ShardIndexer& shard, void* out, int64_t n, cudaStream_t stream) {
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloating<T>) {
      RandomFillKernel<T>
          <<<BlocksFor(n), kThreads, 0, stream>>>(dist, seed, shard, static_cast<T*>(out), n);
    }
  });
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
