#ifndef TESSERA_KERNELS_MEMORY_SPACE_H_
#define TESSERA_KERNELS_MEMORY_SPACE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/host_tensor.h"
#include "core/shape.h"
#include "kernels/device_tensor.h"
#include "kernels/tensor_view.h"

namespace tessera::kernels {

// What a memory space holds now, and what it may hold.
struct MemoryUsage {
  int64_t allocated_bytes = 0;  // in tensors alive now
  int64_t limit_bytes = -1;     // allocations past it are refused; -1: no limit
  // The device's own figures (cudaMemGetInfo); -1 for host memory.
  int64_t device_free_bytes = -1;
  int64_t device_total_bytes = -1;
};

// Receives a tensor's bytes from host memory in pieces, in order (an upload arriving as stream
// chunks). A piece's memory may be reused as soon as Write returns.
class HostToSpaceWriter {
 public:
  virtual ~HostToSpaceWriter() = default;
  // The next bytes; INVALID_ARGUMENT past the tensor's size.
  virtual absl::Status Write(std::span<const std::byte> piece) = 0;
  // Waits until every byte written is in the tensor; INVALID_ARGUMENT if bytes are missing.
  virtual absl::Status Finish() = 0;
};

// Allocations and copies in one memory space: host memory (the CPU backend) or the memory of one
// GPU (the CUDA backends). Everything the worker stores or computes on lives in its space as
// DeviceTensors; host memory is reached only through the copies here.
//
// Views passed in must lie in this space, except the host spans of the copies to and from the
// host. Arguments are checked before any memory is touched (INVALID_ARGUMENT naming the operand).
// Work may be queued asynchronously (CUDA): CopyToHost, Download, ReadToHost and Synchronize wait
// for it. Allocate, freeing a tensor, usage(), WriteFromHost and ReadToHost may be called from any
// thread; the rest, like a KernelBackend's compute, from one thread at a time.
class MemorySpace {
 public:
  virtual ~MemorySpace() = default;
  MemorySpace(const MemorySpace&) = delete;
  MemorySpace& operator=(const MemorySpace&) = delete;

  // The device this memory belongs to: "cpu" or "cuda:N".
  virtual std::string device() const = 0;
  // The device's model (a GPU's name, e.g. "NVIDIA H100 80GB HBM3"); empty for host memory.
  virtual std::string device_name() const { return ""; }
  // True for host memory, whose bytes the CPU reads and writes directly.
  virtual bool host_addressable() const = 0;
  // Waits until every queued operation has finished; reports a failure of any of them.
  virtual absl::Status Synchronize() = 0;

  // An uninitialized tensor; RESOURCE_EXHAUSTED naming the device and the sizes if it would pass
  // the allocation limit or does not fit in the device's free memory.
  absl::StatusOr<DeviceTensor> Allocate(DType dtype, Shape shape);
  // A zero-filled tensor.
  absl::StatusOr<DeviceTensor> Zeros(DType dtype, Shape shape);
  // Sets every byte of `dst` to zero.
  absl::Status SetZero(const TensorView& dst);
  // Copies `dst.nbytes()` bytes from host memory into `dst`; `src` must have exactly that size.
  absl::Status CopyFromHost(std::span<const std::byte> src, const TensorView& dst);
  // Copies `src` into host memory, waiting for queued work; `dst` must have exactly its size.
  absl::Status CopyToHost(const ConstTensorView& src, std::span<std::byte> dst);
  // Copies between two tensors of this space with the same dtype and element count.
  absl::Status Copy(const ConstTensorView& src, const TensorView& dst);
  // Copies every element of `src` into `dst`: strided windows of this space with one dtype and
  // shape, which must not overlap (core's CopyStrided on device memory).
  absl::Status CopyStrided(const ConstStridedView& src, const StridedView& dst);
  // A new tensor holding a copy of `src`.
  absl::StatusOr<DeviceTensor> Clone(const ConstTensorView& src);
  // A new tensor holding a copy of `host`.
  absl::StatusOr<DeviceTensor> Upload(const HostTensor& host);
  // A host copy of `src`.
  absl::StatusOr<HostTensor> Download(const ConstTensorView& src);

  // A writer of host bytes into `dst` as they arrive. Device memory stages them through pinned host
  // buffers, each piece's copy to the device overlapping the arrival of the next (double
  // buffering); host memory takes them directly.
  absl::StatusOr<std::unique_ptr<HostToSpaceWriter>> WriteFromHost(const TensorView& dst);
  // Calls `consume` with src's bytes in order, in pieces of at most `piece_bytes`, at least once
  // (one empty piece for an empty tensor); stops, with OK, as soon as it returns false. Device
  // memory copies the next piece into a pinned buffer while `consume` handles this one; host
  // memory hands out its own bytes.
  absl::Status ReadToHost(const ConstTensorView& src, size_t piece_bytes,
                          absl::FunctionRef<bool(std::span<const std::byte>)> consume);

  // Refuses allocations that would bring what this space holds past `bytes` (shards and
  // temporaries together); negative: no limit (the default).
  void set_allocation_limit(int64_t bytes) { limit_.store(bytes); }
  MemoryUsage usage() const;

 protected:
  MemorySpace() = default;

  // The implementations, called with checked arguments and at least one byte or element.
  virtual absl::StatusOr<std::byte*> AllocateBytes(size_t nbytes) = 0;
  virtual void FreeBytes(std::byte* data) = 0;
  virtual absl::Status DoCopyFromHost(const std::byte* src, std::byte* dst, size_t nbytes) = 0;
  virtual absl::Status DoCopyToHost(const std::byte* src, std::byte* dst, size_t nbytes) = 0;
  virtual absl::Status DoCopy(const std::byte* src, std::byte* dst, size_t nbytes) = 0;
  // `layout` is MergeCopyLayout(src, dst) with at least one dim; `element_size` bytes each.
  virtual absl::Status DoCopyStrided(const std::byte* src, std::byte* dst,
                                     const StridedCopyLayout& layout, size_t element_size) = 0;
  virtual absl::Status DoSetZero(std::byte* data, size_t nbytes) = 0;
  // Staged transfers; the defaults copy each piece with DoCopyFromHost / DoCopyToHost.
  virtual absl::StatusOr<std::unique_ptr<HostToSpaceWriter>> DoWriteFromHost(std::byte* dst,
                                                                             size_t nbytes);
  virtual absl::Status DoReadToHost(const std::byte* src, size_t nbytes, size_t piece_bytes,
                                    absl::FunctionRef<bool(std::span<const std::byte>)> consume);
  // The device's free and total bytes; false for host memory (the default).
  virtual bool DeviceMemoryInfo(int64_t* free_bytes, int64_t* total_bytes) const;

 private:
  friend class DeviceTensor;
  // Frees a tensor's memory and takes its bytes off the count.
  void Release(std::byte* data, size_t nbytes);

  std::atomic<int64_t> allocated_{0};
  std::atomic<int64_t> limit_{-1};
};

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_MEMORY_SPACE_H_
