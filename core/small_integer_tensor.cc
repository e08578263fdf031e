#include "core/small_integer_tensor.h"

#include <random>

#include "core/integer_element.h"

namespace tessera {

HostTensor SmallIntegerTensor(DType dtype, const Shape& shape, uint32_t seed) {
  HostTensor t = HostTensor::ZerosOfValidShape(dtype, shape);
  std::mt19937 gen(seed);
  const bool non_negative = dtype == DType::kUInt8 || dtype == DType::kBool;
  std::uniform_int_distribution<int> dist(non_negative ? 0 : -8, dtype == DType::kBool ? 1 : 8);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    SetFromInt64(t, i, dist(gen));
  }
  return t;
}

}  // namespace tessera
