// The CPU backend's elementwise neural-network kernels: activation gradients, embedding lookup and
// its gradient, and the SGD step.

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/float_dispatch.h"
#include "kernels/cpu/vector_math.h"

namespace tessera::kernels {
namespace {

// f'(v) of a smooth activation, in the element type (float32 or float64).
template <Activation kF, typename T>
T ActivationDerivative(T v) {
  if constexpr (kF == Activation::kGelu) {
    const T cdf = T(0.5) * (T(1) + std::erf(v * T(0.70710678118654752440)));
    const T pdf = T(0.39894228040143267794) * std::exp(T(-0.5) * v * v);
    return cdf + v * pdf;
  } else if constexpr (kF == Activation::kGeluTanh) {
    constexpr T kSqrt2OverPi = T(0.79788456080286535588), kCubic = T(0.044715);
    const T t = Tanh(kSqrt2OverPi * (v + kCubic * v * v * v));
    return T(0.5) * (T(1) + t) +
           T(0.5) * v * (T(1) - t * t) * kSqrt2OverPi * (T(1) + T(3) * kCubic * v * v);
  } else if constexpr (kF == Activation::kTanh) {
    const T t = Tanh(v);
    return T(1) - t * t;
  } else {
    const T sigmoid = T(1) / (T(1) + Exp(-v));
    return sigmoid * (T(1) + v * (T(1) - sigmoid));
  }
}

template <typename T, Activation kF>
void ActivateBackwardTyped(const std::byte* x, const std::byte* dy, std::byte* dx, int64_t n) {
  const T* in = reinterpret_cast<const T*>(x);
  const T* grad = reinterpret_cast<const T*>(dy);
  T* out = reinterpret_cast<T*>(dx);
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (kF == Activation::kRelu) {
      out[i] = in[i] <= T(0) ? T(0) : grad[i];  // as torch's threshold_backward: relu'(0) = 0
    } else {
      out[i] = grad[i] * ActivationDerivative<kF>(in[i]);
    }
  }
}

template <typename T>
void ActivateBackwardDispatch(Activation f, const std::byte* x, const std::byte* dy, std::byte* dx,
                              int64_t n) {
  switch (f) {
    case Activation::kRelu:
      return ActivateBackwardTyped<T, Activation::kRelu>(x, dy, dx, n);
    case Activation::kGelu:
      return ActivateBackwardTyped<T, Activation::kGelu>(x, dy, dx, n);
    case Activation::kGeluTanh:
      return ActivateBackwardTyped<T, Activation::kGeluTanh>(x, dy, dx, n);
    case Activation::kTanh:
      return ActivateBackwardTyped<T, Activation::kTanh>(x, dy, dx, n);
    case Activation::kSilu:
      return ActivateBackwardTyped<T, Activation::kSilu>(x, dy, dx, n);
  }
}

template <typename T, typename EmbeddingBackwardArgs>
void EmbeddingBackwardTyped(const EmbeddingBackwardArgs& e) {
  const int64_t* ids = reinterpret_cast<const int64_t*>(e.ids);
  const T* dy = reinterpret_cast<const T*>(e.dy);
  T* dweight = reinterpret_cast<T*>(e.dweight);
  for (int64_t i = 0; i < e.count; ++i) {
    if (ids[i] < e.row_offset || ids[i] - e.row_offset >= e.rows) continue;
    T* dst = dweight + (ids[i] - e.row_offset) * e.dim;
    const T* src = dy + i * e.dim;
    for (int64_t j = 0; j < e.dim; ++j) dst[j] += src[j];
  }
}

template <typename T, typename SgdArgs>
void SgdStepTyped(const SgdArgs& s) {
  T* param = reinterpret_cast<T*>(s.param);
  const T* grad = reinterpret_cast<const T*>(s.grad);
  T* buf = reinterpret_cast<T*>(s.momentum_buf);
  const T lr = static_cast<T>(s.lr), momentum = static_cast<T>(s.momentum),
          weight_decay = static_cast<T>(s.weight_decay);
  for (int64_t i = 0; i < s.n; ++i) {
    T g = grad[i];
    if (s.weight_decay != 0) g += weight_decay * param[i];
    if (buf != nullptr) {
      buf[i] = s.first_step ? g : momentum * buf[i] + g;
      g = buf[i];
    }
    param[i] -= lr * g;
  }
}

}  // namespace

absl::Status CpuBackend::DoActivateBackward(Activation f, DType dtype, const std::byte* x,
                                            const std::byte* dy, std::byte* dx, int64_t n) {
  VisitFloat32Or64(dtype, [&](auto t) { ActivateBackwardDispatch<decltype(t)>(f, x, dy, dx, n); });
  return absl::OkStatus();
}

absl::Status CpuBackend::DoEmbedding(const EmbeddingArgs& e) {
  const int64_t* ids = reinterpret_cast<const int64_t*>(e.ids);
  for (int64_t i = 0; i < e.count; ++i) {
    if (ids[i] < 0 || ids[i] >= e.num_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat("embedding id ", ids[i], " at position ", i,
                                                     " of the ids is outside [0, ",
                                                     e.num_embeddings, ")"));
    }
  }
  const size_t row_bytes = static_cast<size_t>(e.dim) * DTypeSize(e.dtype);
  if (row_bytes == 0) return absl::OkStatus();  // ids checked, nothing to write
  for (int64_t i = 0; i < e.count; ++i) {
    std::byte* dst = e.out + i * row_bytes;
    if (ids[i] >= e.row_offset && ids[i] - e.row_offset < e.rows) {
      std::memcpy(dst, e.weight + (ids[i] - e.row_offset) * row_bytes, row_bytes);
    } else {
      std::memset(dst, 0, row_bytes);  // all-zero bytes are +0.0 in IEEE floats
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::DoEmbeddingBackward(const EmbeddingBackwardArgs& e) {
  VisitFloat32Or64(e.dtype, [&](auto t) { EmbeddingBackwardTyped<decltype(t)>(e); });
  return absl::OkStatus();
}

absl::Status CpuBackend::DoSgdStep(const SgdArgs& s) {
  VisitFloat32Or64(s.dtype, [&](auto t) { SgdStepTyped<decltype(t)>(s); });
  return absl::OkStatus();
}

}  // namespace tessera::kernels
