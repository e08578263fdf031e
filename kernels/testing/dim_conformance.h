#ifndef TESSERA_KERNELS_TESTING_DIM_CONFORMANCE_H_
#define TESSERA_KERNELS_TESTING_DIM_CONFORMANCE_H_

// Conformance of the kernels along a dim beyond reductions (reduce_conformance.h): arg-reductions,
// cumulative sums and products, softmax and its gradient, against plain float64 / int64 loops over
// dtype x op x shape x dim (size-1 and empty dims, long lines), with special values (NaN, -inf
// lines) and every argument error. The softmax gradient is checked against central differences of
// the forward reference. Include once per test binary (see conformance_fixture.h).

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/sharding/placement.h"
#include "gtest/gtest.h"
#include "kernels/testing/conformance_fixture.h"
#include "kernels/testing/nn_reference.h"

namespace tessera::kernels::testing {

// ---------------------------------------------------------------------------------------------
// Arg-reductions

using ArgReduceParam = std::tuple<DType, bool, DimCase, bool>;
class ArgReduceAlongDimTest : public KernelParamTest<ArgReduceParam> {};

TEST_P(ArgReduceAlongDimTest, GivesTheFirstExtreme) {
  const auto& [dtype, is_max, dim_case, keepdim] = GetParam();
  const int d = NormalizedDim(dim_case);
  const Lines lines(dim_case.shape, d);
  Shape out_shape = dim_case.shape;
  if (keepdim) {
    out_shape[d] = 1;
  } else {
    out_shape.erase(out_shape.begin() + d);
  }
  // Few distinct values, so that ties are common.
  const HostTensor x = RandomTensor(dtype, dim_case.shape, 101, -2, 2);
  DeviceTensor dx = Up(x), dout = Empty(DType::kInt64, out_shape);
  const absl::Status s = backend().ArgReduceAlongDim(is_max, dx.View(), dim_case.dim, dout.View());
  if (lines.size == 0) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("empty"), absl::string_view::npos) << s;
    return;
  }
  TESSERA_ASSERT_OK(s);
  const HostTensor got = Down(dout);
  int mismatches = 0;
  for (int64_t line = 0; line < lines.count(); ++line) {
    int64_t want = 0;
    for (int64_t i = 1; i < lines.size; ++i) {
      const double best = GetDouble(x, lines.At(line, want)), v = GetDouble(x, lines.At(line, i));
      if (is_max ? v > best : v < best) want = i;
    }
    const int64_t value = got.data_as<int64_t>()[line];
    if (value != want && mismatches++ < kMaxReportedMismatches) {
      ADD_FAILURE() << "line " << line << ": got index " << value << ", expected " << want;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, ArgReduceAlongDimTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes), ::testing::Bool(),
                                            ::testing::ValuesIn(DimCases()), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<ArgReduceParam>& info) {
                           return DimCaseName(std::get<0>(info.param),
                                              std::get<1>(info.param) ? "argmax" : "argmin",
                                              std::get<2>(info.param)) +
                                  (std::get<3>(info.param) ? "_keepdim" : "");
                         });

TEST_F(KernelTest, ArgReduceCountsNaNAsTheExtreme) {
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  const HostTensor x = HostTensor::FromValues<float>(DType::kFloat32, {2, 4},
                                                     {1.f, nan, 3.f, nan, -inf, 2.f, inf, inf});
  DeviceTensor dx = Up(x), out = Empty(DType::kInt64, {2});
  for (bool is_max : {true, false}) {
    TESSERA_ASSERT_OK(backend().ArgReduceAlongDim(is_max, dx.View(), -1, out.View()));
    const HostTensor got = Down(out);
    EXPECT_EQ(got.data_as<int64_t>()[0], 1) << is_max;               // the first NaN
    EXPECT_EQ(got.data_as<int64_t>()[1], is_max ? 2 : 0) << is_max;  // the first inf, -inf
  }
}

TEST_F(KernelTest, ArgReduceRejectsBadArgumentsNamingThem) {
  DeviceTensor x = Empty(DType::kFloat32, {4, 5}), out = Empty(DType::kInt64, {4});
  DeviceTensor f32_out = Empty(DType::kFloat32, {4}), wrong = Empty(DType::kInt64, {5});
  DeviceTensor empty = Empty(DType::kFloat32, {4, 0});
  const auto expect_invalid = [](const absl::Status& s, absl::string_view names) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(names), absl::string_view::npos) << s;
  };
  expect_invalid(backend().ArgReduceAlongDim(true, x.View(), 1, f32_out.View()), "float32");
  expect_invalid(backend().ArgReduceAlongDim(true, x.View(), 1, wrong.View()), "[5]");
  expect_invalid(backend().ArgReduceAlongDim(false, x.View(), 2, out.View()), "dim 2");
  expect_invalid(backend().ArgReduceAlongDim(false, empty.View(), 1, out.View()), "[4, 0]");
}

// ---------------------------------------------------------------------------------------------
// Cumulative sums and products

using ScanParam = std::tuple<DType, ReduceOp, DimCase>;
class ScanAlongDimTest : public KernelParamTest<ScanParam> {};

TEST_P(ScanAlongDimTest, MatchesNaiveRunningLoop) {
  const auto& [dtype, op, dim_case] = GetParam();
  const bool product = op == ReduceOp::kProduct, floating = IsFloatingPoint(dtype);
  // Products stay near 1 for floating types; integer products wrap, as they may.
  const HostTensor x = product && floating ? RandomTensor(dtype, dim_case.shape, 111, 0.5, 1.5)
                                           : RandomTensor(dtype, dim_case.shape, 111, -3, 3);
  DeviceTensor dx = Up(x), dout = Empty(dtype, dim_case.shape);
  const absl::Status s = backend().ScanAlongDim(op, dx.View(), dim_case.dim, dout.View());
  if (dtype == DType::kBool) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("bool"), absl::string_view::npos) << s;
    return;
  }
  TESSERA_ASSERT_OK(s);
  const HostTensor got = Down(dout);
  HostTensor want = HostTensor::Zeros(dtype, dim_case.shape).value();
  const Lines lines(dim_case.shape, NormalizedDim(dim_case));
  int mismatches = 0;
  for (int64_t line = 0; line < lines.count(); ++line) {
    double acc = product ? 1 : 0, magnitude = 0;
    int64_t iacc = product ? 1 : 0;
    for (int64_t i = 0; i < lines.size; ++i) {
      const int64_t at = lines.At(line, i);
      double tol = 0;
      if (floating) {
        const double v = GetDouble(x, at);
        acc = product ? acc * v : acc + v;
        magnitude = product ? std::abs(acc) : magnitude + std::abs(v);
        tol =
            2 * UnitRoundoff(dtype) * std::abs(acc) + (i + 2) * ComputeRoundoff(dtype) * magnitude;
        SetFromDouble(want, at, acc);
      } else {
        iacc = product ? WrappedMul(iacc, GetInt64(x, at)) : iacc + GetInt64(x, at);
        SetFromInt64(want, at, iacc);
      }
      ExpectElement(got, want, at, tol, product ? "cumprod" : "cumsum", &mismatches);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, ScanAlongDimTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::Values(ReduceOp::kSum, ReduceOp::kProduct),
                                            ::testing::ValuesIn(DimCases())),
                         [](const ::testing::TestParamInfo<ScanParam>& info) {
                           return DimCaseName(
                               std::get<0>(info.param),
                               std::get<1>(info.param) == ReduceOp::kSum ? "cumsum" : "cumprod",
                               std::get<2>(info.param));
                         });

TEST_F(KernelTest, ScanRunsInPlaceAndRejectsBadArgumentsNamingThem) {
  const HostTensor x = HostTensor::FromValues<int32_t>(DType::kInt32, {2, 3}, {1, 2, 3, 4, 5, 6});
  DeviceTensor dx = Up(x);
  TESSERA_ASSERT_OK(backend().ScanAlongDim(ReduceOp::kSum, dx.View(), 1, dx.View()));
  const HostTensor got = Down(dx);
  const std::vector<int32_t> want = {1, 3, 6, 4, 9, 15};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(got.data_as<int32_t>()[i], want[i]) << i;
  DeviceTensor i64 = Empty(DType::kInt64, {2, 3}), i32_3x2 = Empty(DType::kInt32, {3, 2});
  const auto expect_invalid = [](const absl::Status& s, absl::string_view names) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(names), absl::string_view::npos) << s;
  };
  expect_invalid(backend().ScanAlongDim(ReduceOp::kMax, dx.View(), 1, dx.View()), "max");
  expect_invalid(backend().ScanAlongDim(ReduceOp::kSum, dx.View(), 1, i64.View()), "int64");
  expect_invalid(backend().ScanAlongDim(ReduceOp::kSum, dx.View(), 1, i32_3x2.View()), "[3, 2]");
  expect_invalid(backend().ScanAlongDim(ReduceOp::kProduct, dx.View(), -3, dx.View()), "dim -3");
}

// ---------------------------------------------------------------------------------------------
// Softmax

inline const char* SoftmaxTestName(SoftmaxKind kind) {
  return kind == SoftmaxKind::kSoftmax      ? "softmax"
         : kind == SoftmaxKind::kLogSoftmax ? "log_softmax"
                                            : "safe_softmax";
}

// Half the least float16 subnormal, the absolute rounding of float16's tiny values; 0 elsewhere.
inline double SubnormalRounding(DType dtype) {
  return dtype == DType::kFloat16 ? std::ldexp(1.0, -25) : 0.0;
}

// softmax (or log_softmax, or _safe_softmax) of `x` of `shape` along dim d, in float64.
inline Values NaiveSoftmax(SoftmaxKind kind, const Values& x, const Shape& shape, int d) {
  const Lines lines(shape, d);
  Values y(x.size());
  for (int64_t line = 0; line < lines.count(); ++line) {
    double max = -std::numeric_limits<double>::infinity();
    bool nan = false;
    for (int64_t i = 0; i < lines.size; ++i) {
      max = std::max(max, x[lines.At(line, i)]);
      nan = nan || std::isnan(x[lines.At(line, i)]);
    }
    double sum = 0;
    for (int64_t i = 0; i < lines.size; ++i) sum += std::exp(x[lines.At(line, i)] - max);
    for (int64_t i = 0; i < lines.size; ++i) {
      const double v = x[lines.At(line, i)];
      double out =
          kind == SoftmaxKind::kLogSoftmax ? v - max - std::log(sum) : std::exp(v - max) / sum;
      if (nan) out = std::nan("");
      if (kind == SoftmaxKind::kSafeSoftmax && !nan && std::isinf(max) && max < 0) out = 0;
      y[lines.At(line, i)] = out;
    }
  }
  return y;
}

using SoftmaxParam = std::tuple<DType, SoftmaxKind, DimCase>;
class SoftmaxTest : public KernelParamTest<SoftmaxParam> {};

TEST_P(SoftmaxTest, MatchesFloat64Reference) {
  const auto& [dtype, kind, dim_case] = GetParam();
  const int d = NormalizedDim(dim_case);
  const HostTensor x = RandomTensor(dtype, dim_case.shape, 121, -6, 6);
  DeviceTensor dx = Up(x), dy = Empty(dtype, dim_case.shape);
  TESSERA_ASSERT_OK(backend().SoftmaxAlongDim(kind, dx.View(), dim_case.dim, dy.View()));
  const HostTensor got = Down(dy);
  const Values xs = ToValues(x), want = NaiveSoftmax(kind, xs, dim_case.shape, d);
  const Lines lines(dim_case.shape, d);
  const double ud = UnitRoundoff(dtype), uc = ComputeRoundoff(dtype);
  int mismatches = 0;
  for (int64_t line = 0; line < lines.count(); ++line) {
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < lines.size; ++i) max = std::max(max, xs[lines.At(line, i)]);
    for (int64_t i = 0; i < lines.size; ++i) {
      const int64_t at = lines.At(line, i);
      const double ref = want[at], value = GetDouble(got, at);
      // exp(x - max) has the rounding of x - max relative; log_softmax sums absolute terms.
      const double tol =
          kind == SoftmaxKind::kLogSoftmax
              ? 2 * ud * std::abs(ref) +
                    8 * uc * (std::abs(xs[at]) + std::abs(max) + std::abs(ref - xs[at]) + 1)
              : 2 * ud * ref + 8 * uc * (2 + std::abs(xs[at] - max)) * ref +
                    SubnormalRounding(dtype) + 1e-300;
      if (!(std::abs(value - ref) <= tol) && mismatches++ < kMaxReportedMismatches) {
        ADD_FAILURE() << "element " << at << " (x = " << xs[at] << "): got " << value
                      << ", expected " << ref << " within " << tol;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, SoftmaxTest,
                         ::testing::Combine(::testing::ValuesIn(FloatingDTypes()),
                                            ::testing::Values(SoftmaxKind::kSoftmax,
                                                              SoftmaxKind::kLogSoftmax,
                                                              SoftmaxKind::kSafeSoftmax),
                                            ::testing::ValuesIn(DimCases())),
                         [](const ::testing::TestParamInfo<SoftmaxParam>& info) {
                           return DimCaseName(std::get<0>(info.param),
                                              SoftmaxTestName(std::get<1>(info.param)),
                                              std::get<2>(info.param));
                         });

class SoftmaxSpecialTest : public KernelParamTest<std::tuple<DType, SoftmaxKind>> {};

// Lines of [all -inf], [NaN somewhere], [some -inf], [one element].
TEST_P(SoftmaxSpecialTest, FollowsTorchOnInfiniteAndNaNLines) {
  const auto& [dtype, kind] = GetParam();
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const std::vector<double> values = {-inf, -inf, -inf, 1.0, nan, 2.0, -inf, 0.5, -inf};
  HostTensor x = HostTensor::Zeros(dtype, {3, 3}).value();
  for (size_t i = 0; i < values.size(); ++i) SetFromDouble(x, i, values[i]);
  DeviceTensor dx = Up(x), dy = Empty(dtype, {3, 3});
  TESSERA_ASSERT_OK(backend().SoftmaxAlongDim(kind, dx.View(), 1, dy.View()));
  const HostTensor got = Down(dy);
  const Values want = NaiveSoftmax(kind, ToValues(x), {3, 3}, 1);
  for (int64_t i = 0; i < 9; ++i) {
    const double value = GetDouble(got, i);
    const bool ok = (std::isnan(want[i]) && std::isnan(value)) || value == want[i] ||
                    std::abs(value - want[i]) <= 4 * UnitRoundoff(dtype) * std::abs(want[i]);
    EXPECT_TRUE(ok) << "element " << i << ": got " << value << ", expected " << want[i];
  }
  DeviceTensor one = Up(RandomTensor(dtype, {4, 1}, 122)), one_out = Empty(dtype, {4, 1});
  TESSERA_ASSERT_OK(backend().SoftmaxAlongDim(kind, one.View(), 1, one_out.View()));
  const HostTensor single = Down(one_out);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(GetDouble(single, i), kind == SoftmaxKind::kLogSoftmax ? 0.0 : 1.0) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, SoftmaxSpecialTest,
                         ::testing::Combine(::testing::ValuesIn(FloatingDTypes()),
                                            ::testing::Values(SoftmaxKind::kSoftmax,
                                                              SoftmaxKind::kLogSoftmax,
                                                              SoftmaxKind::kSafeSoftmax)),
                         [](const ::testing::TestParamInfo<std::tuple<DType, SoftmaxKind>>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               SoftmaxTestName(std::get<1>(info.param)));
                         });

using SoftmaxBackwardParam = std::tuple<DType, SoftmaxKind, DimCase>;
class SoftmaxBackwardTest : public KernelParamTest<SoftmaxBackwardParam> {};

// dx from y = the forward of x, against central differences of sum(dy * forward(x)).
TEST_P(SoftmaxBackwardTest, MatchesCentralDifferences) {
  const auto& [dtype, kind, dim_case] = GetParam();
  const int d = NormalizedDim(dim_case);
  const Shape& shape = dim_case.shape;
  const HostTensor x = RandomTensor(dtype, shape, 131, -3, 3);
  const HostTensor dy = RandomTensor(dtype, shape, 132, -2, 2);
  const Values xs = ToValues(x), dys = ToValues(dy),
               p = NaiveSoftmax(SoftmaxKind::kSoftmax, xs, shape, d);
  HostTensor y = HostTensor::Zeros(dtype, shape).value();
  const Values ys = NaiveSoftmax(kind, xs, shape, d);
  for (int64_t i = 0; i < y.num_elements(); ++i) SetFromDouble(y, i, ys[i]);
  DeviceTensor dyv = Up(y), ddy = Up(dy), ddx = Empty(dtype, shape);
  TESSERA_ASSERT_OK(
      backend().SoftmaxBackward(kind, dyv.View(), ddy.View(), dim_case.dim, ddx.View()));
  const HostTensor got = Down(ddx);
  const Values numeric = CentralDifferences(
      [&](const Values& in) { return NaiveSoftmax(kind, in, shape, d); }, xs, dys);
  const Lines lines(shape, d);
  const double ud = UnitRoundoff(dtype);
  int mismatches = 0;
  for (int64_t line = 0; line < lines.count(); ++line) {
    double weighted = 0, total = 0, loss = 0;  // sums of |dy| p, |dy| and |dy| (1 + |y|)
    for (int64_t i = 0; i < lines.size; ++i) {
      const int64_t at = lines.At(line, i);
      weighted += std::abs(dys[at]) * p[at];
      total += std::abs(dys[at]);
      loss += std::abs(dys[at]) * (1 + std::abs(ys[at]));
    }
    for (int64_t i = 0; i < lines.size; ++i) {
      const int64_t at = lines.At(line, i);
      if (std::isnan(numeric[at])) continue;  // not sampled
      const double ref = numeric[at], value = GetDouble(got, at);
      // The rounding of y (and of exp(y)) to the dtype and of the output; the differences'
      // truncation and the loss's roundoff over the step.
      const double rounding = kind == SoftmaxKind::kLogSoftmax
                                  ? p[at] * (1 + std::abs(ys[at])) * total + std::abs(ref)
                                  : p[at] * (std::abs(dys[at]) + weighted) + std::abs(ref);
      const double tol = 8 * ud * rounding + 8 * SubnormalRounding(dtype) * (1 + total) +
                         1e-8 * (std::abs(dys[at]) + p[at] * total + weighted) + 1e-9 * (1 + loss);
      if (!(std::abs(value - ref) <= tol) && mismatches++ < kMaxReportedMismatches) {
        ADD_FAILURE() << "dx " << at << ": got " << value << ", expected " << ref << " within "
                      << tol;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, SoftmaxBackwardTest,
                         ::testing::Combine(::testing::ValuesIn(FloatingDTypes()),
                                            ::testing::Values(SoftmaxKind::kSoftmax,
                                                              SoftmaxKind::kLogSoftmax,
                                                              SoftmaxKind::kSafeSoftmax),
                                            ::testing::ValuesIn(DimCases())),
                         [](const ::testing::TestParamInfo<SoftmaxBackwardParam>& info) {
                           return DimCaseName(std::get<0>(info.param),
                                              SoftmaxTestName(std::get<1>(info.param)),
                                              std::get<2>(info.param));
                         });

TEST_F(KernelTest, SoftmaxRejectsBadArgumentsNamingThem) {
  DeviceTensor x = Empty(DType::kFloat32, {2, 3}), i64 = Empty(DType::kInt64, {2, 3});
  DeviceTensor f64 = Empty(DType::kFloat64, {2, 3}), f32_3x2 = Empty(DType::kFloat32, {3, 2});
  const auto expect_invalid = [](const absl::Status& s, absl::string_view names) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(names), absl::string_view::npos) << s;
  };
  const SoftmaxKind kSoft = SoftmaxKind::kSoftmax, kLog = SoftmaxKind::kLogSoftmax;
  expect_invalid(backend().SoftmaxAlongDim(kSoft, i64.View(), 1, i64.View()), "int64");
  expect_invalid(backend().SoftmaxAlongDim(kLog, x.View(), 1, f64.View()), "float64");
  expect_invalid(backend().SoftmaxAlongDim(kSoft, x.View(), 1, f32_3x2.View()), "[3, 2]");
  expect_invalid(backend().SoftmaxAlongDim(kSoft, x.View(), 2, x.View()), "dim 2");
  expect_invalid(backend().SoftmaxBackward(kSoft, i64.View(), i64.View(), 1, i64.View()), "int64");
  expect_invalid(backend().SoftmaxBackward(kLog, x.View(), f64.View(), 1, x.View()), "dy");
  expect_invalid(backend().SoftmaxBackward(kSoft, x.View(), x.View(), 1, f32_3x2.View()), "dx");
  expect_invalid(backend().SoftmaxBackward(kSoft, x.View(), x.View(), -3, x.View()), "dim -3");
}

}  // namespace tessera::kernels::testing

#endif  // TESSERA_KERNELS_TESTING_DIM_CONFORMANCE_H_
