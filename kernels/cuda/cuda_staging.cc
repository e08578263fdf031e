#include "kernels/cuda/cuda_staging.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessera::kernels {
namespace {

absl::Status Check(cudaError_t err, const std::string& device, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(device, ": ", what, ": ", cudaGetErrorName(err), " (",
                                          static_cast<int>(err), "): ", cudaGetErrorString(err)));
}

// Two buffers of a staging pool, given back (once their copies have finished) when it goes.
class BufferPair {
 public:
  explicit BufferPair(PinnedStaging& staging) : staging_(staging) {}
  ~BufferPair() {
    for (PinnedStaging::Buffer& b : buffers_) {
      cudaEventSynchronize(b.done);
      staging_.Release(b);
    }
  }

  absl::Status Acquire() {
    for (int i = 0; i < 2; ++i) {
      ASSIGN_OR_RETURN(PinnedStaging::Buffer b, staging_.Acquire());
      buffers_.push_back(b);
    }
    return absl::OkStatus();
  }
  PinnedStaging::Buffer& operator[](size_t i) { return buffers_[i % 2]; }
  // Waits until every copy through either buffer has finished.
  absl::Status WaitAll() {
    for (PinnedStaging::Buffer& b : buffers_) {
      RETURN_IF_ERROR(Check(cudaEventSynchronize(b.done), staging_.device(), "staged copy"));
    }
    return absl::OkStatus();
  }
  // Makes `copy_stream` wait for what is queued on `after` now.
  absl::Status OrderAfter(cudaStream_t after, cudaStream_t copy_stream) {
    RETURN_IF_ERROR(
        Check(cudaEventRecord(buffers_[0].done, after), staging_.device(), "cudaEventRecord"));
    return Check(cudaStreamWaitEvent(copy_stream, buffers_[0].done, 0), staging_.device(),
                 "cudaStreamWaitEvent");
  }

 private:
  PinnedStaging& staging_;
  std::vector<PinnedStaging::Buffer> buffers_;
};

class StagedWriter final : public HostToSpaceWriter {
 public:
  StagedWriter(PinnedStaging& staging, cudaStream_t copy_stream, std::byte* dst, size_t nbytes)
      : staging_(staging), buffers_(staging), stream_(copy_stream), dst_(dst), nbytes_(nbytes) {}

  absl::Status Start(cudaStream_t after) {
    RETURN_IF_ERROR(buffers_.Acquire());
    return buffers_.OrderAfter(after, stream_);
  }

  absl::Status Write(std::span<const std::byte> piece) override {
    if (piece.size() > nbytes_ - offset_) {
      return absl::InvalidArgumentError(absl::StrCat("a piece of ", piece.size(), " bytes after ",
                                                     offset_, " of a tensor of ", nbytes_));
    }
    RETURN_IF_ERROR(Check(cudaSetDevice(staging_.ordinal()), staging_.device(), "cudaSetDevice"));
    while (!piece.empty()) {
      const size_t n = std::min(piece.size(), PinnedStaging::kBufferBytes);
      PinnedStaging::Buffer& b = buffers_[next_++];
      // The copy out of this buffer two pieces ago has finished; the one before runs on.
      RETURN_IF_ERROR(Check(cudaEventSynchronize(b.done), staging_.device(), "staged upload"));
      std::memcpy(b.data, piece.data(), n);
      RETURN_IF_ERROR(
          Check(cudaMemcpyAsync(dst_ + offset_, b.data, n, cudaMemcpyHostToDevice, stream_),
                staging_.device(), absl::StrCat("upload of ", n, " bytes")));
      RETURN_IF_ERROR(
          Check(cudaEventRecord(b.done, stream_), staging_.device(), "cudaEventRecord"));
      offset_ += n;
      piece = piece.subspan(n);
    }
    return absl::OkStatus();
  }

  absl::Status Finish() override {
    RETURN_IF_ERROR(buffers_.WaitAll());
    if (offset_ == nbytes_) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(offset_, " bytes written into a tensor of ", nbytes_));
  }

 private:
  PinnedStaging& staging_;
  BufferPair buffers_;
  const cudaStream_t stream_;
  std::byte* const dst_;
  const size_t nbytes_;
  size_t offset_ = 0;
  size_t next_ = 0;
};

}  // namespace

PinnedStaging::~PinnedStaging() {
  cudaSetDevice(ordinal_);
  absl::MutexLock lock(&mu_);
  for (Buffer& b : free_) {
    cudaEventDestroy(b.done);
    cudaFreeHost(b.data);
  }
}

absl::StatusOr<PinnedStaging::Buffer> PinnedStaging::Acquire() {
  {
    absl::MutexLock lock(&mu_);
    if (!free_.empty()) {
      Buffer b = free_.back();
      free_.pop_back();
      return b;
    }
  }
  RETURN_IF_ERROR(Check(cudaSetDevice(ordinal_), device_, "cudaSetDevice"));
  Buffer b;
  void* data = nullptr;
  RETURN_IF_ERROR(Check(cudaHostAlloc(&data, kBufferBytes, cudaHostAllocDefault), device_,
                        absl::StrCat("pinning a staging buffer of ", kBufferBytes, " bytes")));
  b.data = static_cast<std::byte*>(data);
  if (absl::Status s = Check(cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming), device_,
                             "cudaEventCreate");
      !s.ok()) {
    cudaFreeHost(data);
    return s;
  }
  return b;
}

void PinnedStaging::Release(Buffer buffer) {
  absl::MutexLock lock(&mu_);
  free_.push_back(buffer);
}

absl::StatusOr<std::unique_ptr<HostToSpaceWriter>> MakeStagedWriter(PinnedStaging& staging,
                                                                    cudaStream_t copy_stream,
                                                                    cudaStream_t after,
                                                                    std::byte* dst, size_t nbytes) {
  RETURN_IF_ERROR(Check(cudaSetDevice(staging.ordinal()), staging.device(), "cudaSetDevice"));
  auto writer = std::make_unique<StagedWriter>(staging, copy_stream, dst, nbytes);
  RETURN_IF_ERROR(writer->Start(after));
  return std::unique_ptr<HostToSpaceWriter>(std::move(writer));
}

absl::Status StagedRead(PinnedStaging& staging, cudaStream_t copy_stream, cudaStream_t after,
                        const std::byte* src, size_t nbytes, size_t piece_bytes,
                        absl::FunctionRef<bool(std::span<const std::byte>)> consume) {
  const std::string& device = staging.device();
  RETURN_IF_ERROR(Check(cudaSetDevice(staging.ordinal()), device, "cudaSetDevice"));
  BufferPair buffers(staging);
  RETURN_IF_ERROR(buffers.Acquire());
  RETURN_IF_ERROR(buffers.OrderAfter(after, copy_stream));
  const size_t piece = std::min(piece_bytes, PinnedStaging::kBufferBytes);
  const size_t count = (nbytes + piece - 1) / piece;
  const auto size_of = [&](size_t i) { return std::min(piece, nbytes - i * piece); };
  // Queues the copy of piece i into its buffer, whose previous piece has been consumed.
  const auto issue = [&](size_t i) -> absl::Status {
    PinnedStaging::Buffer& b = buffers[i];
    RETURN_IF_ERROR(Check(
        cudaMemcpyAsync(b.data, src + i * piece, size_of(i), cudaMemcpyDeviceToHost, copy_stream),
        device, absl::StrCat("download of ", size_of(i), " bytes")));
    return Check(cudaEventRecord(b.done, copy_stream), device, "cudaEventRecord");
  };
  RETURN_IF_ERROR(issue(0));
  for (size_t i = 0; i < count; ++i) {
    if (i + 1 < count) RETURN_IF_ERROR(issue(i + 1));
    PinnedStaging::Buffer& b = buffers[i];
    RETURN_IF_ERROR(Check(cudaEventSynchronize(b.done), device, "staged download"));
    if (!consume({b.data, size_of(i)})) break;
  }
  return buffers.WaitAll();
}

}  // namespace tessera::kernels
