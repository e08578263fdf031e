#ifndef TESSERA_KERNELS_TESTING_SORT_CONFORMANCE_H_
#define TESSERA_KERNELS_TESTING_SORT_CONFORMANCE_H_

// Conformance of sorts along a dim (torch.sort with stable=True): values and indices against a
// std::stable_sort of each line's positions on float64 values, over dtype x direction x shape x
// dim (0-dim, size-1 and empty dims, an empty outer, long lines) with ties and NaN on every line;
// hand-worked lines (ties, NaN and infinities both ways, int64 beyond float64's precision, bool);
// and every argument error. Include once per test binary (see conformance_fixture.h).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/testing/conformance_fixture.h"

namespace tessera::kernels::testing {

// True iff a comes strictly before b in torch.sort's order: NaN above every number.
inline bool ReferenceSortsBefore(double a, double b, bool descending) {
  if (std::isnan(a) || std::isnan(b)) return descending ? !std::isnan(b) : !std::isnan(a);
  return descending ? a > b : a < b;
}

// A tensor of few distinct values, so that every line has ties; floating ones have a NaN in every
// seventh element.
inline HostTensor TiedTensor(DType dtype, const Shape& shape, uint32_t seed) {
  HostTensor x = RandomTensor(dtype, shape, seed, -3, 3);
  if (!IsFloatingPoint(dtype)) return x;
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    SetFromDouble(x, i, i % 7 == 3 ? std::nan("") : std::round(GetDouble(x, i)) / 2);
  }
  return x;
}

// DimCases() and a 0-dim tensor, which sorts as one line of one element.
inline std::vector<DimCase> SortDimCases() {
  std::vector<DimCase> cases = DimCases();
  cases.push_back(DimCase{{}, 0});
  cases.push_back(DimCase{{}, -1});
  return cases;
}

using SortParam = std::tuple<DType, bool, DimCase>;
class SortAlongDimTest : public KernelParamTest<SortParam> {};

TEST_P(SortAlongDimTest, MatchesAStableSortOfEachLine) {
  const auto& [dtype, descending, dim_case] = GetParam();
  const Shape shape = dim_case.shape.empty() ? Shape{1} : dim_case.shape;
  const Lines lines(shape, NormalizedDim(DimCase{shape, dim_case.dim}));
  const HostTensor x = TiedTensor(dtype, dim_case.shape, 141);
  DeviceTensor dx = Up(x), dvalues = Empty(dtype, dim_case.shape),
               dindices = Empty(DType::kInt64, dim_case.shape);
  TESSERA_ASSERT_OK(
      backend().SortAlongDim(dx.View(), dim_case.dim, descending, dvalues.View(), dindices.View()));
  const HostTensor values = Down(dvalues), indices = Down(dindices);
  HostTensor want = HostTensor::Zeros(dtype, dim_case.shape).value();
  const int64_t element = static_cast<int64_t>(DTypeSize(dtype));
  std::vector<int64_t> order(static_cast<size_t>(lines.size));
  int mismatches = 0;
  for (int64_t line = 0; line < lines.count(); ++line) {
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return ReferenceSortsBefore(GetDouble(x, lines.At(line, a)), GetDouble(x, lines.At(line, b)),
                                  descending);
    });
    for (int64_t i = 0; i < lines.size; ++i) {
      const int64_t at = lines.At(line, i), from = lines.At(line, order[i]);
      std::memcpy(want.data() + at * element, x.data() + from * element, element);
      ExpectElement(values, want, at, 0, "sorted value", &mismatches);
      const int64_t index = indices.data_as<int64_t>()[at];
      if (index != order[i] && mismatches++ < kMaxReportedMismatches) {
        ADD_FAILURE() << "line " << line << " position " << i << ": got index " << index
                      << ", expected " << order[i];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, SortAlongDimTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes), ::testing::Bool(),
                                            ::testing::ValuesIn(SortDimCases())),
                         [](const ::testing::TestParamInfo<SortParam>& info) {
                           return DimCaseName(std::get<0>(info.param),
                                              std::get<1>(info.param) ? "descending" : "ascending",
                                              std::get<2>(info.param));
                         });

class SortTest : public KernelTest {
 protected:
  struct Sorted {
    HostTensor values, indices;
  };

  // x sorted along `dim` on the backend, downloaded.
  Sorted Sort(const HostTensor& x, int64_t dim, bool descending) {
    DeviceTensor dx = Up(x), values = Empty(x.dtype(), x.shape()),
                 indices = Empty(DType::kInt64, x.shape());
    const absl::Status s =
        backend().SortAlongDim(dx.View(), dim, descending, values.View(), indices.View());
    EXPECT_TRUE(s.ok()) << s;
    return {Down(values), Down(indices)};
  }

  // A `dtype` tensor of `shape` holding `values` rounded to it.
  static HostTensor TensorOf(DType dtype, const Shape& shape, const std::vector<double>& values) {
    HostTensor t = HostTensor::Zeros(dtype, shape).value();
    for (size_t i = 0; i < values.size(); ++i) SetFromDouble(t, static_cast<int64_t>(i), values[i]);
    return t;
  }

  // Expects the elements of `got` to be `want`, NaN matching NaN.
  static void ExpectValues(const HostTensor& got, const std::vector<double>& want,
                           const std::string& what) {
    ASSERT_EQ(got.num_elements(), static_cast<int64_t>(want.size())) << what;
    for (size_t i = 0; i < want.size(); ++i) {
      const double g = GetDouble(got, static_cast<int64_t>(i));
      EXPECT_TRUE(g == want[i] || (std::isnan(g) && std::isnan(want[i])))
          << what << " value " << i << ": got " << g << ", expected " << want[i];
    }
  }

  static std::vector<int64_t> Int64sOf(const HostTensor& indices) {
    return std::vector<int64_t>(indices.data_as<int64_t>(),
                                indices.data_as<int64_t>() + indices.num_elements());
  }
};

TEST_F(SortTest, KeepsTiesInIndexOrderAndPutsNaNAboveEveryNumber) {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  for (DType dtype : FloatingDTypes()) {
    const std::string name(DTypeName(dtype));
    const HostTensor x = TensorOf(dtype, {2, 5}, {3, nan, 1, 3, -inf, nan, 2, nan, inf, 2});
    const Sorted up = Sort(x, 1, /*descending=*/false);
    ExpectValues(up.values, {-inf, 1, 3, 3, nan, 2, 2, inf, nan, nan}, name + " ascending");
    EXPECT_EQ(Int64sOf(up.indices), (std::vector<int64_t>{4, 2, 0, 3, 1, 1, 4, 3, 0, 2})) << name;
    const Sorted down = Sort(x, -1, /*descending=*/true);
    ExpectValues(down.values, {nan, 3, 3, 1, -inf, nan, nan, inf, 2, 2}, name + " descending");
    EXPECT_EQ(Int64sOf(down.indices), (std::vector<int64_t>{1, 0, 3, 2, 4, 0, 2, 3, 1, 4})) << name;
  }
}

// Values 2^60 and 2^60 + 1 are one float64: they must order as int64s.
TEST_F(SortTest, SortsInt64ExactlyAlongTheFirstDim) {
  const int64_t big = int64_t{1} << 60;
  const HostTensor x =
      HostTensor::FromValues<int64_t>(DType::kInt64, {3, 2}, {big + 1, -1, big, 7, big + 1, 0});
  const Sorted up = Sort(x, 0, /*descending=*/false);
  EXPECT_EQ(Int64sOf(up.values), (std::vector<int64_t>{big, -1, big + 1, 0, big + 1, 7}));
  EXPECT_EQ(Int64sOf(up.indices), (std::vector<int64_t>{1, 0, 0, 2, 2, 1}));
  const Sorted down = Sort(x, -2, /*descending=*/true);
  EXPECT_EQ(Int64sOf(down.values), (std::vector<int64_t>{big + 1, 7, big + 1, 0, big, -1}));
  EXPECT_EQ(Int64sOf(down.indices), (std::vector<int64_t>{0, 1, 2, 2, 1, 0}));
}

TEST_F(SortTest, OrdersBoolFalseBeforeTrue) {
  const HostTensor x = TensorOf(DType::kBool, {4}, {1, 0, 1, 0});
  const Sorted up = Sort(x, 0, /*descending=*/false);
  ExpectValues(up.values, {0, 0, 1, 1}, "ascending");
  EXPECT_EQ(Int64sOf(up.indices), (std::vector<int64_t>{1, 3, 0, 2}));
  const Sorted down = Sort(x, 0, /*descending=*/true);
  ExpectValues(down.values, {1, 1, 0, 0}, "descending");
  EXPECT_EQ(Int64sOf(down.indices), (std::vector<int64_t>{0, 2, 1, 3}));
}

TEST_F(SortTest, SortsA0DimTensorAsOneElement) {
  const HostTensor x = TensorOf(DType::kFloat16, {}, {-2.5});
  for (int64_t dim : {0, -1}) {
    const Sorted sorted = Sort(x, dim, /*descending=*/dim == 0);
    EXPECT_EQ(sorted.values.shape(), Shape{}) << dim;
    ExpectValues(sorted.values, {-2.5}, absl::StrCat("dim ", dim));
    EXPECT_EQ(Int64sOf(sorted.indices), (std::vector<int64_t>{0})) << dim;
  }
}

TEST_F(SortTest, EmptyLinesAndAnEmptyOuterWriteNothing) {
  for (const DimCase& c : {DimCase{{3, 0, 2}, 1}, DimCase{{0, 3}, 1}, DimCase{{0, 3}, -2}}) {
    DeviceTensor x = Empty(DType::kFloat32, c.shape), values = Empty(DType::kFloat32, c.shape),
                 indices = Empty(DType::kInt64, c.shape);
    TESSERA_ASSERT_OK(
        backend().SortAlongDim(x.View(), c.dim, false, values.View(), indices.View()));
  }
}

TEST_F(SortTest, RejectsBadArgumentsNamingThem) {
  DeviceTensor x = Empty(DType::kFloat32, {4, 5}), values = Empty(DType::kFloat32, {4, 5});
  DeviceTensor indices = Empty(DType::kInt64, {4, 5}), i32 = Empty(DType::kInt32, {4, 5});
  DeviceTensor i64_5x4 = Empty(DType::kInt64, {5, 4}), f64 = Empty(DType::kFloat64, {4, 5});
  DeviceTensor f32_4x4 = Empty(DType::kFloat32, {4, 4}), scalar = Empty(DType::kFloat32, {});
  DeviceTensor scalar_values = Empty(DType::kFloat32, {}),
               scalar_indices = Empty(DType::kInt64, {});
  const auto expect_invalid = [](const absl::Status& s, absl::string_view names) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(names), absl::string_view::npos) << s;
  };
  expect_invalid(backend().SortAlongDim(x.View(), 1, false, values.View(), i32.View()), "int32");
  expect_invalid(backend().SortAlongDim(x.View(), 1, false, values.View(), i64_5x4.View()),
                 "[5, 4]");
  expect_invalid(backend().SortAlongDim(x.View(), 1, true, f64.View(), indices.View()), "float64");
  expect_invalid(backend().SortAlongDim(x.View(), 1, true, f32_4x4.View(), indices.View()),
                 "[4, 4]");
  expect_invalid(backend().SortAlongDim(x.View(), 2, false, values.View(), indices.View()),
                 "dim 2");
  expect_invalid(backend().SortAlongDim(x.View(), -3, true, values.View(), indices.View()),
                 "dim -3");
  expect_invalid(
      backend().SortAlongDim(scalar.View(), 1, false, scalar_values.View(), scalar_indices.View()),
      "dim 1");
}

}  // namespace tessera::kernels::testing

#endif  // TESSERA_KERNELS_TESTING_SORT_CONFORMANCE_H_
