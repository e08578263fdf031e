#include "core/integer_element.h"

namespace tessera {

void SetFromInt64(HostTensor& t, int64_t i, int64_t v) {
  switch (t.dtype()) {
    case DType::kFloat32:
      t.data_as<float>()[i] = static_cast<float>(v);
      break;
    case DType::kFloat64:
      t.data_as<double>()[i] = static_cast<double>(v);
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
      t.data_as<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    case DType::kInt64:
      t.data_as<int64_t>()[i] = v;
      break;
    case DType::kBool:
      t.data_as<bool>()[i] = v != 0;
      break;
  }
}

}  // namespace tessera
