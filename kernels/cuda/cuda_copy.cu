// Strided copy kernel of the CUDA backend: core's CopyStrided on device memory, over the merged
// loops of MergeCopyLayout.

#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/device_element.cuh"

namespace tessera::kernels::cuda {
namespace {

template <typename Word>
__global__ void CopyStridedKernel(const Word* src, Word* dst, int64_t n, StridedCopyIndexer ix) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    int64_t rest = i, from = 0, to = 0;
    for (int d = ix.rank - 1; d >= 0; --d) {
      const int64_t at = rest % ix.shape[d];
      rest /= ix.shape[d];
      from += at * ix.src_strides[d];
      to += at * ix.dst_strides[d];
    }
    dst[to] = src[from];
  }
}

template <typename Word>
void Launch(const void* src, void* dst, int64_t n, const StridedCopyIndexer& ix,
            cudaStream_t stream) {
  CopyStridedKernel<Word><<<BlocksFor(n), kThreads, 0, stream>>>(static_cast<const Word*>(src),
                                                                 static_cast<Word*>(dst), n, ix);
}

}  // namespace

cudaError_t LaunchCopyStrided(const void* src, void* dst, int64_t n, const StridedCopyIndexer& ix,
                              int element_size, cudaStream_t stream) {
  switch (element_size) {
    case 1:
      Launch<uint8_t>(src, dst, n, ix, stream);
      break;
    case 2:
      Launch<uint16_t>(src, dst, n, ix, stream);
      break;
    case 4:
      Launch<uint32_t>(src, dst, n, ix, stream);
      break;
    default:
      Launch<uint64_t>(src, dst, n, ix, stream);
      break;
  }
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
