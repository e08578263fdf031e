#include "worker/comm/nccl_communicator.h"

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/rendezvous/store.h"
#include "worker/comm/gloo_status.h"

namespace tessera::comm {
namespace {

// The store key under the group's prefix where rank 0 publishes the NCCL unique id.
constexpr char kUniqueIdKey[] = "nccl_unique_id";

absl::StatusCode CodeOf(ncclResult_t r) {
  switch (r) {
    case ncclInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case ncclInvalidUsage:
      return absl::StatusCode::kFailedPrecondition;
    case ncclSystemError:
    case ncclRemoteError:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

// NCCL's result as a status: INVALID_ARGUMENT, FAILED_PRECONDITION (invalid usage), UNAVAILABLE
// (system or remote errors: a peer or the network gone) or INTERNAL, with NCCL's last message.
absl::Status NcclError(absl::string_view what, ncclResult_t r, ncclComm_t comm) {
  const char* detail = ncclGetLastError(comm);
  return absl::Status(
      CodeOf(r), absl::StrFormat("%s: NCCL error %d (%s)%s%s", what, static_cast<int>(r),
                                 ncclGetErrorString(r), detail != nullptr && *detail ? ": " : "",
                                 detail != nullptr ? detail : ""));
}

// A CUDA error as a status: FAILED_PRECONDITION when there is no usable device, INTERNAL otherwise.
absl::Status CudaError(absl::string_view what, cudaError_t e) {
  const bool no_device =
      e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInvalidDevice;
  return absl::Status(
      no_device ? absl::StatusCode::kFailedPrecondition : absl::StatusCode::kInternal,
      absl::StrFormat("%s: %s (%d): %s", what, cudaGetErrorName(e), static_cast<int>(e),
                      cudaGetErrorString(e)));
}

ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kInt8:
      return ncclInt8;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    case DType::kUInt8:
    case DType::kBool:
      return ncclUint8;
  }
  return ncclUint8;
}

// An integer average is a NCCL sum finished by core's DivideInPlace.
bool DividesOnHost(ReduceOp op, DType dtype) {
  return op == ReduceOp::kAvg && !IsFloatingPoint(dtype) && dtype != DType::kBool;
}

// NCCL's op for `op` on `dtype`, with core's semantics (see the class comment).
ncclRedOp_t NcclOp(ReduceOp op, DType dtype) {
  if (dtype == DType::kBool) {
    return op == ReduceOp::kProduct || op == ReduceOp::kMin ? ncclMin : ncclMax;
  }
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return IsFloatingPoint(dtype) ? ncclAvg : ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kProduct:
      return ncclProd;
  }
  return ncclSum;
}

size_t Bytes(int64_t count, DType dtype) { return static_cast<size_t>(count) * DTypeSize(dtype); }

const std::byte* Block(const void* base, int r, int64_t count, DType dtype) {
  return static_cast<const std::byte*>(base) + r * Bytes(count, dtype);
}
std::byte* Block(void* base, int r, int64_t count, DType dtype) {
  return static_cast<std::byte*>(base) + r * Bytes(count, dtype);
}

// Polls `done` (true when finished, or a failure) until it finishes or `deadline` passes: spins
// briefly for short operations, then sleeps between polls.
template <typename F>
absl::StatusOr<bool> PollUntil(absl::Time deadline, F&& done) {
  for (int i = 0;; ++i) {
    absl::StatusOr<bool> finished = done();
    if (!finished.ok() || *finished) return finished;
    if (absl::Now() >= deadline) return false;
    if (i < 1000) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(absl::Microseconds(100));
    }
  }
}

// Initializes a non-blocking NCCL communicator, aborting it if it is not ready by `deadline`.
absl::StatusOr<ncclComm_t> InitComm(const ncclUniqueId& id, int rank, int size,
                                    absl::Time deadline) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclUniqueId copy = id;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, size, copy, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    absl::Status error = NcclError("ncclCommInitRankConfig", r, comm);
    if (comm != nullptr) ncclCommAbort(comm);
    return error;
  }
  absl::StatusOr<bool> ready = PollUntil(deadline, [&]() -> absl::StatusOr<bool> {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    if (q != ncclSuccess) return NcclError("ncclCommGetAsyncError", q, comm);
    if (state == ncclInProgress) return false;
    if (state != ncclSuccess) return NcclError("NCCL initialization", state, comm);
    return true;
  });
  if (!ready.ok() || !*ready) {
    ncclCommAbort(comm);
    if (!ready.ok()) return ready.status();
    return absl::DeadlineExceededError(
        "NCCL initialization did not finish before the timeout (are all ranks running?)");
  }
  return comm;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    gloo::rendezvous::Store& store, absl::string_view prefix, int rank, int size,
    const NcclCommunicatorOptions& options) {
  const std::string who =
      absl::StrFormat("NCCL communicator '%s' rank %d of %d", prefix, rank, size);
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": rank is not in the group"));
  }
  if (prefix.empty()) return absl::InvalidArgumentError(absl::StrCat(who, ": empty prefix"));
  if (options.timeout <= absl::ZeroDuration() || options.timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": timeout ", absl::FormatDuration(options.timeout), " must be positive and finite"));
  }
  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess) {
    return CudaError(absl::StrCat(who, ": no CUDA device: cudaGetDeviceCount failed"), e);
  }
  if (options.device < 0 || options.device >= devices) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: CUDA device %d does not exist (%d devices)", who, options.device, devices));
  }
  if (cudaError_t e = cudaSetDevice(options.device); e != cudaSuccess) {
    return CudaError(absl::StrCat(who, ": cudaSetDevice"), e);
  }
  const absl::Time deadline = absl::Now() + options.timeout;

  // Rank 0 makes the unique id; the others read it from the store.
  ncclUniqueId id;
  gloo::rendezvous::PrefixStore prefixed{std::string(prefix), store};
  if (rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return NcclError(absl::StrCat(who, ": ncclGetUniqueId"), r, nullptr);
    }
    absl::Status s = CallGloo(deadline, [&] {
      prefixed.set(kUniqueIdKey, std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
    });
    if (!s.ok()) return WithContext(absl::StrCat(who, ": publishing the id"), s);
  } else {
    std::vector<char> bytes;
    absl::Status s = CallGloo(deadline, [&] {
      prefixed.wait({kUniqueIdKey}, std::chrono::milliseconds(std::max<int64_t>(
                                        1, absl::ToInt64Milliseconds(deadline - absl::Now()))));
      bytes = prefixed.get(kUniqueIdKey);
    });
    if (!s.ok()) return WithContext(absl::StrCat(who, ": reading the id"), s);
    if (bytes.size() != sizeof(id.internal)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: the stored NCCL id has %d bytes, not %d", who, bytes.size(), sizeof(id.internal)));
    }
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }

  absl::StatusOr<ncclComm_t> comm = InitComm(id, rank, size, deadline);
  if (!comm.ok()) {
    return WithContext(who, comm.status());
  }
  cudaStream_t stream = nullptr;
  cudaEvent_t compute_done = nullptr;
  void* barrier_buffer = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&compute_done, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaMalloc(&barrier_buffer, sizeof(float));
  if (e == cudaSuccess) e = cudaMemset(barrier_buffer, 0, sizeof(float));
  if (e != cudaSuccess) {
    ncclCommAbort(*comm);
    if (barrier_buffer != nullptr) cudaFree(barrier_buffer);
    if (compute_done != nullptr) cudaEventDestroy(compute_done);
    if (stream != nullptr) cudaStreamDestroy(stream);
    return CudaError(absl::StrCat(who, ": allocating its stream and scratch"), e);
  }
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(rank, size, options.timeout, options.device, *comm, stream,
                           options.compute_stream, compute_done, barrier_buffer));
}

NcclCommunicator::NcclCommunicator(int rank, int size, absl::Duration timeout, int device,
                                   ncclComm* comm, cudaStream_t stream, cudaStream_t compute_stream,
                                   cudaEvent_t compute_done, void* barrier_buffer)
    : Communicator(rank, size, timeout),
      device_(device),
      comm_(comm),
      stream_(stream),
      compute_stream_(compute_stream),
      compute_done_(compute_done),
      barrier_buffer_(barrier_buffer),
      watchdog_([this] { Watch(); }) {}

void NcclCommunicator::Watch() {
  constexpr absl::Duration kInterval = absl::Milliseconds(200);
  while (!stop_.WaitForNotificationWithTimeout(kInterval)) {
    if (!comm_mu_.TryLock()) continue;  // a call is running: it polls the communicator itself
    if (comm_ != nullptr && cudaSetDevice(device_) == cudaSuccess) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      const ncclResult_t failure = r != ncclSuccess ? r : state;
      if (failure != ncclSuccess && failure != ncclInProgress) {
        const absl::Status cause = NcclError(
            "the NCCL watchdog found the communicator failed between calls", failure, comm_);
        ncclCommAbort(comm_);
        comm_ = nullptr;
        MarkBroken(absl::UnavailableError(absl::StrFormat("rank %d of %d (nccl): %s", rank(),
                                                          size(), cause.message())))
            .IgnoreError();
      }
    }
    comm_mu_.Unlock();
  }
}

NcclCommunicator::~NcclCommunicator() {
  stop_.Notify();
  watchdog_.join();
  cudaSetDevice(device_);
  if (comm_ != nullptr) {
    // A healthy communicator is finalized (flushing NCCL's own work) within its timeout, then
    // destroyed; anything else is aborted.
    bool finalized = false;
    if (Health().ok()) {
      const ncclResult_t r = ncclCommFinalize(comm_);
      if (r == ncclSuccess || r == ncclInProgress) {
        absl::StatusOr<bool> done =
            PollUntil(absl::Now() + timeout(), [&]() -> absl::StatusOr<bool> {
              ncclResult_t state = ncclSuccess;
              if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return false;
              if (state == ncclInProgress) return false;
              return state == ncclSuccess;
            });
        finalized = done.ok() && *done;
      }
    }
    if (finalized) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  cudaFree(barrier_buffer_);
  cudaEventDestroy(compute_done_);
  cudaStreamDestroy(stream_);
}

absl::Status NcclCommunicator::Abort(absl::Status cause) {
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  return cause;
}

absl::Status NcclCommunicator::Wait(absl::string_view what, absl::Time deadline) {
  absl::StatusOr<bool> done = PollUntil(deadline, [&]() -> absl::StatusOr<bool> {
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t r = ncclCommGetAsyncError(comm_, &state); r != ncclSuccess) {
      return NcclError(absl::StrCat(what, ": ncclCommGetAsyncError"), r, comm_);
    }
    if (state == ncclInProgress) return false;
    if (state != ncclSuccess) return NcclError(what, state, comm_);
    const cudaError_t e = cudaStreamQuery(stream_);
    if (e == cudaErrorNotReady) return false;
    if (e != cudaSuccess) return CudaError(what, e);
    return true;
  });
  if (!done.ok()) return Abort(done.status());
  if (!*done) {
    return Abort(absl::DeadlineExceededError(absl::StrCat(
        what, " did not finish before its timeout; the NCCL communicator was aborted")));
  }
  return absl::OkStatus();
}

template <typename F>
absl::Status NcclCommunicator::Run(absl::string_view what, absl::Time deadline, F&& enqueue) {
  absl::MutexLock lock(&comm_mu_);  // the watchdog keeps off while the call polls
  if (comm_ == nullptr) return absl::FailedPreconditionError("the NCCL communicator was aborted");
  if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
    return Abort(CudaError("cudaSetDevice", e));
  }
  // The buffers were written on the compute stream: this call's work waits for that (on the
  // device).
  if (compute_stream_ != nullptr) {
    cudaError_t e = cudaEventRecord(compute_done_, compute_stream_);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_, compute_done_, 0);
    if (e != cudaSuccess) return Abort(CudaError("ordering after the compute stream", e));
  }
  const ncclResult_t r = enqueue();
  // NCCL checks arguments before it enqueues anything: the communicator stays usable.
  if (r == ncclInvalidArgument) return NcclError(what, r, comm_);
  if (r != ncclSuccess && r != ncclInProgress) return Abort(NcclError(what, r, comm_));
  return Wait(what, deadline);
}

absl::Status NcclCommunicator::DivideOnHost(void* data, int64_t count, DType dtype,
                                            absl::Time deadline) {
  std::vector<std::byte> host(Bytes(count, dtype));
  RETURN_IF_ERROR(Run("copy for the average", deadline, [&] {
    return cudaMemcpyAsync(host.data(), data, host.size(), cudaMemcpyDeviceToHost, stream_) ==
                   cudaSuccess
               ? ncclSuccess
               : ncclUnhandledCudaError;
  }));
  DivideInPlace(dtype, host.data(), count, size());
  return Run("copy of the average", deadline, [&] {
    return cudaMemcpyAsync(data, host.data(), host.size(), cudaMemcpyHostToDevice, stream_) ==
                   cudaSuccess
               ? ncclSuccess
               : ncclUnhandledCudaError;
  });
}

absl::Status NcclCommunicator::DoBroadcast(void* data, int64_t count, DType dtype, int root,
                                           absl::Time deadline) {
  return Run("ncclBroadcast", deadline, [&] {
    return ncclBroadcast(data, data, static_cast<size_t>(count), NcclType(dtype), root, comm_,
                         stream_);
  });
}

absl::Status NcclCommunicator::DoAllReduce(void* data, int64_t count, DType dtype, ReduceOp op,
                                           absl::Time deadline) {
  absl::Status s = Run("ncclAllReduce", deadline, [&] {
    return ncclAllReduce(data, data, static_cast<size_t>(count), NcclType(dtype), NcclOp(op, dtype),
                         comm_, stream_);
  });
  if (!s.ok() || !DividesOnHost(op, dtype)) return s;
  return DivideOnHost(data, count, dtype, deadline);
}

absl::Status NcclCommunicator::DoReduce(void* data, int64_t count, DType dtype, ReduceOp op,
                                        int root, absl::Time deadline) {
  absl::Status s = Run("ncclReduce", deadline, [&] {
    return ncclReduce(data, data, static_cast<size_t>(count), NcclType(dtype), NcclOp(op, dtype),
                      root, comm_, stream_);
  });
  if (!s.ok() || rank() != root || !DividesOnHost(op, dtype)) return s;
  return DivideOnHost(data, count, dtype, deadline);
}

absl::Status NcclCommunicator::DoAllGather(const void* send, void* recv, int64_t count, DType dtype,
                                           absl::Time deadline) {
  return Run("ncclAllGather", deadline, [&] {
    return ncclAllGather(send, recv, static_cast<size_t>(count), NcclType(dtype), comm_, stream_);
  });
}

absl::Status NcclCommunicator::DoGather(const void* send, void* recv, int64_t count, DType dtype,
                                        int root, absl::Time deadline) {
  return Run("gather (grouped ncclSend/ncclRecv)", deadline, [&]() -> ncclResult_t {
    if (rank() == root &&
        cudaMemcpyAsync(Block(recv, root, count, dtype), send, Bytes(count, dtype),
                        cudaMemcpyDeviceToDevice, stream_) != cudaSuccess) {
      return ncclUnhandledCudaError;
    }
    ncclGroupStart();
    for (int r = 0; r < size(); ++r) {
      if (rank() == root && r != root) {
        ncclRecv(Block(recv, r, count, dtype), static_cast<size_t>(count), NcclType(dtype), r,
                 comm_, stream_);
      }
    }
    if (rank() != root) {
      ncclSend(send, static_cast<size_t>(count), NcclType(dtype), root, comm_, stream_);
    }
    return ncclGroupEnd();
  });
}

absl::Status NcclCommunicator::DoScatter(const void* send, void* recv, int64_t count, DType dtype,
                                         int root, absl::Time deadline) {
  return Run("scatter (grouped ncclSend/ncclRecv)", deadline, [&]() -> ncclResult_t {
    if (rank() == root &&
        cudaMemcpyAsync(recv, Block(send, root, count, dtype), Bytes(count, dtype),
                        cudaMemcpyDeviceToDevice, stream_) != cudaSuccess) {
      return ncclUnhandledCudaError;
    }
    ncclGroupStart();
    for (int r = 0; r < size(); ++r) {
      if (rank() == root && r != root) {
        ncclSend(Block(send, r, count, dtype), static_cast<size_t>(count), NcclType(dtype), r,
                 comm_, stream_);
      }
    }
    if (rank() != root) {
      ncclRecv(recv, static_cast<size_t>(count), NcclType(dtype), root, comm_, stream_);
    }
    return ncclGroupEnd();
  });
}

absl::Status NcclCommunicator::DoReduceScatter(const void* send, void* recv, int64_t count,
                                               DType dtype, ReduceOp op, absl::Time deadline) {
  absl::Status s = Run("ncclReduceScatter", deadline, [&] {
    return ncclReduceScatter(send, recv, static_cast<size_t>(count), NcclType(dtype),
                             NcclOp(op, dtype), comm_, stream_);
  });
  if (!s.ok() || !DividesOnHost(op, dtype)) return s;
  return DivideOnHost(recv, count, dtype, deadline);
}

absl::Status NcclCommunicator::DoAllToAll(const void* send, void* recv, int64_t count, DType dtype,
                                          absl::Time deadline) {
  return Run("all-to-all (grouped ncclSend/ncclRecv)", deadline, [&]() -> ncclResult_t {
    if (cudaMemcpyAsync(Block(recv, rank(), count, dtype), Block(send, rank(), count, dtype),
                        Bytes(count, dtype), cudaMemcpyDeviceToDevice, stream_) != cudaSuccess) {
      return ncclUnhandledCudaError;
    }
    ncclGroupStart();
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      ncclSend(Block(send, r, count, dtype), static_cast<size_t>(count), NcclType(dtype), r, comm_,
               stream_);
      ncclRecv(Block(recv, r, count, dtype), static_cast<size_t>(count), NcclType(dtype), r, comm_,
               stream_);
    }
    return ncclGroupEnd();
  });
}

absl::Status NcclCommunicator::DoSend(const void* data, int64_t count, DType dtype, int peer,
                                      uint32_t /*tag*/, absl::Time deadline) {
  return Run("ncclSend", deadline, [&] {
    return ncclSend(data, static_cast<size_t>(count), NcclType(dtype), peer, comm_, stream_);
  });
}

absl::Status NcclCommunicator::DoRecv(void* data, int64_t count, DType dtype, int peer,
                                      uint32_t /*tag*/, absl::Time deadline) {
  return Run("ncclRecv", deadline, [&] {
    return ncclRecv(data, static_cast<size_t>(count), NcclType(dtype), peer, comm_, stream_);
  });
}

absl::Status NcclCommunicator::DoBarrier(absl::Time deadline) {
  return Run("barrier (one-element ncclAllReduce)", deadline, [&] {
    return ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclFloat32, ncclSum, comm_, stream_);
  });
}

}  // namespace tessera::comm
