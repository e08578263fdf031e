#ifndef TESSERA_KERNELS_CPU_VECTOR_MATH_H_
#define TESSERA_KERNELS_CPU_VECTOR_MATH_H_

// exp and tanh in float written so that a loop over them vectorizes (no calls, no branches, no
// float-to-int conversions that could overflow): the CPU backend's activations call them per
// element, where libm's scalar expf and tanhf cost ~10-20 ns each. Cephes's single-precision
// polynomials (expf.c, tanhf.c); within 2 ulp of libm over the float range (kernels_test.cc).

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace tessera::kernels {

// e^x: +inf above the float range, 0 below it, NaN for NaN.
inline float ExpFloat(float x) {
  constexpr float kHigh = 88.72283935546875f;  // above this e^x overflows
  constexpr float kLow = -104.0f;              // below this e^x rounds to 0
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;  // ln 2 in two parts
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float c = x > kHigh ? kHigh : (x < kLow ? kLow : x);  // NaN passes through
  const float t = c * kLog2e + kRound;
  const float n = t - kRound;  // round(c / ln 2)
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const float r = (c - n * kLn2High) - n * kLn2Low;  // c - n ln 2, in [-ln 2 / 2, ln 2 / 2]
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.0f;  // e^r
  // 2^n as two factors, so that n in [-150, 128] needs no exponent outside a float's.
  const int32_t half = ni >> 1;
  const float scale_a = std::bit_cast<float>((half + 127) << 23);
  const float scale_b = std::bit_cast<float>((ni - half + 127) << 23);
  const float e = y * scale_a * scale_b;
  return x > kHigh ? std::numeric_limits<float>::infinity() : e;
}

// tanh(x): odd, +-1 beyond |x| ~ 9, NaN for NaN.
inline float TanhFloat(float x) {
  const float a = std::fabs(x);  // tanh is odd: computed for |x|, given x's sign
  const float z = a * a;
  float p = -5.70498872745e-3f;  // tanh(a) = a + a z P(z) for a < 0.625
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * a + a;
  const float large = 1.0f - 2.0f / (ExpFloat(2.0f * a) + 1.0f);
  return std::copysign(a < 0.625f ? small : large, x);
}

// exp and tanh in the CPU kernels' element types: float as above, double libm's.
inline float Exp(float x) { return ExpFloat(x); }
inline double Exp(double x) { return std::exp(x); }
inline float Tanh(float x) { return TanhFloat(x); }
inline double Tanh(double x) { return std::tanh(x); }

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_VECTOR_MATH_H_
