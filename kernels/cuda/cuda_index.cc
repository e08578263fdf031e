// The CUDA backend's indexing kernels: the launches of cuda_index_kernels.cu with the backend's
// stream, and the range check of indices on the device, read back before anything is written.

#include <cstdint>
#include <limits>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_index_launch.h"

namespace tessera::kernels {
namespace {

// "cuda:N: what: cudaErrorX (N): description", or OK.
absl::Status Launched(cudaError_t err, const std::string& device, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(device, ": ", what, ": ", cudaGetErrorName(err), " (",
                                          static_cast<int>(err), "): ", cudaGetErrorString(err)));
}

// The walk on the device; INVALID_ARGUMENT past the kernels' rank limit.
template <typename Walk>
absl::StatusOr<cuda::IndexWalkIndexer> IndexerOf(absl::string_view op, const Walk& walk) {
  if (walk.shape.size() > static_cast<size_t>(cuda::kMaxRank)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " walks an index of ", walk.shape.size(),
                     " dims after merging; the CUDA backend handles up to ", cuda::kMaxRank));
  }
  cuda::IndexWalkIndexer ix;
  ix.rank = static_cast<int>(walk.shape.size());
  ix.dim = walk.dim;
  for (int d = 0; d < ix.rank; ++d) {
    ix.shape[d] = walk.shape[d];
    ix.indexed_strides[d] = walk.indexed_strides[d];
    ix.other_strides[d] = walk.other_strides[d];
  }
  return ix;
}

}  // namespace

absl::StatusOr<int64_t> CudaBackend::DoFindIndexOutside(const std::byte* index, int64_t count,
                                                        int64_t lo, int64_t hi) {
  RETURN_IF_ERROR(UseDevice());
  ASSIGN_OR_RETURN(DeviceTensor first_bad, Allocate(DType::kInt64, {1}));
  RETURN_IF_ERROR(Fill(first_bad.View(), -1.0));  // all bits set: UINT64_MAX, "none"
  RETURN_IF_ERROR(Launched(cuda::LaunchFindIndexOutside(
                               reinterpret_cast<const int64_t*>(index), count, lo, hi,
                               reinterpret_cast<unsigned long long*>(first_bad.data()), stream_),
                           device(), "index range check launch"));
  uint64_t position = 0;
  RETURN_IF_ERROR(
      CopyToHost(std::as_const(first_bad).View(), std::as_writable_bytes(std::span(&position, 1))));
  if (position == std::numeric_limits<uint64_t>::max()) return -1;
  return static_cast<int64_t>(position);
}

absl::Status CudaBackend::DoWrapIndices(std::byte* index, int64_t count, int64_t size) {
  RETURN_IF_ERROR(UseDevice());
  return Launched(cuda::LaunchWrapIndices(reinterpret_cast<int64_t*>(index), count, size, stream_),
                  device(), "wrap indices launch");
}

absl::Status CudaBackend::DoGather(const GatherArgs& g) {
  ASSIGN_OR_RETURN(const cuda::IndexWalkIndexer ix, IndexerOf("gather", g.walk));
  RETURN_IF_ERROR(UseDevice());
  return Launched(cuda::LaunchGather(g.x, reinterpret_cast<const int64_t*>(g.index), g.out,
                                     NumElements(g.walk.shape), ix,
                                     static_cast<int>(DTypeSize(g.dtype)), stream_),
                  device(), "gather launch");
}

absl::Status CudaBackend::DoScatter(const ScatterArgs& s) {
  const absl::string_view op = s.reduce == ScatterReduce::kSum ? "scatter_add" : "scatter";
  ASSIGN_OR_RETURN(const cuda::IndexWalkIndexer ix, IndexerOf(op, s.walk));
  RETURN_IF_ERROR(UseDevice());
  return Launched(
      cuda::LaunchScatter(s.reduce, s.dtype, s.dst, reinterpret_cast<const int64_t*>(s.index),
                          s.src, NumElements(s.walk.shape), ix, stream_),
      device(), absl::StrCat(op, " launch"));
}

absl::Status CudaBackend::DoIndexSelect(const IndexSelectArgs& a) {
  RETURN_IF_ERROR(UseDevice());
  return Launched(cuda::LaunchIndexSelect(a.x, reinterpret_cast<const int64_t*>(a.index), a.out,
                                          a.outer, a.size, a.inner, a.count,
                                          static_cast<int>(DTypeSize(a.dtype)), stream_),
                  device(), "index_select launch");
}

}  // namespace tessera::kernels
