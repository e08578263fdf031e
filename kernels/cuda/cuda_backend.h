#ifndef TESSERA_KERNELS_CUDA_CUDA_BACKEND_H_
#define TESSERA_KERNELS_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

struct CUstream_st;    // cudaStream_t is CUstream_st*
struct cublasContext;  // cublasHandle_t is cublasContext*

namespace tessera::kernels {

// The backend of one CUDA device: device memory, cuBLAS GEMM, the kernels of kernels/cuda/*.cu.
// Every operation is queued on one non-blocking stream of the device (for NCCL to join).
class CudaBackend final : public KernelBackend {
 public:
  // The backend of device `ordinal`; FAILED_PRECONDITION naming the CUDA error (name and number)
  // when no such device is usable.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(int ordinal);
  ~CudaBackend() override;

  std::string device() const override;
  absl::Status Synchronize() override;

  int ordinal() const { return ordinal_; }
  // The stream every operation of this backend is queued on.
  CUstream_st* stream() const { return stream_; }

 protected:
  absl::StatusOr<std::byte*> AllocateBytes(size_t nbytes) override;
  void FreeBytes(std::byte* data) override;
  absl::Status DoCopyFromHost(const std::byte* src, std::byte* dst, size_t nbytes) override;
  absl::Status DoCopyToHost(const std::byte* src, std::byte* dst, size_t nbytes) override;
  absl::Status DoCopy(const std::byte* src, std::byte* dst, size_t nbytes) override;
  absl::Status DoGemm(const GemmArgs& args) override;
  absl::Status DoBinary(BinaryOp op, DType dtype, const std::byte* a, const std::byte* b,
                        std::byte* out, const BroadcastLayout& layout) override;
  absl::Status DoActivate(Activation f, DType dtype, const std::byte* x, std::byte* out,
                          int64_t n) override;
  absl::Status DoReduceAlongDim(const ReduceDimArgs& args) override;
  absl::Status DoReduceInto(ReduceOp op, DType dtype, std::byte* acc, const std::byte* in,
                            int64_t n) override;
  absl::Status DoDivideInPlace(DType dtype, std::byte* data, int64_t n, int64_t divisor) override;
  absl::Status DoCast(DType from, const std::byte* src, DType to, std::byte* dst,
                      int64_t n) override;
  absl::Status DoFill(std::byte* data, int64_t n, const std::byte* value,
                      size_t element_size) override;
  absl::Status DoRandomFill(const RandomFillArgs& args) override;
  // The neural-network kernels are UNIMPLEMENTED on CUDA for now (cuda_nn.cc).
  absl::Status DoActivateBackward(Activation f, DType dtype, const std::byte* x,
                                  const std::byte* dy, std::byte* dx, int64_t n) override;
  absl::Status DoLayerNorm(const NormArgs& args) override;
  absl::Status DoLayerNormBackward(const NormBackwardArgs& args) override;
  absl::Status DoRmsNorm(const NormArgs& args) override;
  absl::Status DoRmsNormBackward(const NormBackwardArgs& args) override;
  absl::Status DoEmbedding(const EmbeddingArgs& args) override;
  absl::Status DoEmbeddingBackward(const EmbeddingBackwardArgs& args) override;
  absl::Status DoAttention(const AttentionArgs& args) override;
  absl::Status DoAttentionBackward(const AttentionBackwardArgs& args) override;
  absl::Status DoSgdStep(const SgdArgs& args) override;

 private:
  CudaBackend(int ordinal, CUstream_st* stream, cublasContext* cublas)
      : ordinal_(ordinal), stream_(stream), cublas_(cublas) {}
  // Makes this backend's device current on the calling thread.
  absl::Status UseDevice() const;

  const int ordinal_;
  CUstream_st* const stream_;
  cublasContext* const cublas_;
};

// MakeBackend's CUDA branch: the backend of device `ordinal`.
absl::StatusOr<std::unique_ptr<KernelBackend>> MakeCudaBackend(int ordinal);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CUDA_CUDA_BACKEND_H_
