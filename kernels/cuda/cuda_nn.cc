// The CUDA backend's neural-network kernels: not written yet, each call is UNIMPLEMENTED naming
// the kernel.

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_backend.h"

namespace tessera::kernels {
namespace {

absl::Status NotYet(absl::string_view kernel) {
  return absl::UnimplementedError(absl::StrCat(kernel, " is not implemented on cuda yet"));
}

}  // namespace

absl::Status CudaBackend::DoActivateBackward(Activation f, DType, const std::byte*,
                                             const std::byte*, std::byte*, int64_t) {
  return NotYet(absl::StrCat(ActivationName(f), " backward"));
}

absl::Status CudaBackend::DoLayerNorm(const NormArgs&) { return NotYet("layer_norm"); }

absl::Status CudaBackend::DoLayerNormBackward(const NormBackwardArgs&) {
  return NotYet("layer_norm backward");
}

absl::Status CudaBackend::DoRmsNorm(const NormArgs&) { return NotYet("rms_norm"); }

absl::Status CudaBackend::DoRmsNormBackward(const NormBackwardArgs&) {
  return NotYet("rms_norm backward");
}

absl::Status CudaBackend::DoEmbedding(const EmbeddingArgs&) { return NotYet("embedding"); }

absl::Status CudaBackend::DoEmbeddingBackward(const EmbeddingBackwardArgs&) {
  return NotYet("embedding backward");
}

absl::Status CudaBackend::DoAttention(const AttentionArgs&) { return NotYet("attention"); }

absl::Status CudaBackend::DoAttentionBackward(const AttentionBackwardArgs&) {
  return NotYet("attention backward");
}

absl::Status CudaBackend::DoSgdStep(const SgdArgs&) { return NotYet("sgd step"); }

}  // namespace tessera::kernels
