#ifndef TESSERA_KERNELS_CPU_CPU_BACKEND_H_
#define TESSERA_KERNELS_CPU_CPU_BACKEND_H_

#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/cpu/onednn_linear.h"

namespace tessera::kernels {

// The CPU backend: host memory (core's strided copies), OpenBLAS GEMM (and attention's per-head
// products), oneDNN matmul for float32 Linear products (onednn_linear.h), single-threaded loops
// elsewhere (one worker per core slot). BLAS threads follow OPENBLAS_NUM_THREADS, read when the
// process starts, or SetBlasThreads; oneDNN's follow them. Reductions for collectives are core's
// ReduceInto and DivideInPlace. Not final: tests derive a stricter memory space from it
// (tests/support/strict_memory_backend.h).
class CpuBackend : public KernelBackend {
 public:
  CpuBackend() = default;

  std::string device() const override { return "cpu"; }
  bool host_addressable() const override { return true; }
  absl::Status Synchronize() override { return absl::OkStatus(); }

 protected:
  absl::StatusOr<std::byte*> AllocateBytes(size_t nbytes) override;
  void FreeBytes(std::byte* data) override;
  absl::Status DoCopyFromHost(const std::byte* src, std::byte* dst, size_t nbytes) override;
  absl::Status DoCopyToHost(const std::byte* src, std::byte* dst, size_t nbytes) override;
  absl::Status DoCopy(const std::byte* src, std::byte* dst, size_t nbytes) override;
  absl::Status DoCopyStrided(const std::byte* src, std::byte* dst, const StridedCopyLayout& layout,
                             size_t element_size) override;
  absl::Status DoSetZero(std::byte* data, size_t nbytes) override;
  absl::Status DoGemm(const GemmArgs& args) override;
  absl::Status DoLinearProduct(const GemmArgs& args, const PreparedWeight* prepared) override;
  absl::StatusOr<std::shared_ptr<const PreparedWeight>> DoPrepareLinearWeight(
      const ConstTensorView& w, int64_t rows) override;
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
  absl::StatusOr<int64_t> DoFindIndexOutside(const std::byte* index, int64_t count, int64_t lo,
                                             int64_t hi) override;
  absl::Status DoWrapIndices(std::byte* index, int64_t count, int64_t size) override;
  absl::Status DoGather(const GatherArgs& args) override;
  absl::Status DoScatter(const ScatterArgs& args) override;
  absl::Status DoIndexSelect(const IndexSelectArgs& args) override;
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
  OnednnLinear linear_;
};

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_CPU_BACKEND_H_
