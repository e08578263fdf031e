#include "kernels/memory_space.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/view_checks.h"

namespace tessera::kernels {
namespace {

// Writes into host memory directly.
class DirectWriter final : public HostToSpaceWriter {
 public:
  DirectWriter(std::byte* dst, size_t nbytes) : dst_(dst), nbytes_(nbytes) {}

  absl::Status Write(std::span<const std::byte> piece) override {
    if (piece.size() > nbytes_ - offset_) {
      return absl::InvalidArgumentError(absl::StrCat("a piece of ", piece.size(), " bytes after ",
                                                     offset_, " of a tensor of ", nbytes_));
    }
    if (!piece.empty()) std::copy(piece.begin(), piece.end(), dst_ + offset_);
    offset_ += piece.size();
    return absl::OkStatus();
  }

  absl::Status Finish() override {
    if (offset_ == nbytes_) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(offset_, " bytes written into a tensor of ", nbytes_));
  }

 private:
  std::byte* const dst_;
  const size_t nbytes_;
  size_t offset_ = 0;
};

// Writes each piece with the space's copy from the host, synchronously.
class CopyingWriter final : public HostToSpaceWriter {
 public:
  CopyingWriter(std::byte* dst, size_t nbytes,
                std::function<absl::Status(const std::byte*, std::byte*, size_t)> copy)
      : dst_(dst), nbytes_(nbytes), copy_(std::move(copy)) {}

  absl::Status Write(std::span<const std::byte> piece) override {
    if (piece.size() > nbytes_ - offset_) {
      return absl::InvalidArgumentError(absl::StrCat("a piece of ", piece.size(), " bytes after ",
                                                     offset_, " of a tensor of ", nbytes_));
    }
    if (!piece.empty()) RETURN_IF_ERROR(copy_(piece.data(), dst_ + offset_, piece.size()));
    offset_ += piece.size();
    return absl::OkStatus();
  }

  absl::Status Finish() override {
    if (offset_ == nbytes_) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(offset_, " bytes written into a tensor of ", nbytes_));
  }

 private:
  std::byte* const dst_;
  const size_t nbytes_;
  const std::function<absl::Status(const std::byte*, std::byte*, size_t)> copy_;
  size_t offset_ = 0;
};

}  // namespace

DeviceTensor::DeviceTensor(DeviceTensor&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      dtype_(other.dtype_),
      shape_(std::move(other.shape_)) {}

DeviceTensor& DeviceTensor::operator=(DeviceTensor&& other) noexcept {
  if (this != &other) {
    Release();
    owner_ = std::exchange(other.owner_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    dtype_ = other.dtype_;
    shape_ = std::move(other.shape_);
  }
  return *this;
}

DeviceTensor::~DeviceTensor() { Release(); }

void DeviceTensor::Release() {
  if (owner_ != nullptr && data_ != nullptr) owner_->Release(data_, nbytes());
  data_ = nullptr;
}

absl::Status DeviceTensor::Reshape(Shape shape) {
  if (NumElements(shape) != num_elements() ||
      std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; })) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reshape ", ShapeToString(shape_), " to ", ShapeToString(shape)));
  }
  shape_ = std::move(shape);
  return absl::OkStatus();
}

void MemorySpace::Release(std::byte* data, size_t nbytes) {
  FreeBytes(data);
  allocated_.fetch_sub(static_cast<int64_t>(nbytes));
}

MemoryUsage MemorySpace::usage() const {
  MemoryUsage u;
  u.allocated_bytes = allocated_.load();
  u.limit_bytes = limit_.load();
  if (!DeviceMemoryInfo(&u.device_free_bytes, &u.device_total_bytes)) {
    u.device_free_bytes = u.device_total_bytes = -1;
  }
  return u;
}

bool MemorySpace::DeviceMemoryInfo(int64_t*, int64_t*) const { return false; }

absl::StatusOr<DeviceTensor> MemorySpace::Allocate(DType dtype, Shape shape) {
  RETURN_IF_ERROR(ValidateShape(shape));
  const int64_t elements = NumElements(shape);
  if (elements > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(DTypeSize(dtype))) {
    return absl::InvalidArgumentError(absl::StrCat("a ", DTypeName(dtype), " tensor of shape ",
                                                   ShapeToString(shape),
                                                   " has more bytes than fit in int64"));
  }
  const size_t nbytes = static_cast<size_t>(elements) * DTypeSize(dtype);
  if (nbytes == 0) return DeviceTensor(this, nullptr, dtype, std::move(shape));
  const int64_t bytes = static_cast<int64_t>(nbytes);
  const int64_t before = allocated_.fetch_add(bytes);
  if (const int64_t limit = limit_.load(); limit >= 0 && before + bytes > limit) {
    allocated_.fetch_sub(bytes);
    return absl::ResourceExhaustedError(absl::StrCat(
        device(), ": allocating ", bytes, " bytes (", DTypeName(dtype), ShapeToString(shape),
        ") would pass the allocation limit of ", limit, " bytes (", before, " in use)"));
  }
  absl::StatusOr<std::byte*> data = AllocateBytes(nbytes);
  if (!data.ok()) {
    allocated_.fetch_sub(bytes);
    return data.status();
  }
  return DeviceTensor(this, *data, dtype, std::move(shape));
}

absl::StatusOr<DeviceTensor> MemorySpace::Zeros(DType dtype, Shape shape) {
  ASSIGN_OR_RETURN(DeviceTensor t, Allocate(dtype, std::move(shape)));
  RETURN_IF_ERROR(SetZero(t.View()));
  return t;
}

absl::Status MemorySpace::SetZero(const TensorView& dst) {
  RETURN_IF_ERROR(CheckView("zero", "destination", dst));
  if (dst.nbytes() == 0) return absl::OkStatus();
  return DoSetZero(dst.data, dst.nbytes());
}

absl::Status MemorySpace::CopyFromHost(std::span<const std::byte> src, const TensorView& dst) {
  RETURN_IF_ERROR(CheckView("copy", "destination", dst));
  if (src.size() != dst.nbytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("copy of ", src.size(), " host bytes into a ", DTypeName(dst.dtype),
                     " tensor of shape ", ShapeToString(dst.shape), " (", dst.nbytes(), " bytes)"));
  }
  if (src.empty()) return absl::OkStatus();
  return DoCopyFromHost(src.data(), dst.data, src.size());
}

absl::Status MemorySpace::CopyToHost(const ConstTensorView& src, std::span<std::byte> dst) {
  RETURN_IF_ERROR(CheckView("copy", "source", src));
  if (dst.size() != src.nbytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "copy of a ", DTypeName(src.dtype), " tensor of shape ", ShapeToString(src.shape), " (",
        src.nbytes(), " bytes) into ", dst.size(), " host bytes"));
  }
  if (dst.empty()) return Synchronize();
  return DoCopyToHost(src.data, dst.data(), dst.size());
}

absl::Status MemorySpace::Copy(const ConstTensorView& src, const TensorView& dst) {
  RETURN_IF_ERROR(CheckView("copy", "source", src));
  RETURN_IF_ERROR(CheckView("copy", "destination", dst));
  if (src.dtype != dst.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("copy needs operands of one dtype; got ",
                                                   DTypeName(src.dtype), " and ",
                                                   DTypeName(dst.dtype)));
  }
  if (src.num_elements() != dst.num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat("copy from shape ", ShapeToString(src.shape),
                                                   " into shape ", ShapeToString(dst.shape),
                                                   ": element counts differ"));
  }
  if (src.nbytes() == 0 || src.data == dst.data) return absl::OkStatus();
  return DoCopy(src.data, dst.data, src.nbytes());
}

absl::Status MemorySpace::CopyStrided(const ConstStridedView& src, const StridedView& dst) {
  RETURN_IF_ERROR(CheckView("strided copy", "source", src));
  RETURN_IF_ERROR(CheckView("strided copy", "destination", dst));
  if (src.dtype != dst.dtype || src.shape != dst.shape || src.strides.size() != src.shape.size() ||
      dst.strides.size() != dst.shape.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("strided copy from ", DTypeName(src.dtype), ShapeToString(src.shape),
                     " (strides ", ShapeToString(src.strides), ") into ", DTypeName(dst.dtype),
                     ShapeToString(dst.shape), " (strides ", ShapeToString(dst.strides), ")"));
  }
  if (NumElements(src.shape) == 0) return absl::OkStatus();
  StridedCopyLayout layout = MergeCopyLayout(src, dst);
  if (layout.shape.empty()) layout = {{1}, {1}, {1}};  // a single element
  return DoCopyStrided(src.data, dst.data, layout, DTypeSize(src.dtype));
}

absl::StatusOr<DeviceTensor> MemorySpace::Clone(const ConstTensorView& src) {
  RETURN_IF_ERROR(CheckView("clone", "source", src));
  ASSIGN_OR_RETURN(DeviceTensor t, Allocate(src.dtype, src.shape));
  RETURN_IF_ERROR(Copy(src, t.View()));
  return t;
}

absl::StatusOr<DeviceTensor> MemorySpace::Upload(const HostTensor& host) {
  ASSIGN_OR_RETURN(DeviceTensor t, Allocate(host.dtype(), host.shape()));
  RETURN_IF_ERROR(CopyFromHost(host.bytes(), t.View()));
  return t;
}

absl::StatusOr<HostTensor> MemorySpace::Download(const ConstTensorView& src) {
  RETURN_IF_ERROR(CheckView("download", "source", src));
  ASSIGN_OR_RETURN(HostTensor host, HostTensor::Uninitialized(src.dtype, src.shape));
  RETURN_IF_ERROR(CopyToHost(src, host.bytes()));
  return host;
}

absl::StatusOr<std::unique_ptr<HostToSpaceWriter>> MemorySpace::WriteFromHost(
    const TensorView& dst) {
  RETURN_IF_ERROR(CheckView("write from host", "destination", dst));
  if (host_addressable() || dst.nbytes() == 0) {
    return std::make_unique<DirectWriter>(dst.data, dst.nbytes());
  }
  return DoWriteFromHost(dst.data, dst.nbytes());
}

absl::Status MemorySpace::ReadToHost(const ConstTensorView& src, size_t piece_bytes,
                                     absl::FunctionRef<bool(std::span<const std::byte>)> consume) {
  RETURN_IF_ERROR(CheckView("read to host", "source", src));
  if (piece_bytes == 0) return absl::InvalidArgumentError("read to host in pieces of 0 bytes");
  const size_t nbytes = src.nbytes();
  if (nbytes == 0) {
    consume({});
    return absl::OkStatus();
  }
  if (!host_addressable()) return DoReadToHost(src.data, nbytes, piece_bytes, consume);
  for (size_t offset = 0; offset < nbytes; offset += piece_bytes) {
    if (!consume({src.data + offset, std::min(piece_bytes, nbytes - offset)})) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HostToSpaceWriter>> MemorySpace::DoWriteFromHost(std::byte* dst,
                                                                                size_t nbytes) {
  return std::make_unique<CopyingWriter>(dst, nbytes,
                                         [this](const std::byte* from, std::byte* to, size_t n) {
                                           return DoCopyFromHost(from, to, n);
                                         });
}

absl::Status MemorySpace::DoReadToHost(
    const std::byte* src, size_t nbytes, size_t piece_bytes,
    absl::FunctionRef<bool(std::span<const std::byte>)> consume) {
  std::vector<std::byte> piece(std::min(piece_bytes, nbytes));
  for (size_t offset = 0; offset < nbytes; offset += piece_bytes) {
    const size_t n = std::min(piece_bytes, nbytes - offset);
    RETURN_IF_ERROR(DoCopyToHost(src + offset, piece.data(), n));
    if (!consume({piece.data(), n})) break;
  }
  return absl::OkStatus();
}

}  // namespace tessera::kernels
