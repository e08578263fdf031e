#include <memory>
#include <type_traits>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/host_element.h"

namespace tessera::kernels {
namespace {

// Accumulator of a sum or product: double for floating types, uint64 (wrapping) for integers.
template <typename C>
using AccType = std::conditional_t<std::is_floating_point_v<C>, double,
                                   std::conditional_t<std::is_same_v<C, bool>, bool, uint64_t>>;

template <typename C>
AccType<C> ToAcc(C v) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
    return static_cast<uint64_t>(static_cast<int64_t>(v));
  } else {
    return v;
  }
}

template <typename A>
bool IsNaN(A v) {
  if constexpr (std::is_floating_point_v<A>) {
    return v != v;
  } else {
    return false;
  }
}

template <ReduceOp kOp, typename A>
A Combine(A acc, A v) {
  if constexpr (std::is_same_v<A, bool>) {
    return (kOp == ReduceOp::kProduct || kOp == ReduceOp::kMin) ? (acc && v) : (acc || v);
  } else if constexpr (kOp == ReduceOp::kSum || kOp == ReduceOp::kAvg) {
    return acc + v;
  } else if constexpr (kOp == ReduceOp::kProduct) {
    return acc * v;
  } else if constexpr (kOp == ReduceOp::kMax) {
    return (v > acc || IsNaN(v)) ? v : acc;  // NaN propagates
  } else {
    return (v < acc || IsNaN(v)) ? v : acc;
  }
}

template <typename T, ReduceOp kOp>
void ReduceDimTyped(int64_t outer, int64_t size, int64_t inner, const T* x, T* out) {
  using C = ComputeType<T>;
  constexpr bool kAccumulates =
      kOp == ReduceOp::kSum || kOp == ReduceOp::kAvg || kOp == ReduceOp::kProduct;
  using A = std::conditional_t<kAccumulates, AccType<C>, C>;
  auto widen = [](T v) -> A {
    if constexpr (kAccumulates) {
      return ToAcc(Load(v));
    } else {
      return Load(v);
    }
  };
  auto acc = std::make_unique<A[]>(static_cast<size_t>(inner));  // not vector<bool>
  for (int64_t o = 0; o < outer; ++o) {
    const T* slab = x + o * size * inner;
    for (int64_t j = 0; j < inner; ++j) acc[j] = widen(slab[j]);
    for (int64_t i = 1; i < size; ++i) {
      const T* row = slab + i * inner;
      for (int64_t j = 0; j < inner; ++j) acc[j] = Combine<kOp>(acc[j], widen(row[j]));
    }
    T* dst = out + o * inner;
    for (int64_t j = 0; j < inner; ++j) {
      A v = acc[j];
      if constexpr (kOp == ReduceOp::kAvg && std::is_floating_point_v<A>) {
        v /= static_cast<A>(size);
      }
      dst[j] = Store<T>(static_cast<C>(v));
    }
  }
}

}  // namespace

absl::Status CpuBackend::DoReduceAlongDim(const ReduceDimArgs& r) {
  VisitDType(r.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = reinterpret_cast<const T*>(r.x);
    T* out = reinterpret_cast<T*>(r.out);
    switch (r.op) {
      case ReduceOp::kSum:
        return ReduceDimTyped<T, ReduceOp::kSum>(r.outer, r.size, r.inner, x, out);
      case ReduceOp::kAvg:
        return ReduceDimTyped<T, ReduceOp::kAvg>(r.outer, r.size, r.inner, x, out);
      case ReduceOp::kMax:
        return ReduceDimTyped<T, ReduceOp::kMax>(r.outer, r.size, r.inner, x, out);
      case ReduceOp::kMin:
        return ReduceDimTyped<T, ReduceOp::kMin>(r.outer, r.size, r.inner, x, out);
      case ReduceOp::kProduct:
        return ReduceDimTyped<T, ReduceOp::kProduct>(r.outer, r.size, r.inner, x, out);
    }
  });
  return absl::OkStatus();
}

}  // namespace tessera::kernels
