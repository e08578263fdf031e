#include "core/ops/type_promotion.h"

#include <optional>

namespace tessera::ops {
namespace {

// The rank of a floating dtype in torch's table: float16 and bfloat16 below float32 below float64.
int FloatingRank(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
    case DType::kBFloat16:
      return 0;
    case DType::kFloat32:
      return 1;
    default:
      return 2;
  }
}

DType PromoteFloatings(DType a, DType b) {
  if (FloatingRank(a) == 0 && FloatingRank(b) == 0) return DType::kFloat32;  // float16, bfloat16
  return FloatingRank(a) >= FloatingRank(b) ? a : b;
}

DType PromoteIntegers(DType a, DType b) {
  const bool a_unsigned = a == DType::kUInt8;
  const bool b_unsigned = b == DType::kUInt8;
  if (a_unsigned != b_unsigned) {
    const DType signed_one = a_unsigned ? b : a;
    // uint8 with int8 is int16 in torch; Tessera's next signed type is int32.
    return signed_one == DType::kInt8 ? DType::kInt32 : signed_one;
  }
  return DTypeSize(a) >= DTypeSize(b) ? a : b;
}

// promote_skip_undefined of torch: an undefined side gives the other.
std::optional<DType> PromoteSkipUndefined(std::optional<DType> a, std::optional<DType> b) {
  if (!a.has_value()) return b;
  if (!b.has_value()) return a;
  return PromoteTypes(*a, *b);
}

// combine_categories of torch: a lower rank matters only where it is of a higher category.
std::optional<DType> CombineCategories(std::optional<DType> higher, std::optional<DType> lower) {
  if (higher.has_value() && IsFloatingPoint(*higher)) return higher;
  if (higher == DType::kBool || (lower.has_value() && IsFloatingPoint(*lower))) {
    return PromoteSkipUndefined(higher, lower);
  }
  return higher.has_value() ? higher : lower;
}

}  // namespace

DType PromoteTypes(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::kBool) return b;
  if (b == DType::kBool) return a;
  const bool a_floating = IsFloatingPoint(a);
  const bool b_floating = IsFloatingPoint(b);
  if (a_floating && b_floating) return PromoteFloatings(a, b);
  if (a_floating) return a;
  if (b_floating) return b;
  return PromoteIntegers(a, b);
}

DType ResultType(std::span<const PromotionOperand> operands) {
  std::optional<DType> dim_result;
  std::optional<DType> zero_dim_result;
  std::optional<DType> wrapped_result;
  for (const PromotionOperand& operand : operands) {
    switch (operand.kind) {
      case OperandKind::kDimTensor:
        dim_result = PromoteSkipUndefined(dim_result, operand.dtype);
        break;
      case OperandKind::kZeroDim:
        zero_dim_result = PromoteSkipUndefined(zero_dim_result, operand.dtype);
        break;
      case OperandKind::kWrappedNumber:
        // A Python float is a tensor of the default dtype, float32.
        wrapped_result = PromoteSkipUndefined(
            wrapped_result, IsFloatingPoint(operand.dtype) ? DType::kFloat32 : operand.dtype);
        break;
    }
  }
  return CombineCategories(dim_result, CombineCategories(zero_dim_result, wrapped_result))
      .value_or(DType::kFloat32);
}

Promotion PromoteOperands(PromotionKind kind, std::span<const PromotionOperand> operands) {
  const DType result = ResultType(operands);
  switch (kind) {
    case PromotionKind::kIntToFloat: {
      const DType floating = IsFloatingPoint(result) ? result : DType::kFloat32;
      return {floating, floating};
    }
    case PromotionKind::kAlwaysBool:
      return {result, DType::kBool};
    case PromotionKind::kBoolToLong: {
      const DType widened = result == DType::kBool ? DType::kInt64 : result;
      return {widened, widened};
    }
    case PromotionKind::kDefault:
    case PromotionKind::kNoOpmath:
      break;
  }
  return {result, result};
}

}  // namespace tessera::ops
