#ifndef TESSERA_KERNELS_DIM_OPS_H_
#define TESSERA_KERNELS_DIM_OPS_H_

// What the kernels along a dim (reductions, scans, arg-reductions, sorts, softmax) compute, for
// host and device code (C++17): the accumulator types and the per-line rules both backends
// instantiate, on compute-type values. `Math` is as in elementwise_ops.h.

#include <cstdint>
#include <type_traits>

#include "kernels/elementwise_ops.h"
#include "kernels/host_device.h"
#include "kernels/ops.h"

namespace tessera::kernels {

// Accumulator of a sum or product: double for floating types, uint64 (wrapping) for integers,
// bool for bool.
template <typename C>
using AccType = std::conditional_t<std::is_floating_point_v<C>, double,
                                   std::conditional_t<std::is_same_v<C, bool>, bool, uint64_t>>;

// v in its accumulator type (integers sign-extended to 64 bits).
template <typename C>
TESSERA_HOST_DEVICE AccType<C> ToAcc(C v) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
    return static_cast<uint64_t>(static_cast<int64_t>(v));
  } else {
    return v;
  }
}

// One step of a cumulative sum or product in the accumulator type (not bool).
template <bool kProduct, typename A>
TESSERA_HOST_DEVICE A ScanStep(A acc, A v) {
  return kProduct ? static_cast<A>(acc * v) : static_cast<A>(acc + v);
}

// True iff `v`, met after `best`, becomes the argmax (kMax) or argmin: strictly beyond it, or the
// first NaN (NaN counts as the extreme, as torch.argmax).
template <bool kMax, typename C>
TESSERA_HOST_DEVICE bool ArgReplaces(C best, C v) {
  if (IsNaNValue(best)) return false;
  if (IsNaNValue(v)) return true;
  return kMax ? best < v : v < best;
}

// True iff `a` sorts strictly before `b`, ascending or (kDescending) descending, NaN above every
// number as torch.sort; equal values and two NaNs are not, so a stable sort keeps their order.
template <bool kDescending, typename C>
TESSERA_HOST_DEVICE bool SortsBefore(C a, C b) {
  if (IsNaNValue(a)) return kDescending && !IsNaNValue(b);
  if (IsNaNValue(b)) return !kDescending;
  return kDescending ? b < a : a < b;
}

// The max of a softmax line folded in one element (or one partial max) at a time: NaN wins and
// stays (a NaN makes its line NaN).
template <typename C>
TESSERA_HOST_DEVICE C LineMax(C max, C v) {
  return ArgReplaces<true>(max, v) ? v : max;
}

// What a softmax line's outputs are divided by (softmax) or less (log_softmax), from the float64
// sum of exp(x - max) over the line: the sum or its log.
template <typename Math, typename C>
TESSERA_HOST_DEVICE C SoftmaxNorm(SoftmaxKind kind, double sum) {
  return kind == SoftmaxKind::kLogSoftmax ? static_cast<C>(Math::Log(sum)) : static_cast<C>(sum);
}

// The output for input v of a line with this max and norm. A line whose max is -inf gives NaN
// (-inf - -inf), or 0 for kSafeSoftmax.
template <typename Math, typename C>
TESSERA_HOST_DEVICE C SoftmaxOutput(SoftmaxKind kind, C v, C max, C norm) {
  if (kind == SoftmaxKind::kSafeSoftmax && max < C(0) && IsNonFinite(max)) return C(0);
  return kind == SoftmaxKind::kLogSoftmax ? v - max - norm : Math::Exp(v - max) / norm;
}

// The softmax of one line of `size` >= 1 values in order: load(i) gives element i in compute type
// C, store(i, y) writes output i. The max is subtracted; exp is in C, the sum of exps in float64.
template <typename Math, typename C, typename Load, typename Store>
TESSERA_HOST_DEVICE void SoftmaxLine(SoftmaxKind kind, int64_t size, Load load, Store store) {
  C max = load(0);
  for (int64_t i = 1; i < size; ++i) max = LineMax(max, load(i));
  double sum = 0;
  for (int64_t i = 0; i < size; ++i) sum += static_cast<double>(Math::Exp(load(i) - max));
  const C norm = SoftmaxNorm<Math, C>(kind, sum);
  for (int64_t i = 0; i < size; ++i) store(i, SoftmaxOutput<Math>(kind, load(i), max, norm));
}

// What element (y, dy) adds to the float64 line sum of the softmax's gradient: dy * y, or dy for
// log_softmax.
template <typename C>
TESSERA_HOST_DEVICE double SoftmaxBackwardTerm(SoftmaxKind kind, C y, C dy) {
  return kind == SoftmaxKind::kLogSoftmax ? static_cast<double>(dy) : static_cast<double>(dy * y);
}

// dx from y, dy and the line's sum s of SoftmaxBackwardTerm: softmax (and _safe_softmax)
// y * (dy - s), log_softmax dy - exp(y) * s.
template <typename Math, typename C>
TESSERA_HOST_DEVICE C SoftmaxGradient(SoftmaxKind kind, C y, C dy, C s) {
  return kind == SoftmaxKind::kLogSoftmax ? dy - Math::Exp(y) * s : y * (dy - s);
}

// The gradient of one line in order, from its y (load_y) and dy (load_dy).
template <typename Math, typename C, typename LoadY, typename LoadDy, typename Store>
TESSERA_HOST_DEVICE void SoftmaxBackwardLine(SoftmaxKind kind, int64_t size, LoadY load_y,
                                             LoadDy load_dy, Store store) {
  double sum = 0;
  for (int64_t i = 0; i < size; ++i) sum += SoftmaxBackwardTerm(kind, load_y(i), load_dy(i));
  const C s = static_cast<C>(sum);
  for (int64_t i = 0; i < size; ++i) {
    store(i, SoftmaxGradient<Math>(kind, load_y(i), load_dy(i), s));
  }
}

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_DIM_OPS_H_
