#ifndef TESSERA_KERNELS_TESTING_COMPUTE_CONFORMANCE_H_
#define TESSERA_KERNELS_TESTING_COMPUTE_CONFORMANCE_H_

// Conformance of GEMM, elementwise binary operations, bias add and activations against naive host
// loops, over dtype x shape x options. Include once per test binary (see conformance_fixture.h).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
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
// GEMM

struct GemmSize {
  int64_t m, n, k;
};
inline void PrintTo(const GemmSize& s, std::ostream* os) {
  *os << "m=" << s.m << " n=" << s.n << " k=" << s.k;
}
using GemmParam = std::tuple<DType, GemmSize, bool, bool, std::pair<double, double>>;
class GemmTest : public KernelParamTest<GemmParam> {};

// Fails where `got` differs from alpha * op(a) op(b) + beta * c, computed in double, by more than
// the rounding a GEMM in a's dtype may make (c is not read with beta 0).
inline void ExpectNaiveGemm(const HostTensor& a, const HostTensor& b, const HostTensor& c, bool ta,
                            bool tb, double alpha, double beta, const GemmSize& size,
                            const HostTensor& got) {
  const DType dtype = a.dtype();
  const auto [m, n, k] = size;
  int mismatches = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0, magnitude = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = GetDouble(a, ta ? p * m + i : i * k + p);
        const double y = GetDouble(b, tb ? j * k + p : p * n + j);
        dot += x * y;
        magnitude += std::abs(x * y);
      }
      const double cij = beta == 0 ? 0.0 : GetDouble(c, i * n + j);
      const double ref = alpha * dot + beta * cij;
      magnitude = std::abs(alpha) * magnitude + std::abs(beta * cij);
      const double tol =
          2 * ((k + 2) * ComputeRoundoff(dtype) * magnitude + UnitRoundoff(dtype) * std::abs(ref)) +
          1e-300;
      const double value = GetDouble(got, i * n + j);
      if (!(std::abs(value - ref) <= tol) && mismatches++ < kMaxReportedMismatches) {
        ADD_FAILURE() << "C(" << i << ", " << j << ") = " << value << ", expected " << ref
                      << " within " << tol;
      }
    }
  }
}

TEST_P(GemmTest, MatchesNaiveLoop) {
  const auto& [dtype, size, ta, tb, scale] = GetParam();
  const auto [m, n, k] = size;
  const auto [alpha, beta] = scale;
  const HostTensor a = RandomTensor(dtype, ta ? Shape{k, m} : Shape{m, k}, 1);
  const HostTensor b = RandomTensor(dtype, tb ? Shape{n, k} : Shape{k, n}, 2);
  const HostTensor c = RandomTensor(dtype, {m, n}, 3);
  DeviceTensor da = Up(a), db = Up(b), dc = Up(c);
  TESSERA_ASSERT_OK(backend().Gemm(ta, tb, alpha, da.View(), db.View(), beta, dc.View()));
  ExpectNaiveGemm(a, b, c, ta, tb, alpha, beta, size, Down(dc));
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, GemmTest,
    ::testing::Combine(::testing::ValuesIn(FloatingDTypes()),
                       ::testing::Values(GemmSize{1, 1, 1}, GemmSize{3, 5, 7}, GemmSize{17, 9, 33},
                                         GemmSize{64, 48, 40}, GemmSize{0, 4, 3}, GemmSize{4, 5, 0},
                                         GemmSize{2, 0, 3}),
                       ::testing::Bool(), ::testing::Bool(),
                       ::testing::Values(std::pair{1.0, 0.0}, std::pair{0.5, 2.0})),
    [](const ::testing::TestParamInfo<GemmParam>& info) {
      const GemmSize& size = std::get<1>(info.param);
      return absl::StrCat(DTypeName(std::get<0>(info.param)), "_", size.m, "x", size.n, "x", size.k,
                          "_", std::get<2>(info.param) ? "T" : "N",
                          std::get<3>(info.param) ? "T" : "N",
                          std::get<4>(info.param).second == 0 ? "_beta0" : "_beta2");
    });

// How a LinearProduct test passes the weight: as it is, prepared for the product's rows, or
// prepared for other rows (which the backend must not use).
enum class WeightUse { kPlain, kPrepared, kPreparedForOtherRows };
using LinearParam = std::tuple<DType, GemmSize, WeightUse>;
class LinearProductTest : public KernelParamTest<LinearParam> {};

TEST_P(LinearProductTest, MatchesNaiveLoopAndDoesNotReadY) {
  const auto& [dtype, size, use] = GetParam();
  const auto [m, n, k] = size;
  const HostTensor x = RandomTensor(dtype, {m, k}, 1);
  const HostTensor w = RandomTensor(dtype, {n, k}, 2);
  HostTensor y = HostTensor::Zeros(dtype, {m, n}).value();
  for (int64_t i = 0; i < y.num_elements(); ++i) SetFromDouble(y, i, std::nan(""));
  DeviceTensor dx = Up(x), dw = Up(w), dy = Up(y);
  std::shared_ptr<const PreparedWeight> prepared;
  if (use != WeightUse::kPlain && n > 0 && k > 0) {
    const int64_t rows = use == WeightUse::kPrepared ? std::max<int64_t>(m, 1) : m + 3;
    absl::StatusOr<std::shared_ptr<const PreparedWeight>> made =
        backend().PrepareLinearWeight(dw.View(), rows);
    ASSERT_TRUE(made.ok()) << made.status();
    prepared = *std::move(made);
  }
  TESSERA_ASSERT_OK(backend().LinearProduct(dx.View(), dw.View(), prepared.get(), dy.View()));
  ExpectNaiveGemm(x, w, y, false, true, 1.0, 0.0, size, Down(dy));
  // A second product with the same prepared weight gives the same result.
  DeviceTensor again = Up(y);
  TESSERA_ASSERT_OK(backend().LinearProduct(dx.View(), dw.View(), prepared.get(), again.View()));
  ExpectNaiveGemm(x, w, y, false, true, 1.0, 0.0, size, Down(again));
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, LinearProductTest,
    ::testing::Combine(::testing::ValuesIn(FloatingDTypes()),
                       ::testing::Values(GemmSize{1, 1, 1}, GemmSize{3, 5, 7}, GemmSize{17, 9, 33},
                                         GemmSize{64, 48, 40}, GemmSize{5, 130, 260},
                                         GemmSize{0, 4, 3}, GemmSize{4, 5, 0}, GemmSize{2, 0, 3}),
                       ::testing::Values(WeightUse::kPlain, WeightUse::kPrepared,
                                         WeightUse::kPreparedForOtherRows)),
    [](const ::testing::TestParamInfo<LinearParam>& info) {
      const GemmSize& size = std::get<1>(info.param);
      const WeightUse use = std::get<2>(info.param);
      return absl::StrCat(DTypeName(std::get<0>(info.param)), "_", size.m, "x", size.n, "x", size.k,
                          use == WeightUse::kPlain      ? "_plain"
                          : use == WeightUse::kPrepared ? "_prepared"
                                                        : "_prepared_for_other_rows");
    });

class LinearProductArgumentTest : public KernelTest {};

TEST_F(LinearProductArgumentTest, RefusesMismatchedShapesAndBadRowsNamingThem) {
  DeviceTensor x = Up(RandomTensor(DType::kFloat32, {4, 3}, 1));
  DeviceTensor w = Up(RandomTensor(DType::kFloat32, {5, 4}, 2));
  DeviceTensor y = Up(RandomTensor(DType::kFloat32, {4, 5}, 3));
  const absl::Status shapes = backend().LinearProduct(x.View(), w.View(), nullptr, y.View());
  EXPECT_EQ(shapes.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(shapes.message().find("[5, 4]"), std::string::npos) << shapes;
  const absl::Status rows = backend().PrepareLinearWeight(w.View(), 0).status();
  EXPECT_EQ(rows.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rows.message().find("0 rows"), std::string::npos) << rows;
  DeviceTensor flat = Up(RandomTensor(DType::kFloat32, {20}, 4));
  const absl::Status rank = backend().PrepareLinearWeight(flat.View(), 4).status();
  EXPECT_EQ(rank.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rank.message().find("[20]"), std::string::npos) << rank;
}

class GemmDTypeTest : public KernelParamTest<DType> {};

TEST_P(GemmDTypeTest, BetaZeroDoesNotReadC) {
  const DType dtype = GetParam();
  const HostTensor a = RandomTensor(dtype, {4, 3}, 1), b = RandomTensor(dtype, {3, 5}, 2);
  HostTensor c = HostTensor::Zeros(dtype, {4, 5}).value();
  for (int64_t i = 0; i < c.num_elements(); ++i) SetFromDouble(c, i, std::nan(""));
  DeviceTensor da = Up(a), db = Up(b), dc = Up(c);
  TESSERA_ASSERT_OK(backend().Gemm(false, false, 1.0, da.View(), db.View(), 0.0, dc.View()));
  const HostTensor got = Down(dc);
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    ASSERT_FALSE(std::isnan(GetDouble(got, i))) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, GemmDTypeTest, ::testing::ValuesIn(FloatingDTypes()),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST_F(KernelTest, GemmRejectsBadArgumentsNamingThem) {
  DeviceTensor a = Empty(DType::kInt32, {2, 3}), b = Empty(DType::kInt32, {3, 4}),
               c = Empty(DType::kInt32, {2, 4});
  absl::Status s = backend().Gemm(false, false, 1, a.View(), b.View(), 0, c.View());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("int32"), absl::string_view::npos) << s;

  DeviceTensor x = Empty(DType::kFloat32, {2, 3}), y = Empty(DType::kFloat32, {4, 5}),
               z = Empty(DType::kFloat32, {2, 5});
  s = backend().Gemm(false, false, 1, x.View(), y.View(), 0, z.View());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[4, 5]"), absl::string_view::npos) << s;

  DeviceTensor r3 = Empty(DType::kFloat32, {2, 3, 1});
  s = backend().Gemm(false, false, 1, r3.View(), y.View(), 0, z.View());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[2, 3, 1]"), absl::string_view::npos) << s;
}

// ---------------------------------------------------------------------------------------------
// Elementwise binary operations with broadcasting

inline bool BinarySupported(BinaryOp op, DType dtype) {
  if (op == BinaryOp::kDiv) return IsFloatingPoint(dtype);
  if (op == BinaryOp::kSub) return dtype != DType::kBool;
  return true;
}

// Element i of `out` = a[ia] op b[ib] by the documented semantics.
inline void NaiveBinary(BinaryOp op, const HostTensor& a, int64_t ia, const HostTensor& b,
                        int64_t ib, HostTensor& out, int64_t i) {
  const DType dtype = a.dtype();
  if (IsFloatingPoint(dtype)) {
    const double x = GetDouble(a, ia), y = GetDouble(b, ib);
    const double v = op == BinaryOp::kAdd   ? x + y
                     : op == BinaryOp::kSub ? x - y
                     : op == BinaryOp::kMul ? x * y
                                            : x / y;
    SetFromDouble(out, i, v);
  } else if (dtype == DType::kBool) {
    const bool x = GetInt64(a, ia) != 0, y = GetInt64(b, ib) != 0;
    SetFromInt64(out, i, op == BinaryOp::kMul ? (x && y) : (x || y));
  } else {
    const int64_t x = GetInt64(a, ia), y = GetInt64(b, ib);
    SetFromInt64(out, i, op == BinaryOp::kAdd ? x + y : op == BinaryOp::kSub ? x - y : x * y);
  }
}

using BinaryParam = std::tuple<DType, BinaryOp, std::pair<Shape, Shape>>;
class BinaryTest : public KernelParamTest<BinaryParam> {};

TEST_P(BinaryTest, MatchesNaiveLoopBitExactly) {
  const auto& [dtype, op, shapes] = GetParam();
  const auto& [shape_a, shape_b] = shapes;
  Shape shape_out;
  ASSERT_TRUE(NaiveBroadcast(shape_a, shape_b, &shape_out));
  const HostTensor a = RandomTensor(dtype, shape_a, 11, -3, 3);
  // Divisors stay away from zero.
  const HostTensor b = op == BinaryOp::kDiv ? RandomTensor(dtype, shape_b, 12, 0.25, 3)
                                            : RandomTensor(dtype, shape_b, 12, -3, 3);
  DeviceTensor da = Up(a), db = Up(b), dout = Empty(dtype, shape_out);
  const absl::Status s = backend().Binary(op, da.View(), db.View(), dout.View());
  if (!BinarySupported(op, dtype)) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(DTypeName(dtype)), absl::string_view::npos) << s;
    return;
  }
  TESSERA_ASSERT_OK(s);
  const HostTensor got = Down(dout);
  HostTensor want = HostTensor::Zeros(dtype, shape_out).value();
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    NaiveBinary(op, a, BroadcastSource(shape_a, shape_out, i), b,
                BroadcastSource(shape_b, shape_out, i), want, i);
  }
  int mismatches = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    if (!SameElement(got, want, i) && mismatches++ < kMaxReportedMismatches) {
      ADD_FAILURE() << "element " << i << ": got " << GetDouble(got, i) << ", expected "
                    << GetDouble(want, i);
    }
  }
}

inline std::vector<std::pair<Shape, Shape>> BinaryShapes() {
  return {{{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}}, {{2, 1, 4}, {3, 1}},          {{}, {2, 3}},
          {{5, 1}, {1, 6}},       {{0, 3}, {3}},    {{4, 1, 3, 1}, {1, 5, 1, 2}}, {{1}, {}}};
}

INSTANTIATE_TEST_SUITE_P(Kernels, BinaryTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::Values(BinaryOp::kAdd, BinaryOp::kSub,
                                                              BinaryOp::kMul, BinaryOp::kDiv),
                                            ::testing::ValuesIn(BinaryShapes())),
                         [](const ::testing::TestParamInfo<BinaryParam>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               BinaryOpName(std::get<1>(info.param)), "_",
                                               ShapeName(std::get<2>(info.param).first), "_",
                                               ShapeName(std::get<2>(info.param).second), "_",
                                               info.index);
                         });

TEST_F(KernelTest, BinaryInPlaceAndShapeErrors) {
  const HostTensor a = RandomTensor(DType::kFloat32, {3, 4}, 1);
  const HostTensor b = RandomTensor(DType::kFloat32, {3, 4}, 2);
  DeviceTensor da = Up(a), db = Up(b);
  TESSERA_ASSERT_OK(backend().Binary(BinaryOp::kMul, da.View(), db.View(), da.View()));
  const HostTensor got = Down(da);
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    EXPECT_EQ(got.data_as<float>()[i], a.data_as<float>()[i] * b.data_as<float>()[i]);
  }
  DeviceTensor c = Empty(DType::kFloat32, {3, 5}), out = Empty(DType::kFloat32, {3, 4});
  absl::Status s = backend().Binary(BinaryOp::kAdd, da.View(), c.View(), out.View());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[3, 5]"), absl::string_view::npos) << s;
  DeviceTensor wrong = Empty(DType::kFloat32, {4, 4});
  s = backend().Binary(BinaryOp::kAdd, da.View(), db.View(), wrong.View());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[4, 4]"), absl::string_view::npos) << s;
  DeviceTensor d64 = Empty(DType::kFloat64, {3, 4});
  s = backend().Binary(BinaryOp::kAdd, da.View(), d64.View(), out.View());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("float64"), absl::string_view::npos) << s;
}

// ---------------------------------------------------------------------------------------------
// Bias add

using BiasAddParam = std::tuple<DType, Shape>;
class BiasAddTest : public KernelParamTest<BiasAddParam> {};

TEST_P(BiasAddTest, AddsBiasToEveryRow) {
  const auto& [dtype, shape] = GetParam();
  const HostTensor x = RandomTensor(dtype, shape, 21, -3, 3);
  const HostTensor bias = RandomTensor(dtype, {shape.back()}, 22, -3, 3);
  DeviceTensor dx = Up(x), dbias = Up(bias);
  TESSERA_ASSERT_OK(backend().BiasAdd(dx.View(), dbias.View()));
  const HostTensor got = Down(dx);
  HostTensor want = x.Clone();
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    NaiveBinary(BinaryOp::kAdd, x, i, bias, i % shape.back(), want, i);
  }
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    ASSERT_TRUE(SameElement(got, want, i))
        << "element " << i << ": got " << GetDouble(got, i) << ", expected " << GetDouble(want, i);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, BiasAddTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::Values(Shape{4, 6}, Shape{2, 3, 5}, Shape{7},
                                                              Shape{3, 0, 4})),
                         [](const ::testing::TestParamInfo<BiasAddParam>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               ShapeName(std::get<1>(info.param)));
                         });

TEST_F(KernelTest, BiasAddRejectsMismatchedBias) {
  DeviceTensor x = Empty(DType::kFloat32, {4, 6}), bias = Empty(DType::kFloat32, {5});
  const absl::Status s = backend().BiasAdd(x.View(), bias.View());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[4, 6]"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("[5]"), absl::string_view::npos) << s;
}

// ---------------------------------------------------------------------------------------------
// Activations

using ActivationParam = std::tuple<DType, Activation, Shape>;
class ActivationTest : public KernelParamTest<ActivationParam> {};

TEST_P(ActivationTest, MatchesNaiveLoop) {
  const auto& [dtype, f, shape] = GetParam();
  const HostTensor x = RandomTensor(dtype, shape, 31, -4, 4);
  DeviceTensor dx = Up(x), dout = Empty(dtype, shape);
  const absl::Status s = backend().Activate(f, dx.View(), dout.View());
  const bool supported = f == Activation::kRelu ? dtype != DType::kBool : IsFloatingPoint(dtype);
  if (!supported) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(DTypeName(dtype)), absl::string_view::npos) << s;
    return;
  }
  TESSERA_ASSERT_OK(s);
  const HostTensor got = Down(dout);
  int mismatches = 0;
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const double in = GetDouble(x, i), ref = NaiveActivation(f, in), value = GetDouble(got, i);
    // Output rounding plus a few ulps of the compute type, relative to the input's size (gelu
    // cancels near -4).
    const double tol = f == Activation::kRelu
                           ? 0.0
                           : 2 * UnitRoundoff(dtype) * std::abs(ref) +
                                 16 * ComputeRoundoff(dtype) * (std::abs(ref) + std::abs(in));
    if (!(std::abs(value - ref) <= tol) && mismatches++ < kMaxReportedMismatches) {
      ADD_FAILURE() << ActivationName(f) << "(" << in << ") = " << value << ", expected " << ref;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, ActivationTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::Values(Activation::kRelu, Activation::kGelu,
                                                              Activation::kGeluTanh,
                                                              Activation::kTanh, Activation::kSilu),
                                            ::testing::Values(Shape{257}, Shape{3, 4, 5})),
                         [](const ::testing::TestParamInfo<ActivationParam>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               ActivationName(std::get<1>(info.param)), "_",
                                               ShapeName(std::get<2>(info.param)));
                         });

TEST_F(KernelTest, ActivationsKeepNaNAndRunInPlace) {
  HostTensor x = HostTensor::FromValues<float>(DType::kFloat32, {3}, {std::nanf(""), -1.f, 2.f});
  DeviceTensor dx = Up(x);
  TESSERA_ASSERT_OK(backend().Activate(Activation::kRelu, dx.View(), dx.View()));
  const HostTensor got = Down(dx);
  EXPECT_TRUE(std::isnan(got.data_as<float>()[0]));
  EXPECT_EQ(got.data_as<float>()[1], 0.f);
  EXPECT_EQ(got.data_as<float>()[2], 2.f);
}

}  // namespace tessera::kernels::testing

#endif  // TESSERA_KERNELS_TESTING_COMPUTE_CONFORMANCE_H_
