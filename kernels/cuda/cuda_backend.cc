#include "kernels/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/cuda_staging.h"

namespace tessera::kernels {
namespace {

// "what: cudaErrorX (N): description" with `code`, or OK for cudaSuccess.
absl::Status CudaStatus(cudaError_t err, absl::string_view what,
                        absl::StatusCode code = absl::StatusCode::kInternal) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::Status(code, absl::StrCat(what, ": ", cudaGetErrorName(err), " (",
                                         static_cast<int>(err), "): ", cudaGetErrorString(err)));
}

absl::Status CublasStatus(cublasStatus_t status, absl::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cublasGetStatusName(status), " (",
                                          static_cast<int>(status),
                                          "): ", cublasGetStatusString(status)));
}

cuda::DeviceReduceOp ToDevice(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return cuda::DeviceReduceOp::kSum;
    case ReduceOp::kAvg:
      return cuda::DeviceReduceOp::kAvg;
    case ReduceOp::kMax:
      return cuda::DeviceReduceOp::kMax;
    case ReduceOp::kMin:
      return cuda::DeviceReduceOp::kMin;
    case ReduceOp::kProduct:
      return cuda::DeviceReduceOp::kProduct;
  }
  return cuda::DeviceReduceOp::kSum;
}

absl::Status RankLimit(absl::string_view what, size_t rank) {
  if (rank <= static_cast<size_t>(cuda::kMaxRank)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " has ", rank,
                                                 " dims after merging; the CUDA backend handles up "
                                                 "to ",
                                                 cuda::kMaxRank));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int ordinal) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the error so that later calls start clean
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device: cudaGetDeviceCount returned ", static_cast<int>(err), " (",
                     cudaGetErrorName(err), ": ", cudaGetErrorString(err), ")"));
  }
  if (ordinal < 0 || ordinal >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda:", ordinal, " requested but ", count, " CUDA device(s) are visible"));
  }
  const std::string device = absl::StrCat("cuda:", ordinal);
  const auto failed = [&](cudaError_t e, absl::string_view what) {
    return CudaStatus(e, absl::StrCat(device, ": ", what), absl::StatusCode::kFailedPrecondition);
  };
  RETURN_IF_ERROR(failed(cudaSetDevice(ordinal), "cudaSetDevice"));
  cudaDeviceProp props{};
  RETURN_IF_ERROR(failed(cudaGetDeviceProperties(&props, ordinal), "cudaGetDeviceProperties"));
  // Everything made so far is undone if a later step fails.
  cudaStream_t stream = nullptr, copy_stream = nullptr;
  cudaMemPool_t pool = nullptr;
  cublasHandle_t cublas = nullptr;
  const auto undo = [&] {
    if (cublas != nullptr) cublasDestroy(cublas);
    if (pool != nullptr) cudaMemPoolDestroy(pool);
    if (copy_stream != nullptr) cudaStreamDestroy(copy_stream);
    if (stream != nullptr) cudaStreamDestroy(stream);
  };
  absl::Status s =
      failed(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (s.ok()) {
    s = failed(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking),
               "cudaStreamCreate (copies)");
  }
  if (s.ok()) {
    // A pool of this backend's own on the device, which keeps what is freed for the next
    // allocation instead of giving it back to the driver at each synchronization.
    cudaMemPoolProps pool_props{};
    pool_props.allocType = cudaMemAllocationTypePinned;
    pool_props.location.type = cudaMemLocationTypeDevice;
    pool_props.location.id = ordinal;
    s = failed(cudaMemPoolCreate(&pool, &pool_props), "cudaMemPoolCreate");
    uint64_t keep = UINT64_MAX;
    if (s.ok()) {
      s = failed(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
                 "cudaMemPoolSetAttribute");
    }
  }
  if (s.ok()) {
    s = CublasStatus(cublasCreate(&cublas), absl::StrCat(device, ": cublasCreate"));
    if (s.ok()) {
      s = CublasStatus(cublasSetStream(cublas, stream), absl::StrCat(device, ": cublasSetStream"));
    }
    // fp32 GEMMs in full fp32 (no TF32), the default that matches the CPU backend.
    if (s.ok()) {
      s = CublasStatus(cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH),
                       absl::StrCat(device, ": cublasSetMathMode"));
    }
    if (!s.ok()) s = absl::FailedPreconditionError(s.message());
  }
  if (!s.ok()) {
    undo();
    return s;
  }
  return std::unique_ptr<CudaBackend>(
      new CudaBackend(ordinal, props.name, stream, copy_stream, pool, cublas));
}

absl::StatusOr<std::vector<DeviceDescription>> DescribeCudaDevices() {
  int count = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    cudaGetLastError();
    if (err == cudaErrorNoDevice) return std::vector<DeviceDescription>{};
    return CudaStatus(err, "no usable CUDA driver: cudaGetDeviceCount",
                      absl::StatusCode::kFailedPrecondition);
  }
  std::vector<DeviceDescription> devices;
  for (int i = 0; i < count; ++i) {
    DeviceDescription d;
    d.device = absl::StrCat("cuda:", i);
    cudaDeviceProp props{};
    RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&props, i),
                               absl::StrCat(d.device, ": cudaGetDeviceProperties"),
                               absl::StatusCode::kFailedPrecondition));
    d.name = props.name;
    size_t free = 0, total = 0;
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(i), absl::StrCat(d.device, ": cudaSetDevice"),
                               absl::StatusCode::kFailedPrecondition));
    RETURN_IF_ERROR(CudaStatus(cudaMemGetInfo(&free, &total),
                               absl::StrCat(d.device, ": cudaMemGetInfo"),
                               absl::StatusCode::kFailedPrecondition));
    d.total_bytes = static_cast<int64_t>(total);
    d.free_bytes = static_cast<int64_t>(free);
    devices.push_back(std::move(d));
  }
  return devices;
}

absl::StatusOr<std::unique_ptr<KernelBackend>> MakeCudaBackend(int ordinal) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend, CudaBackend::Create(ordinal));
  return std::unique_ptr<KernelBackend>(std::move(backend));
}

CudaBackend::CudaBackend(int ordinal, std::string name, cudaStream_t stream,
                         cudaStream_t copy_stream, cudaMemPool_t pool, cublasHandle_t cublas)
    : ordinal_(ordinal),
      name_(std::move(name)),
      stream_(stream),
      copy_stream_(copy_stream),
      pool_(pool),
      cublas_(cublas),
      staging_(std::make_unique<PinnedStaging>(ordinal, absl::StrCat("cuda:", ordinal))) {}

CudaBackend::~CudaBackend() {
  UseDevice().IgnoreError();
  cudaStreamSynchronize(copy_stream_);
  cudaStreamSynchronize(stream_);
  staging_.reset();
  cublasDestroy(cublas_);
  cudaMemPoolDestroy(pool_);
  cudaStreamDestroy(copy_stream_);
  cudaStreamDestroy(stream_);
}

std::string CudaBackend::device() const { return absl::StrCat("cuda:", ordinal_); }

absl::Status CudaBackend::UseDevice() const {
  return CudaStatus(cudaSetDevice(ordinal_), absl::StrCat(device(), ": cudaSetDevice"));
}

absl::Status CudaBackend::Synchronize() {
  RETURN_IF_ERROR(UseDevice());
  return CudaStatus(cudaStreamSynchronize(stream_), absl::StrCat(device(), ": queued work failed"));
}

bool CudaBackend::DeviceMemoryInfo(int64_t* free_bytes, int64_t* total_bytes) const {
  if (!UseDevice().ok()) return false;
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  *free_bytes = static_cast<int64_t>(free);
  *total_bytes = static_cast<int64_t>(total);
  return true;
}

absl::StatusOr<std::byte*> CudaBackend::AllocateBytes(size_t nbytes) {
  RETURN_IF_ERROR(UseDevice());
  // What the pool holds but does not use now serves first; past it the device must have the rest
  // free, with the reserve to spare.
  uint64_t reserved = 0, used = 0;
  cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &reserved);
  cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &used);
  const uint64_t idle = reserved > used ? reserved - used : 0;
  if (nbytes > idle) {
    int64_t free = 0, total = 0;
    if (DeviceMemoryInfo(&free, &total) &&
        static_cast<int64_t>(nbytes - idle) > free - kDeviceReserveBytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          device(), " (", name_, "): allocating ", nbytes, " bytes needs more than the ", free,
          " bytes the device has free (of ", total, "; ", kDeviceReserveBytes,
          " kept in reserve) and the ", idle, " idle in this worker's pool (", used, " in use)"));
    }
  }
  void* p = nullptr;
  const cudaError_t err = cudaMallocFromPoolAsync(&p, nbytes, pool_, stream_);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return CudaStatus(err, absl::StrCat(device(), ": cannot allocate ", nbytes, " bytes"),
                      err == cudaErrorMemoryAllocation ? absl::StatusCode::kResourceExhausted
                                                       : absl::StatusCode::kInternal);
  }
  return static_cast<std::byte*>(p);
}

void CudaBackend::FreeBytes(std::byte* data) {
  UseDevice().IgnoreError();
  // Stream-ordered: reused by later allocations once the work queued before it is done.
  cudaFreeAsync(data, stream_);
}

absl::Status CudaBackend::DoCopyFromHost(const std::byte* src, std::byte* dst, size_t nbytes) {
  RETURN_IF_ERROR(UseDevice());
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream_),
                             absl::StrCat(device(), ": copy of ", nbytes, " bytes from host")));
  return Synchronize();  // the caller may free `src` on return
}

absl::Status CudaBackend::DoCopyToHost(const std::byte* src, std::byte* dst, size_t nbytes) {
  RETURN_IF_ERROR(UseDevice());
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream_),
                             absl::StrCat(device(), ": copy of ", nbytes, " bytes to host")));
  return Synchronize();
}

absl::Status CudaBackend::DoCopy(const std::byte* src, std::byte* dst, size_t nbytes) {
  RETURN_IF_ERROR(UseDevice());
  return CudaStatus(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream_),
                    absl::StrCat(device(), ": device copy of ", nbytes, " bytes"));
}

absl::Status CudaBackend::DoCopyStrided(const std::byte* src, std::byte* dst,
                                        const StridedCopyLayout& layout, size_t element_size) {
  RETURN_IF_ERROR(RankLimit("strided copy", layout.shape.size()));
  RETURN_IF_ERROR(UseDevice());
  cuda::StridedCopyIndexer ix;
  ix.rank = static_cast<int>(layout.shape.size());
  for (int d = 0; d < ix.rank; ++d) {
    ix.shape[d] = layout.shape[d];
    ix.src_strides[d] = layout.src_strides[d];
    ix.dst_strides[d] = layout.dst_strides[d];
  }
  return CudaStatus(cuda::LaunchCopyStrided(src, dst, NumElements(layout.shape), ix,
                                            static_cast<int>(element_size), stream_),
                    absl::StrCat(device(), ": strided copy launch"));
}

absl::Status CudaBackend::DoSetZero(std::byte* data, size_t nbytes) {
  RETURN_IF_ERROR(UseDevice());
  return CudaStatus(cudaMemsetAsync(data, 0, nbytes, stream_),
                    absl::StrCat(device(), ": zeroing ", nbytes, " bytes"));
}

absl::StatusOr<std::unique_ptr<HostToSpaceWriter>> CudaBackend::DoWriteFromHost(std::byte* dst,
                                                                                size_t nbytes) {
  return MakeStagedWriter(*staging_, copy_stream_, stream_, dst, nbytes);
}

absl::Status CudaBackend::DoReadToHost(
    const std::byte* src, size_t nbytes, size_t piece_bytes,
    absl::FunctionRef<bool(std::span<const std::byte>)> consume) {
  return StagedRead(*staging_, copy_stream_, stream_, src, nbytes, piece_bytes, consume);
}

absl::Status CudaBackend::DoGemm(const GemmArgs& g) {
  RETURN_IF_ERROR(UseDevice());
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  const cublasOperation_t op_a = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const std::string what = absl::StrCat(device(), ": gemm ", DTypeName(g.dtype), " [", g.m, ", ",
                                        g.k, "] x [", g.k, ", ", g.n, "]");
  if (g.dtype == DType::kFloat64) {
    return CublasStatus(cublasDgemm(cublas_, op_b, op_a, g.n, g.m, g.k, &g.alpha,
                                    reinterpret_cast<const double*>(g.b), g.ldb,
                                    reinterpret_cast<const double*>(g.a), g.lda, &g.beta,
                                    reinterpret_cast<double*>(g.c), g.ldc),
                        what);
  }
  const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
  if (g.dtype == DType::kFloat32) {
    return CublasStatus(
        cublasSgemm(cublas_, op_b, op_a, g.n, g.m, g.k, &alpha, reinterpret_cast<const float*>(g.b),
                    g.ldb, reinterpret_cast<const float*>(g.a), g.lda, &beta,
                    reinterpret_cast<float*>(g.c), g.ldc),
        what);
  }
  // float16 / bfloat16: cuBLAS accumulates in float32 and rounds C back.
  const cudaDataType_t type = g.dtype == DType::kFloat16 ? CUDA_R_16F : CUDA_R_16BF;
  return CublasStatus(
      cublasGemmEx(cublas_, op_b, op_a, g.n, g.m, g.k, &alpha, g.b, type, g.ldb, g.a, type, g.lda,
                   &beta, g.c, type, g.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      what);
}

absl::Status CudaBackend::DoBinary(BinaryOp op, DType dtype, const std::byte* a, const std::byte* b,
                                   std::byte* out, const BroadcastLayout& layout) {
  RETURN_IF_ERROR(RankLimit(BinaryOpName(op), layout.shape.size()));
  RETURN_IF_ERROR(UseDevice());
  cuda::BroadcastIndexer ix;
  ix.rank = static_cast<int>(layout.shape.size());
  for (int d = 0; d < ix.rank; ++d) {
    ix.shape[d] = layout.shape[d];
    ix.a_strides[d] = layout.a_strides[d];
    ix.b_strides[d] = layout.b_strides[d];
  }
  return CudaStatus(
      cuda::LaunchBinary(op, dtype, a, b, out, NumElements(layout.shape), ix, stream_),
      absl::StrCat(device(), ": ", BinaryOpName(op), " ", DTypeName(dtype), " launch"));
}

absl::Status CudaBackend::DoUnary(UnaryOp op, DType dtype, const std::byte* x, std::byte* out,
                                  int64_t n) {
  RETURN_IF_ERROR(UseDevice());
  return CudaStatus(
      cuda::LaunchUnary(op, dtype, x, out, n, stream_),
      absl::StrCat(device(), ": ", UnaryOpName(op), " ", DTypeName(dtype), " launch"));
}

absl::Status CudaBackend::DoWhere(DType dtype, const std::byte* cond, const std::byte* a,
                                  const std::byte* b, std::byte* out,
                                  const BroadcastLayout3& layout) {
  RETURN_IF_ERROR(RankLimit("where", layout.shape.size()));
  RETURN_IF_ERROR(UseDevice());
  cuda::BroadcastIndexer3 ix;
  ix.rank = static_cast<int>(layout.shape.size());
  for (int d = 0; d < ix.rank; ++d) {
    ix.shape[d] = layout.shape[d];
    for (int k = 0; k < 3; ++k) ix.strides[k][d] = layout.strides[k][d];
  }
  return CudaStatus(
      cuda::LaunchWhere(reinterpret_cast<const bool*>(cond), a, b, out, NumElements(layout.shape),
                        ix, static_cast<int>(DTypeSize(dtype)), stream_),
      absl::StrCat(device(), ": where ", DTypeName(dtype), " launch"));
}

absl::Status CudaBackend::DoReduceAlongDim(const ReduceDimArgs& r) {
  RETURN_IF_ERROR(UseDevice());
  return CudaStatus(cuda::LaunchReduceAlongDim(ToDevice(r.op), r.dtype, r.x, r.out, r.outer, r.size,
                                               r.inner, stream_),
                    absl::StrCat(device(), ": ", ReduceOpName(r.op), " along a dim launch"));
}

absl::Status CudaBackend::DoArgReduceAlongDim(const ReduceDimArgs& r) {
  RETURN_IF_ERROR(UseDevice());
  const bool is_max = r.op == ReduceOp::kMax;
  return CudaStatus(
      cuda::LaunchArgReduceAlongDim(is_max, r.dtype, r.x, reinterpret_cast<int64_t*>(r.out),
                                    r.outer, r.size, r.inner, stream_),
      absl::StrCat(device(), ": ", is_max ? "argmax" : "argmin", " launch"));
}

absl::Status CudaBackend::DoSortAlongDim(const SortDimArgs& s) {
  RETURN_IF_ERROR(UseDevice());
  return CudaStatus(cuda::LaunchSortAlongDim(s.descending, s.dtype, s.x, s.values,
                                             reinterpret_cast<int64_t*>(s.indices), s.outer, s.size,
                                             s.inner, stream_),
                    absl::StrCat(device(), ": sort launch"));
}

absl::Status CudaBackend::DoScanAlongDim(const ReduceDimArgs& r) {
  RETURN_IF_ERROR(UseDevice());
  const bool is_product = r.op == ReduceOp::kProduct;
  return CudaStatus(
      cuda::LaunchScanAlongDim(is_product, r.dtype, r.x, r.out, r.outer, r.size, r.inner, stream_),
      absl::StrCat(device(), ": ", is_product ? "cumprod" : "cumsum", " launch"));
}

absl::Status CudaBackend::DoSoftmaxAlongDim(const SoftmaxDimArgs& a) {
  RETURN_IF_ERROR(UseDevice());
  return CudaStatus(
      cuda::LaunchSoftmaxAlongDim(a.kind, a.dtype, a.in, a.out, a.outer, a.size, a.inner, stream_),
      absl::StrCat(device(), ": softmax launch"));
}

absl::Status CudaBackend::DoSoftmaxBackward(const SoftmaxDimArgs& a) {
  RETURN_IF_ERROR(UseDevice());
  return CudaStatus(cuda::LaunchSoftmaxBackward(a.kind, a.dtype, a.in, a.dy, a.out, a.outer, a.size,
                                                a.inner, stream_),
                    absl::StrCat(device(), ": softmax backward launch"));
}

absl::Status CudaBackend::DoReduceInto(ReduceOp op, DType dtype, std::byte* acc,
                                       const std::byte* in, int64_t n) {
  RETURN_IF_ERROR(UseDevice());
  return CudaStatus(cuda::LaunchReduceInto(ToDevice(op), dtype, acc, in, n, stream_),
                    absl::StrCat(device(), ": reduce ", ReduceOpName(op), " launch"));
}

absl::Status CudaBackend::DoDivideInPlace(DType dtype, std::byte* data, int64_t n,
                                          int64_t divisor) {
  RETURN_IF_ERROR(UseDevice());
  return CudaStatus(cuda::LaunchDivideInPlace(dtype, data, n, divisor, stream_),
                    absl::StrCat(device(), ": divide launch"));
}

absl::Status CudaBackend::DoCast(DType from, const std::byte* src, DType to, std::byte* dst,
                                 int64_t n) {
  RETURN_IF_ERROR(UseDevice());
  return CudaStatus(
      cuda::LaunchCast(from, src, to, dst, n, stream_),
      absl::StrCat(device(), ": cast ", DTypeName(from), " to ", DTypeName(to), " launch"));
}

absl::Status CudaBackend::DoFill(std::byte* data, int64_t n, const std::byte* value,
                                 size_t element_size) {
  RETURN_IF_ERROR(UseDevice());
  uint64_t pattern = 0;
  std::memcpy(&pattern, value, element_size);
  return CudaStatus(cuda::LaunchFill(data, n, pattern, static_cast<int>(element_size), stream_),
                    absl::StrCat(device(), ": fill launch"));
}

absl::Status CudaBackend::DoRandomFill(const RandomFillArgs& args) {
  RETURN_IF_ERROR(RankLimit("random fill", args.out.shape.size()));
  RETURN_IF_ERROR(UseDevice());
  cuda::ShardIndexer shard;
  shard.rank = args.out.rank();
  for (int d = 0; d < shard.rank; ++d) {
    shard.shape[d] = args.out.shape[d];
    shard.global_strides[d] = args.global_strides[d];
    shard.start += args.offset[d] * args.global_strides[d];
  }
  shard.start = static_cast<int64_t>(static_cast<uint64_t>(shard.start) + args.counter);
  return CudaStatus(cuda::LaunchRandomFill(args.dist, args.out.dtype, args.seed, shard,
                                           args.out.data, args.out.num_elements(), stream_),
                    absl::StrCat(device(), ": random fill launch"));
}

}  // namespace tessera::kernels
