#ifndef TESSERA_KERNELS_CUDA_CUDA_STAGING_H_
#define TESSERA_KERNELS_CUDA_CUDA_STAGING_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/memory_space.h"

namespace tessera::kernels {

// Pinned host buffers for the staged transfers of one device, each with the event that marks the
// end of the last copy through it; kept for reuse across transfers. Thread-safe.
class PinnedStaging {
 public:
  // Bytes of one buffer: the largest piece a staged transfer copies at once.
  static constexpr size_t kBufferBytes = size_t{4} << 20;

  struct Buffer {
    std::byte* data = nullptr;
    cudaEvent_t done = nullptr;  // recorded after each copy into or out of `data`
  };

  // `device` names the device in errors ("cuda:0").
  PinnedStaging(int ordinal, std::string device) : ordinal_(ordinal), device_(std::move(device)) {}
  ~PinnedStaging();

  // A buffer whose last copy has finished; INTERNAL if pinned memory cannot be had.
  absl::StatusOr<Buffer> Acquire();
  // Gives back a buffer whose copies have all finished.
  void Release(Buffer buffer);

  int ordinal() const { return ordinal_; }
  const std::string& device() const { return device_; }

 private:
  const int ordinal_;
  const std::string device_;
  absl::Mutex mu_;
  std::vector<Buffer> free_ ABSL_GUARDED_BY(mu_);
};

// A writer of host pieces into `nbytes` of device memory at `dst` through two buffers of
// `staging`: each piece is copied into a pinned buffer and from there to the device on
// `copy_stream`, while the caller fetches the next one. Work queued on `after` before the writer
// was made (the allocation of `dst`) precedes its copies.
absl::StatusOr<std::unique_ptr<HostToSpaceWriter>> MakeStagedWriter(PinnedStaging& staging,
                                                                    cudaStream_t copy_stream,
                                                                    cudaStream_t after,
                                                                    std::byte* dst, size_t nbytes);

// Reads `nbytes` of device memory at `src` in pieces of at most `piece_bytes` (and at most a
// buffer) through two buffers of `staging` on `copy_stream`, the copy of the next piece running
// while `consume` handles this one; stops when it returns false. Work queued on `after` before the
// call (what wrote `src`) precedes the copies.
absl::Status StagedRead(PinnedStaging& staging, cudaStream_t copy_stream, cudaStream_t after,
                        const std::byte* src, size_t nbytes, size_t piece_bytes,
                        absl::FunctionRef<bool(std::span<const std::byte>)> consume);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CUDA_CUDA_STAGING_H_
