#ifndef TESSERA_TESTS_STRICT_MEMORY_BACKEND_H_
#define TESSERA_TESTS_STRICT_MEMORY_BACKEND_H_

// A CPU backend that holds code written against the memory-space seam (the worker's execution) to
// what a GPU would demand: it calls its memory not host-addressable, so uploads and downloads take
// the staged paths a device takes, and every pointer it is handed must lie in one of its own live
// allocations (on a GPU, host memory passed as device memory would fault). A pointer that does not
// fails the operation with INTERNAL naming it, and is counted in violations().

#include <cstdint>
#include <iterator>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"
#include "kernels/cpu/cpu_backend.h"

namespace tessera::testing {

class StrictMemoryBackend final : public kernels::CpuBackend {
 public:
  bool host_addressable() const override { return false; }
  int64_t violations() const {
    absl::MutexLock lock(&mu_);
    return violations_;
  }

 protected:
  absl::StatusOr<std::byte*> AllocateBytes(size_t nbytes) override {
    absl::StatusOr<std::byte*> p = CpuBackend::AllocateBytes(nbytes);
    if (p.ok()) {
      absl::MutexLock lock(&mu_);
      live_[reinterpret_cast<uintptr_t>(*p)] = nbytes;
    }
    return p;
  }
  void FreeBytes(std::byte* data) override {
    {
      absl::MutexLock lock(&mu_);
      live_.erase(reinterpret_cast<uintptr_t>(data));
    }
    CpuBackend::FreeBytes(data);
  }

  absl::Status DoCopyFromHost(const std::byte* src, std::byte* dst, size_t n) override {
    RETURN_IF_ERROR(Mine("copy from host", dst));
    return CpuBackend::DoCopyFromHost(src, dst, n);
  }
  absl::Status DoCopyToHost(const std::byte* src, std::byte* dst, size_t n) override {
    RETURN_IF_ERROR(Mine("copy to host", src));
    return CpuBackend::DoCopyToHost(src, dst, n);
  }
  absl::Status DoCopy(const std::byte* src, std::byte* dst, size_t n) override {
    RETURN_IF_ERROR(Mine("copy", src, dst));
    return CpuBackend::DoCopy(src, dst, n);
  }
  absl::Status DoCopyStrided(const std::byte* src, std::byte* dst, const StridedCopyLayout& layout,
                             size_t element_size) override {
    RETURN_IF_ERROR(Mine("strided copy", src, dst));
    return CpuBackend::DoCopyStrided(src, dst, layout, element_size);
  }
  absl::Status DoSetZero(std::byte* data, size_t n) override {
    RETURN_IF_ERROR(Mine("zero", data));
    return CpuBackend::DoSetZero(data, n);
  }
  absl::Status DoGemm(const GemmArgs& g) override {
    RETURN_IF_ERROR(Mine("gemm", g.a, g.b, g.c));
    return CpuBackend::DoGemm(g);
  }
  absl::Status DoBinary(kernels::BinaryOp op, DType dtype, const std::byte* a, const std::byte* b,
                        std::byte* out, const kernels::BroadcastLayout& layout) override {
    RETURN_IF_ERROR(Mine("binary", a, b, out));
    return CpuBackend::DoBinary(op, dtype, a, b, out, layout);
  }
  absl::Status DoUnary(kernels::UnaryOp op, DType dtype, const std::byte* x, std::byte* out,
                       int64_t n) override {
    RETURN_IF_ERROR(Mine("unary", x, out));
    return CpuBackend::DoUnary(op, dtype, x, out, n);
  }
  absl::Status DoWhere(DType dtype, const std::byte* cond, const std::byte* a, const std::byte* b,
                       std::byte* out, const kernels::BroadcastLayout3& layout) override {
    RETURN_IF_ERROR(Mine("where", cond, a, b, out));
    return CpuBackend::DoWhere(dtype, cond, a, b, out, layout);
  }
  absl::Status DoReduceAlongDim(const ReduceDimArgs& r) override {
    RETURN_IF_ERROR(Mine("reduce along a dim", r.x, r.out));
    return CpuBackend::DoReduceAlongDim(r);
  }
  absl::Status DoArgReduceAlongDim(const ReduceDimArgs& r) override {
    RETURN_IF_ERROR(Mine("arg-reduce along a dim", r.x, r.out));
    return CpuBackend::DoArgReduceAlongDim(r);
  }
  absl::Status DoSortAlongDim(const SortDimArgs& s) override {
    RETURN_IF_ERROR(Mine("sort along a dim", s.x, s.values, s.indices));
    return CpuBackend::DoSortAlongDim(s);
  }
  absl::Status DoScanAlongDim(const ReduceDimArgs& r) override {
    RETURN_IF_ERROR(Mine("scan along a dim", r.x, r.out));
    return CpuBackend::DoScanAlongDim(r);
  }
  absl::Status DoSoftmaxAlongDim(const SoftmaxDimArgs& a) override {
    RETURN_IF_ERROR(Mine("softmax", a.in, a.out));
    return CpuBackend::DoSoftmaxAlongDim(a);
  }
  absl::Status DoSoftmaxBackward(const SoftmaxDimArgs& a) override {
    RETURN_IF_ERROR(Mine("softmax backward", a.in, a.dy, a.out));
    return CpuBackend::DoSoftmaxBackward(a);
  }
  absl::Status DoReduceInto(ReduceOp op, DType dtype, std::byte* acc, const std::byte* in,
                            int64_t n) override {
    RETURN_IF_ERROR(Mine("reduce", acc, in));
    return CpuBackend::DoReduceInto(op, dtype, acc, in, n);
  }
  absl::Status DoDivideInPlace(DType dtype, std::byte* data, int64_t n, int64_t d) override {
    RETURN_IF_ERROR(Mine("divide", data));
    return CpuBackend::DoDivideInPlace(dtype, data, n, d);
  }
  absl::Status DoCast(DType from, const std::byte* src, DType to, std::byte* dst,
                      int64_t n) override {
    RETURN_IF_ERROR(Mine("cast", src, dst));
    return CpuBackend::DoCast(from, src, to, dst, n);
  }
  absl::Status DoFill(std::byte* data, int64_t n, const std::byte* value,
                      size_t element_size) override {
    RETURN_IF_ERROR(Mine("fill", data));  // `value` is a host pattern, as on a GPU
    return CpuBackend::DoFill(data, n, value, element_size);
  }
  absl::Status DoRandomFill(const RandomFillArgs& args) override {
    RETURN_IF_ERROR(Mine("random fill", args.out.data));
    return CpuBackend::DoRandomFill(args);
  }
  absl::Status DoActivateBackward(kernels::Activation f, DType dtype, const std::byte* x,
                                  const std::byte* dy, std::byte* dx, int64_t n) override {
    RETURN_IF_ERROR(Mine("activation backward", x, dy, dx));
    return CpuBackend::DoActivateBackward(f, dtype, x, dy, dx, n);
  }
  absl::Status DoLayerNorm(const NormArgs& a) override {
    RETURN_IF_ERROR(Mine("layer_norm", a.x, a.weight, a.bias, a.y, a.mean, a.rstd));
    return CpuBackend::DoLayerNorm(a);
  }
  absl::Status DoLayerNormBackward(const NormBackwardArgs& a) override {
    RETURN_IF_ERROR(
        Mine("layer_norm backward", a.dy, a.x, a.weight, a.mean, a.rstd, a.dx, a.dweight, a.dbias));
    return CpuBackend::DoLayerNormBackward(a);
  }
  absl::Status DoRmsNorm(const NormArgs& a) override {
    RETURN_IF_ERROR(Mine("rms_norm", a.x, a.weight, a.y, a.rstd));
    return CpuBackend::DoRmsNorm(a);
  }
  absl::Status DoRmsNormBackward(const NormBackwardArgs& a) override {
    RETURN_IF_ERROR(Mine("rms_norm backward", a.dy, a.x, a.weight, a.rstd, a.dx, a.dweight));
    return CpuBackend::DoRmsNormBackward(a);
  }
  absl::Status DoEmbedding(const EmbeddingArgs& a) override {
    RETURN_IF_ERROR(Mine("embedding", a.ids, a.weight, a.out));
    return CpuBackend::DoEmbedding(a);
  }
  absl::Status DoEmbeddingBackward(const EmbeddingBackwardArgs& a) override {
    RETURN_IF_ERROR(Mine("embedding backward", a.ids, a.dy, a.dweight));
    return CpuBackend::DoEmbeddingBackward(a);
  }
  absl::Status DoAttention(const AttentionArgs& a) override {
    RETURN_IF_ERROR(Mine("attention", a.q, a.k, a.v, a.out, a.probs));
    return CpuBackend::DoAttention(a);
  }
  absl::Status DoAttentionBackward(const AttentionBackwardArgs& a) override {
    RETURN_IF_ERROR(Mine("attention backward", a.q, a.k, a.v, a.probs, a.dout, a.dq, a.dk, a.dv));
    return CpuBackend::DoAttentionBackward(a);
  }
  absl::Status DoSgdStep(const SgdArgs& a) override {
    RETURN_IF_ERROR(Mine("sgd step", a.param, a.grad, a.momentum_buf));
    return CpuBackend::DoSgdStep(a);
  }

 private:
  // OK if every non-null pointer lies in a live allocation of this backend.
  template <typename... Ptr>
  absl::Status Mine(absl::string_view op, Ptr... pointers) {
    absl::MutexLock lock(&mu_);
    for (const void* p : {static_cast<const void*>(pointers)...}) {
      if (p == nullptr) continue;
      const uintptr_t at = reinterpret_cast<uintptr_t>(p);
      auto it = live_.upper_bound(at);
      if (it != live_.begin() && at < std::prev(it)->first + std::prev(it)->second) continue;
      ++violations_;
      return absl::InternalError(absl::StrCat(op, " was handed 0x", absl::Hex(at),
                                              ", which is not memory of this backend"));
    }
    return absl::OkStatus();
  }

  mutable absl::Mutex mu_;
  std::map<uintptr_t, size_t> live_ ABSL_GUARDED_BY(mu_);  // start -> bytes
  int64_t violations_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_STRICT_MEMORY_BACKEND_H_
