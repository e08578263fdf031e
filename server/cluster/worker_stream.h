#ifndef TESSERA_SERVER_CLUSTER_WORKER_STREAM_H_
#define TESSERA_SERVER_CLUSTER_WORKER_STREAM_H_

#include <functional>
#include <memory>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "tessera/v1/worker.grpc.pb.h"

namespace tessera {

// One worker's CommandStream call, long-lived: carries one command batch at a time and takes its
// reply, with no call set-up per batch. A stream that ends (the worker went away, the call was
// cancelled) fails the batch in flight with the status it ended with and takes no more; its owner
// opens a new one for the next batch. A batch is never sent twice. Thread-safe.
class WorkerStream final : public grpc::ClientBidiReactor<v1::CommandBatch, v1::CommandBatchReply> {
 public:
  // What became of a batch: its reply, or the status the stream ended with.
  using Replied = std::function<void(grpc::Status, v1::CommandBatchReply)>;

  // Opens the stream on `stub`; `authorize` adds the call's metadata (the cluster secret).
  // `closed` runs once the stream has ended and failed its batch, if any (on a gRPC thread).
  static std::shared_ptr<WorkerStream> Open(
      v1::Worker::Stub& stub, const std::function<void(grpc::ClientContext*)>& authorize,
      std::function<void()> closed);

  // Sends `batch` (its timeout_micros set to the time left until `deadline`, its reply's deadline
  // here, which the owner enforces with Cancel); `replied` runs once, on a gRPC thread, never
  // here. At most one batch is in flight: call it again only once `replied` ran. Returns false,
  // and drops `replied`, when the stream has already ended (never on a stream's first Send: it
  // cannot end before that).
  bool Send(std::shared_ptr<const v1::CommandBatch> batch, absl::Time deadline, Replied replied);
  // Ends the stream, failing its batch in flight with `why` (the first reason given wins).
  void Cancel(grpc::Status why);

  // Whether the stream has ended or is ending: the next batch needs a new one.
  bool ended() const;
  // The deadline of the batch in flight; nullopt when none is.
  std::optional<absl::Time> in_flight_deadline() const;

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  explicit WorkerStream(std::function<void()> closed) : closed_(std::move(closed)) {}
  // Starts writing the batch waiting, if any and no write is under way.
  void WriteNext() ABSL_LOCKS_EXCLUDED(mu_);

  grpc::ClientContext context_;
  const std::function<void()> closed_;
  mutable absl::Mutex mu_;
  std::shared_ptr<WorkerStream> self_ ABSL_GUARDED_BY(mu_);  // alive until OnDone
  // The batch being written, and one to write once it is (its reply came before the write's end).
  std::shared_ptr<const v1::CommandBatch> writing_batch_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const v1::CommandBatch> waiting_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // The read under way: written by gRPC, taken by OnReadDone under mu_ (see there).
  v1::CommandBatchReply reply_;
  Replied replied_ ABSL_GUARDED_BY(mu_);  // the batch in flight's, until it is answered
  absl::Time deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool ending_ ABSL_GUARDED_BY(mu_) = false;              // cancelled or ended
  bool done_ ABSL_GUARDED_BY(mu_) = false;                // OnDone ran
  bool held_ ABSL_GUARDED_BY(mu_) = true;                 // OnDone is held off until the first Send
  std::optional<grpc::Status> why_ ABSL_GUARDED_BY(mu_);  // given by Cancel
};

}  // namespace tessera

#endif  // TESSERA_SERVER_CLUSTER_WORKER_STREAM_H_
