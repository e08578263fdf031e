#ifndef TESSERA_KERNELS_DEVICE_TENSOR_H_
#define TESSERA_KERNELS_DEVICE_TENSOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "kernels/tensor_view.h"

namespace tessera::kernels {

class MemorySpace;

// A contiguous tensor in a memory space (kernels/memory_space.h: host memory for the CPU backend,
// one GPU's memory for a CUDA backend), owned and freed through it. Move-only; the space must
// outlive it.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(DeviceTensor&& other) noexcept;
  DeviceTensor& operator=(DeviceTensor&& other) noexcept;
  ~DeviceTensor();

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t num_elements() const { return NumElements(shape_); }
  size_t nbytes() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype_); }
  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }

  TensorView View() { return {data_, dtype_, shape_}; }
  ConstTensorView View() const { return {data_, dtype_, shape_}; }

  // Gives the tensor another shape of the same element count (row-major: the bytes stay);
  // INVALID_ARGUMENT naming both shapes otherwise.
  absl::Status Reshape(Shape shape);

 private:
  friend class MemorySpace;
  DeviceTensor(MemorySpace* owner, std::byte* data, DType dtype, Shape shape)
      : owner_(owner), data_(data), dtype_(dtype), shape_(std::move(shape)) {}
  void Release();

  MemorySpace* owner_ = nullptr;
  std::byte* data_ = nullptr;  // null for an empty tensor
  DType dtype_ = DType::kFloat32;
  Shape shape_;
};

// The whole of a tensor as a view (the same as View(), for code written over either tensor kind).
inline TensorView ViewOf(DeviceTensor& t) { return t.View(); }
inline ConstTensorView ViewOf(const DeviceTensor& t) { return t.View(); }

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_DEVICE_TENSOR_H_
