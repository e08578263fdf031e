#ifndef TESSERA_CORE_HOST_TENSOR_H_
#define TESSERA_CORE_HOST_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace tessera {

// A non-owning strided window onto elements of one dtype; strides are in elements.
template <typename Byte>
struct BasicStridedView {
  Byte* data = nullptr;
  DType dtype = DType::kFloat32;
  Shape shape;
  std::vector<int64_t> strides;

  operator BasicStridedView<const std::byte>() const requires(!std::is_const_v<Byte>) {
    return {data, dtype, shape, strides};
  }
};
using StridedView = BasicStridedView<std::byte>;
using ConstStridedView = BasicStridedView<const std::byte>;

// Copies every element of `src` into `dst`; shapes and dtypes must match (checked by the caller).
// Runs of contiguous elements are copied with memcpy.
void CopyStrided(const ConstStridedView& src, const StridedView& dst);

// The loops of a strided copy: size-1 dims dropped and dims contiguous in both views merged, so a
// copy runs over the fewest of them (none for a single element). Strides are in elements.
struct StridedCopyLayout {
  std::vector<int64_t> shape, src_strides, dst_strides;
};
StridedCopyLayout MergeCopyLayout(const ConstStridedView& src, const StridedView& dst);

// The sub-block [offsets[i], offsets[i] + sizes[i]) of a contiguous tensor of `shape` at `data`, as
// a view; only pointer arithmetic, so `data` may be in any memory space. INVALID_ARGUMENT if the
// block is not inside the tensor.
absl::StatusOr<ConstStridedView> BlockOf(const std::byte* data, DType dtype, const Shape& shape,
                                         std::span<const int64_t> offsets,
                                         std::span<const int64_t> sizes);
absl::StatusOr<StridedView> BlockOf(std::byte* data, DType dtype, const Shape& shape,
                                    std::span<const int64_t> offsets,
                                    std::span<const int64_t> sizes);

// A tensor in host memory: an owned, contiguous, row-major, 64-byte aligned buffer with a shape and
// a dtype. Move-only; Clone() copies.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(HostTensor&&) noexcept = default;
  HostTensor& operator=(HostTensor&&) noexcept = default;

  // A zero-filled tensor. INVALID_ARGUMENT for a negative size or more bytes than fit in int64.
  static absl::StatusOr<HostTensor> Zeros(DType dtype, Shape shape);
  // A tensor whose contents are left uninitialized (for buffers about to be overwritten).
  static absl::StatusOr<HostTensor> Uninitialized(DType dtype, Shape shape);
  // A tensor holding a copy of `bytes`; INVALID_ARGUMENT unless the size is shape × dtype size.
  static absl::StatusOr<HostTensor> FromBytes(DType dtype, Shape shape,
                                              std::span<const std::byte> bytes);
  // A zero-filled tensor of a shape its caller builds valid (tests, tools, fixed shapes): a shape
  // Zeros would refuse is a bug there, and aborts the process with Zeros' message.
  static HostTensor ZerosOfValidShape(DType dtype, Shape shape);
  // A tensor from typed values (T must match the dtype's size) filling a shape valid as for
  // ZerosOfValidShape; for tests and tools.
  template <typename T>
  static HostTensor FromValues(DType dtype, Shape shape, const std::vector<T>& values) {
    HostTensor t = ZerosOfValidShape(dtype, std::move(shape));
    if (t.nbytes() > 0) std::memcpy(t.data(), values.data(), t.nbytes());  // data() may be null
    return t;
  }

  HostTensor Clone() const;
  // Gives the tensor another shape of the same element count (row-major: the bytes stay);
  // INVALID_ARGUMENT naming both shapes otherwise.
  absl::Status Reshape(Shape shape);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t num_elements() const { return NumElements(shape_); }
  size_t nbytes() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype_); }

  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  std::span<std::byte> bytes() { return {data(), nbytes()}; }
  std::span<const std::byte> bytes() const { return {data(), nbytes()}; }
  template <typename T>
  T* data_as() {
    return reinterpret_cast<T*>(data());
  }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(data());
  }

  // The whole tensor as a strided view.
  StridedView View();
  ConstStridedView View() const;

  // The sub-block [offsets[i], offsets[i] + sizes[i]) in every dim, as a view (no copy).
  // INVALID_ARGUMENT if the block is not inside the tensor.
  absl::StatusOr<StridedView> Block(std::span<const int64_t> offsets,
                                    std::span<const int64_t> sizes);
  absl::StatusOr<ConstStridedView> Block(std::span<const int64_t> offsets,
                                         std::span<const int64_t> sizes) const;

  // Elements [start, start + length) along `dim` (negative dims count from the end), as a view.
  absl::StatusOr<ConstStridedView> Narrow(int64_t dim, int64_t start, int64_t length) const;

  // True iff dtype, shape and every byte are equal.
  bool BitEqual(const HostTensor& other) const;

 private:
  struct AlignedDelete {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  HostTensor(DType dtype, Shape shape);

  DType dtype_ = DType::kFloat32;
  Shape shape_;
  std::unique_ptr<std::byte[], AlignedDelete> data_;
};

// Copies the sub-block at `offsets` of size `sizes` out of `src` into a new contiguous tensor: the
// operation that extracts any shard not along dim 0.
absl::StatusOr<HostTensor> PackBlock(const HostTensor& src, std::span<const int64_t> offsets,
                                     std::span<const int64_t> sizes);

// Writes `block` into `dst` at `offsets`; the inverse of PackBlock. `dst` is untouched on error.
absl::Status UnpackBlock(const HostTensor& block, std::span<const int64_t> offsets,
                         HostTensor& dst);

// `shape` with dim `dim` resized to `size`.
Shape WithDimSize(Shape shape, int dim, int64_t size);

// Elements [start, start + length) of `t` along `dim`, as a new tensor. INVALID_ARGUMENT if the
// range is not inside the tensor.
absl::StatusOr<HostTensor> SliceAlong(const HostTensor& t, int dim, int64_t start, int64_t length);

// Writes `block` into `dst` at `offset` along `dim` (and 0 along every other dim).
// INVALID_ARGUMENT if it does not fit; `dst` is untouched on error.
absl::Status PlaceAlong(const HostTensor& block, int dim, int64_t offset, HostTensor& dst);

}  // namespace tessera

#endif  // TESSERA_CORE_HOST_TENSOR_H_
