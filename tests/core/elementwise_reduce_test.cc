#include "core/sharding/elementwise_reduce.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;

// Storage tags for the 16-bit float types, which are held as uint16_t bit patterns.
struct Half {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};
// bool as one byte (std::vector<bool> has no data()).
struct Bool {
  bool value;
};

float ToFloat(Half h) { return HalfToFloat(h.bits); }
float ToFloat(BF16 b) { return BFloat16ToFloat(b.bits); }
Half ToHalf(float f) { return {FloatToHalf(f)}; }
BF16 ToBF16(float f) { return {FloatToBFloat16(f)}; }

// The plain reference: op on two values of T, integers wrapping modulo 2^bits as the hardware (and
// NCCL) do.
template <typename T>
T Naive(ReduceOp op, T a, T b) {
  if constexpr (std::is_same_v<T, Bool>) {
    if (op == ReduceOp::kProduct || op == ReduceOp::kMin) return {a.value && b.value};
    return {a.value || b.value};
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BF16>) {
    const float r = Naive(op, ToFloat(a), ToFloat(b));  // computed in float, rounded back
    if constexpr (std::is_same_v<T, Half>)
      return ToHalf(r);
    else
      return ToBF16(r);
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      case ReduceOp::kProduct:
        return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      case ReduceOp::kMax:
        return a < b ? b : a;
      case ReduceOp::kMin:
        return b < a ? b : a;
    }
    return a;
  } else {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return a + b;
      case ReduceOp::kProduct:
        return a * b;
      case ReduceOp::kMax:
        return a < b ? b : a;
      case ReduceOp::kMin:
        return b < a ? b : a;
    }
    return a;
  }
}

// Equal as values: NaN equals NaN, +0 equals -0 (the order of max(+0, -0) is unspecified).
template <typename T>
bool SameValue(T a, T b) {
  if constexpr (std::is_same_v<T, Bool>) {
    return a.value == b.value;
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BF16>) {
    return SameValue(ToFloat(a), ToFloat(b));
  } else if constexpr (std::is_floating_point_v<T>) {
    return (std::isnan(a) && std::isnan(b)) || a == b;
  } else {
    return a == b;
  }
}

template <typename T>
std::string Show(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BF16>) {
    return absl::StrCat(ToFloat(v), " (0x", absl::Hex(v.bits), ")");
  } else if constexpr (std::is_same_v<T, Bool>) {
    return v.value ? "true" : "false";
  } else if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>) {
    return absl::StrCat(static_cast<int>(v));
  } else {
    return absl::StrCat(v);
  }
}

// Random values of T; `small` keeps integers within [-20, 20] and floats within [-8, 8].
template <typename T>
T RandomValue(std::mt19937& rng, bool small) {
  if constexpr (std::is_same_v<T, Bool>) {
    return {std::uniform_int_distribution<int>(0, 1)(rng) == 1};
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BF16>) {
    if (small) {
      const float f = std::uniform_real_distribution<float>(-8, 8)(rng);
      if constexpr (std::is_same_v<T, Half>)
        return ToHalf(f);
      else
        return ToBF16(f);
    }
    // Any finite pattern.
    const uint16_t exp_mask = std::is_same_v<T, Half> ? 0x7c00u : 0x7f80u;
    uint16_t bits;
    do {
      bits = static_cast<uint16_t>(std::uniform_int_distribution<int>(0, 0xffff)(rng));
    } while ((bits & exp_mask) == exp_mask);
    return T{bits};
  } else if constexpr (std::is_integral_v<T>) {
    if (small)
      return static_cast<T>(
          std::uniform_int_distribution<int>(std::is_signed_v<T> ? -20 : 0, 20)(rng));
    return static_cast<T>(std::uniform_int_distribution<int64_t>(
        std::numeric_limits<T>::lowest(), std::numeric_limits<T>::max())(rng));
  } else {
    if (small) return std::uniform_real_distribution<T>(-8, 8)(rng);
    // Wide magnitudes, both signs, occasional zeros.
    const T mag = std::ldexp(std::uniform_real_distribution<T>(1, 2)(rng),
                             std::uniform_int_distribution<int>(-60, 60)(rng));
    const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
    if (kind == 0) return T(0);
    return kind % 2 ? mag : -mag;
  }
}

template <typename T>
std::vector<T> RandomValues(size_t n, std::mt19937& rng, bool small) {
  std::vector<T> v(n);
  for (T& x : v) x = RandomValue<T>(rng, small);
  return v;
}

// Calls f(T{}) with the test's storage type for `dtype`.
template <typename F>
void WithStorageType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat64:
      return f(double{});
    case DType::kFloat16:
      return f(Half{});
    case DType::kBFloat16:
      return f(BF16{});
    case DType::kInt8:
      return f(int8_t{});
    case DType::kUInt8:
      return f(uint8_t{});
    case DType::kInt32:
      return f(int32_t{});
    case DType::kInt64:
      return f(int64_t{});
    case DType::kBool:
      return f(Bool{});
  }
}

std::string ParamName(DType dtype, ReduceOp op) {
  return absl::StrCat(DTypeName(dtype), "_", ReduceOpName(op));
}

// --- ReduceInto --------------------------------------------------------------------------

class ReduceIntoTest : public ::testing::TestWithParam<std::tuple<DType, ReduceOp>> {};

TEST_P(ReduceIntoTest, MatchesNaiveLoop) {
  const auto [dtype, op] = GetParam();
  WithStorageType(dtype, [&, dtype = dtype, op = op](auto tag) {
    using T = decltype(tag);
    static_assert(sizeof(T) > 0);
    ASSERT_EQ(sizeof(T), DTypeSize(dtype));
    std::mt19937 rng(static_cast<uint32_t>(static_cast<int>(dtype) * 10 + static_cast<int>(op)));
    for (bool small : {false, true}) {
      const size_t n = 1031;
      std::vector<T> acc = RandomValues<T>(n + 1, rng, small);  // the last one is a sentinel
      const std::vector<T> in = RandomValues<T>(n + 1, rng, small);
      const std::vector<T> before = acc;
      ReduceInto(op, dtype, acc.data(), in.data(), static_cast<int64_t>(n));
      for (size_t i = 0; i < n; ++i) {
        const T want = Naive(op, before[i], in[i]);
        ASSERT_TRUE(SameValue(acc[i], want))
            << i << ": " << Show(before[i]) << " op " << Show(in[i]) << " gave " << Show(acc[i])
            << ", want " << Show(want);
      }
      ASSERT_EQ(std::memcmp(&acc[n], &before[n], sizeof(T)), 0) << "wrote past n";
    }
  });
}

INSTANTIATE_TEST_SUITE_P(DTypesAndOps, ReduceIntoTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::ValuesIn(kAllReduceOps)),
                         [](const auto& info) {
                           return ParamName(std::get<0>(info.param), std::get<1>(info.param));
                         });

TEST(ReduceIntoTest, HandWorked) {
  std::vector<float> f{1.5f, -2.0f, 3.0f};
  const std::vector<float> g{2.0f, 4.0f, -1.0f};
  ReduceInto(ReduceOp::kProduct, DType::kFloat32, f.data(), g.data(), 3);
  EXPECT_THAT(f, ElementsAre(3.0f, -8.0f, -3.0f));

  std::vector<int32_t> i{5, -7, 0};
  const std::vector<int32_t> j{-9, -3, 2};
  ReduceInto(ReduceOp::kMin, DType::kInt32, i.data(), j.data(), 3);
  EXPECT_THAT(i, ElementsAre(-9, -7, 0));

  // 1 + 2^-11 is not a half: 1 (0x3c00) + 2^-11 rounds back to 1 (ties to even).
  std::vector<uint16_t> h{0x3c00};
  const std::vector<uint16_t> tiny{0x1000};  // 2^-11
  ReduceInto(ReduceOp::kSum, DType::kFloat16, h.data(), tiny.data(), 1);
  EXPECT_EQ(h[0], 0x3c00u);
}

TEST(ReduceIntoTest, BoolSumAvgMaxAreOrProductMinAreAnd) {
  const bool a[] = {false, false, true, true};
  const bool b[] = {false, true, false, true};
  for (ReduceOp op : kAllReduceOps) {
    bool acc[4];
    std::copy(std::begin(a), std::end(a), acc);
    ReduceInto(op, DType::kBool, acc, b, 4);
    const bool is_and = op == ReduceOp::kProduct || op == ReduceOp::kMin;
    if (is_and) {
      EXPECT_THAT(acc, ElementsAre(false, false, false, true)) << ReduceOpName(op);
    } else {
      EXPECT_THAT(acc, ElementsAre(false, true, true, true)) << ReduceOpName(op);
    }
  }
}

TEST(ReduceIntoTest, IntegersWrapOnOverflow) {
  std::vector<int32_t> a{std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
  const std::vector<int32_t> one{1, -1};
  ReduceInto(ReduceOp::kSum, DType::kInt32, a.data(), one.data(), 2);
  EXPECT_THAT(
      a, ElementsAre(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));

  std::vector<int64_t> b{int64_t{1} << 62};
  const std::vector<int64_t> four{4};
  ReduceInto(ReduceOp::kProduct, DType::kInt64, b.data(), four.data(), 1);
  EXPECT_EQ(b[0], 0);

  std::vector<int8_t> c{100, -100};
  const std::vector<int8_t> d{100, -100};
  ReduceInto(ReduceOp::kSum, DType::kInt8, c.data(), d.data(), 2);
  EXPECT_THAT(c, ElementsAre(-56, 56));

  std::vector<uint8_t> e{200, 16};
  const std::vector<uint8_t> f{100, 16};
  ReduceInto(ReduceOp::kProduct, DType::kUInt8, e.data(), f.data(), 2);
  EXPECT_THAT(e, ElementsAre(static_cast<uint8_t>(20000 % 256), 0));
}

// --- avg = sum, then DivideInPlace -----------------------------------------------------------

class AverageTest : public ::testing::TestWithParam<std::tuple<DType, int>> {};

TEST_P(AverageTest, SumThenDivideMatchesNaive) {
  const auto [dtype, k] = GetParam();
  WithStorageType(dtype, [&, dtype = dtype, k = k](auto tag) {
    using T = decltype(tag);
    std::mt19937 rng(static_cast<uint32_t>(static_cast<int>(dtype) * 100 + k));
    const size_t n = 257;
    std::vector<std::vector<T>> inputs;
    for (int r = 0; r < k; ++r) inputs.push_back(RandomValues<T>(n, rng, /*small=*/true));

    std::vector<T> acc(n);
    FillIdentity(ReduceOp::kAvg, dtype, acc.data(), static_cast<int64_t>(n));
    for (const std::vector<T>& in : inputs) {
      ReduceInto(ReduceOp::kAvg, dtype, acc.data(), in.data(), static_cast<int64_t>(n));
    }
    DivideInPlace(dtype, acc.data(), static_cast<int64_t>(n), k);

    for (size_t i = 0; i < n; ++i) {
      T sum = inputs[0][i];
      for (int r = 1; r < k; ++r) sum = Naive(ReduceOp::kSum, sum, inputs[r][i]);
      T want;
      if constexpr (std::is_same_v<T, Bool>) {
        want = sum;  // bool: or, and division leaves it unchanged
      } else if constexpr (std::is_same_v<T, Half>) {
        want = ToHalf(ToFloat(sum) / static_cast<float>(k));
      } else if constexpr (std::is_same_v<T, BF16>) {
        want = ToBF16(ToFloat(sum) / static_cast<float>(k));
      } else if constexpr (std::is_integral_v<T>) {
        want = static_cast<T>(static_cast<int64_t>(sum) / k);  // truncates toward zero
      } else {
        want = sum / static_cast<T>(k);
      }
      ASSERT_TRUE(SameValue(acc[i], want))
          << i << ": got " << Show(acc[i]) << ", want " << Show(want);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(DTypesAndGroupSizes, AverageTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::Values(1, 2, 3, 5, 8)),
                         [](const auto& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_k",
                                               std::get<1>(info.param));
                         });

TEST(DivideInPlaceTest, IntegersTruncateTowardZero) {
  std::vector<int32_t> a{7, -7, 6, -6, 1, -1};
  DivideInPlace(DType::kInt32, a.data(), 6, 2);
  EXPECT_THAT(a, ElementsAre(3, -3, 3, -3, 0, 0));
  std::vector<int64_t> b{std::numeric_limits<int64_t>::max(), -9};
  DivideInPlace(DType::kInt64, b.data(), 2, 4);
  EXPECT_THAT(b, ElementsAre(std::numeric_limits<int64_t>::max() / 4, -2));
}

TEST(DivideInPlaceTest, DivisorLargerThanTheElementTypeHolds) {
  // Group sizes are not bounded by the element type: 200 does not fit in int8, 256 not in uint8.
  std::vector<int8_t> a{100, -100, 127, -128};
  DivideInPlace(DType::kInt8, a.data(), 4, 200);
  EXPECT_THAT(a, ElementsAre(0, 0, 0, 0));
  std::vector<int8_t> b{100, -100, 127, -128};
  DivideInPlace(DType::kInt8, b.data(), 4, 3);
  EXPECT_THAT(b, ElementsAre(33, -33, 42, -42));
  std::vector<uint8_t> c{255, 200, 10};
  DivideInPlace(DType::kUInt8, c.data(), 3, 256);
  EXPECT_THAT(c, ElementsAre(0, 0, 0));
  std::vector<uint8_t> d{255, 200, 10};
  DivideInPlace(DType::kUInt8, d.data(), 3, 100);
  EXPECT_THAT(d, ElementsAre(2, 2, 0));
  std::vector<int32_t> e{std::numeric_limits<int32_t>::min()};
  DivideInPlace(DType::kInt32, e.data(), 1, int64_t{1} << 32);
  EXPECT_THAT(e, ElementsAre(0));
}

TEST(DivideInPlaceTest, FloatsAndBool) {
  std::vector<float> f{1.0f, 3.0f, -5.0f};
  DivideInPlace(DType::kFloat32, f.data(), 3, 2);
  EXPECT_THAT(f, ElementsAre(0.5f, 1.5f, -2.5f));
  std::vector<double> g{1.0};
  DivideInPlace(DType::kFloat64, g.data(), 1, 3);
  EXPECT_EQ(g[0], 1.0 / 3.0);
  std::vector<uint16_t> h{FloatToHalf(3.0f), FloatToHalf(1.0f)};
  DivideInPlace(DType::kFloat16, h.data(), 2, 3);
  EXPECT_THAT(h, ElementsAre(FloatToHalf(1.0f), FloatToHalf(1.0f / 3.0f)));
  std::vector<uint16_t> bf{FloatToBFloat16(3.0f), FloatToBFloat16(1.0f)};
  DivideInPlace(DType::kBFloat16, bf.data(), 2, 2);
  EXPECT_THAT(bf, ElementsAre(FloatToBFloat16(1.5f), FloatToBFloat16(0.5f)));
  bool b[] = {true, false};
  DivideInPlace(DType::kBool, b, 2, 4);
  EXPECT_THAT(b, ElementsAre(true, false));
}

// --- FillIdentity --------------------------------------------------------------------------

TEST(FillIdentityTest, Values) {
  const float inf = std::numeric_limits<float>::infinity();
  auto fill = [](ReduceOp op, DType dtype, auto zero) {
    std::array<decltype(zero), 3> v{zero, zero, zero};
    FillIdentity(op, dtype, v.data(), 2);
    EXPECT_EQ(v[2], zero) << "wrote past n";
    EXPECT_EQ(v[0], v[1]);
    return v[0];
  };
  EXPECT_EQ(fill(ReduceOp::kSum, DType::kFloat32, 9.0f), 0.0f);
  EXPECT_EQ(fill(ReduceOp::kAvg, DType::kFloat32, 9.0f), 0.0f);
  EXPECT_EQ(fill(ReduceOp::kProduct, DType::kFloat32, 9.0f), 1.0f);
  EXPECT_EQ(fill(ReduceOp::kMax, DType::kFloat32, 9.0f), -inf);
  EXPECT_EQ(fill(ReduceOp::kMin, DType::kFloat32, 9.0f), inf);
  EXPECT_EQ(fill(ReduceOp::kMax, DType::kFloat64, 9.0), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(fill(ReduceOp::kMin, DType::kFloat64, 9.0), std::numeric_limits<double>::infinity());
  EXPECT_EQ(fill(ReduceOp::kProduct, DType::kFloat64, 9.0), 1.0);

  const uint16_t nine16 = 0x1234;
  EXPECT_EQ(fill(ReduceOp::kSum, DType::kFloat16, nine16), 0x0000u);
  EXPECT_EQ(fill(ReduceOp::kProduct, DType::kFloat16, nine16), 0x3c00u);
  EXPECT_EQ(fill(ReduceOp::kMax, DType::kFloat16, nine16), 0xfc00u);
  EXPECT_EQ(fill(ReduceOp::kMin, DType::kFloat16, nine16), 0x7c00u);
  EXPECT_EQ(fill(ReduceOp::kAvg, DType::kBFloat16, nine16), 0x0000u);
  EXPECT_EQ(fill(ReduceOp::kProduct, DType::kBFloat16, nine16), 0x3f80u);
  EXPECT_EQ(fill(ReduceOp::kMax, DType::kBFloat16, nine16), 0xff80u);
  EXPECT_EQ(fill(ReduceOp::kMin, DType::kBFloat16, nine16), 0x7f80u);

  EXPECT_EQ(fill(ReduceOp::kSum, DType::kInt8, int8_t{9}), 0);
  EXPECT_EQ(fill(ReduceOp::kProduct, DType::kInt8, int8_t{9}), 1);
  EXPECT_EQ(fill(ReduceOp::kMax, DType::kInt8, int8_t{9}), -128);
  EXPECT_EQ(fill(ReduceOp::kMin, DType::kInt8, int8_t{9}), 127);
  EXPECT_EQ(fill(ReduceOp::kMax, DType::kUInt8, uint8_t{9}), 0);
  EXPECT_EQ(fill(ReduceOp::kMin, DType::kUInt8, uint8_t{9}), 255);
  EXPECT_EQ(fill(ReduceOp::kMax, DType::kInt32, int32_t{9}), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(fill(ReduceOp::kMin, DType::kInt32, int32_t{9}), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(fill(ReduceOp::kMax, DType::kInt64, int64_t{9}), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(fill(ReduceOp::kMin, DType::kInt64, int64_t{9}), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(fill(ReduceOp::kAvg, DType::kInt64, int64_t{9}), 0);
  EXPECT_EQ(fill(ReduceOp::kProduct, DType::kInt64, int64_t{9}), 1);

  EXPECT_FALSE(fill(ReduceOp::kSum, DType::kBool, true));
  EXPECT_FALSE(fill(ReduceOp::kAvg, DType::kBool, true));
  EXPECT_FALSE(fill(ReduceOp::kMax, DType::kBool, true));
  EXPECT_TRUE(fill(ReduceOp::kProduct, DType::kBool, false));
  EXPECT_TRUE(fill(ReduceOp::kMin, DType::kBool, false));
}

class FillIdentityTest : public ::testing::TestWithParam<std::tuple<DType, ReduceOp>> {};

// op(identity, x) == x for every x.
TEST_P(FillIdentityTest, IsTheIdentityOfReduceInto) {
  const auto [dtype, op] = GetParam();
  WithStorageType(dtype, [&, dtype = dtype, op = op](auto tag) {
    using T = decltype(tag);
    std::mt19937 rng(static_cast<uint32_t>(static_cast<int>(dtype) * 7 + static_cast<int>(op)));
    const size_t n = 513;
    const std::vector<T> x = RandomValues<T>(n, rng, /*small=*/false);
    std::vector<T> acc(n);
    FillIdentity(op, dtype, acc.data(), static_cast<int64_t>(n));
    ReduceInto(op, dtype, acc.data(), x.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(SameValue(acc[i], x[i])) << i << ": " << Show(x[i]) << " became " << Show(acc[i]);
    }
  });
}

// `v` rounded to an integer value (floating types; others are returned as they are).
template <typename T>
T Rounded(T v) {
  if constexpr (std::is_same_v<T, Half>) {
    return ToHalf(std::round(ToFloat(v)));
  } else if constexpr (std::is_same_v<T, BF16>) {
    return ToBF16(std::round(ToFloat(v)));
  } else if constexpr (std::is_floating_point_v<T>) {
    return std::round(v);
  } else {
    return v;
  }
}

// Partial's contract: the group's parts of a value reduce to the value, bit for bit. For avg the
// k copies' sum is rounded once, so the values are integers there (exact up to k * 20).
TEST_P(FillIdentityTest, PartitionedPartsReduceToTheValue) {
  const auto [dtype, op] = GetParam();
  WithStorageType(dtype, [&, dtype = dtype, op = op](auto tag) {
    using T = decltype(tag);
    std::mt19937 rng(static_cast<uint32_t>(static_cast<int>(dtype) * 11 + static_cast<int>(op)));
    const size_t n = 257;
    std::vector<T> x = RandomValues<T>(n, rng, /*small=*/true);
    if (op == ReduceOp::kAvg) {
      for (T& v : x) v = Rounded(v);
    }
    for (int64_t k : {1, 2, 3, 5}) {
      std::vector<T> acc = x;
      PartitionValue(op, 0, dtype, acc.data(), static_cast<int64_t>(n));
      for (int64_t q = 1; q < k; ++q) {
        std::vector<T> part = x;
        PartitionValue(op, q, dtype, part.data(), static_cast<int64_t>(n));
        ReduceInto(op, dtype, acc.data(), part.data(), static_cast<int64_t>(n));
      }
      if (op == ReduceOp::kAvg) DivideInPlace(dtype, acc.data(), static_cast<int64_t>(n), k);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(SameValue(acc[i], x[i]))
            << "k=" << k << ", " << i << ": " << Show(x[i]) << " became " << Show(acc[i]);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(DTypesAndOps, FillIdentityTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::ValuesIn(kAllReduceOps)),
                         [](const auto& info) {
                           return ParamName(std::get<0>(info.param), std::get<1>(info.param));
                         });

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(ReduceIntoNaN, MaxAndMinKeepANaNFromEitherSide) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
    float acc[2] = {1.0f, nan};
    const float in[2] = {nan, 1.0f};
    ReduceInto(op, DType::kFloat32, acc, in, 2);
    EXPECT_TRUE(std::isnan(acc[0])) << ReduceOpName(op);
    EXPECT_TRUE(std::isnan(acc[1])) << ReduceOpName(op);
  }
}

}  // namespace
}  // namespace tessera
