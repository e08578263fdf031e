#ifndef TESSERA_KERNELS_CPU_HOST_MATH_H_
#define TESSERA_KERNELS_CPU_HOST_MATH_H_

#include <cmath>

#include "kernels/cpu/vector_math.h"

namespace tessera::kernels {

// The math library of the CPU backend's elementwise and along-a-dim kernels (the `Math` of
// kernels/elementwise_ops.h): vector_math.h's exp and tanh, which vectorize, and libm for the rest.
struct HostMath {
  template <typename C>
  static C Exp(C v) {
    return kernels::Exp(v);
  }
  template <typename C>
  static C Tanh(C v) {
    return kernels::Tanh(v);
  }
  template <typename C>
  static C Expm1(C v) {
    return std::expm1(v);
  }
  template <typename C>
  static C Log(C v) {
    return std::log(v);
  }
  template <typename C>
  static C Log1p(C v) {
    return std::log1p(v);
  }
  template <typename C>
  static C Log2(C v) {
    return std::log2(v);
  }
  template <typename C>
  static C Sqrt(C v) {
    return std::sqrt(v);
  }
  template <typename C>
  static C Sin(C v) {
    return std::sin(v);
  }
  template <typename C>
  static C Cos(C v) {
    return std::cos(v);
  }
  template <typename C>
  static C Erf(C v) {
    return std::erf(v);
  }
  template <typename C>
  static C Floor(C v) {
    return std::floor(v);
  }
  template <typename C>
  static C Ceil(C v) {
    return std::ceil(v);
  }
  template <typename C>
  static C Rint(C v) {
    return std::nearbyint(v);
  }
  template <typename C>
  static C Trunc(C v) {
    return std::trunc(v);
  }
  template <typename C>
  static C Fabs(C v) {
    return std::fabs(v);
  }
  template <typename C>
  static C Fmod(C a, C b) {
    return std::fmod(a, b);
  }
  template <typename C>
  static C Pow(C a, C b) {
    return std::pow(a, b);
  }
  template <typename C>
  static C Copysign(C a, C b) {
    return std::copysign(a, b);
  }
};

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_HOST_MATH_H_
