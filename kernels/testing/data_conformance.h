#ifndef TESSERA_KERNELS_TESTING_DATA_CONFORMANCE_H_
#define TESSERA_KERNELS_TESTING_DATA_CONFORMANCE_H_

// Conformance of memory, casts, fills and counter-based random fills against naive host loops.
// Include once per test binary (see conformance_fixture.h).

#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/sharding/chunk.h"
#include "gtest/gtest.h"
#include "kernels/philox.h"
#include "kernels/testing/conformance_fixture.h"

namespace tessera::kernels::testing {

// ---------------------------------------------------------------------------------------------
// Memory

class MemoryTest : public KernelParamTest<DType> {};

TEST_P(MemoryTest, UploadCopyDownloadKeepsEveryByte) {
  const DType dtype = GetParam();
  const HostTensor host = RandomTensor(dtype, {7, 13}, 71);
  DeviceTensor a = Up(host), b = Empty(dtype, {91});
  TESSERA_ASSERT_OK(backend().Copy(a.View(), b.View()));
  HostTensor back = Down(b);
  EXPECT_EQ(back.shape(), (Shape{91}));
  EXPECT_EQ(0, std::memcmp(back.data(), host.data(), host.nbytes()));
  HostTensor direct = HostTensor::Zeros(dtype, {7, 13}).value();
  TESSERA_ASSERT_OK(backend().CopyToHost(a.View(), direct.bytes()));
  EXPECT_TRUE(direct.BitEqual(host));
}

INSTANTIATE_TEST_SUITE_P(Kernels, MemoryTest, ::testing::ValuesIn(kAllDTypes),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST_F(KernelTest, CopiesCheckSizes) {
  DeviceTensor a = Empty(DType::kFloat32, {2, 3}), empty = Empty(DType::kFloat32, {0, 3});
  std::vector<std::byte> wrong(5);
  absl::Status s = backend().CopyFromHost(wrong, a.View());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[2, 3]"), absl::string_view::npos) << s;
  s = backend().CopyToHost(a.View(), wrong);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  DeviceTensor other = Empty(DType::kInt32, {6});
  s = backend().Copy(a.View(), other.View());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  TESSERA_ASSERT_OK(backend().CopyFromHost({}, empty.View()));
  EXPECT_EQ(Down(empty).num_elements(), 0);
}

// ---------------------------------------------------------------------------------------------
// Casts between every pair of dtypes

// Source values that exercise rounding, truncation, saturation, wrapping, NaN and infinities.
inline HostTensor CastSource(DType dtype) {
  if (IsFloatingPoint(dtype)) {
    const double inf = std::numeric_limits<double>::infinity();
    const std::vector<double> values = {
        0,    -0.0, 1,     -1,    2.5,   -2.5, 0.3,  100.7,        -100.7, 255.9,  300,
        -300, 1e10, -1e10, 65504, 70000, inf,  -inf, std::nan(""), 1e-8,   3.4e38, 1.0000001};
    HostTensor t = HostTensor::Zeros(dtype, {static_cast<int64_t>(values.size())}).value();
    for (size_t i = 0; i < values.size(); ++i) SetFromDouble(t, i, values[i]);
    return t;
  }
  const std::vector<int64_t> values = {0,
                                       1,
                                       -1,
                                       5,
                                       -5,
                                       127,
                                       -128,
                                       255,
                                       300,
                                       -300,
                                       70000,
                                       -70000,
                                       (int64_t{1} << 40) + 3,
                                       -(int64_t{1} << 40),
                                       (int64_t{1} << 62) + 1,
                                       (int64_t{1} << 24) + 1};
  HostTensor t = HostTensor::Zeros(dtype, {static_cast<int64_t>(values.size())}).value();
  for (size_t i = 0; i < values.size(); ++i) SetFromInt64(t, i, values[i]);
  return t;
}

using CastParam = std::tuple<DType, DType>;
class CastTest : public KernelParamTest<CastParam> {};

TEST_P(CastTest, FollowsTheConversionRule) {
  const auto& [from, to] = GetParam();
  const HostTensor src = CastSource(from);
  DeviceTensor dsrc = Up(src), ddst = Empty(to, src.shape());
  TESSERA_ASSERT_OK(backend().Cast(dsrc.View(), ddst.View()));
  const HostTensor got = Down(ddst);
  HostTensor want = HostTensor::Zeros(to, src.shape()).value();
  for (int64_t i = 0; i < src.num_elements(); ++i) {
    if (IsFloatingPoint(from)) {
      SetFromDouble(want, i, GetDouble(src, i));
    } else {
      SetFromInt64(want, i, GetInt64(src, i));
    }
  }
  for (int64_t i = 0; i < src.num_elements(); ++i) {
    EXPECT_TRUE(SameElement(got, want, i))
        << "element " << i << " (" << GetDouble(src, i) << "): got " << GetDouble(got, i)
        << ", expected " << GetDouble(want, i);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CastTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::ValuesIn(kAllDTypes)),
                         [](const ::testing::TestParamInfo<CastParam>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_to_",
                                               DTypeName(std::get<1>(info.param)));
                         });

// ---------------------------------------------------------------------------------------------
// Fill

using FillParam = std::tuple<DType, double>;
class FillTest : public KernelParamTest<FillParam> {};

TEST_P(FillTest, SetsEveryElementByTheConversionRule) {
  const auto& [dtype, value] = GetParam();
  DeviceTensor t = Empty(dtype, {3, 37});
  TESSERA_ASSERT_OK(backend().Fill(t.View(), value));
  const HostTensor got = Down(t);
  HostTensor want = HostTensor::Zeros(dtype, {3, 37}).value();
  for (int64_t i = 0; i < want.num_elements(); ++i) SetFromDouble(want, i, value);
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    ASSERT_TRUE(SameElement(got, want, i)) << "element " << i << ": got " << GetDouble(got, i);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, FillTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::Values(0.0, 1.5, -3.25, 1e10, std::nan(""))),
                         [](const ::testing::TestParamInfo<FillParam>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               info.index % 5);
                         });

// ---------------------------------------------------------------------------------------------
// Counter-based random fill

// One way to cut a global tensor into shards: the (offset, size) block of every rank.
struct ShardLayout {
  std::string name;
  Shape global;
  std::vector<std::pair<Shape, Shape>> blocks;
};
inline void PrintTo(const ShardLayout& layout, std::ostream* os) { *os << layout.name; }

// Shards of `global` split along each dim d into splits[d] torch.chunk pieces (empty pieces
// included), as a mesh with one Shard(d) per mesh dim produces them.
inline ShardLayout GridShards(const Shape& global, const std::vector<int64_t>& splits) {
  ShardLayout layout{
      absl::StrCat(absl::StrJoin(global, "x"), "_by_", absl::StrJoin(splits, "x")), global, {}};
  std::vector<int64_t> rank(global.size(), 0);
  while (true) {
    Shape offset(global.size()), size(global.size());
    for (size_t d = 0; d < global.size(); ++d) {
      const ChunkRange c = ChunkOf(global[d], splits[d], rank[d]);
      offset[d] = c.offset;
      size[d] = c.size;
    }
    layout.blocks.emplace_back(offset, size);
    int d = static_cast<int>(global.size()) - 1;
    for (; d >= 0; --d) {
      if (++rank[d] < splits[d]) break;
      rank[d] = 0;
    }
    if (d < 0) return layout;
  }
}

inline std::vector<ShardLayout> ShardLayouts() {
  return {GridShards({8, 12}, {2, 1}),
          GridShards({8, 12}, {1, 3}),
          GridShards({8, 12}, {2, 2}),
          GridShards({5, 7, 3}, {2, 3, 1}),
          GridShards({13}, {4}),
          GridShards({3, 5}, {4, 1}),  // the last rank's shard is empty
          GridShards({2, 3, 4, 5}, {1, 2, 1, 3}),
          // Mesh (2, 2) with (Shard(1), Shard(1)) on [2, 5]: nested chunks (ARCHITECTURE.md).
          {"2x5_nested_S1S1",
           {2, 5},
           {{{0, 0}, {2, 2}}, {{0, 2}, {2, 1}}, {{0, 3}, {2, 1}}, {{0, 4}, {2, 1}}}}};
}

using RandomShardParam = std::tuple<DType, Distribution, ShardLayout>;
class RandomShardTest : public KernelParamTest<RandomShardParam> {};

TEST_P(RandomShardTest, EveryShardEqualsTheSliceOfTheFullTensor) {
  const auto& [dtype, dist, layout] = GetParam();
  constexpr uint64_t kSeed = 0x5eed1234abcdull;
  DeviceTensor full = Empty(dtype, layout.global);
  const Shape zeros(layout.global.size(), 0);
  TESSERA_ASSERT_OK(backend().RandomFill(dist, kSeed, layout.global, zeros, full.View()));
  const HostTensor full_host = Down(full);
  for (const auto& [offset, size] : layout.blocks) {
    DeviceTensor shard = Empty(dtype, size);
    TESSERA_ASSERT_OK(backend().RandomFill(dist, kSeed, layout.global, offset, shard.View()));
    const HostTensor want = PackBlock(full_host, offset, size).value();
    EXPECT_TRUE(Down(shard).BitEqual(want))
        << "shard " << ShapeToString(size) << " at " << ShapeToString(offset);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, RandomShardTest,
                         ::testing::Combine(::testing::ValuesIn(FloatingDTypes()),
                                            ::testing::Values(Distribution::kUniform,
                                                              Distribution::kNormal),
                                            ::testing::ValuesIn(ShardLayouts())),
                         [](const ::testing::TestParamInfo<RandomShardParam>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               DistributionName(std::get<1>(info.param)), "_",
                                               std::get<2>(info.param).name);
                         });

// The value element `index` must have, computed on the host from kernels/philox.h.
inline double PhiloxReference(DType dtype, Distribution dist, uint64_t seed, uint64_t index) {
  const Philox4x32 r = PhiloxForElement(seed, index);
  if (dist == Distribution::kNormal) {
    HostTensor one = HostTensor::Zeros(dtype, {1}).value();
    SetFromDouble(one, 0, NormalValue(r));
    return GetDouble(one, 0);
  }
  switch (dtype) {
    case DType::kFloat32:
      return UniformFloat32(r);
    case DType::kFloat64:
      return UniformFloat64(r);
    case DType::kFloat16:
      return UniformFloat16(r);
    default:
      return UniformBFloat16(r);
  }
}

using RandomParam = std::tuple<DType, Distribution>;
class RandomFillTest : public KernelParamTest<RandomParam> {};

TEST_P(RandomFillTest, ElementIsPhiloxOfSeedAndGlobalIndex) {
  const auto& [dtype, dist] = GetParam();
  constexpr uint64_t kSeed = 0xfeedfacecafebeefull;
  // A shard whose global indices pass 2^32, so both counter words are exercised.
  const Shape global = {3, int64_t{1} << 31}, offset = {1, (int64_t{1} << 31) - 3};
  const Shape local = {2, 3};
  DeviceTensor t = Empty(dtype, local);
  TESSERA_ASSERT_OK(backend().RandomFill(dist, kSeed, global, offset, t.View()));
  const HostTensor got = Down(t);
  for (int64_t r = 0; r < local[0]; ++r) {
    for (int64_t c = 0; c < local[1]; ++c) {
      const uint64_t index = (offset[0] + r) * global[1] + offset[1] + c;
      const double want = PhiloxReference(dtype, dist, kSeed, index);
      const double value = GetDouble(got, r * local[1] + c);
      if (dist == Distribution::kUniform) {
        EXPECT_EQ(value, want) << "global index " << index;  // bit-identical on every backend
      } else {  // log and cos may differ in the last bit between host and device libraries
        EXPECT_NEAR(value, want, 4 * UnitRoundoff(dtype) * std::max(1.0, std::abs(want)))
            << "global index " << index;
      }
    }
  }
}

TEST_P(RandomFillTest, HasTheDistributionsMoments) {
  const auto& [dtype, dist] = GetParam();
  constexpr int64_t kN = int64_t{1} << 16;
  DeviceTensor t = Empty(dtype, {kN});
  TESSERA_ASSERT_OK(backend().RandomFill(dist, 7, Shape{kN}, Shape{0}, t.View()));
  const HostTensor got = Down(t);
  double sum = 0, sum_sq = 0, lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < kN; ++i) {
    const double v = GetDouble(got, i);
    ASSERT_TRUE(std::isfinite(v)) << "element " << i;
    sum += v;
    sum_sq += v * v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const double mean = sum / kN, variance = sum_sq / kN - mean * mean;
  if (dist == Distribution::kUniform) {
    EXPECT_GE(lo, 0.0);
    EXPECT_LT(hi, 1.0);
    EXPECT_NEAR(mean, 0.5, 0.01);
    EXPECT_NEAR(variance, 1.0 / 12, 0.005);
  } else {
    EXPECT_NEAR(mean, 0.0, 0.02);
    EXPECT_NEAR(variance, 1.0, 0.03);
    EXPECT_LT(lo, -3.0);
    EXPECT_GT(hi, 3.0);
  }
}

TEST_P(RandomFillTest, SameSeedSameBitsOtherSeedOtherBits) {
  const auto& [dtype, dist] = GetParam();
  const Shape shape = {64, 64};
  DeviceTensor a = Empty(dtype, shape), b = Empty(dtype, shape), c = Empty(dtype, shape);
  TESSERA_ASSERT_OK(backend().RandomFill(dist, 42, shape, Shape{0, 0}, a.View()));
  TESSERA_ASSERT_OK(backend().RandomFill(dist, 42, shape, Shape{0, 0}, b.View()));
  TESSERA_ASSERT_OK(backend().RandomFill(dist, 43, shape, Shape{0, 0}, c.View()));
  const HostTensor ha = Down(a), hb = Down(b), hc = Down(c);
  EXPECT_TRUE(ha.BitEqual(hb));
  int64_t equal = 0;
  for (int64_t i = 0; i < ha.num_elements(); ++i) equal += SameElement(ha, hc, i) ? 1 : 0;
  EXPECT_LT(equal, ha.num_elements() / 20) << equal << " of " << ha.num_elements();
}

INSTANTIATE_TEST_SUITE_P(Kernels, RandomFillTest,
                         ::testing::Combine(::testing::ValuesIn(FloatingDTypes()),
                                            ::testing::Values(Distribution::kUniform,
                                                              Distribution::kNormal)),
                         [](const ::testing::TestParamInfo<RandomParam>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               DistributionName(std::get<1>(info.param)));
                         });

TEST_F(KernelTest, RandomFillRejectsBadArguments) {
  DeviceTensor ints = Empty(DType::kInt32, {4});
  absl::Status s = backend().RandomFill(Distribution::kUniform, 1, Shape{4}, Shape{0}, ints.View());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("int32"), absl::string_view::npos) << s;

  DeviceTensor shard = Empty(DType::kFloat32, {2, 3});
  s = backend().RandomFill(Distribution::kUniform, 1, Shape{4, 4}, Shape{0, 2}, shard.View());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[4, 4]"), absl::string_view::npos) << s;
  s = backend().RandomFill(Distribution::kUniform, 1, Shape{4, 4, 1}, Shape{0, 0, 0}, shard.View());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

}  // namespace tessera::kernels::testing

#endif  // TESSERA_KERNELS_TESTING_DATA_CONFORMANCE_H_
