#ifndef TESSERA_KERNELS_ELEMENTWISE_OPS_H_
#define TESSERA_KERNELS_ELEMENTWISE_OPS_H_

// What Unary and Binary compute on one element, for host and device code (C++17): the single
// definition both backends instantiate, on compute-type values (float for float16 and bfloat16).
// Ops a dtype does not take are rejected before dispatch; their instantiations return a
// placeholder.
//
// `Math` is the backend's math library: static functions on float and double named Exp, Expm1,
// Log, Log1p, Log2, Sqrt, Sin, Cos, Tanh, Erf, Floor, Ceil, Rint (half to even), Trunc, Fabs (one
// argument) and Fmod, Pow, Copysign (two), callable where the op runs (kernels/cpu/host_math.h,
// kernels/cuda/device_math.cuh).

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/host_device.h"
#include "kernels/ops.h"

namespace tessera::kernels {

// True iff v is NaN (never for integers).
template <typename C>
TESSERA_HOST_DEVICE bool IsNaNValue(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return v != v;
  } else {
    return false;
  }
}

// True iff v is +-inf or NaN (v - v is NaN exactly then; never for integers).
template <typename C>
TESSERA_HOST_DEVICE bool IsNonFinite(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    const C zero = v - v;
    return zero != zero;
  } else {
    return false;
  }
}

// Integer arithmetic modulo 2^bits, computed unsigned (C a non-bool integer type).
template <typename C>
TESSERA_HOST_DEVICE C WrapAdd(C a, C b) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
}
template <typename C>
TESSERA_HOST_DEVICE C WrapSub(C a, C b) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(static_cast<U>(a) - static_cast<U>(b));
}
template <typename C>
TESSERA_HOST_DEVICE C WrapMul(C a, C b) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
}

// base^exp for integers as torch's kernel: by squaring, wrapping; a negative exponent gives 1 for
// base 1, +-1 for base -1, and 0 otherwise.
template <typename C>
TESSERA_HOST_DEVICE C IntPow(C base, C exp) {
  if constexpr (std::is_signed_v<C>) {
    if (exp < 0) {
      if (base == 1) return C(1);
      if (base == -1) return (exp & 1) != 0 ? C(-1) : C(1);
      return C(0);
    }
  }
  C result = 1;
  for (auto e = static_cast<std::make_unsigned_t<C>>(exp); e != 0; e >>= 1) {
    if ((e & 1) != 0) result = WrapMul(result, base);
    base = WrapMul(base, base);
  }
  return result;
}

// a - b * floor(a / b), the sign of the divisor (Python's %, torch.remainder); 0 for an integer
// b == 0.
template <typename Math, typename C>
TESSERA_HOST_DEVICE C Remainder(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    C mod = Math::Fmod(a, b);
    if (mod != C(0) && ((b < C(0)) != (mod < C(0)))) mod += b;
    return mod;
  } else if constexpr (std::is_unsigned_v<C>) {
    return b == C(0) ? C(0) : static_cast<C>(a % b);
  } else {
    if (b == C(0) || b == C(-1)) return C(0);  // x % -1 is 0; INT_MIN % -1 would overflow
    const C r = static_cast<C>(a % b);
    return (r != C(0) && ((r < C(0)) != (b < C(0)))) ? static_cast<C>(r + b) : r;
  }
}

// floor(a / b) (torch.floor_divide, whose floating rule this follows); 0 for an integer b == 0,
// and integer quotients wrap (INT_MIN / -1 is INT_MIN).
template <typename Math, typename C>
TESSERA_HOST_DEVICE C FloorDivide(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (b == C(0)) return a / b;
    const C mod = Math::Fmod(a, b);
    C div = (a - mod) / b;
    if (mod != C(0) && ((b < C(0)) != (mod < C(0)))) div -= C(1);
    if (div == C(0)) return Math::Copysign(C(0), a / b);
    C floordiv = Math::Floor(div);
    if (div - floordiv > C(0.5)) floordiv += C(1);
    return floordiv;
  } else if constexpr (std::is_unsigned_v<C>) {
    return b == C(0) ? C(0) : static_cast<C>(a / b);
  } else {
    if (b == C(0)) return C(0);
    if (b == C(-1)) return WrapSub(C(0), a);
    const C q = static_cast<C>(a / b);
    return (a % b != 0 && ((a < C(0)) != (b < C(0)))) ? static_cast<C>(q - 1) : q;
  }
}

// The result type of an op on compute type C.
template <BinaryOp kOp, typename C>
using BinaryResult = std::conditional_t<GivesBool(kOp), bool, C>;
template <UnaryOp kOp, typename C>
using UnaryResult = std::conditional_t<GivesBool(kOp), bool, C>;

// a op b. bool add / mul / maximum / minimum are or / and / or / and; logical ops treat nonzero
// (and NaN) as true; maximum and minimum propagate NaN; integers wrap.
template <typename Math, BinaryOp kOp, typename C>
TESSERA_HOST_DEVICE BinaryResult<kOp, C> ApplyBinary(C a, C b) {
  constexpr bool kBool = std::is_same_v<C, bool>;
  constexpr bool kFloat = std::is_floating_point_v<C>;
  if constexpr (kOp == BinaryOp::kEq) return a == b;
  if constexpr (kOp == BinaryOp::kNe) return a != b;
  if constexpr (kOp == BinaryOp::kLt) return a < b;
  if constexpr (kOp == BinaryOp::kLe) return a <= b;
  if constexpr (kOp == BinaryOp::kGt) return a > b;
  if constexpr (kOp == BinaryOp::kGe) return a >= b;
  if constexpr (kOp == BinaryOp::kLogicalAnd) return a != C(0) && b != C(0);
  if constexpr (kOp == BinaryOp::kLogicalOr) return a != C(0) || b != C(0);
  if constexpr (kOp == BinaryOp::kLogicalXor) return (a != C(0)) != (b != C(0));
  if constexpr (kOp == BinaryOp::kMaximum || kOp == BinaryOp::kMinimum) {
    if (IsNaNValue(a)) return a;
    if (IsNaNValue(b)) return b;
    if constexpr (kOp == BinaryOp::kMaximum) return a < b ? b : a;
    if constexpr (kOp == BinaryOp::kMinimum) return b < a ? b : a;
  }
  if constexpr (kBool) {
    if constexpr (kOp == BinaryOp::kMul || kOp == BinaryOp::kBitwiseAnd) return a && b;
    if constexpr (kOp == BinaryOp::kBitwiseXor) return a != b;
    if constexpr (!GivesBool(kOp)) return a || b;  // add, bitwise_or; the rest are rejected
  } else if constexpr (kFloat) {
    if constexpr (kOp == BinaryOp::kAdd) return a + b;
    if constexpr (kOp == BinaryOp::kSub) return a - b;
    if constexpr (kOp == BinaryOp::kMul) return a * b;
    if constexpr (kOp == BinaryOp::kDiv) return a / b;
    if constexpr (kOp == BinaryOp::kPow) {
      // x ** 2 (an RMSNorm's square) as one rounded product, the value pow rounds to, as torch's
      // own kernel computes it, without pow's cost.
      if (b == C(2)) return a * a;
      return Math::Pow(a, b);
    }
    if constexpr (kOp == BinaryOp::kRemainder) return Remainder<Math>(a, b);
    if constexpr (kOp == BinaryOp::kFloorDivide) return FloorDivide<Math>(a, b);
    if constexpr (kOp >= BinaryOp::kBitwiseAnd) return a;  // rejected for floating dtypes
  } else {
    if constexpr (kOp == BinaryOp::kAdd) return WrapAdd(a, b);
    if constexpr (kOp == BinaryOp::kSub) return WrapSub(a, b);
    if constexpr (kOp == BinaryOp::kMul) return WrapMul(a, b);
    if constexpr (kOp == BinaryOp::kDiv) return C(0);  // rejected for integers
    if constexpr (kOp == BinaryOp::kPow) return IntPow(a, b);
    if constexpr (kOp == BinaryOp::kRemainder) return Remainder<Math>(a, b);
    if constexpr (kOp == BinaryOp::kFloorDivide) return FloorDivide<Math>(a, b);
    if constexpr (kOp == BinaryOp::kBitwiseAnd) return static_cast<C>(a & b);
    if constexpr (kOp == BinaryOp::kBitwiseOr) return static_cast<C>(a | b);
    if constexpr (kOp == BinaryOp::kBitwiseXor) return static_cast<C>(a ^ b);
  }
}

// The floating-only unary ops (NeedsFloating) on a floating v.
template <typename Math, UnaryOp kOp, typename C>
TESSERA_HOST_DEVICE C ApplyFloatingUnary(C v) {
  if constexpr (kOp == UnaryOp::kExp) return Math::Exp(v);
  if constexpr (kOp == UnaryOp::kExpm1) return Math::Expm1(v);
  if constexpr (kOp == UnaryOp::kLog) return Math::Log(v);
  if constexpr (kOp == UnaryOp::kLog1p) return Math::Log1p(v);
  if constexpr (kOp == UnaryOp::kLog2) return Math::Log2(v);
  if constexpr (kOp == UnaryOp::kSqrt) return Math::Sqrt(v);
  if constexpr (kOp == UnaryOp::kRsqrt) return C(1) / Math::Sqrt(v);
  if constexpr (kOp == UnaryOp::kReciprocal) return C(1) / v;
  if constexpr (kOp == UnaryOp::kSin) return Math::Sin(v);
  if constexpr (kOp == UnaryOp::kCos) return Math::Cos(v);
  if constexpr (kOp == UnaryOp::kTanh) return Math::Tanh(v);
  if constexpr (kOp == UnaryOp::kSigmoid) return C(1) / (C(1) + Math::Exp(-v));
  if constexpr (kOp == UnaryOp::kSilu) return v / (C(1) + Math::Exp(-v));
  if constexpr (kOp == UnaryOp::kGelu) {
    return C(0.5) * v * (C(1) + Math::Erf(v * C(0.70710678118654752440)));
  }
  if constexpr (kOp == UnaryOp::kGeluTanh) {
    const C inner = C(0.79788456080286535588) * (v + C(0.044715) * v * v * v);
    return C(0.5) * v * (C(1) + Math::Tanh(inner));
  }
  if constexpr (kOp == UnaryOp::kErf) return Math::Erf(v);
}

// op(v). sign(NaN) is 0 and relu(NaN) NaN, as torch; floor, ceil, round (half to even) and trunc
// are the identity on integers; integers wrap (neg and abs of the least value give it back).
template <typename Math, UnaryOp kOp, typename C>
TESSERA_HOST_DEVICE UnaryResult<kOp, C> ApplyUnary(C v) {
  constexpr bool kBool = std::is_same_v<C, bool>;
  constexpr bool kFloat = std::is_floating_point_v<C>;
  if constexpr (kOp == UnaryOp::kLogicalNot) return v == C(0);
  if constexpr (kOp == UnaryOp::kIsNan) return IsNaNValue(v);
  if constexpr (kOp == UnaryOp::kIsInf) return !IsNaNValue(v) && IsNonFinite(v);
  if constexpr (kOp == UnaryOp::kIsFinite) return !IsNonFinite(v);
  if constexpr (kBool) {
    if constexpr (kOp == UnaryOp::kBitwiseNot) return !v;
    if constexpr (!GivesBool(kOp)) return v;  // abs; the rest are rejected for bool
  } else if constexpr (kFloat) {
    if constexpr (NeedsFloating(kOp)) return ApplyFloatingUnary<Math, kOp>(v);
    if constexpr (kOp == UnaryOp::kNeg) return -v;
    if constexpr (kOp == UnaryOp::kAbs) return Math::Fabs(v);
    if constexpr (kOp == UnaryOp::kSign) return C(C(0) < v) - C(v < C(0));
    if constexpr (kOp == UnaryOp::kRelu) return v < C(0) ? C(0) : v;  // NaN stays NaN
    if constexpr (kOp == UnaryOp::kFloor) return Math::Floor(v);
    if constexpr (kOp == UnaryOp::kCeil) return Math::Ceil(v);
    if constexpr (kOp == UnaryOp::kRound) return Math::Rint(v);
    if constexpr (kOp == UnaryOp::kTrunc) return Math::Trunc(v);
    if constexpr (kOp == UnaryOp::kSquare) return v * v;
    if constexpr (kOp == UnaryOp::kBitwiseNot) return v;  // rejected for floating dtypes
  } else if constexpr (std::is_unsigned_v<C>) {
    if constexpr (kOp == UnaryOp::kSign) return static_cast<C>(v != C(0));
    if constexpr (kOp == UnaryOp::kNeg) return WrapSub(C(0), v);
    if constexpr (kOp == UnaryOp::kSquare) return WrapMul(v, v);
    if constexpr (kOp == UnaryOp::kBitwiseNot) return static_cast<C>(~v);
    if constexpr (!GivesBool(kOp) && kOp != UnaryOp::kSign && kOp != UnaryOp::kNeg &&
                  kOp != UnaryOp::kSquare && kOp != UnaryOp::kBitwiseNot) {
      return v;  // abs, relu, floor, ceil, round, trunc; the floating-only ops are rejected
    }
  } else {
    if constexpr (NeedsFloating(kOp)) return v;  // rejected for integers
    if constexpr (kOp == UnaryOp::kNeg) return WrapSub(C(0), v);
    if constexpr (kOp == UnaryOp::kAbs) return v < C(0) ? WrapSub(C(0), v) : v;
    if constexpr (kOp == UnaryOp::kSign) return static_cast<C>(C(C(0) < v) - C(v < C(0)));
    if constexpr (kOp == UnaryOp::kRelu) return v < C(0) ? C(0) : v;
    if constexpr (kOp >= UnaryOp::kFloor && kOp <= UnaryOp::kTrunc) return v;
    if constexpr (kOp == UnaryOp::kSquare) return WrapMul(v, v);
    if constexpr (kOp == UnaryOp::kBitwiseNot) return static_cast<C>(~v);
  }
}

// Calls f(std::integral_constant<E, e>{}) for the enumerator e == value of an enum E with
// enumerators 0 .. kCount - 1.
template <typename E, int... kValues, typename F>
void VisitEnumValue(E value, std::integer_sequence<int, kValues...>, F&& f) {
  (void)((static_cast<int>(value) == kValues
              ? (f(std::integral_constant<E, static_cast<E>(kValues)>{}), true)
              : false) ||
         ...);
}

// Calls f(std::integral_constant<BinaryOp, op>{}) (host code: the backends' dispatch).
template <typename F>
void VisitBinaryOp(BinaryOp op, F&& f) {
  VisitEnumValue(op, std::make_integer_sequence<int, kNumBinaryOps>{}, f);
}

// Calls f(std::integral_constant<UnaryOp, op>{}).
template <typename F>
void VisitUnaryOp(UnaryOp op, F&& f) {
  VisitEnumValue(op, std::make_integer_sequence<int, kNumUnaryOps>{}, f);
}

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_ELEMENTWISE_OPS_H_
