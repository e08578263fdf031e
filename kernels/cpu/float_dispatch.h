#ifndef TESSERA_KERNELS_CPU_FLOAT_DISPATCH_H_
#define TESSERA_KERNELS_CPU_FLOAT_DISPATCH_H_

#include "core/dtype.h"

namespace tessera::kernels {

// Calls f(float{}) for float32 and f(double{}) otherwise: the element types of the CPU backend's
// neural-network kernels, whose dtype is checked to be one of the two.
template <typename F>
void VisitFloat32Or64(DType dtype, F&& f) {
  if (dtype == DType::kFloat32) {
    f(float{});
  } else {
    f(double{});
  }
}

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_FLOAT_DISPATCH_H_
