#ifndef TESSERA_WORKER_COMM_GLOO_COMMUNICATOR_H_
#define TESSERA_WORKER_COMM_GLOO_COMMUNICATOR_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace tessera::comm {

class TimedGlooContext;

// Where a Gloo rank listens and how long it waits.
struct GlooCommunicatorOptions {
  // Host name or IP address this rank binds and advertises to its peers (must resolve).
  std::string hostname = "127.0.0.1";
  // Network interface to bind instead (for example "eth0"); used when not empty.
  std::string interface;
  // Bound on the rendezvous and connection, and the default timeout of every call.
  absl::Duration timeout = absl::Seconds(30);
};

// Communicator for cpu meshes: Gloo's collectives over TCP on host buffers. Gloo reduces with
// core's ReduceInto as its reduction callback, so every dtype (bfloat16 and bool included) and op
// has core's semantics; avg is a sum finished with DivideInPlace. ReduceScatter is an all-to-all
// and a local reduction in rank order (gloo_communicator.cc has the measurements); every other op
// is Gloo's own. Keeps its largest scratch buffer (at most 64 MiB) between calls.
class GlooCommunicator final : public Communicator {
 public:
  // Connects rank `rank` of `size` to its peers through `store`, under keys prefixed by `prefix`
  // (one prefix per group and incarnation, so groups can share a store). Blocks until every rank
  // has joined: DEADLINE_EXCEEDED after options.timeout, UNAVAILABLE if a peer cannot be reached,
  // INVALID_ARGUMENT for a bad rank, size, timeout, host name or interface. `store` is only used
  // during this call. The first call in a process ignores SIGPIPE if it still has its default
  // action, so that a write to a closed peer is an error rather than the end of the process.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(
      gloo::rendezvous::Store& store, absl::string_view prefix, int rank, int size,
      const GlooCommunicatorOptions& options);

  ~GlooCommunicator() override;

  absl::string_view backend() const override { return "gloo"; }

 private:
  GlooCommunicator(std::shared_ptr<TimedGlooContext> context, absl::Duration timeout);

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
  // Closes every pair's socket: a peer waiting on this rank sees "connection closed" at once.
  void Disconnect() override;

  // The tag of the next collective: every rank issues collectives in the same order, so the
  // counters agree and a stray message can never match a later collective.
  uint32_t NextTag() { return next_tag_++; }

  // Bounds every wait of the next operation by `deadline`, including the waits inside Gloo's
  // algorithms that take no timeout of their own; returns the remaining time for Gloo's options.
  std::chrono::milliseconds BoundWaits(absl::Time deadline);

  // A buffer of `bytes` for one operation: this communicator's kept scratch, or for very large
  // requests a buffer owned by `oversized`.
  std::byte* Scratch(int64_t bytes, std::unique_ptr<std::byte[]>& oversized);

  std::shared_ptr<TimedGlooContext> context_;
  uint32_t next_tag_ = 0;
  std::unique_ptr<std::byte[]> scratch_;  // kept between calls, up to kKeptScratchBytes
  int64_t scratch_bytes_ = 0;
};

}  // namespace tessera::comm

#endif  // TESSERA_WORKER_COMM_GLOO_COMMUNICATOR_H_
