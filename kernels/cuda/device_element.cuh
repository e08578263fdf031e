#ifndef TESSERA_KERNELS_CUDA_DEVICE_ELEMENT_CUH_
#define TESSERA_KERNELS_CUDA_DEVICE_ELEMENT_CUH_

// Device-side element types for every dtype, the mirror of kernels/host_element.h: the storage
// type, the compute type (float for float16 and bfloat16), and the dispatch from a DType.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"

namespace tessera::kernels::cuda {

template <typename T>
struct ComputeTypeOf {
  using type = T;
};
template <>
struct ComputeTypeOf<__half> {
  using type = float;
};
template <>
struct ComputeTypeOf<__nv_bfloat16> {
  using type = float;
};
template <typename T>
using ComputeType = typename ComputeTypeOf<T>::type;

template <typename T>
inline constexpr bool kIsFloating = std::is_floating_point_v<ComputeType<T>>;

template <typename T>
__device__ inline ComputeType<T> Load(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}

// Rounds to nearest even for float16 and bfloat16, as the host's FloatToHalf / FloatToBFloat16.
template <typename T>
__device__ inline T Store(ComputeType<T> v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with T the device storage type of `dtype`.
template <typename F>
void VisitDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(TypeTag<float>{});
    case DType::kFloat64:
      return f(TypeTag<double>{});
    case DType::kFloat16:
      return f(TypeTag<__half>{});
    case DType::kBFloat16:
      return f(TypeTag<__nv_bfloat16>{});
    case DType::kInt8:
      return f(TypeTag<int8_t>{});
    case DType::kUInt8:
      return f(TypeTag<uint8_t>{});
    case DType::kInt32:
      return f(TypeTag<int32_t>{});
    case DType::kInt64:
      return f(TypeTag<int64_t>{});
    case DType::kBool:
      return f(TypeTag<bool>{});
  }
}

inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements.
inline unsigned BlocksFor(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

}  // namespace tessera::kernels::cuda

#endif  // TESSERA_KERNELS_CUDA_DEVICE_ELEMENT_CUH_
