#ifndef TESSERA_KERNELS_CUDA_CUDA_INDEX_LAUNCH_H_
#define TESSERA_KERNELS_CUDA_CUDA_INDEX_LAUNCH_H_

// Launchers of the CUDA backend's indexing kernels (cuda_index_kernels.cu), called by CudaBackend
// with checked arguments: int64 indices already checked to be in range (but by
// LaunchFindIndexOutside, which does the check). Each queues work on `stream` and returns the
// launch error. C++17 and free of Abseil types, as cuda_launch.h.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/ops.h"

namespace tessera::kernels::cuda {

// KernelBackend's IndexWalk: position p at coordinate c of `shape` pairs the indexed tensor's
// element sum over d != dim of c[d] * indexed_strides[d] + index[p] * indexed_strides[dim] with
// the other operand's sum over d of c[d] * other_strides[d].
struct IndexWalkIndexer {
  int rank = 0;
  int dim = 0;
  int64_t shape[kMaxRank] = {};
  int64_t indexed_strides[kMaxRank] = {};
  int64_t other_strides[kMaxRank] = {};
};

// *first_bad = the least position i < count with index[i] outside [lo, hi), left as is (the
// caller sets it to UINT64_MAX first) when there is none.
cudaError_t LaunchFindIndexOutside(const int64_t* index, int64_t count, int64_t lo, int64_t hi,
                                   unsigned long long* first_bad, cudaStream_t stream);
// index[i] += size where index[i] < 0, for i < count.
cudaError_t LaunchWrapIndices(int64_t* index, int64_t count, int64_t size, cudaStream_t stream);
// out[other] = x[indexed] for the n positions of the walk, elements of `element_size` bytes.
cudaError_t LaunchGather(const void* x, const int64_t* index, void* out, int64_t n,
                         const IndexWalkIndexer& walk, int element_size, cudaStream_t stream);
// dst[indexed] = src[other] (kNone) or += src[other] (kSum, atomic) for the n positions.
cudaError_t LaunchScatter(ScatterReduce reduce, DType dtype, void* dst, const int64_t* index,
                          const void* src, int64_t n, const IndexWalkIndexer& walk,
                          cudaStream_t stream);
// out[o, c, i] = x[o, index[c], i] for x [outer, size, inner] and out [outer, count, inner].
cudaError_t LaunchIndexSelect(const void* x, const int64_t* index, void* out, int64_t outer,
                              int64_t size, int64_t inner, int64_t count, int element_size,
                              cudaStream_t stream);

}  // namespace tessera::kernels::cuda

#endif  // TESSERA_KERNELS_CUDA_CUDA_INDEX_LAUNCH_H_
