#ifndef TESSERA_CLIENT_OP_STREAM_H_
#define TESSERA_CLIENT_OP_STREAM_H_

// A session's ordered op stream (DTensorService.OpStream): ops and frees go out in order without
// waiting for their answers, so a client issues them as fast as it can build them; each call's
// outcome arrives later. A writer thread sends what queued up meanwhile as one message, which the
// coordinator answers with one message of results; at most kMaxUnanswered calls are outstanding
// (Send waits for room). Internal to the client library.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/sync_stream.h"
#include "tessera/v1/dtensor.grpc.pb.h"

namespace tessera::client::internal {

// The outcome of one call on the stream, known once its result arrives.
class StreamOutcome {
 public:
  explicit StreamOutcome(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }
  bool known() const { return known_.HasBeenNotified(); }
  // The outcome; only once known().
  const absl::Status& status() const { return status_; }
  // Records the outcome (once).
  void Set(absl::Status status);
  // Waits until known, up to `deadline`; false if it is not known by then.
  bool WaitUntil(absl::Time deadline) const;

 private:
  const uint64_t id_;
  absl::Status status_;
  absl::Notification known_;
};

class OpStream {
 public:
  // Sets the client id (and a deadline) on a call's context.
  using Prepare = std::function<void(grpc::ClientContext*, absl::Duration)>;
  // How long one gRPC stream lives before the next call opens another (after the first drained).
  static constexpr absl::Duration kLifetime = absl::Hours(1);
  // A stream with nothing to send or await for this long is closed by the client (the next call
  // opens another), before the coordinator's --session_stream_idle_timeout (10 min by default)
  // cuts it: a stream the client closes itself never loses a call it sent.
  static constexpr absl::Duration kIdleClose = absl::Minutes(4);

  OpStream(v1::DTensorService::Stub* stub, Prepare prepare);
  // Sends what is queued and closes the stream, waiting up to kCloseTimeout for the answers.
  ~OpStream();
  OpStream(const OpStream&) = delete;
  OpStream& operator=(const OpStream&) = delete;
  static constexpr absl::Duration kCloseTimeout = absl::Seconds(10);
  static constexpr size_t kMaxUnanswered = 4096;

  // Queues `call` (its id is set here) and returns its outcome, to be known later. When the stream
  // broke, the calls it had not answered fail UNAVAILABLE and this opens a new one.
  std::shared_ptr<StreamOutcome> Send(v1::StreamCall call);
  // Waits up to `timeout` for `outcome`: DEADLINE_EXCEEDED if it is still unknown then, else the
  // call's own status.
  absl::Status Await(const std::shared_ptr<StreamOutcome>& outcome, absl::Duration timeout);
  // Waits up to `timeout` until every call sent so far is answered (whatever its outcome), so that
  // a call made next on another RPC sees their effects; DEADLINE_EXCEEDED if one is still unknown.
  absl::Status AwaitSent(absl::Duration timeout);

 private:
  // One gRPC stream with its writer and reader threads.
  struct Channel;

  // Opens a channel when none is open or the open one broke or grew old; `mu_` held.
  void EnsureOpen() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends `channel`: sends the rest, half-closes, waits for the answers (up to `timeout`), cancels
  // what is left and joins its threads. `mu_` not held.
  void Close(std::unique_ptr<Channel> channel, absl::Duration timeout);
  void WriteLoop(Channel* channel);
  void ReadLoop(Channel* channel);
  // Fails every call of `channel` not answered yet.
  void FailUnanswered(Channel* channel, const absl::Status& why);

  v1::DTensorService::Stub* const stub_;
  const Prepare prepare_;
  absl::Mutex mu_;
  std::unique_ptr<Channel> channel_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace tessera::client::internal

#endif  // TESSERA_CLIENT_OP_STREAM_H_
