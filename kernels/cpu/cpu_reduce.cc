// The CPU backend's kernels along a dim other than softmax: reductions, arg-reductions and scans,
// slab by slab ([size, inner] at a time, the inner dim as the vector loop), and sorts, line by
// line.

#include <algorithm>
#include <memory>
#include <numeric>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/dim_ops.h"
#include "kernels/host_element.h"

namespace tessera::kernels {
namespace {

template <ReduceOp kOp, typename A>
A Combine(A acc, A v) {
  if constexpr (std::is_same_v<A, bool>) {
    return (kOp == ReduceOp::kProduct || kOp == ReduceOp::kMin) ? (acc && v) : (acc || v);
  } else if constexpr (kOp == ReduceOp::kSum || kOp == ReduceOp::kAvg) {
    return acc + v;
  } else if constexpr (kOp == ReduceOp::kProduct) {
    return acc * v;
  } else if constexpr (kOp == ReduceOp::kMax) {
    return (v > acc || IsNaNValue(v)) ? v : acc;  // NaN propagates
  } else {
    return (v < acc || IsNaNValue(v)) ? v : acc;
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

// The index of the first maximum (kMax) or minimum along the dim of each [outer, inner] position.
template <typename T, bool kMax>
void ArgReduceDimTyped(int64_t outer, int64_t size, int64_t inner, const T* x, int64_t* out) {
  using C = ComputeType<T>;
  auto best = std::make_unique<C[]>(static_cast<size_t>(inner));  // not vector<bool>
  for (int64_t o = 0; o < outer; ++o) {
    const T* slab = x + o * size * inner;
    int64_t* index = out + o * inner;
    for (int64_t j = 0; j < inner; ++j) {
      best[j] = Load(slab[j]);
      index[j] = 0;
    }
    for (int64_t i = 1; i < size; ++i) {
      const T* row = slab + i * inner;
      for (int64_t j = 0; j < inner; ++j) {
        const C v = Load(row[j]);
        if (ArgReplaces<kMax>(best[j], v)) {
          best[j] = v;
          index[j] = i;
        }
      }
    }
  }
}

// Each line along the dim stably sorted, ascending or (kDescending) descending: its positions by
// SortsBefore on the loaded values, then the elements gathered in that order.
template <typename T, bool kDescending>
void SortDimTyped(int64_t outer, int64_t size, int64_t inner, const T* x, T* values,
                  int64_t* indices) {
  using C = ComputeType<T>;
  auto line = std::make_unique<C[]>(static_cast<size_t>(size));  // not vector<bool>
  std::vector<int64_t> order(static_cast<size_t>(size));
  const auto before = [&](int64_t a, int64_t b) {
    return SortsBefore<kDescending>(line[a], line[b]);
  };
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      const int64_t start = o * size * inner + j;
      for (int64_t i = 0; i < size; ++i) line[i] = Load(x[start + i * inner]);
      std::iota(order.begin(), order.end(), int64_t{0});
      std::stable_sort(order.begin(), order.end(), before);
      for (int64_t i = 0; i < size; ++i) {
        values[start + i * inner] = x[start + order[i] * inner];
        indices[start + i * inner] = order[i];
      }
    }
  }
}

// The inclusive cumulative sum or product (kProduct) along the dim, in the accumulator type.
template <typename T, bool kProduct>
void ScanDimTyped(int64_t outer, int64_t size, int64_t inner, const T* x, T* out) {
  using C = ComputeType<T>;
  using A = AccType<C>;
  auto acc = std::make_unique<A[]>(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o) {
    const T* src = x + o * size * inner;
    T* dst = out + o * size * inner;
    for (int64_t j = 0; j < inner; ++j) acc[j] = kProduct ? A(1) : A(0);
    for (int64_t i = 0; i < size; ++i) {
      for (int64_t j = 0; j < inner; ++j) {
        acc[j] = ScanStep<kProduct>(acc[j], ToAcc(Load(src[i * inner + j])));
        dst[i * inner + j] = Store<T>(static_cast<C>(acc[j]));
      }
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

absl::Status CpuBackend::DoArgReduceAlongDim(const ReduceDimArgs& r) {
  VisitDType(r.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = reinterpret_cast<const T*>(r.x);
    int64_t* out = reinterpret_cast<int64_t*>(r.out);
    if (r.op == ReduceOp::kMax) {
      ArgReduceDimTyped<T, true>(r.outer, r.size, r.inner, x, out);
    } else {
      ArgReduceDimTyped<T, false>(r.outer, r.size, r.inner, x, out);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::DoSortAlongDim(const SortDimArgs& r) {
  VisitDType(r.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = reinterpret_cast<const T*>(r.x);
    T* values = reinterpret_cast<T*>(r.values);
    int64_t* indices = reinterpret_cast<int64_t*>(r.indices);
    if (r.descending) {
      SortDimTyped<T, true>(r.outer, r.size, r.inner, x, values, indices);
    } else {
      SortDimTyped<T, false>(r.outer, r.size, r.inner, x, values, indices);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::DoScanAlongDim(const ReduceDimArgs& r) {
  VisitDType(r.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      const T* x = reinterpret_cast<const T*>(r.x);
      T* out = reinterpret_cast<T*>(r.out);
      if (r.op == ReduceOp::kProduct) {
        ScanDimTyped<T, true>(r.outer, r.size, r.inner, x, out);
      } else {
        ScanDimTyped<T, false>(r.outer, r.size, r.inner, x, out);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace tessera::kernels
