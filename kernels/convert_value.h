#ifndef TESSERA_KERNELS_CONVERT_VALUE_H_
#define TESSERA_KERNELS_CONVERT_VALUE_H_

// The conversion rule of Cast and Fill, for host and device code. Values are in their compute type
// (float for float16 and bfloat16, which are then rounded to nearest even when stored):
//   to bool: value != 0 (NaN is true);
//   floating to integer: truncates toward zero, saturates at the type's range, NaN gives 0;
//   integer or bool to integer: wraps modulo 2^bits (two's complement), as C++20 does;
//   anything to floating: rounds to nearest even (to float16/bfloat16 through float32).

#include <cstdint>
#include <type_traits>

#include "kernels/host_device.h"

namespace tessera::kernels {

// Range of an integer type, usable in device code without --expt-relaxed-constexpr.
template <typename T>
struct IntRange {
  static constexpr bool kSigned = static_cast<T>(-1) < static_cast<T>(0);
  static constexpr int kBits = static_cast<int>(sizeof(T) * 8);
  static constexpr T kMax =
      kSigned ? static_cast<T>((uint64_t{1} << (kBits - 1)) - 1) : static_cast<T>(~uint64_t{0});
  static constexpr T kMin = kSigned ? static_cast<T>(-kMax - 1) : T{0};
};

// `v` truncated toward zero into integer type T, saturating; NaN gives 0.
template <typename T>
TESSERA_HOST_DEVICE T SaturatingIntFromDouble(double v) {
  if (v != v) return T{0};
  const double lo = static_cast<double>(IntRange<T>::kMin);
  const double hi_excl = static_cast<double>(IntRange<T>::kMax) + 1.0;  // exact power of two
  if (v <= lo) return IntRange<T>::kMin;
  if (v >= hi_excl) return IntRange<T>::kMax;
  return static_cast<T>(v);
}

// Converts `v` (compute type From) to compute type To by the rule above.
template <typename To, typename From>
TESSERA_HOST_DEVICE To ConvertValue(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return SaturatingIntFromDouble<To>(static_cast<double>(v));
  } else if constexpr (std::is_integral_v<To>) {
    using U = std::make_unsigned_t<To>;
    return static_cast<To>(static_cast<U>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CONVERT_VALUE_H_
