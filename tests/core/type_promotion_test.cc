// Type promotion against torch's answers written out by hand: torch.promote_types over every pair
// of Tessera's dtypes, torch.result_type over tensors, 0-dim tensors and wrapped numbers, and what
// each ELEMENTWISE_TYPE_PROMOTION_KIND computes in and returns.

#include "core/ops/type_promotion.h"

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace tessera::ops {
namespace {

constexpr DType f32 = DType::kFloat32;
constexpr DType f64 = DType::kFloat64;
constexpr DType f16 = DType::kFloat16;
constexpr DType bf16 = DType::kBFloat16;
constexpr DType i8 = DType::kInt8;
constexpr DType u8 = DType::kUInt8;
constexpr DType i32 = DType::kInt32;
constexpr DType i64 = DType::kInt64;
constexpr DType b1 = DType::kBool;

// torch.promote_types(row, column), rows and columns in kAllDTypes order (f32, f64, f16, bf16, i8,
// u8, i32, i64, bool); torch gives int16 for u8 with i8, which Tessera makes int32.
constexpr DType kPromoteTable[9][9] = {
    /* f32  */ {f32, f64, f32, f32, f32, f32, f32, f32, f32},
    /* f64  */ {f64, f64, f64, f64, f64, f64, f64, f64, f64},
    /* f16  */ {f32, f64, f16, f32, f16, f16, f16, f16, f16},
    /* bf16 */ {f32, f64, f32, bf16, bf16, bf16, bf16, bf16, bf16},
    /* i8   */ {f32, f64, f16, bf16, i8, i32, i32, i64, i8},
    /* u8   */ {f32, f64, f16, bf16, i32, u8, i32, i64, u8},
    /* i32  */ {f32, f64, f16, bf16, i32, i32, i32, i64, i32},
    /* i64  */ {f32, f64, f16, bf16, i64, i64, i64, i64, i64},
    /* bool */ {f32, f64, f16, bf16, i8, u8, i32, i64, b1},
};

class PromoteTypesTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(PromoteTypesTest, MatchesTorchsTable) {
  const auto [row, column] = GetParam();
  const DType a = kAllDTypes[row];
  const DType b = kAllDTypes[column];
  EXPECT_EQ(PromoteTypes(a, b), kPromoteTable[row][column])
      << DTypeName(a) << " with " << DTypeName(b);
  EXPECT_EQ(PromoteTypes(a, b), PromoteTypes(b, a));
}

INSTANTIATE_TEST_SUITE_P(AllPairs, PromoteTypesTest,
                         ::testing::Combine(::testing::Range(0, 9), ::testing::Range(0, 9)),
                         [](const auto& info) {
                           return absl::StrCat(DTypeName(kAllDTypes[std::get<0>(info.param)]), "_",
                                               DTypeName(kAllDTypes[std::get<1>(info.param)]));
                         });

TEST(PromoteTypesTest, TableFollowsKAllDTypesOrder) {
  const DType kOrder[] = {f32, f64, f16, bf16, i8, u8, i32, i64, b1};
  ASSERT_EQ(std::size(kAllDTypes), std::size(kOrder));
  for (size_t i = 0; i < std::size(kOrder); ++i) EXPECT_EQ(kAllDTypes[i], kOrder[i]);
}

PromotionOperand Dim(DType dtype) { return {dtype, OperandKind::kDimTensor}; }
PromotionOperand ZeroDim(DType dtype) { return {dtype, OperandKind::kZeroDim}; }
PromotionOperand Wrapped(DType dtype) { return {dtype, OperandKind::kWrappedNumber}; }
const PromotionOperand kWrappedInt = Wrapped(i64);
const PromotionOperand kWrappedFloat = Wrapped(f64);
const PromotionOperand kWrappedBool = Wrapped(b1);

std::string OperandsName(const std::vector<PromotionOperand>& operands) {
  return absl::StrJoin(operands, "_", [](std::string* out, const PromotionOperand& operand) {
    const char* kind = operand.kind == OperandKind::kDimTensor ? "dim"
                       : operand.kind == OperandKind::kZeroDim ? "zerodim"
                                                               : "wrapped";
    absl::StrAppend(out, kind, DTypeName(operand.dtype));
  });
}

struct ResultTypeCase {
  std::vector<PromotionOperand> operands;
  DType result;
};

// torch.result_type of the operands, as torch answers.
const std::vector<ResultTypeCase>& ResultTypeCases() {
  static const std::vector<ResultTypeCase>* const kCases = new std::vector<ResultTypeCase>{
      {{Dim(i32), Dim(i64)}, i64},
      {{Dim(u8), Dim(i8)}, i32},  // int16 in torch
      {{Dim(b1), Dim(b1)}, b1},
      {{Dim(f16), Dim(bf16)}, f32},
      {{Dim(f16), Dim(f32)}, f32},
      {{Dim(i32), kWrappedInt}, i32},    // int32 tensor + 2
      {{Dim(i32), kWrappedFloat}, f32},  // int32 tensor + 2.5: the default dtype
      {{Dim(f16), ZeroDim(f64)}, f16},   // a 0-dim tensor of the same category ranks lower
      {{Dim(i32), ZeroDim(f64)}, f64},   // ... of a higher category wins
      {{Dim(i32), ZeroDim(i64)}, i32},
      {{Dim(b1), kWrappedInt}, i64},         // bool tensor + 1
      {{Dim(b1), kWrappedBool}, b1},         // bool tensor + True
      {{Dim(u8), kWrappedInt}, u8},          // uint8 tensor + -1
      {{ZeroDim(i64), kWrappedFloat}, f32},  // 0-dim int64 + 1.0
      {{ZeroDim(i32), ZeroDim(f16)}, f16},
      {{ZeroDim(u8), ZeroDim(i8)}, i32},
      {{Dim(bf16), kWrappedFloat}, bf16},
      {{Dim(f64), kWrappedFloat}, f64},
      {{Dim(f32), ZeroDim(f64)}, f32},
      {{Dim(b1), ZeroDim(f64)}, f64},
      {{Dim(b1), ZeroDim(u8)}, u8},
      {{ZeroDim(b1), kWrappedFloat}, f32},
      {{Dim(i8), ZeroDim(i64), kWrappedFloat}, f32},
      {{Dim(b1), ZeroDim(b1), kWrappedInt}, i64},
      {{Dim(f16), ZeroDim(i64), kWrappedFloat}, f16},
      {{kWrappedInt, kWrappedFloat}, f32},  // torch.result_type(1, 2.0)
      {{kWrappedInt}, i64},
      {{kWrappedBool, kWrappedInt}, i64},
      {{Dim(i32), Dim(i8), ZeroDim(i64), kWrappedInt}, i32},
      {{}, f32},  // nothing to promote: the default dtype
  };
  return *kCases;
}

class ResultTypeTest : public ::testing::TestWithParam<ResultTypeCase> {};

TEST_P(ResultTypeTest, MatchesTorchResultType) {
  EXPECT_EQ(DTypeName(ResultType(GetParam().operands)), DTypeName(GetParam().result));
}

INSTANTIATE_TEST_SUITE_P(Operands, ResultTypeTest, ::testing::ValuesIn(ResultTypeCases()),
                         [](const auto& info) {
                           return info.param.operands.empty() ? std::string("none")
                                                              : OperandsName(info.param.operands);
                         });

TEST(ResultTypeTest, DimTensorsAloneArePromoteTypes) {
  for (DType a : kAllDTypes) {
    for (DType b : kAllDTypes) {
      const PromotionOperand operands[] = {Dim(a), Dim(b)};
      EXPECT_EQ(ResultType(operands), PromoteTypes(a, b));
      const PromotionOperand zero_dims[] = {ZeroDim(a), ZeroDim(b)};
      EXPECT_EQ(ResultType(zero_dims), PromoteTypes(a, b));
    }
  }
}

TEST(ResultTypeTest, AWrappedNumberNeverWidensATensorOfItsCategory) {
  for (DType dtype : kAllDTypes) {
    const PromotionOperand with_int[] = {Dim(dtype), kWrappedInt};
    EXPECT_EQ(ResultType(with_int), dtype == b1 ? i64 : dtype) << DTypeName(dtype);
    const PromotionOperand with_float[] = {Dim(dtype), kWrappedFloat};
    EXPECT_EQ(ResultType(with_float), IsFloatingPoint(dtype) ? dtype : f32) << DTypeName(dtype);
    const PromotionOperand with_bool[] = {Dim(dtype), kWrappedBool};
    EXPECT_EQ(ResultType(with_bool), dtype) << DTypeName(dtype);
  }
}

struct PromotionCase {
  PromotionKind kind;
  std::vector<PromotionOperand> operands;
  DType compute;
  DType output;
};

const std::vector<PromotionCase>& PromotionCases() {
  static const std::vector<PromotionCase>* const kCases = new std::vector<PromotionCase>{
      {PromotionKind::kDefault, {Dim(i32), Dim(i64)}, i64, i64},
      {PromotionKind::kDefault, {Dim(i32), kWrappedFloat}, f32, f32},
      {PromotionKind::kDefault, {Dim(bf16), kWrappedFloat}, bf16, bf16},  // computed as bfloat16
      {PromotionKind::kDefault, {Dim(b1), Dim(b1)}, b1, b1},
      {PromotionKind::kIntToFloat, {Dim(i64)}, f32, f32},  // torch.exp of int64
      {PromotionKind::kIntToFloat, {Dim(b1)}, f32, f32},
      {PromotionKind::kIntToFloat, {Dim(i32), Dim(i64)}, f32, f32},  // int / int
      {PromotionKind::kIntToFloat, {Dim(f16)}, f16, f16},
      {PromotionKind::kIntToFloat, {Dim(i32), ZeroDim(f64)}, f64, f64},
      {PromotionKind::kIntToFloat, {Dim(i32), kWrappedInt}, f32, f32},
      {PromotionKind::kAlwaysBool, {Dim(i32), Dim(f16)}, f16, b1},  // eq
      {PromotionKind::kAlwaysBool, {Dim(f32), kWrappedInt}, f32, b1},
      {PromotionKind::kAlwaysBool, {Dim(u8), kWrappedFloat}, f32, b1},
      {PromotionKind::kAlwaysBool, {Dim(b1), Dim(b1)}, b1, b1},
      {PromotionKind::kBoolToLong, {Dim(b1)}, i64, i64},   // sum of bools
      {PromotionKind::kBoolToLong, {Dim(i32)}, i32, i32},  // widening ints is the reduction's
      {PromotionKind::kBoolToLong, {Dim(u8)}, u8, u8},
      {PromotionKind::kBoolToLong, {Dim(f16)}, f16, f16},
      {PromotionKind::kNoOpmath, {Dim(f16)}, f16, f16},  // abs, neg
      {PromotionKind::kNoOpmath, {Dim(i8), kWrappedInt}, i8, i8},
  };
  return *kCases;
}

class PromoteOperandsTest : public ::testing::TestWithParam<PromotionCase> {};

TEST_P(PromoteOperandsTest, ComputesAndReturnsAsTorch) {
  const PromotionCase& c = GetParam();
  const Promotion promotion = PromoteOperands(c.kind, c.operands);
  EXPECT_EQ(DTypeName(promotion.compute), DTypeName(c.compute));
  EXPECT_EQ(DTypeName(promotion.output), DTypeName(c.output));
}

std::string KindName(PromotionKind kind) {
  switch (kind) {
    case PromotionKind::kDefault:
      return "Default";
    case PromotionKind::kIntToFloat:
      return "IntToFloat";
    case PromotionKind::kAlwaysBool:
      return "AlwaysBool";
    case PromotionKind::kBoolToLong:
      return "BoolToLong";
    case PromotionKind::kNoOpmath:
      return "NoOpmath";
  }
  return "Invalid";
}

INSTANTIATE_TEST_SUITE_P(Kinds, PromoteOperandsTest, ::testing::ValuesIn(PromotionCases()),
                         [](const auto& info) {
                           return absl::StrCat(KindName(info.param.kind), "_",
                                               OperandsName(info.param.operands));
                         });

TEST(PromoteOperandsTest, DefaultAndNoOpmathAreTheResultType) {
  for (DType a : kAllDTypes) {
    for (DType b : kAllDTypes) {
      const PromotionOperand operands[] = {Dim(a), ZeroDim(b)};
      const DType result = ResultType(operands);
      for (PromotionKind kind : {PromotionKind::kDefault, PromotionKind::kNoOpmath}) {
        const Promotion promotion = PromoteOperands(kind, operands);
        EXPECT_EQ(promotion.compute, result);
        EXPECT_EQ(promotion.output, result);
      }
      const Promotion comparison = PromoteOperands(PromotionKind::kAlwaysBool, operands);
      EXPECT_EQ(comparison.compute, result);
      EXPECT_EQ(comparison.output, b1);
    }
  }
}

}  // namespace
}  // namespace tessera::ops
