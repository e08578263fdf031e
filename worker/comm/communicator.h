#ifndef TESSERA_WORKER_COMM_COMMUNICATOR_H_
#define TESSERA_WORKER_COMM_COMMUNICATOR_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/dtype.h"
#include "core/sharding/placement.h"

namespace tessera::comm {

// A group of `size` ranks that run collectives together; this object is rank `rank` of it.
//
// Buffers are (pointer, element count, dtype) in the backend's memory: host memory for Gloo,
// device memory of the communicator's GPU for NCCL. Every rank calls the same collectives in the
// same order with the same count, dtype, op and root. `count` is always the number of elements one
// rank contributes or receives per peer block, so a buffer that holds one block per rank has
// size() * count elements. A count of 0 is a no-op that returns OK without communicating.
//
// Reductions follow core's ReduceInto: integers wrap, float16 and bfloat16 are rounded after each
// step, and on bool sum/avg/max are logical or, product/min logical and. kAvg is the sum divided by
// size() as core's DivideInPlace does it (integers truncate toward zero).
//
// Every call has a timeout: the communicator's (set_timeout) unless the call passes its own. A call
// that fails once communication has begun (timeout, a peer gone, a transport error) marks the
// communicator broken: that call returns DEADLINE_EXCEEDED, UNAVAILABLE or INTERNAL, and every
// later call returns FAILED_PRECONDITION naming the first failure. Breaking closes the rank's
// connections (Disconnect), so a peer still waiting on this rank in the same or a later call fails
// at once instead of at its own timeout: one rank's failure reaches the whole group together, and
// the ranks of a group whose member died move on to their next commands at about the same time. A
// broken communicator cannot be repaired; make a new one under a fresh rendezvous prefix. Bad
// arguments return INVALID_ARGUMENT before anything is sent and leave the communicator usable.
//
// Thread-compatible: one operation at a time. timeout(), set_timeout() and Health() may be called
// from any thread.
class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // "gloo" or "nccl".
  virtual absl::string_view backend() const = 0;

  absl::Duration timeout() const;
  // INVALID_ARGUMENT unless `timeout` is positive and finite.
  absl::Status set_timeout(absl::Duration timeout);

  // OK while usable; FAILED_PRECONDITION naming the failure that broke it.
  absl::Status Health() const;
  // Breaks the communicator by `cause` as a failed call would, closing its connections (a no-op
  // if already broken): for another communicator of the same mesh that broke. Between calls only.
  void Break(absl::Status cause);

  using Timeout = std::optional<absl::Duration>;

  // data: count elements; root's data is copied into every other rank's data.
  absl::Status Broadcast(void* data, int64_t count, DType dtype, int root, Timeout timeout = {});
  // data: count elements, replaced on every rank by op over all ranks' data.
  absl::Status AllReduce(void* data, int64_t count, DType dtype, ReduceOp op, Timeout timeout = {});
  // data: count elements, replaced on root by op over all ranks' data; unchanged elsewhere.
  absl::Status Reduce(void* data, int64_t count, DType dtype, ReduceOp op, int root,
                      Timeout timeout = {});
  // send: count elements; recv: size()*count, block r from rank r. send may be recv's own block.
  absl::Status AllGather(const void* send, void* recv, int64_t count, DType dtype,
                         Timeout timeout = {});
  // send: count elements; recv (root only, may be null elsewhere): size()*count, block r from r.
  absl::Status Gather(const void* send, void* recv, int64_t count, DType dtype, int root,
                      Timeout timeout = {});
  // send (root only, may be null elsewhere): size()*count, block r goes to r; recv: count.
  absl::Status Scatter(const void* send, void* recv, int64_t count, DType dtype, int root,
                       Timeout timeout = {});
  // send: size()*count; recv: count, op over block rank() of every rank's send.
  absl::Status ReduceScatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                             Timeout timeout = {});
  // send: size()*count, block r goes to rank r; recv: size()*count, block r from rank r.
  absl::Status AllToAll(const void* send, void* recv, int64_t count, DType dtype,
                        Timeout timeout = {});
  // data: count elements sent to `peer`, which must Recv with the same tag and count.
  absl::Status Send(const void* data, int64_t count, DType dtype, int peer, uint32_t tag,
                    Timeout timeout = {});
  // data: count elements received from `peer`'s Send with the same tag (NCCL: in issue order).
  absl::Status Recv(void* data, int64_t count, DType dtype, int peer, uint32_t tag,
                    Timeout timeout = {});
  // Returns once every rank has entered the barrier.
  absl::Status Barrier(Timeout timeout = {});

 protected:
  Communicator(int rank, int size, absl::Duration timeout);

  // Implementations. Arguments are checked, count > 0, the communicator is not broken, and
  // `deadline` is when the whole operation must have finished. A failure marks the communicator
  // broken, except INVALID_ARGUMENT (for checks a backend makes before communicating).
  virtual absl::Status DoBroadcast(void* data, int64_t count, DType dtype, int root,
                                   absl::Time deadline) = 0;
  virtual absl::Status DoAllReduce(void* data, int64_t count, DType dtype, ReduceOp op,
                                   absl::Time deadline) = 0;
  virtual absl::Status DoReduce(void* data, int64_t count, DType dtype, ReduceOp op, int root,
                                absl::Time deadline) = 0;
  virtual absl::Status DoAllGather(const void* send, void* recv, int64_t count, DType dtype,
                                   absl::Time deadline) = 0;
  virtual absl::Status DoGather(const void* send, void* recv, int64_t count, DType dtype, int root,
                                absl::Time deadline) = 0;
  virtual absl::Status DoScatter(const void* send, void* recv, int64_t count, DType dtype, int root,
                                 absl::Time deadline) = 0;
  virtual absl::Status DoReduceScatter(const void* send, void* recv, int64_t count, DType dtype,
                                       ReduceOp op, absl::Time deadline) = 0;
  virtual absl::Status DoAllToAll(const void* send, void* recv, int64_t count, DType dtype,
                                  absl::Time deadline) = 0;
  virtual absl::Status DoSend(const void* data, int64_t count, DType dtype, int peer, uint32_t tag,
                              absl::Time deadline) = 0;
  virtual absl::Status DoRecv(void* data, int64_t count, DType dtype, int peer, uint32_t tag,
                              absl::Time deadline) = 0;
  virtual absl::Status DoBarrier(absl::Time deadline) = 0;

  // Marks the communicator broken by `cause` (the first cause is kept) and returns `cause`.
  absl::Status MarkBroken(absl::Status cause);
  // Closes this rank's connections to its peers; called once, when a call first breaks the
  // communicator, on that call's thread. The default (a backend that cannot) does nothing.
  virtual void Disconnect() {}

 private:
  // Checks `timeout` and the communicator's state; on success sets *deadline.
  absl::Status Begin(absl::string_view op, const Timeout& timeout, absl::Time* deadline) const;
  // Passes an implementation's result through, marking the communicator broken on failure.
  absl::Status Finish(absl::string_view op, absl::Status status);
  // Finish(op, run()), counting and timing the call into the process's metrics
  // (tessera_collectives_total, tessera_collective_bytes_total, tessera_collective_seconds) with
  // `bytes` the bytes of the count elements the call names.
  absl::Status Timed(absl::string_view op, int64_t bytes, absl::FunctionRef<absl::Status()> run);

  const int rank_;
  const int size_;
  mutable absl::Mutex mu_;
  absl::Duration timeout_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::comm

#endif  // TESSERA_WORKER_COMM_COMMUNICATOR_H_
