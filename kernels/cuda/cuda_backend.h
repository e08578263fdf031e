#ifndef TESSERA_KERNELS_CUDA_CUDA_BACKEND_H_
#define TESSERA_KERNELS_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"

struct CUstream_st;         // cudaStream_t is CUstream_st*
struct CUmemPoolHandle_st;  // cudaMemPool_t is CUmemPoolHandle_st*
struct cublasContext;       // cublasHandle_t is cublasContext*

namespace tessera::kernels {

class PinnedStaging;

// The backend of one CUDA device: its memory, cuBLAS GEMM, the kernels of kernels/cuda/*.cu.
//
// Memory is a stream-ordered pool (cudaMallocFromPoolAsync on a pool of the backend's own that
// keeps freed memory cached): an allocation that would not fit in what the pool has idle plus what
// the device reports free (cudaMemGetInfo, less a reserve for cuBLAS, NCCL and the context) is
// RESOURCE_EXHAUSTED before anything is asked of the driver, as is one past the allocation limit.
// Compute and device copies are queued on one non-blocking stream (for NCCL to order itself
// after); uploads and downloads in pieces (WriteFromHost, ReadToHost) run on a copy stream of their
// own through pinned staging buffers, two per transfer, so the copy of one piece overlaps the
// arrival or sending of the next.
class CudaBackend final : public KernelBackend {
 public:
  // Device memory kept free for what is not allocated through the backend.
  static constexpr int64_t kDeviceReserveBytes = int64_t{256} << 20;

  // The backend of device `ordinal`; FAILED_PRECONDITION naming the CUDA error (name and number)
  // when no such device is usable.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(int ordinal);
  ~CudaBackend() override;

  std::string device() const override;
  bool host_addressable() const override { return false; }
  absl::Status Synchronize() override;
  void* native_stream() const override { return stream_; }

  int ordinal() const { return ordinal_; }
  // The stream every compute operation of this backend is queued on.
  CUstream_st* stream() const { return stream_; }
  std::string device_name() const override { return name_; }

 protected:
  absl::StatusOr<std::byte*> AllocateBytes(size_t nbytes) override;
  void FreeBytes(std::byte* data) override;
  absl::Status DoCopyFromHost(const std::byte* src, std::byte* dst, size_t nbytes) override;
  absl::Status DoCopyToHost(const std::byte* src, std::byte* dst, size_t nbytes) override;
  absl::Status DoCopy(const std::byte* src, std::byte* dst, size_t nbytes) override;
  absl::Status DoCopyStrided(const std::byte* src, std::byte* dst, const StridedCopyLayout& layout,
                             size_t element_size) override;
  absl::Status DoSetZero(std::byte* data, size_t nbytes) override;
  absl::StatusOr<std::unique_ptr<HostToSpaceWriter>> DoWriteFromHost(std::byte* dst,
                                                                     size_t nbytes) override;
  absl::Status DoReadToHost(const std::byte* src, size_t nbytes, size_t piece_bytes,
                            absl::FunctionRef<bool(std::span<const std::byte>)> consume) override;
  bool DeviceMemoryInfo(int64_t* free_bytes, int64_t* total_bytes) const override;
  absl::Status DoGemm(const GemmArgs& args) override;
  absl::Status DoBinary(BinaryOp op, DType dtype, const std::byte* a, const std::byte* b,
                        std::byte* out, const BroadcastLayout& layout) override;
  absl::Status DoUnary(UnaryOp op, DType dtype, const std::byte* x, std::byte* out,
                       int64_t n) override;
  absl::Status DoWhere(DType dtype, const std::byte* cond, const std::byte* a, const std::byte* b,
                       std::byte* out, const BroadcastLayout3& layout) override;
  absl::Status DoReduceAlongDim(const ReduceDimArgs& args) override;
  absl::Status DoArgReduceAlongDim(const ReduceDimArgs& args) override;
  absl::Status DoSortAlongDim(const SortDimArgs& args) override;
  absl::Status DoScanAlongDim(const ReduceDimArgs& args) override;
  absl::Status DoSoftmaxAlongDim(const SoftmaxDimArgs& args) override;
  absl::Status DoSoftmaxBackward(const SoftmaxDimArgs& args) override;
  absl::Status DoReduceInto(ReduceOp op, DType dtype, std::byte* acc, const std::byte* in,
                            int64_t n) override;
  absl::Status DoDivideInPlace(DType dtype, std::byte* data, int64_t n, int64_t divisor) override;
  absl::Status DoCast(DType from, const std::byte* src, DType to, std::byte* dst,
                      int64_t n) override;
  absl::Status DoFill(std::byte* data, int64_t n, const std::byte* value,
                      size_t element_size) override;
  absl::Status DoRandomFill(const RandomFillArgs& args) override;
  // The indexing kernels (cuda_index.cc, cuda_index_kernels.cu).
  absl::StatusOr<int64_t> DoFindIndexOutside(const std::byte* index, int64_t count, int64_t lo,
                                             int64_t hi) override;
  absl::Status DoWrapIndices(std::byte* index, int64_t count, int64_t size) override;
  absl::Status DoGather(const GatherArgs& args) override;
  absl::Status DoScatter(const ScatterArgs& args) override;
  absl::Status DoIndexSelect(const IndexSelectArgs& args) override;
  // The neural-network kernels (cuda_nn.cc, cuda_nn_kernels.cu, cuda_attention.cc).
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
  CudaBackend(int ordinal, std::string name, CUstream_st* stream, CUstream_st* copy_stream,
              CUmemPoolHandle_st* pool, cublasContext* cublas);
  // Makes this backend's device current on the calling thread.
  absl::Status UseDevice() const;

  const int ordinal_;
  const std::string name_;
  CUstream_st* const stream_;
  CUstream_st* const copy_stream_;  // staged uploads and downloads
  CUmemPoolHandle_st* const pool_;
  cublasContext* const cublas_;
  std::unique_ptr<PinnedStaging> staging_;
};

// MakeBackend's CUDA branch: the backend of device `ordinal`.
absl::StatusOr<std::unique_ptr<KernelBackend>> MakeCudaBackend(int ordinal);
// ListCudaDevices' CUDA branch.
absl::StatusOr<std::vector<DeviceDescription>> DescribeCudaDevices();

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CUDA_CUDA_BACKEND_H_
