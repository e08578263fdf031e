#include "core/small_integer_tensor.h"

#include <random>

namespace tessera {

HostTensor SmallIntegerTensor(DType dtype, const Shape& shape, uint32_t seed) {
  HostTensor t = HostTensor::ZerosOfValidShape(dtype, shape);
  std::mt19937 gen(seed);
  const bool non_negative = dtype == DType::kUInt8 || dtype == DType::kBool;
  std::uniform_int_distribution<int> dist(non_negative ? 0 : -8, dtype == DType::kBool ? 1 : 8);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const int v = dist(gen);
    switch (dtype) {
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
        t.data_as<int8_t>()[i] = static_cast<int8_t>(v);
        break;
      case DType::kUInt8:
        t.data_as<uint8_t>()[i] = static_cast<uint8_t>(v);
        break;
      case DType::kInt32:
        t.data_as<int32_t>()[i] = v;
        break;
      case DType::kInt64:
        t.data_as<int64_t>()[i] = v;
        break;
      case DType::kBool:
        t.data_as<bool>()[i] = v != 0;
        break;
    }
  }
  return t;
}

}  // namespace tessera
