#include "core/sharding/elementwise_reduce.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

namespace tessera {
namespace {

// Calls f(T{}) with T the arithmetic type that holds `dtype` on the host; 16-bit floats use Half16
// and BFloat16 tags handled by the callers.
struct Half16 {};
struct BF16 {};

template <typename F>
void DispatchDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat64:
      return f(double{});
    case DType::kFloat16:
      return f(Half16{});
    case DType::kBFloat16:
      return f(BF16{});
    case DType::kInt8:
      return f(int8_t{});
    case DType::kUInt8:
      return f(uint8_t{});
    case DType::kInt32:
      return f(int32_t{});
    case DType::kInt64:
      return f(int64_t{});
    case DType::kBool:
      return f(bool{});
  }
}

template <typename T>
T Combine(ReduceOp op, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return (op == ReduceOp::kProduct || op == ReduceOp::kMin) ? (a && b) : (a || b);
  } else if constexpr (std::is_integral_v<T>) {
    // Wraps modulo 2^bits (as NCCL does) instead of overflowing a signed type, which is undefined.
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      case ReduceOp::kProduct:
        return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      case ReduceOp::kMax:
        return std::max(a, b);
      case ReduceOp::kMin:
        return std::min(a, b);
    }
    return a;
  } else {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return static_cast<T>(a + b);
      case ReduceOp::kProduct:
        return static_cast<T>(a * b);
      // NaN wins, as in torch.maximum / torch.minimum.
      case ReduceOp::kMax:
        return (a != a || b != b) ? a + b : std::max(a, b);
      case ReduceOp::kMin:
        return (a != a || b != b) ? a + b : std::min(a, b);
    }
    return a;
  }
}

template <typename T>
void ReduceTyped(ReduceOp op, T* acc, const T* in, int64_t n) {
  // One switch per buffer, so each loop is a plain vectorizable loop.
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      for (int64_t i = 0; i < n; ++i) acc[i] = Combine(ReduceOp::kSum, acc[i], in[i]);
      break;
    case ReduceOp::kProduct:
      for (int64_t i = 0; i < n; ++i) acc[i] = Combine(ReduceOp::kProduct, acc[i], in[i]);
      break;
    case ReduceOp::kMax:
      for (int64_t i = 0; i < n; ++i) acc[i] = Combine(ReduceOp::kMax, acc[i], in[i]);
      break;
    case ReduceOp::kMin:
      for (int64_t i = 0; i < n; ++i) acc[i] = Combine(ReduceOp::kMin, acc[i], in[i]);
      break;
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void Reduce16(ReduceOp op, uint16_t* acc, const uint16_t* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    acc[i] = FromFloat(Combine(op, ToFloat(acc[i]), ToFloat(in[i])));
  }
}

template <typename T>
T Identity(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return T(0);
    case ReduceOp::kProduct:
      return T(1);
    case ReduceOp::kMax:
      if constexpr (std::numeric_limits<T>::has_infinity)
        return -std::numeric_limits<T>::infinity();
      return std::numeric_limits<T>::lowest();
    case ReduceOp::kMin:
      if constexpr (std::numeric_limits<T>::has_infinity) return std::numeric_limits<T>::infinity();
      return std::numeric_limits<T>::max();
  }
  return T(0);
}

}  // namespace

void ReduceInto(ReduceOp op, DType dtype, void* acc, const void* in, int64_t n) {
  DispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, Half16>) {
      Reduce16<HalfToFloat, FloatToHalf>(op, static_cast<uint16_t*>(acc),
                                         static_cast<const uint16_t*>(in), n);
    } else if constexpr (std::is_same_v<T, BF16>) {
      Reduce16<BFloat16ToFloat, FloatToBFloat16>(op, static_cast<uint16_t*>(acc),
                                                 static_cast<const uint16_t*>(in), n);
    } else {
      ReduceTyped(op, static_cast<T*>(acc), static_cast<const T*>(in), n);
    }
  });
}

void DivideInPlace(DType dtype, void* data, int64_t n, int64_t divisor) {
  DispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, Half16> || std::is_same_v<T, BF16>) {
      const bool half = std::is_same_v<T, Half16>;
      auto* p = static_cast<uint16_t*>(data);
      for (int64_t i = 0; i < n; ++i) {
        const float v = (half ? HalfToFloat(p[i]) : BFloat16ToFloat(p[i])) / divisor;
        p[i] = half ? FloatToHalf(v) : FloatToBFloat16(v);
      }
    } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      // In int64: the divisor need not fit in T (a group of 256 ranks averaging uint8).
      auto* p = static_cast<T*>(data);
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<int64_t>(p[i]) / divisor);
    } else if constexpr (std::is_floating_point_v<T>) {
      auto* p = static_cast<T*>(data);
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(divisor));
    }
  });
}

void FillIdentity(ReduceOp op, DType dtype, void* data, int64_t n) {
  DispatchDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, Half16> || std::is_same_v<T, BF16>) {
      const float v = Identity<float>(op);
      const uint16_t bits = std::is_same_v<T, Half16> ? FloatToHalf(v) : FloatToBFloat16(v);
      std::fill_n(static_cast<uint16_t*>(data), n, bits);
    } else if constexpr (std::is_same_v<T, bool>) {
      std::fill_n(static_cast<bool*>(data), n, op == ReduceOp::kProduct || op == ReduceOp::kMin);
    } else {
      std::fill_n(static_cast<T*>(data), n, Identity<T>(op));
    }
  });
}

void PartitionValue(ReduceOp op, int64_t coordinate, DType dtype, void* data, int64_t n) {
  if (coordinate != 0 && PartitionUsesIdentity(op)) FillIdentity(op, dtype, data, n);
}

}  // namespace tessera
