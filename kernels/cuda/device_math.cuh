#ifndef TESSERA_KERNELS_CUDA_DEVICE_MATH_CUH_
#define TESSERA_KERNELS_CUDA_DEVICE_MATH_CUH_

// The math library of the CUDA backend's elementwise and along-a-dim kernels (the `Math` of
// kernels/elementwise_ops.h): CUDA's float and double overloads, correctly rounded where CUDA's
// are (sqrt, floor, ceil, rint, trunc, fabs, fmod, copysign) and within its documented ulps
// elsewhere (no fast-math intrinsics).

#include <cuda_runtime.h>

namespace tessera::kernels::cuda {

struct DeviceMath {
  template <typename C>
  __device__ static C Exp(C v) {
    return exp(v);
  }
  template <typename C>
  __device__ static C Tanh(C v) {
    return tanh(v);
  }
  template <typename C>
  __device__ static C Expm1(C v) {
    return expm1(v);
  }
  template <typename C>
  __device__ static C Log(C v) {
    return log(v);
  }
  template <typename C>
  __device__ static C Log1p(C v) {
    return log1p(v);
  }
  template <typename C>
  __device__ static C Log2(C v) {
    return log2(v);
  }
  template <typename C>
  __device__ static C Sqrt(C v) {
    return sqrt(v);
  }
  template <typename C>
  __device__ static C Sin(C v) {
    return sin(v);
  }
  template <typename C>
  __device__ static C Cos(C v) {
    return cos(v);
  }
  template <typename C>
  __device__ static C Erf(C v) {
    return erf(v);
  }
  template <typename C>
  __device__ static C Floor(C v) {
    return floor(v);
  }
  template <typename C>
  __device__ static C Ceil(C v) {
    return ceil(v);
  }
  template <typename C>
  __device__ static C Rint(C v) {
    return rint(v);
  }
  template <typename C>
  __device__ static C Trunc(C v) {
    return trunc(v);
  }
  template <typename C>
  __device__ static C Fabs(C v) {
    return fabs(v);
  }
  template <typename C>
  __device__ static C Fmod(C a, C b) {
    return fmod(a, b);
  }
  template <typename C>
  __device__ static C Pow(C a, C b) {
    return pow(a, b);
  }
  template <typename C>
  __device__ static C Copysign(C a, C b) {
    return copysign(a, b);
  }
};

}  // namespace tessera::kernels::cuda

#endif  // TESSERA_KERNELS_CUDA_DEVICE_MATH_CUH_
