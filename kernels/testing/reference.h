#ifndef TESSERA_KERNELS_TESTING_REFERENCE_H_
#define TESSERA_KERNELS_TESTING_REFERENCE_H_

// Plain host helpers the kernel tests build their references from: reading and writing single
// elements of any dtype by the documented rules, random host tensors, and per-dtype rounding.
// Written independently of the kernels so that a test compares two implementations.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "core/dtype.h"
#include "core/host_tensor.h"
#include "core/integer_element.h"
#include "core/shape.h"

namespace tessera::kernels::testing {

// Element i of `t` as a double (exact except for int64 beyond 2^53).
inline double GetDouble(const HostTensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat32:
      return t.data_as<float>()[i];
    case DType::kFloat64:
      return t.data_as<double>()[i];
    case DType::kFloat16:
      return HalfToFloat(t.data_as<uint16_t>()[i]);
    case DType::kBFloat16:
      return BFloat16ToFloat(t.data_as<uint16_t>()[i]);
    case DType::kInt8:
      return t.data_as<int8_t>()[i];
    case DType::kUInt8:
      return t.data_as<uint8_t>()[i];
    case DType::kInt32:
      return t.data_as<int32_t>()[i];
    case DType::kInt64:
      return static_cast<double>(t.data_as<int64_t>()[i]);
    case DType::kBool:
      return t.data_as<bool>()[i] ? 1.0 : 0.0;
  }
  return 0;
}

// Element i of an integer or bool tensor.
inline int64_t GetInt64(const HostTensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kInt8:
      return t.data_as<int8_t>()[i];
    case DType::kUInt8:
      return t.data_as<uint8_t>()[i];
    case DType::kInt32:
      return t.data_as<int32_t>()[i];
    case DType::kInt64:
      return t.data_as<int64_t>()[i];
    case DType::kBool:
      return t.data_as<bool>()[i] ? 1 : 0;
    default:
      return static_cast<int64_t>(GetDouble(t, i));
  }
}

// `v` truncated into [lo, hi], NaN to 0: the floating-to-integer rule.
template <typename T>
T TruncSaturate(double v) {
  if (std::isnan(v)) return 0;
  const double t = std::trunc(v);
  if (t <= static_cast<double>(std::numeric_limits<T>::min())) {
    return std::numeric_limits<T>::min();
  }
  if (t >= std::ldexp(1.0, std::numeric_limits<T>::digits)) return std::numeric_limits<T>::max();
  return static_cast<T>(t);
}

// Stores a floating value: rounded to nearest even (16-bit types through float32), truncated and
// saturated for integers, != 0 for bool.
inline void SetFromDouble(HostTensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kFloat32:
      t.data_as<float>()[i] = static_cast<float>(v);
      break;
    case DType::kFloat64:
      t.data_as<double>()[i] = v;
      break;
    case DType::kFloat16:
      t.data_as<uint16_t>()[i] = FloatToHalf(static_cast<float>(v));
      break;
    case DType::kBFloat16:
      t.data_as<uint16_t>()[i] = FloatToBFloat16(static_cast<float>(v));
      break;
    case DType::kInt8:
      t.data_as<int8_t>()[i] = TruncSaturate<int8_t>(v);
      break;
    case DType::kUInt8:
      t.data_as<uint8_t>()[i] = TruncSaturate<uint8_t>(v);
      break;
    case DType::kInt32:
      t.data_as<int32_t>()[i] = TruncSaturate<int32_t>(v);
      break;
    case DType::kInt64:
      t.data_as<int64_t>()[i] = TruncSaturate<int64_t>(v);
      break;
    case DType::kBool:
      t.data_as<bool>()[i] = v != 0.0;
      break;
  }
}

// A tensor of random values in [lo, hi] rounded to `dtype`; integer dtypes get integers in
// [ceil(lo), floor(hi)] (uint8 clamps lo to 0), bool gets random bits.
inline HostTensor RandomTensor(DType dtype, const Shape& shape, uint32_t seed, double lo = -2.0,
                               double hi = 2.0) {
  HostTensor t = HostTensor::Zeros(dtype, shape).value();
  std::mt19937 gen(seed);
  if (IsFloatingPoint(dtype)) {
    std::uniform_real_distribution<double> dist(lo, hi);
    for (int64_t i = 0; i < t.num_elements(); ++i) SetFromDouble(t, i, dist(gen));
  } else if (dtype == DType::kBool) {
    std::bernoulli_distribution dist(0.5);
    for (int64_t i = 0; i < t.num_elements(); ++i) SetFromInt64(t, i, dist(gen) ? 1 : 0);
  } else {
    const int64_t low = dtype == DType::kUInt8 ? std::max<int64_t>(0, std::ceil(lo))
                                               : static_cast<int64_t>(std::ceil(lo));
    std::uniform_int_distribution<int64_t> dist(low, static_cast<int64_t>(std::floor(hi)));
    for (int64_t i = 0; i < t.num_elements(); ++i) SetFromInt64(t, i, dist(gen));
  }
  return t;
}

// Unit roundoff of a floating dtype (half an ulp of 1); 0 for integer and bool dtypes.
inline double UnitRoundoff(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return std::ldexp(1.0, -24);
    case DType::kFloat64:
      return std::ldexp(1.0, -53);
    case DType::kFloat16:
      return std::ldexp(1.0, -11);
    case DType::kBFloat16:
      return std::ldexp(1.0, -8);
    default:
      return 0.0;
  }
}

// The unit roundoff of the type a dtype is computed in (float32 for the 16-bit types).
inline double ComputeRoundoff(DType dtype) {
  return dtype == DType::kFloat64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
}

// The numpy broadcast of two shapes, written out plainly; empty if they do not broadcast.
inline bool NaiveBroadcast(const Shape& a, const Shape& b, Shape* out) {
  const size_t rank = std::max(a.size(), b.size());
  out->assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i + a.size() >= rank ? a[i + a.size() - rank] : 1;
    const int64_t db = i + b.size() >= rank ? b[i + b.size() - rank] : 1;
    if (da != db && da != 1 && db != 1) return false;
    (*out)[i] = da == 1 ? db : da;
  }
  return true;
}

// Linear index into a tensor of shape `in` for the element at linear index `i` of its broadcast
// to shape `out`.
inline int64_t BroadcastSource(const Shape& in, const Shape& out, int64_t i) {
  int64_t index = 0, stride = 1;
  for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
    const int64_t coord = i % out[d];
    i /= out[d];
    const int din = d - static_cast<int>(out.size() - in.size());
    if (din < 0) continue;
    if (in[din] != 1) index += coord * stride;
    stride *= in[din];
  }
  return index;
}

// -x and a * b modulo 2^64 (stored with SetFromInt64, they wrap to the dtype's width).
inline int64_t WrappedNeg(int64_t x) { return static_cast<int64_t>(0 - static_cast<uint64_t>(x)); }
inline int64_t WrappedMul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// True iff elements i of a and b have the same bytes, or are both NaN.
inline bool SameElement(const HostTensor& a, const HostTensor& b, int64_t i) {
  const size_t size = DTypeSize(a.dtype());
  if (std::memcmp(a.data() + i * size, b.data() + i * size, size) == 0) return true;
  return IsFloatingPoint(a.dtype()) && std::isnan(GetDouble(a, i)) && std::isnan(GetDouble(b, i));
}

}  // namespace tessera::kernels::testing

#endif  // TESSERA_KERNELS_TESTING_REFERENCE_H_
