#ifndef TESSERA_KERNELS_TENSOR_VIEW_H_
#define TESSERA_KERNELS_TENSOR_VIEW_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/host_tensor.h"
#include "core/shape.h"

namespace tessera::kernels {

// A non-owning, contiguous, row-major tensor in one backend's memory space (host memory for the
// CPU backend, device memory for a CUDA backend).
template <typename Byte>
struct BasicTensorView {
  Byte* data = nullptr;
  DType dtype = DType::kFloat32;
  Shape shape;

  int64_t num_elements() const { return NumElements(shape); }
  size_t nbytes() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype); }
  int rank() const { return static_cast<int>(shape.size()); }

  operator BasicTensorView<const std::byte>() const requires(!std::is_const_v<Byte>) {
    return {data, dtype, shape};
  }
};
using TensorView = BasicTensorView<std::byte>;
using ConstTensorView = BasicTensorView<const std::byte>;

// The whole of a host tensor as a view (host memory is the CPU backend's memory space).
inline TensorView ViewOf(HostTensor& t) { return {t.data(), t.dtype(), t.shape()}; }
inline ConstTensorView ViewOf(const HostTensor& t) { return {t.data(), t.dtype(), t.shape()}; }

// `view` with another shape of the same element count (a row-major reshape is free).
template <typename Byte>
BasicTensorView<Byte> Reshaped(const BasicTensorView<Byte>& view, Shape shape) {
  return {view.data, view.dtype, std::move(shape)};
}

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_TENSOR_VIEW_H_
