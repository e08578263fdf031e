#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/host_memory.h"
#include "core/sharding/elementwise_reduce.h"

namespace tessera::kernels {

// Tensors of a huge page or more start on a huge page boundary, so that every 2 MiB of them can be
// a transparent huge page (core's AdviseHugePages).
absl::StatusOr<std::byte*> CpuBackend::AllocateBytes(size_t nbytes) {
  void* p = nullptr;
  if (posix_memalign(&p, nbytes >= kHugePageBytes ? kHugePageBytes : 64, nbytes) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("cpu: cannot allocate ", nbytes, " bytes"));
  }
  AdviseHugePages(static_cast<std::byte*>(p), nbytes);
  return static_cast<std::byte*>(p);
}

void CpuBackend::FreeBytes(std::byte* data) { std::free(data); }

// Host memory to host memory, whichever side the host is.
absl::Status CpuBackend::DoCopyFromHost(const std::byte* src, std::byte* dst, size_t nbytes) {
  std::memmove(dst, src, nbytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoCopyToHost(const std::byte* src, std::byte* dst, size_t nbytes) {
  std::memmove(dst, src, nbytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoCopy(const std::byte* src, std::byte* dst, size_t nbytes) {
  std::memmove(dst, src, nbytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoCopyStrided(const std::byte* src, std::byte* dst,
                                       const StridedCopyLayout& layout, size_t element_size) {
  // core's copy on the merged loops, with a dtype of the element's size (only bytes move).
  const DType dtype = element_size == 1   ? DType::kUInt8
                      : element_size == 2 ? DType::kFloat16
                      : element_size == 4 ? DType::kInt32
                                          : DType::kInt64;
  ::tessera::CopyStrided({src, dtype, layout.shape, layout.src_strides},
                         {dst, dtype, layout.shape, layout.dst_strides});
  return absl::OkStatus();
}

absl::Status CpuBackend::DoSetZero(std::byte* data, size_t nbytes) {
  std::memset(data, 0, nbytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoReduceInto(ReduceOp op, DType dtype, std::byte* acc, const std::byte* in,
                                      int64_t n) {
  ::tessera::ReduceInto(op, dtype, acc, in, n);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoDivideInPlace(DType dtype, std::byte* data, int64_t n, int64_t divisor) {
  ::tessera::DivideInPlace(dtype, data, n, divisor);
  return absl::OkStatus();
}

absl::Status CpuBackend::DoFill(std::byte* data, int64_t n, const std::byte* value,
                                size_t element_size) {
  auto fill = [&](auto word) {
    std::memcpy(&word, value, sizeof(word));
    std::fill_n(reinterpret_cast<decltype(word)*>(data), n, word);
  };
  switch (element_size) {
    case 1:
      fill(uint8_t{});
      break;
    case 2:
      fill(uint16_t{});
      break;
    case 4:
      fill(uint32_t{});
      break;
    default:
      fill(uint64_t{});
      break;
  }
  return absl::OkStatus();
}

}  // namespace tessera::kernels
