#ifndef TESSERA_CORE_DTYPE_H_
#define TESSERA_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

// Element type of a tensor. Values are stable: they are the wire values of tessera.v1.DType.
enum class DType : int {
  kFloat32 = 1,
  kFloat64 = 2,
  kFloat16 = 3,
  kBFloat16 = 4,
  kInt8 = 5,
  kUInt8 = 6,
  kInt32 = 7,
  kInt64 = 8,
  kBool = 9,
};

// Every dtype, in wire order.
inline constexpr DType kAllDTypes[] = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                                       DType::kBFloat16, DType::kInt8,    DType::kUInt8,
                                       DType::kInt32,    DType::kInt64,   DType::kBool};

// Size of one element in bytes.
size_t DTypeSize(DType dtype);

// PyTorch's name: "float32", "bfloat16", "bool", ...
absl::string_view DTypeName(DType dtype);

// Parses a PyTorch name ("float32", also "float", "half", "double", "long", "int").
absl::StatusOr<DType> ParseDType(absl::string_view name);

// True for float32, float64, float16 and bfloat16.
bool IsFloatingPoint(DType dtype);

// True iff `value` is one of the enumerators (for values read off the wire).
bool IsValidDType(int value);

// IEEE binary16 and bfloat16 conversions; float → 16-bit rounds to nearest even, NaN stays NaN.
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);
float BFloat16ToFloat(uint16_t bits);

}  // namespace tessera

#endif  // TESSERA_CORE_DTYPE_H_
