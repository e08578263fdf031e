#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/convert_value.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/host_element.h"

namespace tessera::kernels {
namespace {

// a op b on compute-type values; integers wrap (computed unsigned), bool add/mul are or/and.
template <BinaryOp kOp, typename C>
C ApplyBinary(C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return kOp == BinaryOp::kMul ? (a && b) : (a || b);
  } else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    if constexpr (kOp == BinaryOp::kAdd)
      return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
    if constexpr (kOp == BinaryOp::kSub)
      return static_cast<C>(static_cast<U>(a) - static_cast<U>(b));
    if constexpr (kOp == BinaryOp::kMul)
      return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
    return C{0};  // kDiv is rejected for integers before dispatch
  } else {
    if constexpr (kOp == BinaryOp::kAdd) return a + b;
    if constexpr (kOp == BinaryOp::kSub) return a - b;
    if constexpr (kOp == BinaryOp::kMul) return a * b;
    return a / b;
  }
}

// out = f(a, b) over a broadcast layout; the innermost dim runs as a plain loop.
template <typename T, typename F>
void ForEachBroadcast(const BroadcastLayout& layout, const T* a, const T* b, T* out, F f) {
  const int rank = static_cast<int>(layout.shape.size());
  if (rank == 0) {
    out[0] = f(a[0], b[0]);
    return;
  }
  const int64_t inner = layout.shape[rank - 1];
  const int64_t sa = layout.a_strides[rank - 1], sb = layout.b_strides[rank - 1];
  int64_t outer = 1;
  for (int d = 0; d + 1 < rank; ++d) outer *= layout.shape[d];
  std::vector<int64_t> index(rank > 1 ? rank - 1 : 0, 0);
  int64_t offset_a = 0, offset_b = 0;
  for (int64_t o = 0; o < outer; ++o) {
    T* dst = out + o * inner;
    const T* pa = a + offset_a;
    const T* pb = b + offset_b;
    if (sa == 1 && sb == 1) {
      for (int64_t i = 0; i < inner; ++i) dst[i] = f(pa[i], pb[i]);
    } else if (sa == 1 && sb == 0) {
      const T vb = pb[0];
      for (int64_t i = 0; i < inner; ++i) dst[i] = f(pa[i], vb);
    } else if (sa == 0 && sb == 1) {
      const T va = pa[0];
      for (int64_t i = 0; i < inner; ++i) dst[i] = f(va, pb[i]);
    } else {
      for (int64_t i = 0; i < inner; ++i) dst[i] = f(pa[i * sa], pb[i * sb]);
    }
    for (int d = rank - 2; d >= 0; --d) {
      offset_a += layout.a_strides[d];
      offset_b += layout.b_strides[d];
      if (++index[d] < layout.shape[d]) break;
      offset_a -= layout.a_strides[d] * layout.shape[d];
      offset_b -= layout.b_strides[d] * layout.shape[d];
      index[d] = 0;
    }
  }
}

template <typename T, BinaryOp kOp>
void BinaryTyped(const BroadcastLayout& layout, const std::byte* a, const std::byte* b,
                 std::byte* out) {
  ForEachBroadcast(layout, reinterpret_cast<const T*>(a), reinterpret_cast<const T*>(b),
                   reinterpret_cast<T*>(out),
                   [](T x, T y) { return Store<T>(ApplyBinary<kOp>(Load(x), Load(y))); });
}

template <Activation kF, typename C>
C ApplyActivation(C v) {
  if constexpr (kF == Activation::kRelu && std::is_unsigned_v<C>) {
    return v;  // bool is rejected before dispatch; unsigned values are never negative
  } else if constexpr (kF == Activation::kRelu) {
    return v < C(0) ? C(0) : v;  // NaN stays NaN
  } else if constexpr (std::is_floating_point_v<C>) {
    if constexpr (kF == Activation::kGelu) {
      return C(0.5) * v * (C(1) + std::erf(v * C(0.70710678118654752440)));
    } else if constexpr (kF == Activation::kGeluTanh) {
      const C inner = C(0.79788456080286535588) * (v + C(0.044715) * v * v * v);
      return C(0.5) * v * (C(1) + Tanh(inner));
    } else if constexpr (kF == Activation::kSilu) {
      return v / (C(1) + Exp(-v));
    } else {
      return Tanh(v);
    }
  } else {
    return v;  // rejected for integers before dispatch
  }
}

template <typename T, Activation kF>
void ActivateTyped(const std::byte* x, std::byte* out, int64_t n) {
  const T* in = reinterpret_cast<const T*>(x);
  T* dst = reinterpret_cast<T*>(out);
  for (int64_t i = 0; i < n; ++i) dst[i] = Store<T>(ApplyActivation<kF>(Load(in[i])));
}

}  // namespace

absl::Status CpuBackend::DoBinary(BinaryOp op, DType dtype, const std::byte* a, const std::byte* b,
                                  std::byte* out, const BroadcastLayout& layout) {
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (op) {
      case BinaryOp::kAdd:
        return BinaryTyped<T, BinaryOp::kAdd>(layout, a, b, out);
      case BinaryOp::kSub:
        return BinaryTyped<T, BinaryOp::kSub>(layout, a, b, out);
      case BinaryOp::kMul:
        return BinaryTyped<T, BinaryOp::kMul>(layout, a, b, out);
      case BinaryOp::kDiv:
        return BinaryTyped<T, BinaryOp::kDiv>(layout, a, b, out);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::DoActivate(Activation f, DType dtype, const std::byte* x, std::byte* out,
                                    int64_t n) {
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (f) {
      case Activation::kRelu:
        return ActivateTyped<T, Activation::kRelu>(x, out, n);
      case Activation::kGelu:
        return ActivateTyped<T, Activation::kGelu>(x, out, n);
      case Activation::kGeluTanh:
        return ActivateTyped<T, Activation::kGeluTanh>(x, out, n);
      case Activation::kTanh:
        return ActivateTyped<T, Activation::kTanh>(x, out, n);
      case Activation::kSilu:
        return ActivateTyped<T, Activation::kSilu>(x, out, n);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::DoCast(DType from, const std::byte* src, DType to, std::byte* dst,
                                int64_t n) {
  VisitDType(from, [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    VisitDType(to, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      const From* in = reinterpret_cast<const From*>(src);
      To* out = reinterpret_cast<To*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        out[i] = Store<To>(ConvertValue<ComputeType<To>>(Load(in[i])));
      }
    });
  });
  return absl::OkStatus();
}

}  // namespace tessera::kernels
