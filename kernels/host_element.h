#ifndef TESSERA_KERNELS_HOST_ELEMENT_H_
#define TESSERA_KERNELS_HOST_ELEMENT_H_

// Host-side element types for every dtype: the C++ type that stores it, the type it is computed in,
// and one switch that maps a DType to them.

#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/dtype.h"

namespace tessera::kernels {

// Storage of one float16 / bfloat16 element; computed in float.
struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// The type an element of storage type T is computed in.
template <typename T>
struct ComputeTypeOf {
  using type = T;
};
template <>
struct ComputeTypeOf<Float16> {
  using type = float;
};
template <>
struct ComputeTypeOf<BFloat16> {
  using type = float;
};
template <typename T>
using ComputeType = typename ComputeTypeOf<T>::type;

template <typename T>
inline ComputeType<T> Load(T v) {
  if constexpr (std::is_same_v<T, Float16>) {
    return HalfToFloat(v.bits);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16ToFloat(v.bits);
  } else {
    return v;
  }
}

// Stores a compute-type value; float16 and bfloat16 round to nearest even.
template <typename T>
inline T Store(ComputeType<T> v) {
  if constexpr (std::is_same_v<T, Float16>) {
    return T{FloatToHalf(v)};
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return T{FloatToBFloat16(v)};
  } else {
    return v;
  }
}

// True for the storage types of floating dtypes.
template <typename T>
inline constexpr bool kIsFloating = std::is_floating_point_v<ComputeType<T>>;

// Calls f(std::type_identity<T>{}) with T the storage type of `dtype` and returns its result.
template <typename F>
decltype(auto) VisitDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(std::type_identity<float>{});
    case DType::kFloat64:
      return f(std::type_identity<double>{});
    case DType::kFloat16:
      return f(std::type_identity<Float16>{});
    case DType::kBFloat16:
      return f(std::type_identity<BFloat16>{});
    case DType::kInt8:
      return f(std::type_identity<int8_t>{});
    case DType::kUInt8:
      return f(std::type_identity<uint8_t>{});
    case DType::kInt32:
      return f(std::type_identity<int32_t>{});
    case DType::kInt64:
      return f(std::type_identity<int64_t>{});
    case DType::kBool:
      break;
  }
  return f(std::type_identity<bool>{});
}

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_HOST_ELEMENT_H_
