// The CPU kernels' vectorizable exp and tanh against libm's, over a sweep of every float bit
// pattern (one in 251) and the special values.

#include "kernels/cpu/vector_math.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace tessera::kernels {
namespace {

// Distance in units in the last place; NaN against NaN is 0, a sign mismatch is huge.
int64_t Ulps(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  if (a == b) return 0;
  if (std::signbit(a) != std::signbit(b)) return INT64_MAX;
  return std::abs(int64_t{std::bit_cast<int32_t>(a)} - int64_t{std::bit_cast<int32_t>(b)});
}

struct Worst {
  int64_t ulps = 0;
  float at = 0;
};

template <typename F, typename G>
Worst Sweep(F ours, G libm) {
  Worst worst;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 251) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(bits));
    const int64_t d = Ulps(ours(x), libm(x));
    if (d > worst.ulps) worst = {d, x};
  }
  return worst;
}

TEST(VectorMathTest, ExpIsWithinOneUlpOfLibm) {
  const Worst w = Sweep(ExpFloat, [](float x) { return std::exp(x); });
  EXPECT_LE(w.ulps, 1) << "at x = " << w.at;
}

TEST(VectorMathTest, TanhIsWithinTwoUlpsOfLibm) {
  const Worst w = Sweep(TanhFloat, [](float x) { return std::tanh(x); });
  EXPECT_LE(w.ulps, 2) << "at x = " << w.at;
}

TEST(VectorMathTest, SpecialValues) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(ExpFloat(0.0f), 1.0f);
  EXPECT_EQ(ExpFloat(kInf), kInf);
  EXPECT_EQ(ExpFloat(89.0f), kInf);
  EXPECT_EQ(ExpFloat(-kInf), 0.0f);
  EXPECT_EQ(ExpFloat(-200.0f), 0.0f);
  EXPECT_TRUE(std::isnan(ExpFloat(kNan)));
  EXPECT_EQ(TanhFloat(kInf), 1.0f);
  EXPECT_EQ(TanhFloat(-kInf), -1.0f);
  EXPECT_EQ(TanhFloat(50.0f), 1.0f);
  EXPECT_TRUE(std::isnan(TanhFloat(kNan)));
  EXPECT_EQ(TanhFloat(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(TanhFloat(-0.0f)));
}

}  // namespace
}  // namespace tessera::kernels
