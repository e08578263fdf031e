#include "core/dtype.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

// --- sizes, names and parsing ------------------------------------------------------------

struct DTypeFacts {
  DType dtype;
  size_t size;
  const char* name;
  bool floating;
};

constexpr DTypeFacts kFacts[] = {
    {DType::kFloat32, 4, "float32", true}, {DType::kFloat64, 8, "float64", true},
    {DType::kFloat16, 2, "float16", true}, {DType::kBFloat16, 2, "bfloat16", true},
    {DType::kInt8, 1, "int8", false},      {DType::kUInt8, 1, "uint8", false},
    {DType::kInt32, 4, "int32", false},    {DType::kInt64, 8, "int64", false},
    {DType::kBool, 1, "bool", false},
};

class DTypeFactsTest : public ::testing::TestWithParam<DTypeFacts> {};

TEST_P(DTypeFactsTest, SizeNameAndKindMatchPyTorch) {
  const DTypeFacts& f = GetParam();
  EXPECT_EQ(DTypeSize(f.dtype), f.size);
  EXPECT_EQ(DTypeName(f.dtype), f.name);
  EXPECT_EQ(IsFloatingPoint(f.dtype), f.floating);
  EXPECT_TRUE(IsValidDType(static_cast<int>(f.dtype)));
}

TEST_P(DTypeFactsTest, ParsesItsOwnName) {
  absl::StatusOr<DType> parsed = ParseDType(GetParam().name);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, GetParam().dtype);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, DTypeFactsTest, ::testing::ValuesIn(kFacts),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(DTypeTest, FactsTableCoversEveryDType) {
  ASSERT_EQ(std::size(kAllDTypes), std::size(kFacts));
  for (size_t i = 0; i < std::size(kAllDTypes); ++i) EXPECT_EQ(kAllDTypes[i], kFacts[i].dtype);
}

TEST(DTypeTest, ParsesPyTorchAliases) {
  const std::pair<const char*, DType> aliases[] = {{"float", DType::kFloat32},
                                                   {"double", DType::kFloat64},
                                                   {"half", DType::kFloat16},
                                                   {"int", DType::kInt32},
                                                   {"long", DType::kInt64}};
  for (const auto& [name, dtype] : aliases) {
    absl::StatusOr<DType> parsed = ParseDType(name);
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status();
    EXPECT_EQ(*parsed, dtype) << name;
  }
}

TEST(DTypeTest, UnknownNameIsInvalidArgumentNamingIt) {
  for (const char* name : {"float8", "Float32", "", "complex64", " float32"}) {
    absl::StatusOr<DType> parsed = ParseDType(name);
    ASSERT_FALSE(parsed.ok()) << name;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr(absl::StrCat("'", name, "'")));
  }
}

TEST(DTypeTest, IsValidDTypeRejectsValuesOutsideTheEnum) {
  EXPECT_FALSE(IsValidDType(0));
  EXPECT_FALSE(IsValidDType(10));
  EXPECT_FALSE(IsValidDType(-1));
  EXPECT_FALSE(IsValidDType(std::numeric_limits<int>::max()));
}

// --- float16 ------------------------------------------------------------------------------

bool IsHalfNaN(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool IsBFloat16NaN(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

// The value of a half bit pattern by its definition.
double HalfValueByDefinition(uint16_t h) {
  const int sign = (h & 0x8000u) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f) return mant ? std::nan("") : sign * std::numeric_limits<double>::infinity();
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

// A slow FloatToHalf: round |x| to a multiple of the half quantum at its binade, ties to even,
// with long double arithmetic, then encode the result field by field.
uint16_t ReferenceFloatToHalf(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  if (std::isnan(x)) return sign | 0x7e00u;
  const long double a = std::fabs(static_cast<long double>(x));
  if (std::isinf(x)) return sign | 0x7c00u;
  if (a == 0) return sign;
  int e2;
  std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1): the binade exponent is e2 - 1
  const int binade = std::max(e2 - 1, -14);
  const long double quantum = std::ldexp(1.0L, binade - 10);
  const long double q = std::nearbyint(a / quantum);  // default rounding: to nearest, ties even
  const long double r = q * quantum;
  if (r > 65504.0L) return sign | 0x7c00u;
  if (r < std::ldexp(1.0L, -14)) return static_cast<uint16_t>(sign | static_cast<uint16_t>(q));
  int re;
  const long double m = std::frexp(r, &re);  // r = m * 2^re
  const int exp_field = re - 1 + 15;
  const int mant_field = static_cast<int>((m * 2 - 1) * 1024);
  return static_cast<uint16_t>(sign | (exp_field << 10) | mant_field);
}

float Float(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(Float16Test, HalfToFloatMatchesTheDefinitionForEveryPattern) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (IsHalfNaN(static_cast<uint16_t>(h))) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), HalfValueByDefinition(static_cast<uint16_t>(h)))
        << std::hex << h;
    EXPECT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << h;
  }
}

TEST(Float16Test, EveryNonNaNPatternRoundTripsThroughFloat) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    if (IsHalfNaN(bits)) continue;
    ASSERT_EQ(FloatToHalf(HalfToFloat(bits)), bits) << std::hex << h;
  }
}

TEST(Float16Test, KnownValues) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00u);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000u);
  EXPECT_EQ(FloatToHalf(0.5f), 0x3800u);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bffu);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bffu);  // below the midpoint to 65536
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00u);  // the midpoint ties to even: infinity
  EXPECT_EQ(FloatToHalf(-65520.0f), 0xfc00u);
  EXPECT_EQ(FloatToHalf(1e10f), 0x7c00u);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::max()), 0x7c00u);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400u);  // smallest normal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001u);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000u);  // tie with 0 and 1: to even, 0
  EXPECT_EQ(FloatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001u);
  EXPECT_EQ(FloatToHalf(3 * std::ldexp(1.0f, -25)), 0x0002u);  // tie with 1 and 2: to even, 2
  EXPECT_EQ(FloatToHalf(5 * std::ldexp(1.0f, -25)), 0x0002u);  // tie with 2 and 3: to even, 2
  EXPECT_EQ(FloatToHalf(-std::ldexp(1.0f, -25)), 0x8000u);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000u);
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000u);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000u);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00u);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00u);

  EXPECT_EQ(HalfToFloat(0x3c00u), 1.0f);
  EXPECT_EQ(HalfToFloat(0x7bffu), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001u), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x03ffu), 1023 * std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000u)));
  EXPECT_EQ(HalfToFloat(0x8000u), 0.0f);
  EXPECT_EQ(HalfToFloat(0x7c00u), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0xfc00u), -std::numeric_limits<float>::infinity());
}

TEST(Float16Test, NaNStaysNaN) {
  for (uint32_t bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu, 0xff800001u,
                        0x7fffe000u, 0x7f802000u}) {
    const uint16_t h = FloatToHalf(Float(bits));
    EXPECT_TRUE(IsHalfNaN(h)) << std::hex << bits << " -> " << h;
    EXPECT_EQ((h & 0x8000u) != 0, (bits & 0x80000000u) != 0) << std::hex << bits;
  }
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00u)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7c01u)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0xfdffu)));
  EXPECT_TRUE(IsHalfNaN(FloatToHalf(HalfToFloat(0x7c01u))));
}

// For every pair of adjacent finite non-negative halfs, the float exactly halfway between them
// rounds to the one with an even mantissa, and the floats just either side round to the nearer.
TEST(Float16Test, TiesRoundToEvenBetweenEveryAdjacentPair) {
  for (uint32_t k = 0; k <= 0x7bffu; ++k) {
    const uint16_t lo = static_cast<uint16_t>(k);
    const uint16_t hi = static_cast<uint16_t>(k + 1);
    // Past 65504 the next step would be 65536, which rounds to infinity (0x7c00).
    const double hi_value = hi == 0x7c00u ? 65536.0 : HalfValueByDefinition(hi);
    const double mid_d = (HalfValueByDefinition(lo) + hi_value) / 2;
    const float mid = static_cast<float>(mid_d);
    ASSERT_EQ(static_cast<double>(mid), mid_d) << "midpoint not exact at " << std::hex << k;
    const uint16_t even = (lo & 1u) ? hi : lo;
    ASSERT_EQ(FloatToHalf(mid), even) << std::hex << k;
    ASSERT_EQ(FloatToHalf(-mid), even | 0x8000u) << std::hex << k;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, 0.0f)), lo) << std::hex << k;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, 1e30f)), hi) << std::hex << k;
  }
}

TEST(Float16Test, TieBetweenTwoNormalsHandWorked) {
  // 1 + 2^-11 lies halfway between 1 (0x3c00, even) and 1 + 2^-10 (0x3c01).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00u);
  // 1 + 3 * 2^-11 lies halfway between 0x3c01 and 0x3c02 (even).
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02u);
  // Halfs in [2048, 4096) step by 2: 2049 ties between 0x6800 (even) and 0x6801; 2051 between
  // 0x6801 and 0x6802 (even).
  EXPECT_EQ(FloatToHalf(2049.0f), 0x6800u);
  EXPECT_EQ(FloatToHalf(2051.0f), 0x6802u);
  // 4095 ties between 4094 (0x6bff) and 4096 (0x6c00, even): rounding carries into the exponent.
  EXPECT_EQ(FloatToHalf(4095.0f), 0x6c00u);
}

TEST(Float16Test, ReferenceIsSelfConsistent) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    if (IsHalfNaN(static_cast<uint16_t>(h))) continue;
    ASSERT_EQ(ReferenceFloatToHalf(static_cast<float>(HalfValueByDefinition(h))), h)
        << std::hex << h;
  }
}

TEST(Float16Test, MatchesSlowReferenceOnRandomBitPatterns) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2'000'000; ++i) {
    const float x = Float(bits(rng));
    if (std::isnan(x)) continue;
    ASSERT_EQ(FloatToHalf(x), ReferenceFloatToHalf(x)) << std::hexfloat << x;
  }
}

TEST(Float16Test, MatchesSlowReferenceAcrossTheHalfRange) {
  // Uniform exponent over and just past the half range, random mantissa, random sign.
  std::mt19937 rng(777);
  std::uniform_int_distribution<int> exponent(-27, 17);
  std::uniform_int_distribution<uint32_t> mantissa(0, 0x7fffffu);
  std::uniform_int_distribution<int> sign(0, 1);
  for (int i = 0; i < 2'000'000; ++i) {
    const uint32_t b = (static_cast<uint32_t>(sign(rng)) << 31) |
                       (static_cast<uint32_t>(exponent(rng) + 127) << 23) | mantissa(rng);
    const float x = Float(b);
    ASSERT_EQ(FloatToHalf(x), ReferenceFloatToHalf(x)) << std::hexfloat << x;
  }
}

// --- bfloat16 -----------------------------------------------------------------------------

// A slow FloatToBFloat16 with the same approach: 8 significant bits, float32's exponent range.
uint16_t ReferenceFloatToBFloat16(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xffc0u : 0x7fc0u;
  if (std::isinf(x) || x == 0) return static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16);
  const long double a = std::fabs(static_cast<long double>(x));
  int e2;
  std::frexp(a, &e2);
  const int binade = std::max(e2 - 1, -126);
  const long double quantum = std::ldexp(1.0L, binade - 7);
  const long double r = std::nearbyint(a / quantum) * quantum;
  const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  if (r >= std::ldexp(1.0L, 128)) return sign | 0x7f80u;
  // r has at most 8 significant bits, so it is a float whose low 16 bits are zero.
  const uint32_t rb = std::bit_cast<uint32_t>(static_cast<float>(r));
  EXPECT_EQ(rb & 0xffffu, 0u);
  return static_cast<uint16_t>(sign | (rb >> 16));
}

TEST(BFloat16Test, EveryNonNaNPatternRoundTripsThroughFloat) {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float f = BFloat16ToFloat(bits);
    if (IsBFloat16NaN(bits)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << b;
      EXPECT_TRUE(IsBFloat16NaN(FloatToBFloat16(f))) << std::hex << b;
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(f), b << 16) << std::hex << b;
    ASSERT_EQ(FloatToBFloat16(f), bits) << std::hex << b;
  }
}

TEST(BFloat16Test, KnownValues) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80u);
  EXPECT_EQ(FloatToBFloat16(-2.0f), 0xc000u);
  EXPECT_EQ(FloatToBFloat16(0.0f), 0x0000u);
  EXPECT_EQ(FloatToBFloat16(-0.0f), 0x8000u);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()), 0x7f80u);
  EXPECT_EQ(FloatToBFloat16(-std::numeric_limits<float>::infinity()), 0xff80u);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7f80u);  // rounds past max
  EXPECT_EQ(FloatToBFloat16(Float(0x7f7f7fffu)), 0x7f7fu);                 // largest finite
  EXPECT_EQ(FloatToBFloat16(Float(0x7f7f8000u)), 0x7f80u);  // tie with 0x7f7f (odd): inf
  EXPECT_EQ(FloatToBFloat16(Float(0x00008000u)), 0x0000u);  // subnormal tie to even 0
  EXPECT_EQ(FloatToBFloat16(Float(0x00018000u)), 0x0002u);  // subnormal tie to even 2
  EXPECT_EQ(BFloat16ToFloat(0x3f80u), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(0x4049u), 3.140625f);
}

TEST(BFloat16Test, TiesRoundToEvenBetweenEveryAdjacentPair) {
  for (uint32_t k = 0; k < 0x7f7fu; ++k) {
    const uint16_t lo = static_cast<uint16_t>(k);
    const uint16_t hi = static_cast<uint16_t>(k + 1);
    const float mid = Float((k << 16) | 0x8000u);
    ASSERT_EQ(static_cast<double>(mid),
              (static_cast<double>(BFloat16ToFloat(lo)) + BFloat16ToFloat(hi)) / 2);
    const uint16_t even = (lo & 1u) ? hi : lo;
    ASSERT_EQ(FloatToBFloat16(mid), even) << std::hex << k;
    ASSERT_EQ(FloatToBFloat16(-mid), even | 0x8000u) << std::hex << k;
    ASSERT_EQ(FloatToBFloat16(Float((k << 16) | 0x7fffu)), lo) << std::hex << k;
    ASSERT_EQ(FloatToBFloat16(Float((k << 16) | 0x8001u)), hi) << std::hex << k;
  }
}

TEST(BFloat16Test, NaNStaysNaN) {
  for (uint32_t bits :
       {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7f80ffffu, 0xff800001u, 0x7fffffffu}) {
    const uint16_t b = FloatToBFloat16(Float(bits));
    EXPECT_TRUE(IsBFloat16NaN(b)) << std::hex << bits << " -> " << b;
    EXPECT_EQ((b & 0x8000u) != 0, (bits & 0x80000000u) != 0) << std::hex << bits;
  }
}

TEST(BFloat16Test, MatchesSlowReferenceOnRandomBitPatterns) {
  std::mt19937 rng(4242);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2'000'000; ++i) {
    const float x = Float(bits(rng));
    if (std::isnan(x)) continue;
    ASSERT_EQ(FloatToBFloat16(x), ReferenceFloatToBFloat16(x)) << std::hexfloat << x;
  }
}

}  // namespace
}  // namespace tessera
