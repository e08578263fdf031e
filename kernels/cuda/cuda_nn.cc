// The CUDA backend's neural-network kernels other than attention (cuda_attention.cc): the launches
// of cuda_nn_kernels.cu with the backend's stream, and the embedding's id check.

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_nn_launch.h"

namespace tessera::kernels {
namespace {

// "cuda:N: what: cudaErrorX (N): description", or OK.
absl::Status Launched(cudaError_t err, const std::string& device, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(device, ": ", what, ": ", cudaGetErrorName(err), " (",
                                          static_cast<int>(err), "): ", cudaGetErrorString(err)));
}

}  // namespace

absl::Status CudaBackend::DoActivateBackward(Activation f, DType dtype, const std::byte* x,
                                             const std::byte* dy, std::byte* dx, int64_t n) {
  RETURN_IF_ERROR(UseDevice());
  return Launched(cuda::LaunchActivateBackward(f, dtype, x, dy, dx, n, stream_), device(),
                  absl::StrCat(ActivationName(f), " backward launch"));
}

absl::Status CudaBackend::DoLayerNorm(const NormArgs& a) {
  RETURN_IF_ERROR(UseDevice());
  return Launched(cuda::LaunchNormRows(true, a.dtype, a.rows, a.cols, a.eps, a.x, a.weight, a.bias,
                                       a.y, reinterpret_cast<float*>(a.mean),
                                       reinterpret_cast<float*>(a.rstd), stream_),
                  device(), "layer_norm launch");
}

absl::Status CudaBackend::DoRmsNorm(const NormArgs& a) {
  RETURN_IF_ERROR(UseDevice());
  return Launched(
      cuda::LaunchNormRows(false, a.dtype, a.rows, a.cols, a.eps, a.x, a.weight, nullptr, a.y,
                           nullptr, reinterpret_cast<float*>(a.rstd), stream_),
      device(), "rms_norm launch");
}

absl::Status CudaBackend::DoLayerNormBackward(const NormBackwardArgs& a) {
  RETURN_IF_ERROR(UseDevice());
  const auto* mean = reinterpret_cast<const float*>(a.mean);
  const auto* rstd = reinterpret_cast<const float*>(a.rstd);
  RETURN_IF_ERROR(Launched(cuda::LaunchNormRowsBackward(true, a.dtype, a.rows, a.cols, a.dy, a.x,
                                                        a.weight, mean, rstd, a.dx, stream_),
                           device(), "layer_norm backward launch"));
  if (a.dweight == nullptr && a.dbias == nullptr) return absl::OkStatus();
  return Launched(cuda::LaunchNormParameterGrads(a.dtype, a.rows, a.cols, a.dy, a.x, mean, rstd,
                                                 a.dweight, a.dbias, stream_),
                  device(), "layer_norm parameter gradients launch");
}

absl::Status CudaBackend::DoRmsNormBackward(const NormBackwardArgs& a) {
  RETURN_IF_ERROR(UseDevice());
  const auto* rstd = reinterpret_cast<const float*>(a.rstd);
  RETURN_IF_ERROR(Launched(cuda::LaunchNormRowsBackward(false, a.dtype, a.rows, a.cols, a.dy, a.x,
                                                        a.weight, nullptr, rstd, a.dx, stream_),
                           device(), "rms_norm backward launch"));
  if (a.dweight == nullptr) return absl::OkStatus();
  return Launched(cuda::LaunchNormParameterGrads(a.dtype, a.rows, a.cols, a.dy, a.x, nullptr, rstd,
                                                 a.dweight, nullptr, stream_),
                  device(), "rms_norm parameter gradients launch");
}

absl::Status CudaBackend::DoEmbedding(const EmbeddingArgs& e) {
  RETURN_IF_ERROR(UseDevice());
  const auto* ids = reinterpret_cast<const int64_t*>(e.ids);
  // The ids are checked on the device and the first bad one, if any, read back before anything is
  // written: INVALID_ARGUMENT naming it and its position, as on the CPU.
  ASSIGN_OR_RETURN(DeviceTensor first_bad, Allocate(DType::kInt64, {1}));
  RETURN_IF_ERROR(Fill(first_bad.View(), -1.0));  // all bits set: UINT64_MAX, "none"
  auto* first = reinterpret_cast<unsigned long long*>(first_bad.data());
  RETURN_IF_ERROR(Launched(cuda::LaunchFindBadIds(ids, e.count, e.num_embeddings, first, stream_),
                           device(), "embedding id check launch"));
  uint64_t position = 0;
  RETURN_IF_ERROR(
      CopyToHost(std::as_const(first_bad).View(), std::as_writable_bytes(std::span(&position, 1))));
  if (position != std::numeric_limits<uint64_t>::max()) {
    int64_t id = 0;
    RETURN_IF_ERROR(
        CopyToHost(ConstTensorView{e.ids + position * sizeof(int64_t), DType::kInt64, Shape{}},
                   std::as_writable_bytes(std::span(&id, 1))));
    return absl::InvalidArgumentError(absl::StrCat("embedding id ", id, " at position ", position,
                                                   " of the ids is outside [0, ", e.num_embeddings,
                                                   ")"));
  }
  if (e.dim == 0) return absl::OkStatus();  // ids checked, nothing to write
  return Launched(cuda::LaunchEmbedding(e.dtype, ids, e.count, e.rows, e.dim, e.row_offset,
                                        e.weight, e.out, stream_),
                  device(), "embedding launch");
}

absl::Status CudaBackend::DoEmbeddingBackward(const EmbeddingBackwardArgs& e) {
  RETURN_IF_ERROR(UseDevice());
  if (e.dim == 0) return absl::OkStatus();
  return Launched(
      cuda::LaunchEmbeddingBackward(e.dtype, reinterpret_cast<const int64_t*>(e.ids), e.count,
                                    e.rows, e.dim, e.row_offset, e.dy, e.dweight, stream_),
      device(), "embedding backward launch");
}

absl::Status CudaBackend::DoSgdStep(const SgdArgs& s) {
  RETURN_IF_ERROR(UseDevice());
  return Launched(cuda::LaunchSgdStep(s.dtype, s.param, s.grad, s.momentum_buf, s.n, s.lr,
                                      s.momentum, s.weight_decay, s.first_step, stream_),
                  device(), "sgd step launch");
}

}  // namespace tessera::kernels
