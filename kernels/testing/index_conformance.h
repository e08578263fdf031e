#ifndef TESSERA_KERNELS_TESTING_INDEX_CONFORMANCE_H_
#define TESSERA_KERNELS_TESTING_INDEX_CONFORMANCE_H_

// Conformance of the indexing kernels (Gather, ScatterInto, IndexSelect, WrapIndices) against
// plain host loops over coordinates, over every dtype x shapes (an index smaller than its tensor,
// larger along the dim, 0-dim, empty, long rows) x dim, bit for bit; torch's documented examples;
// repeated indices (kNone writes one of the values, kSum adds them all); and every argument error,
// an index out of range named with its position before anything is written. Include once per
// test binary (see conformance_fixture.h).

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/small_integer_tensor.h"
#include "gtest/gtest.h"
#include "kernels/testing/conformance_fixture.h"

namespace tessera::kernels::testing {

// A shape as the indexing kernels see it: 0-dim as [1].
inline Shape IndexingShape(const Shape& shape) { return shape.empty() ? Shape{1} : shape; }

inline std::vector<int64_t> Unravel(const Shape& shape, int64_t i) {
  std::vector<int64_t> c(shape.size(), 0);
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    c[d] = i % shape[d];
    i /= shape[d];
  }
  return c;
}

inline int64_t Ravel(const Shape& shape, const std::vector<int64_t>& c) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + c[d];
  return i;
}

// Copies element `from` of `src` into element `to` of `dst` (same dtype), bit for bit.
inline void CopyElement(const HostTensor& src, int64_t from, HostTensor& dst, int64_t to) {
  const size_t size = DTypeSize(src.dtype());
  std::memcpy(dst.data() + to * size, src.data() + from * size, size);
}

// Indices in [0, size) (or [lo, size) with a negative lo), the same for the same seed.
inline HostTensor RandomIndices(const Shape& shape, int64_t size, uint32_t seed, int64_t lo = 0) {
  return RandomTensor(DType::kInt64, shape, seed, static_cast<double>(lo),
                      static_cast<double>(size - 1));
}

inline void ExpectInvalid(const absl::Status& s, absl::string_view names) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(names), absl::string_view::npos) << s;
}

// A gather or scatter: the indexed tensor's shape, the index's, the other operand's (a scatter's
// src; a gather's out has the index's shape) and the dim.
struct IndexCase {
  Shape indexed;
  Shape index;
  Shape other;
  int64_t dim;
};

inline void PrintTo(const IndexCase& c, std::ostream* os) {
  *os << ShapeToString(c.indexed) << " by " << ShapeToString(c.index) << " dim " << c.dim;
}

inline std::string IndexCaseName(DType dtype, const IndexCase& c) {
  return absl::StrReplaceAll(
      absl::StrCat(DTypeName(dtype), "_", ShapeName(c.indexed), "_by_", ShapeName(c.index),
                   "_from_", ShapeName(c.other), "_dim", c.dim),
      {{"-", "m"}});
}

inline std::vector<IndexCase> IndexCases() {
  return {
      {{4, 5}, {3, 5}, {3, 5}, 0},
      {{4, 5}, {4, 2}, {4, 3}, 1},
      {{4, 5}, {2, 3}, {3, 4}, -1},
      {{2, 3, 4}, {2, 2, 4}, {2, 2, 4}, -2},
      {{2, 3, 4}, {1, 3, 2}, {2, 3, 3}, 2},
      {{2, 3, 4}, {2, 1, 4}, {2, 1, 4}, 0},
      {{5}, {7}, {8}, 0},
      {{}, {}, {}, 0},
      {{}, {3}, {3}, -1},
      {{4, 5}, {0, 5}, {2, 5}, 0},
      {{64, 33}, {64, 33}, {64, 33}, 1},
      {{3, 1, 70}, {3, 1, 70}, {3, 1, 70}, 1},
      // Dims that merge (1 and 2; 0 and 1), and dims that must not (index smaller on dim 1).
      {{3, 4, 5}, {2, 4, 5}, {2, 4, 5}, 0},
      {{3, 4, 5}, {3, 4, 2}, {3, 4, 3}, 2},
      {{3, 5, 4}, {3, 4, 4}, {3, 4, 4}, 2},
  };
}

// ---------------------------------------------------------------------------------------------
// Gather

using GatherParam = std::tuple<DType, IndexCase>;
class GatherTest : public KernelParamTest<GatherParam> {};

TEST_P(GatherTest, ReadsEachIndexedElement) {
  const auto& [dtype, c] = GetParam();
  const Shape xs = IndexingShape(c.indexed), is = IndexingShape(c.index);
  const int d = static_cast<int>(c.dim < 0 ? c.dim + static_cast<int64_t>(xs.size()) : c.dim);
  const HostTensor x = RandomTensor(dtype, c.indexed, 11);
  const HostTensor index = RandomIndices(c.index, xs[d], 12);
  HostTensor want = HostTensor::ZerosOfValidShape(dtype, c.index);
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    std::vector<int64_t> at = Unravel(is, i);
    at[d] = index.data_as<int64_t>()[i];
    CopyElement(x, Ravel(xs, at), want, i);
  }
  DeviceTensor dx = Up(x), dindex = Up(index), dout = Empty(dtype, c.index);
  TESSERA_ASSERT_OK(backend().Gather(dx.View(), c.dim, dindex.View(), dout.View()));
  const HostTensor got = Down(dout);
  int mismatches = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    ExpectElement(got, want, i, 0, "gather", &mismatches);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, GatherTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::ValuesIn(IndexCases())),
                         [](const ::testing::TestParamInfo<GatherParam>& info) {
                           return IndexCaseName(std::get<0>(info.param), std::get<1>(info.param));
                         });

// torch.gather's documented example.
TEST_F(KernelTest, GatherMatchesTorchExample) {
  DeviceTensor t = Up(HostTensor::FromValues<float>(DType::kFloat32, {2, 2}, {1, 2, 3, 4}));
  DeviceTensor index = Up(HostTensor::FromValues<int64_t>(DType::kInt64, {2, 2}, {0, 0, 1, 0}));
  DeviceTensor out = Empty(DType::kFloat32, {2, 2});
  TESSERA_ASSERT_OK(backend().Gather(t.View(), 1, index.View(), out.View()));
  const HostTensor got = Down(out);
  EXPECT_EQ(std::vector<float>(got.data_as<float>(), got.data_as<float>() + 4),
            (std::vector<float>{1, 1, 4, 3}));
}

TEST_F(KernelTest, GatherRejectsBadArgumentsNamingThem) {
  DeviceTensor x = Up(RandomTensor(DType::kFloat32, {3, 4}, 1));
  DeviceTensor out = Empty(DType::kFloat32, {2, 4});
  DeviceTensor bad =
      Up(HostTensor::FromValues<int64_t>(DType::kInt64, {2, 4}, {0, 1, 2, 3, 1, 5, 0, 0}));
  absl::Status s = backend().Gather(x.View(), 1, bad.View(), out.View());
  ExpectInvalid(s, "index 5 at [1, 1]");
  ExpectInvalid(s, "size 4");
  DeviceTensor negative =
      Up(HostTensor::FromValues<int64_t>(DType::kInt64, {2, 4}, {0, 1, 2, 3, 1, -1, 0, 0}));
  ExpectInvalid(backend().Gather(x.View(), 1, negative.View(), out.View()), "index -1 at [1, 1]");
  DeviceTensor i32 = Up(HostTensor::FromValues<int32_t>(DType::kInt32, {1}, {0}));
  DeviceTensor out1 = Empty(DType::kFloat32, {1});
  ExpectInvalid(backend().Gather(x.View(), 0, i32.View(), out1.View()), "int64");
  DeviceTensor flat = Up(RandomIndices({4}, 3, 2));
  ExpectInvalid(backend().Gather(x.View(), 0, flat.View(), out1.View()), "rank");
  DeviceTensor wide = Up(RandomIndices({2, 5}, 3, 3));
  DeviceTensor out25 = Empty(DType::kFloat32, {2, 5});
  ExpectInvalid(backend().Gather(x.View(), 0, wide.View(), out25.View()), "on dim 1");
  DeviceTensor ok = Up(RandomIndices({2, 4}, 3, 4));
  ExpectInvalid(backend().Gather(x.View(), 0, ok.View(), out25.View()), "out");
  ExpectInvalid(backend().Gather(x.View(), 2, ok.View(), out.View()), "dim 2");
}

// ---------------------------------------------------------------------------------------------
// Scatter

using ScatterParam = std::tuple<DType, IndexCase, ScatterReduce>;
class ScatterTest : public KernelParamTest<ScatterParam> {};

TEST_P(ScatterTest, WritesOrAddsAtEachIndex) {
  const auto& [dtype, c, reduce] = GetParam();
  const Shape ds = IndexingShape(c.indexed), is = IndexingShape(c.index),
              ss = IndexingShape(c.other);
  const int d = static_cast<int>(c.dim < 0 ? c.dim + static_cast<int64_t>(ds.size()) : c.dim);
  // Small integers: sums are exact in every dtype, so kSum compares bit for bit.
  const HostTensor dst = SmallIntegerTensor(dtype, c.indexed, 21);
  const HostTensor src = SmallIntegerTensor(dtype, c.other, 22);
  const HostTensor index = RandomIndices(c.index, ds[d], 23);
  // Each dst element's writers: the src elements scattered onto it, in index order.
  std::vector<std::vector<int64_t>> writers(dst.num_elements());
  for (int64_t i = 0; i < index.num_elements(); ++i) {
    std::vector<int64_t> at = Unravel(is, i);
    const int64_t from = Ravel(ss, at);
    at[d] = index.data_as<int64_t>()[i];
    writers[Ravel(ds, at)].push_back(from);
  }
  DeviceTensor ddst = Up(dst), dindex = Up(index), dsrc = Up(src);
  TESSERA_ASSERT_OK(backend().ScatterInto(ddst.View(), c.dim, dindex.View(), dsrc.View(), reduce));
  const HostTensor got = Down(ddst);
  int mismatches = 0;
  for (int64_t e = 0; e < dst.num_elements(); ++e) {
    if (reduce == ScatterReduce::kSum || writers[e].empty()) {
      HostTensor want = HostTensor::ZerosOfValidShape(dtype, {1});
      double sum = GetDouble(dst, e);
      for (int64_t from : writers[e]) sum += GetDouble(src, from);
      SetFromDouble(want, 0, sum);
      const bool same =
          std::memcmp(got.data() + e * DTypeSize(dtype), want.data(), DTypeSize(dtype)) == 0;
      if (!same && mismatches++ < kMaxReportedMismatches) {
        ADD_FAILURE() << "dst element " << e << ": got " << GetDouble(got, e) << ", expected "
                      << sum;
      }
      continue;
    }
    bool written = false;
    for (int64_t from : writers[e]) {
      written |= std::memcmp(got.data() + e * DTypeSize(dtype),
                             src.data() + from * DTypeSize(dtype), DTypeSize(dtype)) == 0;
    }
    if (!written && mismatches++ < kMaxReportedMismatches) {
      ADD_FAILURE() << "dst element " << e << " is " << GetDouble(got, e)
                    << ", none of the values scattered onto it";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, ScatterTest,
    ::testing::Combine(::testing::ValuesIn(kAllDTypes), ::testing::ValuesIn(IndexCases()),
                       ::testing::Values(ScatterReduce::kNone, ScatterReduce::kSum)),
    [](const ::testing::TestParamInfo<ScatterParam>& info) {
      return IndexCaseName(std::get<0>(info.param), std::get<1>(info.param)) +
             (std::get<2>(info.param) == ScatterReduce::kSum ? "_add" : "_write");
    });

// torch.Tensor.scatter_ and scatter_add_'s documented examples.
TEST_F(KernelTest, ScatterMatchesTorchExamples) {
  std::vector<float> one_to_ten;
  for (int i = 1; i <= 10; ++i) one_to_ten.push_back(static_cast<float>(i));
  DeviceTensor src = Up(HostTensor::FromValues<float>(DType::kFloat32, {2, 5}, one_to_ten));
  DeviceTensor index = Up(HostTensor::FromValues<int64_t>(DType::kInt64, {1, 4}, {0, 1, 2, 0}));
  DeviceTensor dst = Up(HostTensor::ZerosOfValidShape(DType::kFloat32, {3, 5}));
  TESSERA_ASSERT_OK(
      backend().ScatterInto(dst.View(), 0, index.View(), src.View(), ScatterReduce::kNone));
  HostTensor got = Down(dst);
  EXPECT_EQ(std::vector<float>(got.data_as<float>(), got.data_as<float>() + 15),
            (std::vector<float>{1, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0}));

  DeviceTensor ones =
      Up(HostTensor::FromValues<float>(DType::kFloat32, {2, 5}, std::vector<float>(10, 1.f)));
  DeviceTensor index2 =
      Up(HostTensor::FromValues<int64_t>(DType::kInt64, {2, 5}, {0, 1, 2, 0, 0, 0, 1, 2, 2, 2}));
  DeviceTensor sums = Up(HostTensor::ZerosOfValidShape(DType::kFloat32, {3, 5}));
  TESSERA_ASSERT_OK(
      backend().ScatterInto(sums.View(), 0, index2.View(), ones.View(), ScatterReduce::kSum));
  got = Down(sums);
  EXPECT_EQ(std::vector<float>(got.data_as<float>(), got.data_as<float>() + 15),
            (std::vector<float>{2, 0, 0, 1, 1, 0, 2, 0, 0, 0, 0, 0, 2, 1, 1}));
}

// Many repeats of one index: every add lands (atomics on CUDA, sub-word dtypes included).
TEST_F(KernelTest, ScatterAddSumsEveryRepeat) {
  for (DType dtype : {DType::kInt8, DType::kFloat16, DType::kInt32, DType::kFloat32}) {
    DeviceTensor dst = Up(HostTensor::ZerosOfValidShape(dtype, {3}));
    HostTensor ones = HostTensor::ZerosOfValidShape(dtype, {100});
    for (int64_t i = 0; i < 100; ++i) SetFromDouble(ones, i, 1);
    DeviceTensor src = Up(ones);
    HostTensor index = HostTensor::ZerosOfValidShape(DType::kInt64, {100});
    for (int64_t i = 0; i < 100; ++i) index.data_as<int64_t>()[i] = i % 2 == 0 ? 1 : 2;
    DeviceTensor dindex = Up(index);
    TESSERA_ASSERT_OK(
        backend().ScatterInto(dst.View(), 0, dindex.View(), src.View(), ScatterReduce::kSum));
    const HostTensor got = Down(dst);
    EXPECT_EQ(GetDouble(got, 0), 0) << DTypeName(dtype);
    EXPECT_EQ(GetDouble(got, 1), 50) << DTypeName(dtype);
    EXPECT_EQ(GetDouble(got, 2), 50) << DTypeName(dtype);
  }
}

TEST_F(KernelTest, ScatterRejectsBadArgumentsNamingThemAndWritesNothing) {
  const HostTensor original = RandomTensor(DType::kFloat32, {3, 4}, 5);
  DeviceTensor dst = Up(original);
  DeviceTensor src = Up(RandomTensor(DType::kFloat32, {2, 4}, 6));
  DeviceTensor bad =
      Up(HostTensor::FromValues<int64_t>(DType::kInt64, {2, 4}, {0, 1, 2, 0, 1, 2, 3, 0}));
  for (ScatterReduce reduce : {ScatterReduce::kNone, ScatterReduce::kSum}) {
    const absl::Status s = backend().ScatterInto(dst.View(), 0, bad.View(), src.View(), reduce);
    ExpectInvalid(s, "index 3 at [1, 2]");
    ExpectInvalid(s, reduce == ScatterReduce::kSum ? "scatter_add" : "scatter");
  }
  const HostTensor after = Down(dst);
  EXPECT_EQ(std::memcmp(after.data(), original.data(), original.nbytes()), 0);
  DeviceTensor f64 = Up(RandomTensor(DType::kFloat64, {2, 4}, 7));
  DeviceTensor ok = Up(RandomIndices({2, 4}, 3, 8));
  ExpectInvalid(backend().ScatterInto(dst.View(), 0, ok.View(), f64.View(), ScatterReduce::kNone),
                "float64");
  DeviceTensor small = Up(RandomTensor(DType::kFloat32, {2, 3}, 9));
  ExpectInvalid(backend().ScatterInto(dst.View(), 0, ok.View(), small.View(), ScatterReduce::kNone),
                "src");
  DeviceTensor wide = Up(RandomIndices({2, 5}, 3, 10));
  DeviceTensor src25 = Up(RandomTensor(DType::kFloat32, {2, 5}, 11));
  ExpectInvalid(
      backend().ScatterInto(dst.View(), 0, wide.View(), src25.View(), ScatterReduce::kSum),
      "on dim 1");
}

// ---------------------------------------------------------------------------------------------
// IndexSelect

struct SelectCase {
  Shape x;
  int64_t dim;
  int64_t count;  // -1: a 0-D index
};

inline std::vector<SelectCase> SelectCases() {
  return {{{4, 5}, 0, 6},     {{4, 5}, 1, 3},   {{4, 5}, -1, 0}, {{2, 3, 4}, 1, 5},
          {{2, 3, 4}, 0, -1}, {{7}, 0, 7},      {{}, 0, 1},      {{}, 0, -1},
          {{0, 3}, 1, 2},     {{3, 100}, 0, 9}, {{100, 3}, 1, 1}};
}

using SelectParam = std::tuple<DType, SelectCase>;
class IndexSelectTest : public KernelParamTest<SelectParam> {};

TEST_P(IndexSelectTest, CopiesTheIndexedSlices) {
  const auto& [dtype, c] = GetParam();
  const Shape xs = IndexingShape(c.x);
  const int d = static_cast<int>(c.dim < 0 ? c.dim + static_cast<int64_t>(xs.size()) : c.dim);
  const Shape index_shape = c.count < 0 ? Shape{} : Shape{c.count};
  const HostTensor x = RandomTensor(dtype, c.x, 31);
  const HostTensor index = RandomIndices(index_shape, xs[d], 32);
  Shape out_shape = c.x;
  if (!c.x.empty()) out_shape[d] = NumElements(index_shape);
  const Shape os = IndexingShape(out_shape);
  HostTensor want = HostTensor::ZerosOfValidShape(dtype, out_shape);
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    std::vector<int64_t> at = Unravel(os, i);
    at[d] = index.data_as<int64_t>()[at[d]];
    CopyElement(x, Ravel(xs, at), want, i);
  }
  DeviceTensor dx = Up(x), dindex = Up(index), dout = Empty(dtype, out_shape);
  TESSERA_ASSERT_OK(backend().IndexSelect(dx.View(), c.dim, dindex.View(), dout.View()));
  const HostTensor got = Down(dout);
  int mismatches = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    ExpectElement(got, want, i, 0, "index_select", &mismatches);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, IndexSelectTest,
    ::testing::Combine(::testing::ValuesIn(kAllDTypes), ::testing::ValuesIn(SelectCases())),
    [](const ::testing::TestParamInfo<SelectParam>& info) {
      const SelectCase& c = std::get<1>(info.param);
      return absl::StrReplaceAll(
          absl::StrCat(DTypeName(std::get<0>(info.param)), "_", ShapeName(c.x), "_dim", c.dim, "_",
                       c.count < 0 ? std::string("scalar") : absl::StrCat(c.count)),
          {{"-", "m"}});
    });

TEST_F(KernelTest, IndexSelectRejectsBadArgumentsNamingThem) {
  DeviceTensor x = Up(RandomTensor(DType::kInt32, {3, 4}, 1));
  DeviceTensor out = Empty(DType::kInt32, {3, 2});
  DeviceTensor bad = Up(HostTensor::FromValues<int64_t>(DType::kInt64, {2}, {3, 4}));
  ExpectInvalid(backend().IndexSelect(x.View(), 1, bad.View(), out.View()), "index 4 at [1]");
  DeviceTensor negative = Up(HostTensor::FromValues<int64_t>(DType::kInt64, {2}, {-1, 0}));
  ExpectInvalid(backend().IndexSelect(x.View(), 1, negative.View(), out.View()), "index -1 at [0]");
  DeviceTensor two_d = Up(RandomIndices({1, 2}, 4, 2));
  ExpectInvalid(backend().IndexSelect(x.View(), 1, two_d.View(), out.View()), "0-D or 1-D");
  DeviceTensor ok = Up(RandomIndices({2}, 3, 3));
  ExpectInvalid(backend().IndexSelect(x.View(), 0, ok.View(), out.View()), "out");
  DeviceTensor scalar = Up(RandomTensor(DType::kInt32, {}, 4));
  DeviceTensor scalar_out = Empty(DType::kInt32, {});
  ExpectInvalid(backend().IndexSelect(scalar.View(), 0, ok.View(), scalar_out.View()), "one index");
}

// ---------------------------------------------------------------------------------------------
// WrapIndices

TEST_F(KernelTest, WrapIndicesMakesNegativeIndicesPositions) {
  DeviceTensor index =
      Up(HostTensor::FromValues<int64_t>(DType::kInt64, {2, 3}, {-4, -1, 0, 3, -2, 1}));
  TESSERA_ASSERT_OK(backend().WrapIndices(index.View(), 4));
  const HostTensor got = Down(index);
  EXPECT_EQ(std::vector<int64_t>(got.data_as<int64_t>(), got.data_as<int64_t>() + 6),
            (std::vector<int64_t>{0, 3, 0, 3, 2, 1}));
  const HostTensor long_index = RandomIndices({1000}, 7, 5, -7);
  DeviceTensor many = Up(long_index);
  TESSERA_ASSERT_OK(backend().WrapIndices(many.View(), 7));
  const HostTensor wrapped = Down(many);
  for (int64_t i = 0; i < 1000; ++i) {
    const int64_t v = long_index.data_as<int64_t>()[i];
    ASSERT_EQ(wrapped.data_as<int64_t>()[i], v < 0 ? v + 7 : v) << i;
  }
}

TEST_F(KernelTest, WrapIndicesRejectsIndicesOutsideTheDim) {
  const HostTensor original = HostTensor::FromValues<int64_t>(DType::kInt64, {4}, {-1, 0, -5, 4});
  DeviceTensor index = Up(original);
  const absl::Status s = backend().WrapIndices(index.View(), 4);
  ExpectInvalid(s, "index -5 at [2]");
  ExpectInvalid(s, "[-4, 4)");
  const HostTensor after = Down(index);
  EXPECT_EQ(std::memcmp(after.data(), original.data(), original.nbytes()), 0);
  DeviceTensor f32 = Up(RandomTensor(DType::kFloat32, {2}, 1));
  ExpectInvalid(backend().WrapIndices(f32.View(), 4), "int64");
}

}  // namespace tessera::kernels::testing

#endif  // TESSERA_KERNELS_TESTING_INDEX_CONFORMANCE_H_
