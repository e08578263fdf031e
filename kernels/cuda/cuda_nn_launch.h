#ifndef TESSERA_KERNELS_CUDA_CUDA_NN_LAUNCH_H_
#define TESSERA_KERNELS_CUDA_CUDA_NN_LAUNCH_H_

// Launchers of the CUDA backend's neural-network kernels (cuda_nn_kernels.cu), called by
// CudaBackend with checked arguments: float32 or float64 operands (`dtype`), float32 statistics and
// probabilities. Each queues work on `stream` and returns the launch error. C++17 and free of
// Abseil types, as cuda_launch.h. The arithmetic follows the CPU backend's (kernels/cpu/cpu_nn.cc,
// cpu_norm.cc, cpu_attention.cc): row statistics and row sums accumulate in float64.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/ops.h"

namespace tessera::kernels::cuda {

// dx = dy * f'(x) over n elements (relu'(0) = 0).
cudaError_t LaunchActivateBackward(Activation f, DType dtype, const void* x, const void* dy,
                                   void* dx, int64_t n, cudaStream_t stream);

// One normalization of `rows` rows of `cols` elements: y = (x - mean) * rstd * weight + bias, mean
// 0 unless `centered` (LayerNorm) and rstd = 1 / sqrt(mean((x - mean)^2) + eps). weight and bias
// may be null (1 and 0); `mean` (written when centered) and `rstd` are float32 [rows].
cudaError_t LaunchNormRows(bool centered, DType dtype, int64_t rows, int64_t cols, double eps,
                           const void* x, const void* weight, const void* bias, void* y,
                           float* mean, float* rstd, cudaStream_t stream);

// The input gradient of LaunchNormRows: with xhat = (x - mean) * rstd and g = dy * weight,
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (no mean(g) unless centered).
cudaError_t LaunchNormRowsBackward(bool centered, DType dtype, int64_t rows, int64_t cols,
                                   const void* dy, const void* x, const void* weight,
                                   const float* mean, const float* rstd, void* dx,
                                   cudaStream_t stream);

// dweight[j] += sum over rows of dy * xhat, dbias[j] += sum over rows of dy (either may be null);
// `mean` is null when not centered.
cudaError_t LaunchNormParameterGrads(DType dtype, int64_t rows, int64_t cols, const void* dy,
                                     const void* x, const float* mean, const float* rstd,
                                     void* dweight, void* dbias, cudaStream_t stream);

// *first_bad = the least position i < count with ids[i] outside [0, num_embeddings), left as is
// (the caller sets it to UINT64_MAX first) when there is none.
cudaError_t LaunchFindBadIds(const int64_t* ids, int64_t count, int64_t num_embeddings,
                             unsigned long long* first_bad, cudaStream_t stream);
// out[i, :] = weight[ids[i] - row_offset, :] for ids in [row_offset, row_offset + rows), else 0.
cudaError_t LaunchEmbedding(DType dtype, const int64_t* ids, int64_t count, int64_t rows,
                            int64_t dim, int64_t row_offset, const void* weight, void* out,
                            cudaStream_t stream);
// dweight[ids[i] - row_offset, :] += dy[i, :] for the ids in the shard (atomic adds).
cudaError_t LaunchEmbeddingBackward(DType dtype, const int64_t* ids, int64_t count, int64_t rows,
                                    int64_t dim, int64_t row_offset, const void* dy, void* dweight,
                                    cudaStream_t stream);

// Each of `count` rows of `s` scores of type `dtype` becomes its softmax, stably; with `causal`,
// row i of each [s, s] block keeps entries j <= i (the rest 0). Rows of float64 scores also
// written, rounded, to `rounded` (float32) when it is not null.
cudaError_t LaunchSoftmaxRows(DType dtype, void* scores, int64_t count, int s, bool causal,
                              float* rounded, cudaStream_t stream);

// ds = p * (ds - rowsum(p * ds)) over `count` rows of `s`: the softmax's backward in place.
cudaError_t LaunchSoftmaxBackwardRows(DType dtype, const void* p, void* ds, int64_t count, int s,
                                      cudaStream_t stream);

// One torch.optim.SGD step on n elements (momentum_buf null without momentum).
cudaError_t LaunchSgdStep(DType dtype, void* param, const void* grad, void* momentum_buf, int64_t n,
                          double lr, double momentum, double weight_decay, bool first_step,
                          cudaStream_t stream);

}  // namespace tessera::kernels::cuda

#endif  // TESSERA_KERNELS_CUDA_CUDA_NN_LAUNCH_H_
