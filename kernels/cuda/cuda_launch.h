#ifndef TESSERA_KERNELS_CUDA_CUDA_LAUNCH_H_
#define TESSERA_KERNELS_CUDA_CUDA_LAUNCH_H_

// Launchers of the CUDA backend's kernels, called by CudaBackend with checked arguments. Each
// queues work on `stream` and returns the launch error (cudaSuccess if queued). C++17 and free of
// Abseil types so that nvcc compiles the .cu files that define them.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/ops.h"

namespace tessera::kernels::cuda {

// Largest rank a kernel indexes (after size-1 dims are dropped and contiguous dims merged).
inline constexpr int kMaxRank = 8;

// ReduceOp of core/sharding/placement.h, which device code (C++17) cannot include.
enum class DeviceReduceOp : int { kSum, kAvg, kMax, kMin, kProduct };

// A broadcast walk (kernels/broadcast.h) over the output's elements.
struct BroadcastIndexer {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t a_strides[kMaxRank] = {};
  int64_t b_strides[kMaxRank] = {};
};

// A three-input broadcast walk (kernels/broadcast.h's BroadcastLayout3): strides[k] are input k's.
struct BroadcastIndexer3 {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t strides[3][kMaxRank] = {};
};

// A shard of a tensor: its shape and the global strides and index of its first element.
struct ShardIndexer {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t global_strides[kMaxRank] = {};
  int64_t start = 0;
};

// A strided copy's merged loops (core's StridedCopyLayout); strides in elements.
struct StridedCopyIndexer {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t src_strides[kMaxRank] = {};
  int64_t dst_strides[kMaxRank] = {};
};

// dst[walk] = src[walk] for the n elements of `element_size` bytes the indexer walks.
cudaError_t LaunchCopyStrided(const void* src, void* dst, int64_t n, const StridedCopyIndexer& ix,
                              int element_size, cudaStream_t stream);
// `out` has `dtype`, or bool where GivesBool(op); so has LaunchUnary's.
cudaError_t LaunchBinary(BinaryOp op, DType dtype, const void* a, const void* b, void* out,
                         int64_t n, const BroadcastIndexer& indexer, cudaStream_t stream);
cudaError_t LaunchUnary(UnaryOp op, DType dtype, const void* x, void* out, int64_t n,
                        cudaStream_t stream);
// out = cond ? a : b for the n elements the indexer walks (cond, a, b), of `element_size` bytes.
cudaError_t LaunchWhere(const bool* cond, const void* a, const void* b, void* out, int64_t n,
                        const BroadcastIndexer3& indexer, int element_size, cudaStream_t stream);
// x viewed as [outer, size, inner] reduced into out [outer, inner]; size >= 1.
cudaError_t LaunchReduceAlongDim(DeviceReduceOp op, DType dtype, const void* x, void* out,
                                 int64_t outer, int64_t size, int64_t inner, cudaStream_t stream);
// The int64 index of the first maximum (is_max) or minimum of x [outer, size, inner] along the
// dim into out [outer, inner]; size >= 1.
cudaError_t LaunchArgReduceAlongDim(bool is_max, DType dtype, const void* x, int64_t* out,
                                    int64_t outer, int64_t size, int64_t inner,
                                    cudaStream_t stream);
// Each line along the dim of x [outer, size, inner] stably sorted (descending or ascending) into
// values, same shape and dtype, and the positions it came from into indices; size >= 1.
cudaError_t LaunchSortAlongDim(bool descending, DType dtype, const void* x, void* values,
                               int64_t* indices, int64_t outer, int64_t size, int64_t inner,
                               cudaStream_t stream);
// The inclusive cumulative sum or product (is_product) of x [outer, size, inner] along the dim
// into out, same shape; dtype is not bool.
cudaError_t LaunchScanAlongDim(bool is_product, DType dtype, const void* x, void* out,
                               int64_t outer, int64_t size, int64_t inner, cudaStream_t stream);
// softmax (as `kind`) of each line along the dim of x [outer, size >= 1, inner] into y, floating.
cudaError_t LaunchSoftmaxAlongDim(SoftmaxKind kind, DType dtype, const void* x, void* y,
                                  int64_t outer, int64_t size, int64_t inner, cudaStream_t stream);
// Its gradient dx from y and dy, same shape.
cudaError_t LaunchSoftmaxBackward(SoftmaxKind kind, DType dtype, const void* y, const void* dy,
                                  void* dx, int64_t outer, int64_t size, int64_t inner,
                                  cudaStream_t stream);
cudaError_t LaunchReduceInto(DeviceReduceOp op, DType dtype, void* acc, const void* in, int64_t n,
                             cudaStream_t stream);
cudaError_t LaunchDivideInPlace(DType dtype, void* data, int64_t n, int64_t divisor,
                                cudaStream_t stream);
cudaError_t LaunchCast(DType from, const void* src, DType to, void* dst, int64_t n,
                       cudaStream_t stream);
// Writes the low `element_size` bytes of `pattern` into `n` elements.
cudaError_t LaunchFill(void* data, int64_t n, uint64_t pattern, int element_size,
                       cudaStream_t stream);
cudaError_t LaunchRandomFill(Distribution dist, DType dtype, uint64_t seed,
                             const ShardIndexer& shard, void* out, int64_t n, cudaStream_t stream);

}  // namespace tessera::kernels::cuda

#endif  // TESSERA_KERNELS_CUDA_CUDA_LAUNCH_H_
