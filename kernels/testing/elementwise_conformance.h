#ifndef TESSERA_KERNELS_TESTING_ELEMENTWISE_CONFORMANCE_H_
#define TESSERA_KERNELS_TESTING_ELEMENTWISE_CONFORMANCE_H_

// Conformance of the elementwise families (every UnaryOp, the BinaryOps beyond add / sub / mul /
// div, which compute_conformance.h covers, and Where) against plain scalar references written from
// torch's definitions with <cmath>, over op x dtype x shape (broadcasts, empty tensors, size-1
// dims, scalars), plus special values and every argument error. Include once per test binary (see
// conformance_fixture.h).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/testing/conformance_fixture.h"
#include "kernels/testing/nn_reference.h"

namespace tessera::kernels::testing {

// ---------------------------------------------------------------------------------------------
// References

inline std::vector<UnaryOp> AllUnaryOps() {
  std::vector<UnaryOp> ops;
  for (int i = 0; i < kNumUnaryOps; ++i) ops.push_back(static_cast<UnaryOp>(i));
  return ops;
}

// The BinaryOps past kDiv.
inline std::vector<BinaryOp> NewBinaryOps() {
  std::vector<BinaryOp> ops;
  for (int i = static_cast<int>(BinaryOp::kPow); i < kNumBinaryOps; ++i) {
    ops.push_back(static_cast<BinaryOp>(i));
  }
  return ops;
}

// The dtypes Unary takes for `op`, as backend.h documents them.
inline bool UnarySupported(UnaryOp op, DType dtype) {
  if (NeedsFloating(op)) return IsFloatingPoint(dtype);
  switch (op) {
    case UnaryOp::kNeg:
    case UnaryOp::kSign:
    case UnaryOp::kRelu:
    case UnaryOp::kSquare:
    case UnaryOp::kFloor:
    case UnaryOp::kCeil:
    case UnaryOp::kRound:
    case UnaryOp::kTrunc:
      return dtype != DType::kBool;
    case UnaryOp::kBitwiseNot:
      return !IsFloatingPoint(dtype);
    default:
      return true;
  }
}

// The dtypes Binary takes for `op`.
inline bool BinarySupportedFor(BinaryOp op, DType dtype) {
  switch (op) {
    case BinaryOp::kDiv:
      return IsFloatingPoint(dtype);
    case BinaryOp::kSub:
    case BinaryOp::kPow:
    case BinaryOp::kRemainder:
    case BinaryOp::kFloorDivide:
      return dtype != DType::kBool;
    case BinaryOp::kBitwiseAnd:
    case BinaryOp::kBitwiseOr:
    case BinaryOp::kBitwiseXor:
      return !IsFloatingPoint(dtype);
    default:
      return true;
  }
}

// Ops whose floating result is the exact result rounded once (to float32, then to the dtype):
// the kernel must match the reference bit for bit.
inline bool UnaryIsExact(UnaryOp op) {
  switch (op) {
    case UnaryOp::kNeg:
    case UnaryOp::kAbs:
    case UnaryOp::kSign:
    case UnaryOp::kRelu:
    case UnaryOp::kFloor:
    case UnaryOp::kCeil:
    case UnaryOp::kRound:
    case UnaryOp::kTrunc:
    case UnaryOp::kSquare:
    case UnaryOp::kSqrt:
    case UnaryOp::kReciprocal:
      return true;
    default:
      return GivesBool(op);
  }
}

// op(x) on a floating value, from torch's definitions (sign(NaN) = 0, round half to even).
inline double NaiveUnary(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::kNeg:
      return -x;
    case UnaryOp::kAbs:
      return std::fabs(x);
    case UnaryOp::kSign:
      return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
    case UnaryOp::kExp:
      return std::exp(x);
    case UnaryOp::kExpm1:
      return std::expm1(x);
    case UnaryOp::kLog:
      return std::log(x);
    case UnaryOp::kLog1p:
      return std::log1p(x);
    case UnaryOp::kLog2:
      return std::log2(x);
    case UnaryOp::kSqrt:
      return std::sqrt(x);
    case UnaryOp::kRsqrt:
      return 1 / std::sqrt(x);
    case UnaryOp::kReciprocal:
      return 1 / x;
    case UnaryOp::kSin:
      return std::sin(x);
    case UnaryOp::kCos:
      return std::cos(x);
    case UnaryOp::kTanh:
      return NaiveActivation(Activation::kTanh, x);
    case UnaryOp::kSigmoid:
      return 1 / (1 + std::exp(-x));
    case UnaryOp::kSilu:
      return NaiveActivation(Activation::kSilu, x);
    case UnaryOp::kRelu:
      return x < 0 ? 0.0 : x;
    case UnaryOp::kGelu:
      return NaiveActivation(Activation::kGelu, x);
    case UnaryOp::kGeluTanh:
      return NaiveActivation(Activation::kGeluTanh, x);
    case UnaryOp::kErf:
      return std::erf(x);
    case UnaryOp::kFloor:
      return std::floor(x);
    case UnaryOp::kCeil:
      return std::ceil(x);
    case UnaryOp::kRound:
      return std::nearbyint(x);
    case UnaryOp::kTrunc:
      return std::trunc(x);
    case UnaryOp::kSquare:
      return x * x;
    case UnaryOp::kLogicalNot:
      return x == 0 ? 1.0 : 0.0;
    case UnaryOp::kIsNan:
      return std::isnan(x) ? 1.0 : 0.0;
    case UnaryOp::kIsInf:
      return std::isinf(x) ? 1.0 : 0.0;
    case UnaryOp::kIsFinite:
      return std::isfinite(x) ? 1.0 : 0.0;
    case UnaryOp::kBitwiseNot:
      break;
  }
  return std::nan("");
}

// op(x) on an integer or bool value (0 / 1), wrapping when stored.
inline int64_t NaiveUnaryInteger(UnaryOp op, int64_t x, bool is_bool) {
  switch (op) {
    case UnaryOp::kNeg:
      return WrappedNeg(x);
    case UnaryOp::kAbs:
      return x < 0 ? WrappedNeg(x) : x;
    case UnaryOp::kSign:
      return (x > 0) - (x < 0);
    case UnaryOp::kRelu:
      return x < 0 ? 0 : x;
    case UnaryOp::kSquare:
      return WrappedMul(x, x);
    case UnaryOp::kLogicalNot:
      return x == 0;
    case UnaryOp::kIsNan:
    case UnaryOp::kIsInf:
      return 0;
    case UnaryOp::kIsFinite:
      return 1;
    case UnaryOp::kBitwiseNot:
      return is_bool ? !x : ~x;
    default:
      return x;  // floor, ceil, round, trunc
  }
}

// a ^ b on integers by torch's rule for negative exponents: 1 for base 1, +-1 for base -1, else 0.
inline int64_t NaiveIntPow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? (b % 2 != 0 ? -1 : 1) : 0;
  int64_t result = 1;
  for (int64_t i = 0; i < b; ++i) result = WrappedMul(result, a);
  return result;
}

// a op b on floating values (1 / 0 for bool results), from torch's definitions: remainder has the
// divisor's sign (fmod, then the divisor added when the signs differ), floor_divide is
// floor(a / b), maximum and minimum propagate NaN.
inline double NaiveBinaryFloating(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
    case BinaryOp::kDiv:
      return a / b;
    case BinaryOp::kPow:
      return std::pow(a, b);
    case BinaryOp::kMaximum:
      return std::isnan(a) || std::isnan(b) ? std::nan("") : std::max(a, b);
    case BinaryOp::kMinimum:
      return std::isnan(a) || std::isnan(b) ? std::nan("") : std::min(a, b);
    case BinaryOp::kRemainder: {
      const double r = std::fmod(a, b);
      return r != 0 && (r < 0) != (b < 0) ? r + b : r;
    }
    case BinaryOp::kFloorDivide:
      return std::floor(a / b);
    case BinaryOp::kEq:
      return a == b;
    case BinaryOp::kNe:
      return a != b;
    case BinaryOp::kLt:
      return a < b;
    case BinaryOp::kLe:
      return a <= b;
    case BinaryOp::kGt:
      return a > b;
    case BinaryOp::kGe:
      return a >= b;
    case BinaryOp::kLogicalAnd:
      return a != 0 && b != 0;
    case BinaryOp::kLogicalOr:
      return a != 0 || b != 0;
    case BinaryOp::kLogicalXor:
      return (a != 0) != (b != 0);
    default:
      return std::nan("");  // bitwise ops: integers only
  }
}

// a op b on integer or bool values (0 / 1), wrapping when stored; a zero divisor gives 0.
inline int64_t NaiveBinaryInteger(BinaryOp op, int64_t a, int64_t b, bool is_bool) {
  switch (op) {
    case BinaryOp::kAdd:
      return is_bool ? (a || b) : static_cast<int64_t>(static_cast<uint64_t>(a) + b);
    case BinaryOp::kSub:
      return static_cast<int64_t>(static_cast<uint64_t>(a) - b);
    case BinaryOp::kMul:
      return is_bool ? (a && b) : WrappedMul(a, b);
    case BinaryOp::kPow:
      return NaiveIntPow(a, b);
    case BinaryOp::kMaximum:
      return std::max(a, b);
    case BinaryOp::kMinimum:
      return std::min(a, b);
    case BinaryOp::kRemainder: {
      if (b == 0) return 0;
      const int64_t r = a % b;
      return r != 0 && (r < 0) != (b < 0) ? r + b : r;
    }
    case BinaryOp::kFloorDivide:
      if (b == 0) return 0;
      return a / b - (a % b != 0 && (a < 0) != (b < 0) ? 1 : 0);
    case BinaryOp::kBitwiseAnd:
      return a & b;
    case BinaryOp::kBitwiseOr:
      return a | b;
    case BinaryOp::kBitwiseXor:
      return a ^ b;
    default:
      return static_cast<int64_t>(
          NaiveBinaryFloating(op, static_cast<double>(a), static_cast<double>(b)));
  }
}

// The output dtype of an op on `dtype`.
inline DType OutDType(bool gives_bool, DType dtype) { return gives_bool ? DType::kBool : dtype; }

// ---------------------------------------------------------------------------------------------
// Unary

// Inputs inside the op's domain where it has one (log, sqrt, ...), else in [-4, 4]; integers in
// [-100, 100] (squares wrap int8).
inline HostTensor UnaryInput(UnaryOp op, DType dtype, const Shape& shape) {
  if (!IsFloatingPoint(dtype)) return RandomTensor(dtype, shape, 71, -100, 100);
  switch (op) {
    case UnaryOp::kLog:
    case UnaryOp::kLog2:
    case UnaryOp::kSqrt:
    case UnaryOp::kRsqrt:
      return RandomTensor(dtype, shape, 71, 0.05, 4);
    case UnaryOp::kLog1p:
      return RandomTensor(dtype, shape, 71, -0.9, 4);
    case UnaryOp::kReciprocal:
      return RandomTensor(dtype, shape, 71, 0.25, 4);
    default:
      return RandomTensor(dtype, shape, 71, -4, 4);
  }
}

// The reference of Unary(op) on x, and the tolerance of element i (0: bit for bit).
inline HostTensor NaiveUnaryTensor(UnaryOp op, const HostTensor& x) {
  HostTensor want = HostTensor::Zeros(OutDType(GivesBool(op), x.dtype()), x.shape()).value();
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    if (IsFloatingPoint(x.dtype())) {
      SetFromDouble(want, i, NaiveUnary(op, GetDouble(x, i)));
    } else {
      SetFromInt64(want, i, NaiveUnaryInteger(op, GetInt64(x, i), x.dtype() == DType::kBool));
    }
  }
  return want;
}
inline double UnaryTolerance(UnaryOp op, DType dtype, double in, double ref) {
  if (!IsFloatingPoint(dtype) || UnaryIsExact(op)) return 0;
  // Output rounding plus a few ulps of the compute type, relative to the input's size.
  return 2 * UnitRoundoff(dtype) * std::abs(ref) +
         16 * ComputeRoundoff(dtype) * (std::abs(ref) + std::abs(in));
}

using UnaryParam = std::tuple<DType, UnaryOp, Shape>;
class UnaryTest : public KernelParamTest<UnaryParam> {};

TEST_P(UnaryTest, MatchesScalarReference) {
  const auto& [dtype, op, shape] = GetParam();
  const HostTensor x = UnaryInput(op, dtype, shape);
  const DType out_dtype = OutDType(GivesBool(op), dtype);
  DeviceTensor dx = Up(x), dout = Empty(out_dtype, shape);
  const absl::Status s = backend().Unary(op, dx.View(), dout.View());
  if (!UnarySupported(op, dtype)) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(DTypeName(dtype)), absl::string_view::npos) << s;
    return;
  }
  TESSERA_ASSERT_OK(s);
  const HostTensor got = Down(dout), want = NaiveUnaryTensor(op, x);
  int mismatches = 0;
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const double tol = UnaryTolerance(op, dtype, GetDouble(x, i), GetDouble(want, i));
    ExpectElement(got, want, i, tol, absl::StrCat(UnaryOpName(op), "(", GetDouble(x, i), ")"),
                  &mismatches);
  }
}

inline std::vector<Shape> UnaryShapes() { return {{2, 3, 5}, {257}, {0, 4}, {1}, {}}; }

INSTANTIATE_TEST_SUITE_P(Kernels, UnaryTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::ValuesIn(AllUnaryOps()),
                                            ::testing::ValuesIn(UnaryShapes())),
                         [](const ::testing::TestParamInfo<UnaryParam>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               UnaryOpName(std::get<1>(info.param)), "_",
                                               ShapeName(std::get<2>(info.param)));
                         });

class UnarySpecialValueTest : public KernelParamTest<std::tuple<DType, UnaryOp>> {};

// NaN, +-inf, +-0, halves (round to even) and the edges of the domains, against the reference.
TEST_P(UnarySpecialValueTest, FollowsTheReferenceOnSpecialValues) {
  const auto& [dtype, op] = GetParam();
  if (!UnarySupported(op, dtype)) GTEST_SKIP() << UnaryOpName(op) << " takes integers and bool";
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> values = {std::nan(""), inf,  -inf, 0.0,  -0.0, 0.5, 1.5,
                                      2.5,          -0.5, -2.5, -1.0, 1.0,  3.0, -3.75};
  HostTensor x = HostTensor::Zeros(dtype, {static_cast<int64_t>(values.size())}).value();
  for (size_t i = 0; i < values.size(); ++i) SetFromDouble(x, i, values[i]);
  DeviceTensor dx = Up(x), dout = Empty(OutDType(GivesBool(op), dtype), x.shape());
  TESSERA_ASSERT_OK(backend().Unary(op, dx.View(), dout.View()));
  const HostTensor got = Down(dout), want = NaiveUnaryTensor(op, x);
  int mismatches = 0;
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const double in = GetDouble(x, i), ref = GetDouble(want, i), value = GetDouble(got, i);
    if (!std::isfinite(ref) || !std::isfinite(value)) {
      EXPECT_TRUE(SameElement(got, want, i) || (std::isnan(ref) && std::isnan(value)))
          << UnaryOpName(op) << "(" << in << ") = " << value << ", expected " << ref;
      continue;
    }
    ExpectElement(got, want, i, UnaryTolerance(op, dtype, in, ref),
                  absl::StrCat(UnaryOpName(op), "(", in, ")"), &mismatches);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, UnarySpecialValueTest,
                         ::testing::Combine(::testing::ValuesIn(FloatingDTypes()),
                                            ::testing::ValuesIn(AllUnaryOps())),
                         [](const ::testing::TestParamInfo<std::tuple<DType, UnaryOp>>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               UnaryOpName(std::get<1>(info.param)));
                         });

TEST_F(KernelTest, UnaryWrapsIntegersAndRunsInPlace) {
  HostTensor x = HostTensor::FromValues<int8_t>(DType::kInt8, {4}, {-128, 127, -3, 16});
  DeviceTensor dx = Up(x);
  TESSERA_ASSERT_OK(backend().Unary(UnaryOp::kNeg, dx.View(), dx.View()));
  EXPECT_EQ(Down(dx).data_as<int8_t>()[0], -128);
  EXPECT_EQ(Down(dx).data_as<int8_t>()[1], -127);
  TESSERA_ASSERT_OK(backend().Unary(UnaryOp::kAbs, dx.View(), dx.View()));
  EXPECT_EQ(Down(dx).data_as<int8_t>()[0], -128);
  TESSERA_ASSERT_OK(backend().Unary(UnaryOp::kSquare, dx.View(), dx.View()));
  EXPECT_EQ(Down(dx).data_as<int8_t>()[3], 0);  // 256 wraps to 0
  HostTensor u = HostTensor::FromValues<uint8_t>(DType::kUInt8, {2}, {0, 5});
  DeviceTensor du = Up(u);
  TESSERA_ASSERT_OK(backend().Unary(UnaryOp::kBitwiseNot, du.View(), du.View()));
  EXPECT_EQ(Down(du).data_as<uint8_t>()[0], 255);
  EXPECT_EQ(Down(du).data_as<uint8_t>()[1], 250);
}

TEST_F(KernelTest, UnaryRejectsBadArgumentsNamingThem) {
  DeviceTensor i32 = Empty(DType::kInt32, {3}), f32 = Empty(DType::kFloat32, {3});
  DeviceTensor b = Empty(DType::kBool, {3}), f32_4 = Empty(DType::kFloat32, {4});
  const auto expect_invalid = [](const absl::Status& s, absl::string_view names) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(names), absl::string_view::npos) << s;
  };
  expect_invalid(backend().Unary(UnaryOp::kExp, i32.View(), i32.View()), "int32");
  expect_invalid(backend().Unary(UnaryOp::kNeg, b.View(), b.View()), "bool");
  expect_invalid(backend().Unary(UnaryOp::kFloor, b.View(), b.View()), "bool");
  expect_invalid(backend().Unary(UnaryOp::kBitwiseNot, f32.View(), f32.View()), "float32");
  expect_invalid(backend().Unary(UnaryOp::kIsNan, f32.View(), f32.View()), "bool");
  expect_invalid(backend().Unary(UnaryOp::kSin, f32.View(), f32_4.View()), "[4]");
  expect_invalid(backend().Activate(Activation::kRelu, b.View(), b.View()), "bool");
}

// ---------------------------------------------------------------------------------------------
// Binary: the ops past div

// Inputs for a op b: pow gets bases in [0.5, 2] and exponents in [-3, 3] (integers: [-3, 3] both,
// negative exponents included); the rest [-3, 3], integer divisors including 0.
inline std::pair<HostTensor, HostTensor> BinaryInputs(BinaryOp op, DType dtype, const Shape& a,
                                                      const Shape& b) {
  if (op == BinaryOp::kPow && IsFloatingPoint(dtype)) {
    return {RandomTensor(dtype, a, 81, 0.5, 2), RandomTensor(dtype, b, 82, -3, 3)};
  }
  return {RandomTensor(dtype, a, 81, -3, 3), RandomTensor(dtype, b, 82, -3, 3)};
}

// The reference of element i of a op b broadcast, into `want`.
inline void NaiveBinaryElement(BinaryOp op, const HostTensor& a, int64_t ia, const HostTensor& b,
                               int64_t ib, HostTensor& want, int64_t i) {
  if (IsFloatingPoint(a.dtype())) {
    const double v = NaiveBinaryFloating(op, GetDouble(a, ia), GetDouble(b, ib));
    if (GivesBool(op)) {
      SetFromInt64(want, i, v != 0);
    } else {
      SetFromDouble(want, i, v);
    }
  } else {
    SetFromInt64(
        want, i,
        NaiveBinaryInteger(op, GetInt64(a, ia), GetInt64(b, ib), a.dtype() == DType::kBool));
  }
}

using NewBinaryParam = std::tuple<DType, BinaryOp, std::pair<Shape, Shape>>;
class NewBinaryTest : public KernelParamTest<NewBinaryParam> {};

TEST_P(NewBinaryTest, MatchesScalarReference) {
  const auto& [dtype, op, shapes] = GetParam();
  const auto& [shape_a, shape_b] = shapes;
  Shape shape_out;
  ASSERT_TRUE(NaiveBroadcast(shape_a, shape_b, &shape_out));
  const auto [a, b] = BinaryInputs(op, dtype, shape_a, shape_b);
  const DType out_dtype = OutDType(GivesBool(op), dtype);
  DeviceTensor da = Up(a), db = Up(b), dout = Empty(out_dtype, shape_out);
  const absl::Status s = backend().Binary(op, da.View(), db.View(), dout.View());
  if (!BinarySupportedFor(op, dtype)) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(DTypeName(dtype)), absl::string_view::npos) << s;
    return;
  }
  TESSERA_ASSERT_OK(s);
  const HostTensor got = Down(dout);
  HostTensor want = HostTensor::Zeros(out_dtype, shape_out).value();
  int mismatches = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    NaiveBinaryElement(op, a, BroadcastSource(shape_a, shape_out, i), b,
                       BroadcastSource(shape_b, shape_out, i), want, i);
    // pow is the only op here not rounded once from the exact result.
    const double tol =
        op == BinaryOp::kPow && IsFloatingPoint(dtype)
            ? (2 * UnitRoundoff(dtype) + 16 * ComputeRoundoff(dtype)) * std::abs(GetDouble(want, i))
            : 0.0;
    ExpectElement(got, want, i, tol, std::string(BinaryOpName(op)), &mismatches);
  }
}

inline std::vector<std::pair<Shape, Shape>> NewBinaryShapes() {
  return {{{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}}, {{2, 1, 4}, {3, 1}}, {{}, {2, 3}},
          {{5, 1}, {1, 6}},       {{0, 3}, {3}},    {{1}, {}},           {{37}, {1}}};
}

INSTANTIATE_TEST_SUITE_P(Kernels, NewBinaryTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::ValuesIn(NewBinaryOps()),
                                            ::testing::ValuesIn(NewBinaryShapes())),
                         [](const ::testing::TestParamInfo<NewBinaryParam>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               BinaryOpName(std::get<1>(info.param)), "_",
                                               ShapeName(std::get<2>(info.param).first), "_",
                                               ShapeName(std::get<2>(info.param).second), "_",
                                               info.index);
                         });

TEST_F(KernelTest, BinaryFollowsTorchOnEdgeCases) {
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  const HostTensor a =
      HostTensor::FromValues<float>(DType::kFloat32, {5}, {nan, 1.f, -7.f, 7.f, 1.f});
  const HostTensor b =
      HostTensor::FromValues<float>(DType::kFloat32, {5}, {2.f, nan, 2.f, -2.f, 0.f});
  DeviceTensor da = Up(a), db = Up(b), out = Empty(DType::kFloat32, {5});
  TESSERA_ASSERT_OK(backend().Binary(BinaryOp::kMaximum, da.View(), db.View(), out.View()));
  EXPECT_TRUE(std::isnan(Down(out).data_as<float>()[0]));
  EXPECT_TRUE(std::isnan(Down(out).data_as<float>()[1]));
  TESSERA_ASSERT_OK(backend().Binary(BinaryOp::kRemainder, da.View(), db.View(), out.View()));
  EXPECT_EQ(Down(out).data_as<float>()[2], 1.f);   // -7 % 2
  EXPECT_EQ(Down(out).data_as<float>()[3], -1.f);  // 7 % -2
  TESSERA_ASSERT_OK(backend().Binary(BinaryOp::kFloorDivide, da.View(), db.View(), out.View()));
  EXPECT_EQ(Down(out).data_as<float>()[2], -4.f);
  EXPECT_EQ(Down(out).data_as<float>()[4], inf);  // 1 // 0, as IEEE division
  const HostTensor x = HostTensor::FromValues<int32_t>(DType::kInt32, {4}, {-7, 7, 5, 2});
  const HostTensor y = HostTensor::FromValues<int32_t>(DType::kInt32, {4}, {2, 0, -1, -2});
  DeviceTensor dx = Up(x), dy = Up(y), iout = Empty(DType::kInt32, {4});
  TESSERA_ASSERT_OK(backend().Binary(BinaryOp::kFloorDivide, dx.View(), dy.View(), iout.View()));
  EXPECT_EQ(Down(iout).data_as<int32_t>()[0], -4);
  EXPECT_EQ(Down(iout).data_as<int32_t>()[1], 0);  // an integer zero divisor gives 0
  TESSERA_ASSERT_OK(backend().Binary(BinaryOp::kPow, dx.View(), dy.View(), iout.View()));
  EXPECT_EQ(Down(iout).data_as<int32_t>()[0], 49);
  EXPECT_EQ(Down(iout).data_as<int32_t>()[1], 1);
  EXPECT_EQ(Down(iout).data_as<int32_t>()[3], 0);  // 2 ** -2 on integers
  const HostTensor m = HostTensor::FromValues<int32_t>(DType::kInt32, {1}, {INT32_MIN});
  const HostTensor minus_one = HostTensor::FromValues<int32_t>(DType::kInt32, {1}, {-1});
  DeviceTensor dm = Up(m), dmo = Up(minus_one), mout = Empty(DType::kInt32, {1});
  TESSERA_ASSERT_OK(backend().Binary(BinaryOp::kFloorDivide, dm.View(), dmo.View(), mout.View()));
  EXPECT_EQ(Down(mout).data_as<int32_t>()[0], INT32_MIN);  // wraps
  TESSERA_ASSERT_OK(backend().Binary(BinaryOp::kRemainder, dm.View(), dmo.View(), mout.View()));
  EXPECT_EQ(Down(mout).data_as<int32_t>()[0], 0);
}

TEST_F(KernelTest, NewBinaryOpsRejectBadArgumentsNamingThem) {
  DeviceTensor f32 = Empty(DType::kFloat32, {3}), f64 = Empty(DType::kFloat64, {3});
  DeviceTensor b = Empty(DType::kBool, {3}), i32 = Empty(DType::kInt32, {3});
  DeviceTensor f32_5 = Empty(DType::kFloat32, {5}), b5 = Empty(DType::kBool, {5});
  const auto expect_invalid = [](const absl::Status& s, absl::string_view names) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(names), absl::string_view::npos) << s;
  };
  expect_invalid(backend().Binary(BinaryOp::kEq, f32.View(), f32.View(), f32.View()), "bool");
  expect_invalid(backend().Binary(BinaryOp::kLt, f32.View(), f64.View(), b.View()), "float64");
  expect_invalid(backend().Binary(BinaryOp::kMaximum, f32.View(), f32.View(), b.View()), "bool");
  expect_invalid(backend().Binary(BinaryOp::kBitwiseAnd, f32.View(), f32.View(), f32.View()),
                 "float32");
  expect_invalid(backend().Binary(BinaryOp::kPow, b.View(), b.View(), b.View()), "bool");
  expect_invalid(backend().Binary(BinaryOp::kRemainder, b.View(), b.View(), b.View()), "bool");
  expect_invalid(backend().Binary(BinaryOp::kDiv, i32.View(), i32.View(), i32.View()), "int32");
  expect_invalid(backend().Binary(BinaryOp::kGe, f32.View(), f32_5.View(), b5.View()), "[5]");
  expect_invalid(backend().Binary(BinaryOp::kNe, f32.View(), f32.View(), b5.View()), "[5]");
}

// ---------------------------------------------------------------------------------------------
// Where

struct WhereShapes {
  Shape cond, a, b;
};
inline void PrintTo(const WhereShapes& s, std::ostream* os) {
  *os << ShapeToString(s.cond) << " " << ShapeToString(s.a) << " " << ShapeToString(s.b);
}
using WhereParam = std::tuple<DType, WhereShapes>;
class WhereTest : public KernelParamTest<WhereParam> {};

TEST_P(WhereTest, PicksByTheBroadcastCondition) {
  const auto& [dtype, shapes] = GetParam();
  Shape values, shape_out;
  ASSERT_TRUE(NaiveBroadcast(shapes.a, shapes.b, &values));
  ASSERT_TRUE(NaiveBroadcast(shapes.cond, values, &shape_out));
  const HostTensor cond = RandomTensor(DType::kBool, shapes.cond, 91);
  const HostTensor a = RandomTensor(dtype, shapes.a, 92, -3, 3);
  const HostTensor b = RandomTensor(dtype, shapes.b, 93, -3, 3);
  DeviceTensor dc = Up(cond), da = Up(a), db = Up(b), dout = Empty(dtype, shape_out);
  TESSERA_ASSERT_OK(backend().Where(dc.View(), da.View(), db.View(), dout.View()));
  const HostTensor got = Down(dout);
  HostTensor want = HostTensor::Zeros(dtype, shape_out).value();
  const size_t size = DTypeSize(dtype);
  int mismatches = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const bool pick_a = GetInt64(cond, BroadcastSource(shapes.cond, shape_out, i)) != 0;
    const HostTensor& from = pick_a ? a : b;
    const int64_t j = BroadcastSource(pick_a ? shapes.a : shapes.b, shape_out, i);
    std::memcpy(want.data() + i * size, from.data() + j * size, size);
    ExpectElement(got, want, i, 0, "where", &mismatches);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, WhereTest,
    ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                       ::testing::Values(WhereShapes{{2, 3, 4}, {2, 3, 4}, {2, 3, 4}},
                                         WhereShapes{{3, 1}, {1, 4}, {3, 4}},
                                         WhereShapes{{4}, {2, 3, 4}, {}}, WhereShapes{{}, {5}, {5}},
                                         WhereShapes{{2, 1, 3}, {1, 4, 1}, {2, 4, 3}},
                                         WhereShapes{{0, 3}, {3}, {1}}, WhereShapes{{1}, {1}, {}},
                                         WhereShapes{{129}, {129}, {1}})),
    [](const ::testing::TestParamInfo<WhereParam>& info) {
      const WhereShapes& s = std::get<1>(info.param);
      return absl::StrCat(DTypeName(std::get<0>(info.param)), "_", ShapeName(s.cond), "_",
                          ShapeName(s.a), "_", ShapeName(s.b));
    });

TEST_F(KernelTest, WhereRejectsBadArgumentsNamingThem) {
  DeviceTensor c = Empty(DType::kBool, {2, 3}), f32 = Empty(DType::kFloat32, {2, 3});
  DeviceTensor i32 = Empty(DType::kInt32, {2, 3}), f64 = Empty(DType::kFloat64, {2, 3});
  DeviceTensor c4 = Empty(DType::kBool, {4}), f32_3x3 = Empty(DType::kFloat32, {3, 3});
  const auto expect_invalid = [](const absl::Status& s, absl::string_view names) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(names), absl::string_view::npos) << s;
  };
  expect_invalid(backend().Where(i32.View(), f32.View(), f32.View(), f32.View()), "int32");
  expect_invalid(backend().Where(c.View(), f32.View(), f64.View(), f32.View()), "float64");
  expect_invalid(backend().Where(c.View(), f32.View(), f32.View(), f64.View()), "float64");
  expect_invalid(backend().Where(c4.View(), f32.View(), f32.View(), f32.View()), "[4]");
  expect_invalid(backend().Where(c.View(), f32.View(), f32.View(), f32_3x3.View()), "[3, 3]");
}

}  // namespace tessera::kernels::testing

#endif  // TESSERA_KERNELS_TESTING_ELEMENTWISE_CONFORMANCE_H_
