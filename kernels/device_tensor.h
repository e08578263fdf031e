#ifndef TESSERA_KERNELS_DEVICE_TENSOR_H_
#define TESSERA_KERNELS_DEVICE_TENSOR_H_

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/shape.h"
#include "kernels/tensor_view.h"

namespace tessera::kernels {

class KernelBackend;

// A contiguous tensor owned by a backend, in its memory space, freed through it. Move-only; the
// backend must outlive it.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(DeviceTensor&& other) noexcept;
  DeviceTensor& operator=(DeviceTensor&& other) noexcept;
  ~DeviceTensor();

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t num_elements() const { return NumElements(shape_); }
  size_t nbytes() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype_); }
  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }

  TensorView View() { return {data_, dtype_, shape_}; }
  ConstTensorView View() const { return {data_, dtype_, shape_}; }

 private:
  friend class KernelBackend;
  DeviceTensor(KernelBackend* owner, std::byte* data, DType dtype, Shape shape)
      : owner_(owner), data_(data), dtype_(dtype), shape_(std::move(shape)) {}
  void Release();

  KernelBackend* owner_ = nullptr;
  std::byte* data_ = nullptr;  // null for an empty tensor
  DType dtype_ = DType::kFloat32;
  Shape shape_;
};

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_DEVICE_TENSOR_H_
