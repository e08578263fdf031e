// The CPU backend's softmax along a dim and its gradient: each line of x viewed as [outer, size,
// inner] (stride `inner`) through kernels/dim_ops.h's SoftmaxLine and SoftmaxBackwardLine.

#include <cstdint>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/host_math.h"
#include "kernels/dim_ops.h"
#include "kernels/host_element.h"

namespace tessera::kernels {
namespace {

// The lines along the dim of a tensor viewed as [outer, size, inner].
struct DimLines {
  int64_t outer, size, inner;

  // Calls f(start) with the offset of each line's first element.
  template <typename F>
  void ForEach(F f) const {
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t j = 0; j < inner; ++j) f(o * size * inner + j);
    }
  }
};

template <typename T>
void SoftmaxTyped(SoftmaxKind kind, const DimLines& lines, const T* x, T* y) {
  using C = ComputeType<T>;
  const int64_t stride = lines.inner;
  lines.ForEach([&](int64_t start) {
    SoftmaxLine<HostMath, C>(
        kind, lines.size, [&](int64_t i) { return Load(x[start + i * stride]); },
        [&](int64_t i, C v) { y[start + i * stride] = Store<T>(v); });
  });
}

template <typename T>
void SoftmaxBackwardTyped(SoftmaxKind kind, const DimLines& lines, const T* y, const T* dy, T* dx) {
  using C = ComputeType<T>;
  const int64_t stride = lines.inner;
  lines.ForEach([&](int64_t start) {
    SoftmaxBackwardLine<HostMath, C>(
        kind, lines.size, [&](int64_t i) { return Load(y[start + i * stride]); },
        [&](int64_t i) { return Load(dy[start + i * stride]); },
        [&](int64_t i, C v) { dx[start + i * stride] = Store<T>(v); });
  });
}

}  // namespace

absl::Status CpuBackend::DoSoftmaxAlongDim(const SoftmaxDimArgs& a) {
  VisitDType(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloating<T>) {
      SoftmaxTyped(a.kind, DimLines{a.outer, a.size, a.inner}, reinterpret_cast<const T*>(a.in),
                   reinterpret_cast<T*>(a.out));
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::DoSoftmaxBackward(const SoftmaxDimArgs& a) {
  VisitDType(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloating<T>) {
      SoftmaxBackwardTyped(a.kind, DimLines{a.outer, a.size, a.inner},
                           reinterpret_cast<const T*>(a.in), reinterpret_cast<const T*>(a.dy),
                           reinterpret_cast<T*>(a.out));
    }
  });
  return absl::OkStatus();
}

}  // namespace tessera::kernels
