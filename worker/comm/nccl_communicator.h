#ifndef TESSERA_WORKER_COMM_NCCL_COMMUNICATOR_H_
#define TESSERA_WORKER_COMM_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"

struct ncclComm;

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace tessera::comm {

// Which GPU a NCCL rank drives and how long it waits.
struct NcclCommunicatorOptions {
  // CUDA device ordinal; every buffer passed to the communicator lives on this device.
  int device = 0;
  // Bound on the rendezvous and initialization, and the default timeout of every call.
  absl::Duration timeout = absl::Seconds(30);
  // The stream the buffers passed in are written on (the compute stream of the device's kernels);
  // each call's work waits for what is queued there through an event, without a host wait. Null:
  // the caller has synchronized its work before each call.
  cudaStream_t compute_stream = nullptr;
};

// Communicator for cuda meshes: NCCL collectives on device buffers, run on the communicator's own
// CUDA stream, ordered after the work queued on the compute stream (options.compute_stream) by an
// event. A call returns once its work has finished on the device, so outputs can be used right
// after it on any stream.
//
// NCCL has every dtype and op natively except these, built on top: bool is uint8 with max (or)
// for sum/avg/max and min (and) for product/min; integer avg is a sum divided on the host by
// core's DivideInPlace (a device round trip, but truncation exactly as the reference). Floating
// avg is ncclAvg, which NCCL computes as a sum of x/size: it can differ from sum/size in the last
// bit. Gather, Scatter and AllToAll are grouped ncclSend/ncclRecv; Barrier is a one-element
// all-reduce. Send/Recv pairs match in issue order (NCCL has no tags; `tag` is ignored).
//
// Timeouts and failures: the communicator is non-blocking; a call polls its stream and
// ncclCommGetAsyncError until `deadline`, then aborts the communicator (ncclCommAbort) and returns
// DEADLINE_EXCEEDED; an error NCCL reports (a peer or the network gone: ncclRemoteError,
// ncclSystemError) aborts it and returns UNAVAILABLE. Between calls a watchdog thread polls
// ncclCommGetAsyncError every 200 ms and aborts a communicator that failed while idle, marking it
// broken (UNAVAILABLE), so the next call, and the worker's report to the coordinator, say so
// instead of hanging in NCCL.
class NcclCommunicator final : public Communicator {
 public:
  // Initializes rank `rank` of `size` on options.device. Rank 0 creates the NCCL unique id and
  // publishes it in `store` under `prefix`; the others wait for it. FAILED_PRECONDITION when the
  // device is not usable (no GPU, no driver), DEADLINE_EXCEEDED when the peers do not all arrive
  // within options.timeout, INVALID_ARGUMENT for a bad rank, size or timeout.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      gloo::rendezvous::Store& store, absl::string_view prefix, int rank, int size,
      const NcclCommunicatorOptions& options);

  ~NcclCommunicator() override;

  absl::string_view backend() const override { return "nccl"; }
  int device() const { return device_; }
  // The stream the collectives run on.
  cudaStream_t stream() const { return stream_; }

 private:
  NcclCommunicator(int rank, int size, absl::Duration timeout, int device, ncclComm* comm,
                   cudaStream_t stream, cudaStream_t compute_stream, cudaEvent_t compute_done,
                   void* barrier_buffer);

  absl::Status DoBroadcast(void* data, int64_t count, DType dtype, int root,
                           absl::Time deadline) override;
  absl::Status DoAllReduce(void* data, int64_t count, DType dtype, ReduceOp op,
                           absl::Time deadline) override;
  absl::Status DoReduce(void* data, int64_t count, DType dtype, ReduceOp op, int root,
                        absl::Time deadline) override;
  absl::Status DoAllGather(const void* send, void* recv, int64_t count, DType dtype,
                           absl::Time deadline) override;
  absl::Status DoGather(const void* send, void* recv, int64_t count, DType dtype, int root,
                        absl::Time deadline) override;
  absl::Status DoScatter(const void* send, void* recv, int64_t count, DType dtype, int root,
                         absl::Time deadline) override;
  absl::Status DoReduceScatter(const void* send, void* recv, int64_t count, DType dtype,
                               ReduceOp op, absl::Time deadline) override;
  absl::Status DoAllToAll(const void* send, void* recv, int64_t count, DType dtype,
                          absl::Time deadline) override;
  absl::Status DoSend(const void* data, int64_t count, DType dtype, int peer, uint32_t tag,
                      absl::Time deadline) override;
  absl::Status DoRecv(void* data, int64_t count, DType dtype, int peer, uint32_t tag,
                      absl::Time deadline) override;
  absl::Status DoBarrier(absl::Time deadline) override;

  // Enqueues work with `enqueue` (which returns an ncclResult_t as int, so this header needs no
  // nccl.h), then waits for it on the stream until `deadline`; aborts the communicator on failure.
  template <typename F>
  absl::Status Run(absl::string_view what, absl::Time deadline, F&& enqueue);
  // Waits until the enqueued work has completed; aborts on an error or at `deadline`.
  absl::Status Wait(absl::string_view what, absl::Time deadline);
  // data /= size() on the host for an integer average (copy out, core's DivideInPlace, copy in).
  absl::Status DivideOnHost(void* data, int64_t count, DType dtype, absl::Time deadline);
  // Aborts the NCCL communicator (pending work is cancelled) and returns `cause`; comm_mu_ held.
  absl::Status Abort(absl::Status cause);
  // The watchdog thread's loop: polls an idle communicator for asynchronous errors until stop_.
  void Watch();

  const int device_;
  // Held by a call for its whole length, and by the watchdog when it finds the communicator idle.
  absl::Mutex comm_mu_;
  ncclComm* comm_;  // null once aborted
  cudaStream_t stream_;
  cudaStream_t compute_stream_;  // null: none to order after
  cudaEvent_t compute_done_;     // recorded on compute_stream_ before each call's work
  void* barrier_buffer_;         // one float on the device
  absl::Notification stop_;      // ends the watchdog
  std::thread watchdog_;
};

}  // namespace tessera::comm

#endif  // TESSERA_WORKER_COMM_NCCL_COMMUNICATOR_H_
