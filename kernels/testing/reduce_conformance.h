#ifndef TESSERA_KERNELS_TESTING_REDUCE_CONFORMANCE_H_
#define TESSERA_KERNELS_TESTING_REDUCE_CONFORMANCE_H_

// Conformance of the reductions (along a dim, and the elementwise steps of collectives) against
// naive host loops, over dtype x op x shape. Include once per test binary (see
// conformance_fixture.h).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/sharding/placement.h"
#include "gtest/gtest.h"
#include "kernels/testing/conformance_fixture.h"

namespace tessera::kernels::testing {

// ---------------------------------------------------------------------------------------------
// Reductions along a dim

using ReduceDimParam = std::tuple<DType, ReduceOp, DimCase, bool>;
class ReduceAlongDimTest : public KernelParamTest<ReduceDimParam> {};

TEST_P(ReduceAlongDimTest, MatchesNaiveLoop) {
  const auto& [dtype, op, dim_case, keepdim] = GetParam();
  const Shape& shape = dim_case.shape;
  const int rank = static_cast<int>(shape.size());
  const int d = static_cast<int>(dim_case.dim < 0 ? dim_case.dim + rank : dim_case.dim);
  Shape out_shape = shape;
  if (keepdim) {
    out_shape[d] = 1;
  } else {
    out_shape.erase(out_shape.begin() + d);
  }
  // Products stay near 1 for floating types; integer products wrap, as they may.
  const bool floating = IsFloatingPoint(dtype);
  const HostTensor x = op != ReduceOp::kProduct ? RandomTensor(dtype, shape, 41, -3, 3)
                       : floating               ? RandomTensor(dtype, shape, 41, 0.5, 1.5)
                                                : RandomTensor(dtype, shape, 41, -2, 2);
  DeviceTensor dx = Up(x), dout = Empty(dtype, out_shape);
  const absl::Status s = backend().ReduceAlongDim(op, dx.View(), dim_case.dim, dout.View());
  const int64_t size = shape[d];
  const bool empty_extreme =
      size == 0 && (op == ReduceOp::kMax || op == ReduceOp::kMin) && NumElements(out_shape) > 0;
  if ((op == ReduceOp::kAvg && !IsFloatingPoint(dtype)) || empty_extreme) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    if (!empty_extreme) {
      EXPECT_NE(s.message().find(DTypeName(dtype)), absl::string_view::npos) << s;
    }
    return;
  }
  TESSERA_ASSERT_OK(s);
  const HostTensor got = Down(dout);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= shape[i];
  for (int i = d + 1; i < rank; ++i) inner *= shape[i];
  HostTensor want = HostTensor::Zeros(dtype, out_shape).value();
  const bool is_bool = dtype == DType::kBool;
  int mismatches = 0;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      const int64_t out_index = o * inner + j;
      double tol = 0;
      if (floating) {
        double acc = op == ReduceOp::kProduct ? 1 : 0, magnitude = 0;
        if (op == ReduceOp::kMax) acc = -INFINITY;
        if (op == ReduceOp::kMin) acc = INFINITY;
        for (int64_t i = 0; i < size; ++i) {
          const double v = GetDouble(x, (o * size + i) * inner + j);
          magnitude += std::abs(v);
          if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += v;
          if (op == ReduceOp::kProduct) acc *= v;
          if (op == ReduceOp::kMax) acc = std::max(acc, v);
          if (op == ReduceOp::kMin) acc = std::min(acc, v);
        }
        if (op == ReduceOp::kAvg) {
          acc = size == 0 ? NAN : acc / static_cast<double>(size);
          magnitude /= std::max<int64_t>(size, 1);
        }
        if (op == ReduceOp::kProduct) magnitude = std::abs(acc);
        tol = 2 * UnitRoundoff(dtype) * std::abs(acc) +
              (size + 2) * ComputeRoundoff(dtype) * magnitude;
        SetFromDouble(want, out_index, acc);
      } else {
        int64_t acc = op == ReduceOp::kProduct ? 1 : 0;
        if (size > 0) acc = GetInt64(x, o * size * inner + j);
        for (int64_t i = 1; i < size; ++i) {
          const int64_t v = GetInt64(x, (o * size + i) * inner + j);
          switch (op) {
            case ReduceOp::kSum:
            case ReduceOp::kAvg:
              acc = is_bool ? (acc || v) : acc + v;
              break;
            case ReduceOp::kProduct:
              acc =
                  is_bool
                      ? (acc && v)
                      : static_cast<int64_t>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(v));
              break;
            case ReduceOp::kMax:
              acc = std::max(acc, v);
              break;
            case ReduceOp::kMin:
              acc = std::min(acc, v);
              break;
          }
        }
        SetFromInt64(want, out_index, acc);
      }
      const bool ok = SameElement(got, want, out_index) ||
                      std::abs(GetDouble(got, out_index) - GetDouble(want, out_index)) <= tol;
      if (!ok && mismatches++ < kMaxReportedMismatches) {
        ADD_FAILURE() << "output " << out_index << ": got " << GetDouble(got, out_index)
                      << ", expected " << GetDouble(want, out_index);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, ReduceAlongDimTest,
    ::testing::Combine(::testing::ValuesIn(kAllDTypes), ::testing::ValuesIn(kAllReduceOps),
                       ::testing::Values(DimCase{{2, 3, 4}, 0}, DimCase{{2, 3, 4}, 1},
                                         DimCase{{2, 3, 4}, -1}, DimCase{{5}, 0},
                                         DimCase{{1, 7}, 1}, DimCase{{6, 1, 2}, 1},
                                         DimCase{{3, 0, 2}, 1}, DimCase{{0, 3}, 1},
                                         DimCase{{4, 100}, 1}),
                       ::testing::Bool()),
    [](const ::testing::TestParamInfo<ReduceDimParam>& info) {
      const DimCase& dim_case = std::get<2>(info.param);
      return absl::StrReplaceAll(
          absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                       ReduceOpName(std::get<1>(info.param)), "_", ShapeName(dim_case.shape),
                       "_dim", dim_case.dim, std::get<3>(info.param) ? "_keepdim" : ""),
          {{"-", "m"}});
    });

TEST_F(KernelTest, ReduceAlongDimPropagatesNaNAndChecksShapes) {
  const float nan = std::nanf("");
  HostTensor x =
      HostTensor::FromValues<float>(DType::kFloat32, {2, 3}, {1.f, nan, 3.f, nan, 5.f, -6.f});
  DeviceTensor dx = Up(x), out = Empty(DType::kFloat32, {2});
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kSum}) {
    TESSERA_ASSERT_OK(backend().ReduceAlongDim(op, dx.View(), 1, out.View()));
    const HostTensor got = Down(out);
    EXPECT_TRUE(std::isnan(got.data_as<float>()[0])) << ReduceOpName(op);
    EXPECT_TRUE(std::isnan(got.data_as<float>()[1])) << ReduceOpName(op);
  }
  DeviceTensor wrong = Empty(DType::kFloat32, {3});
  const absl::Status s = backend().ReduceAlongDim(ReduceOp::kSum, dx.View(), 1, wrong.View());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[3]"), absl::string_view::npos) << s;
  const absl::Status bad_dim = backend().ReduceAlongDim(ReduceOp::kSum, dx.View(), 2, out.View());
  EXPECT_EQ(bad_dim.code(), absl::StatusCode::kInvalidArgument) << bad_dim;
}

// ---------------------------------------------------------------------------------------------
// Elementwise reductions of collectives (core's ReduceInto / DivideInPlace semantics)

using ReduceIntoParam = std::tuple<DType, ReduceOp>;
class ReduceIntoTest : public KernelParamTest<ReduceIntoParam> {};

TEST_P(ReduceIntoTest, MatchesNaiveLoopBitExactly) {
  const auto& [dtype, op] = GetParam();
  const HostTensor acc = RandomTensor(dtype, {5, 37}, 51, -3, 3);
  const HostTensor in = RandomTensor(dtype, {5, 37}, 52, -3, 3);
  DeviceTensor dacc = Up(acc), din = Up(in);
  TESSERA_ASSERT_OK(backend().ReduceInto(op, dacc.View(), din.View()));
  const HostTensor got = Down(dacc);
  HostTensor want = acc.Clone();
  for (int64_t i = 0; i < acc.num_elements(); ++i) {
    if (IsFloatingPoint(dtype)) {
      const double a = GetDouble(acc, i), b = GetDouble(in, i);
      const double v = op == ReduceOp::kMax       ? (a < b ? b : a)
                       : op == ReduceOp::kMin     ? (b < a ? b : a)
                       : op == ReduceOp::kProduct ? a * b
                                                  : a + b;
      SetFromDouble(want, i, v);
    } else if (dtype == DType::kBool) {
      const bool a = GetInt64(acc, i), b = GetInt64(in, i);
      const bool v = (op == ReduceOp::kProduct || op == ReduceOp::kMin) ? (a && b) : (a || b);
      SetFromInt64(want, i, v);
    } else {
      const int64_t a = GetInt64(acc, i), b = GetInt64(in, i);
      const int64_t v = op == ReduceOp::kMax       ? std::max(a, b)
                        : op == ReduceOp::kMin     ? std::min(a, b)
                        : op == ReduceOp::kProduct ? a * b
                                                   : a + b;
      SetFromInt64(want, i, v);
    }
  }
  for (int64_t i = 0; i < acc.num_elements(); ++i) {
    ASSERT_TRUE(SameElement(got, want, i))
        << "element " << i << ": got " << GetDouble(got, i) << ", expected " << GetDouble(want, i);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, ReduceIntoTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::ValuesIn(kAllReduceOps)),
                         [](const ::testing::TestParamInfo<ReduceIntoParam>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               ReduceOpName(std::get<1>(info.param)));
                         });

using DivideParam = std::tuple<DType, int64_t>;
class DivideInPlaceTest : public KernelParamTest<DivideParam> {};

TEST_P(DivideInPlaceTest, MatchesNaiveLoopBitExactly) {
  const auto& [dtype, divisor] = GetParam();
  const HostTensor x = RandomTensor(dtype, {3, 41}, 61, -100, 100);
  DeviceTensor dx = Up(x);
  TESSERA_ASSERT_OK(backend().DivideInPlace(dx.View(), divisor));
  const HostTensor got = Down(dx);
  HostTensor want = x.Clone();
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    if (dtype == DType::kFloat64) {
      SetFromDouble(want, i, GetDouble(x, i) / static_cast<double>(divisor));
    } else if (IsFloatingPoint(dtype)) {
      // float32 division (correctly rounded, as the double quotient rounded to float), then
      // rounded to the 16-bit type.
      SetFromDouble(want, i, static_cast<float>(GetDouble(x, i) / static_cast<double>(divisor)));
    } else if (dtype != DType::kBool) {
      SetFromInt64(want, i, GetInt64(x, i) / divisor);
    }
  }
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    ASSERT_TRUE(SameElement(got, want, i))
        << "element " << i << ": got " << GetDouble(got, i) << ", expected " << GetDouble(want, i);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, DivideInPlaceTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::Values(int64_t{1}, int64_t{3}, int64_t{4})),
                         [](const ::testing::TestParamInfo<DivideParam>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_by",
                                               std::get<1>(info.param));
                         });

TEST_F(KernelTest, DivideInPlaceNeedsAPositiveDivisor) {
  DeviceTensor x = Empty(DType::kInt8, {4});
  for (int64_t divisor : {int64_t{0}, int64_t{-2}}) {
    const absl::Status s = backend().DivideInPlace(x.View(), divisor);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("int8"), absl::string_view::npos) << s;
  }
}

}  // namespace tessera::kernels::testing

#endif  // TESSERA_KERNELS_TESTING_REDUCE_CONFORMANCE_H_
