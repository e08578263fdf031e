#ifndef TESSERA_SERVER_CLUSTER_DISPATCHER_H_
#define TESSERA_SERVER_CLUSTER_DISPATCHER_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/cluster/sequence_lease.h"
#include "server/cluster/worker_registry.h"
#include "tessera/v1/worker.pb.h"

namespace tessera {

class WorkerStream;

// Sends one command to many workers at once: the same payload, each with its own sequence and
// incarnation, so the cost per op stays flat as workers grow. Commands wait in a queue per
// worker, which goes as one batch on the worker's command stream (WorkerStream, long-lived, with no
// call set-up per batch) whenever the worker has none in flight: an idle worker gets a command at
// once, a busy one everything that queued up meanwhile in one batch, sent as soon as its previous
// batch is answered. A stream that ends fails its batch in flight as a failed call would (never
// sent again: its unanswered sequences are released) and the next batch opens a new one.
// Thread-safe.
class Dispatcher final : public SequenceReleaser {
 public:
  Dispatcher(WorkerRegistry* registry, std::string secret);
  ~Dispatcher();

  // Runs `command` on every worker of `worker_ids` (in that order) and returns their replies in the
  // same order. Each command has deadline `timeout`. On failure returns the most telling error,
  // naming the worker: a worker that is gone (UNAVAILABLE, its id and address, whatever its peers
  // reported; a peer's I/O error makes the dispatcher check that all are there), then a worker's
  // own refusal (RESOURCE_EXHAUSTED, INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, others), and
  // a timeout last, since a peer that timed out usually waited on the one that failed.
  absl::StatusOr<std::vector<v1::CommandReply>> Run(const std::vector<int64_t>& worker_ids,
                                                    const v1::Command& command,
                                                    absl::Duration timeout);

  // Called once when every worker of a Post replied: the combined status (as Run's) and the
  // replies in worker order.
  using Done = std::function<void(absl::Status, std::vector<v1::CommandReply>)>;

  // Queues `command` for `workers` as Run does but returns at once; `done` runs on a gRPC thread
  // when every worker replied. Blocks while kMaxInFlight posts are outstanding (back-pressure), so
  // a client that pipelines ops cannot queue unbounded work; a Post from a `done` never blocks. The
  // calls start on the sender thread, so the caller can answer its own client first; with
  // `send_here`, on the calling thread (Run, which waits anyway, saves a thread hand-off).
  void Post(const std::vector<WorkerHandle>& workers, const v1::Command& command,
            absl::Duration timeout, Done done, bool send_here = false);
  // Post with a command of its own for each worker (`commands[i]` to `workers[i]`, each given its
  // sequence and incarnation): one step of SPMD work whose ranks each get their own data, ordered
  // on every worker as one post.
  void PostEach(const std::vector<WorkerHandle>& workers, std::vector<v1::Command> commands,
                absl::Duration timeout, Done done, bool send_here = false);
  static constexpr int kMaxInFlight = 256;

  // While one lives, the sender thread is not woken for new posts, so that the posts of one client
  // message (a StreamCalls of many ops) leave in one batch per worker when it ends. Posts still go
  // at once from a batch's completion, and the sender goes anyway once kMaxInFlight posts wait.
  class HoldSends {
   public:
    explicit HoldSends(Dispatcher& dispatcher);
    ~HoldSends();
    HoldSends(const HoldSends&) = delete;
    HoldSends& operator=(const HoldSends&) = delete;

   private:
    Dispatcher& dispatcher_;
  };

  // Reserves the next command sequence on each of `workers`, in that order, all under the
  // registry's one lock, so that any two calls are in the same relative order on every worker
  // they share.
  //
  // The ordering rule that makes batched commands and direct uploads and downloads agree: a worker
  // runs everything strictly in sequence order, whichever path it came by, and never skips a
  // number (CommandSequencer); so a number, once reserved, goes to its worker without waiting for
  // anything ordered after it, and is accounted for. Post takes its numbers and queues them in the
  // workers' outboxes under one lock, so each outbox is in sequence order and a batch never waits
  // for a number queued behind it; a shard stream sends its first message, which carries its
  // number, as it opens, and a stream that holds its turn while it is fed (an upload fed by
  // downloads) is opened after the streams that feed it; and a number not used is released to its
  // worker (SequenceLease). A command waiting for its turn thus waits only for numbers on their
  // way.
  std::vector<SequenceLease> Reserve(const std::vector<WorkerHandle>& workers);
  // Tells `worker` that `sequences`, reserved on it, will not be used (asynchronously, waiting for
  // the worker to be reachable up to kReleaseTimeout; a release that fails is logged, and the
  // worker's order then stalls until it counts itself broken). `done`, if given, runs with the
  // call's outcome and the worker's reply: the numbers it kept because admitted direct uploads
  // hold them, and those whose admitted uploads failed.
  using Released = std::function<void(absl::Status, const v1::ReleaseReply& reply)>;
  void Release(const WorkerHandle& worker, std::vector<int64_t> sequences, Released done = nullptr);
  // Release of one number, for a SequenceLease that ends unused.
  void ReleaseUnused(const WorkerHandle& worker, int64_t sequence) override {
    Release(worker, {sequence});
  }
  static constexpr absl::Duration kReleaseTimeout = absl::Seconds(30);

  // Called with every worker's reply that reports a broken communicator, as it arrives (before
  // the other workers of its post have replied), on a gRPC thread; it may Post without waiting
  // for room. Set once, before the first Post.
  using BrokenObserver = std::function<void(const WorkerHandle&, const v1::BrokenCommunicator&)>;
  void ObserveBroken(BrokenObserver observer) { observe_broken_ = std::move(observer); }

  // Calls each of `workers` with an empty batch; those the call cannot reach are marked
  // unreachable in the registry. Returns when all answered or kProbeTimeout passed. Never call it
  // on a gRPC callback thread (a post's `done`): the replies need those threads.
  void Probe(const std::vector<WorkerHandle>& workers) const;
  // Probe without waiting: `then` runs once every probe answered or timed out, on a gRPC callback
  // thread (at once, here, when `workers` is empty).
  void Probe(const std::vector<WorkerHandle>& workers, std::function<void()> then) const;
  static constexpr absl::Duration kProbeTimeout = absl::Seconds(1);

  // Attaches the cluster secret to a call to a worker.
  void Authorize(grpc::ClientContext* context) const;

  WorkerRegistry& registry() { return *registry_; }

  // What waits and what runs, for metrics: posts not yet done, commands queued for a worker and
  // not yet sent, and command batches in flight.
  struct Load {
    int64_t posts_in_flight = 0;
    int64_t commands_queued = 0;
    int64_t batches_in_flight = 0;
  };
  Load CurrentLoad();

 private:
  struct PostState;
  // One worker's part of a post, waiting to be sent.
  struct Queued {
    v1::Command command;
    SequenceLease lease;  // the command's sequence on its worker
    absl::Time deadline;
    std::shared_ptr<PostState> post;
    size_t index = 0;  // the worker's position in the post
  };
  // The commands waiting for one worker, whether a batch of its is in flight, and its command
  // stream (opened on `stream_stub`, the channel of the registration it was opened for).
  struct Outbox {
    WorkerHandle worker;
    std::deque<Queued> queue;
    bool sending = false;
    std::shared_ptr<WorkerStream> stream;
    std::shared_ptr<v1::Worker::Stub> stream_stub;
  };
  // One batch sent to a worker, until its reply (or failure) is taken.
  struct Call;

  using Batches = std::vector<std::pair<WorkerHandle, std::vector<Queued>>>;

  void SendLoop();
  // Sends every batch: the large ones but the first on the fan-out threads, the rest on this
  // thread, so that the workers of one post get large commands at the same time rather than one
  // serialized and written after another (a module forward's 256 KiB input took ~0.3 ms a worker).
  void SendAll(Batches batches);
  void FanOutLoop();
  // Takes the queue of every worker with no batch in flight, marking them in flight.
  Batches TakeReady() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `batch` to `worker` as one batch on its command stream (opening one if it has none).
  void Send(WorkerHandle worker, std::vector<Queued> batch);
  // The stream the next batch to `worker` goes on: its open one, or a new one.
  std::shared_ptr<WorkerStream> StreamTo(const WorkerHandle& worker);
  // Takes a batch's outcome: `s` is the stream's status when it ended before the reply.
  void Replied(const std::shared_ptr<Call>& call, const grpc::Status& s);
  // Records one worker's outcome of a post; the last one runs the post's `done` (after probing
  // the workers, without blocking, when Combine asks for it).
  void Complete(const std::shared_ptr<PostState>& post, size_t index, absl::Status status,
                v1::CommandReply reply);
  // Runs the post's `done` with `combined`.
  void Finish(const std::shared_ptr<PostState>& post, absl::Status combined);
  // The most telling error among the outcomes, naming the worker: a dead one alone, whatever its
  // peers reported. Sets *probe when it is a survivor's I/O error with no worker known to be gone:
  // the workers are then probed, and a gone one named instead.
  absl::Status Combine(const std::vector<WorkerHandle>& workers,
                       const std::vector<absl::Status>& statuses, bool* probe) const;
  // Every kWatchPeriod (sooner for a deadline due), ends the streams with a batch in flight past
  // its deadline (it fails DEADLINE_EXCEEDED) or to a worker the registry no longer counts alive
  // (a paused or partitioned worker), so that their commands fail once the worker is declared dead
  // rather than at their deadline.
  void WatchLoop();

  WorkerRegistry* registry_;
  const std::string secret_;
  BrokenObserver observe_broken_;
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // posts not yet done
  std::map<int64_t, Outbox> outboxes_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int holds_ ABSL_GUARDED_BY(mu_) = 0;  // HoldSends alive
  std::thread sender_;
  // Batches waiting for a fan-out thread.
  absl::Mutex fanout_mu_;
  std::deque<std::pair<WorkerHandle, std::vector<Queued>>> fanout_ ABSL_GUARDED_BY(fanout_mu_);
  bool fanout_stopping_ ABSL_GUARDED_BY(fanout_mu_) = false;
  std::vector<std::thread> fanout_threads_;
  absl::Mutex watch_mu_;
  bool watch_stopping_ ABSL_GUARDED_BY(watch_mu_) = false;
  std::thread watcher_;
  // Command streams not yet ended (the destructor waits for them), and whether new ones may open.
  absl::Mutex streams_mu_;
  int open_streams_ ABSL_GUARDED_BY(streams_mu_) = 0;
  bool streams_closing_ ABSL_GUARDED_BY(streams_mu_) = false;
  static constexpr absl::Duration kWatchPeriod = absl::Milliseconds(200);
  static constexpr int kFanOutThreads = 3;
  static constexpr size_t kFanOutBytes = 64 << 10;  // a batch at least this large is fanned out
};

}  // namespace tessera

#endif  // TESSERA_SERVER_CLUSTER_DISPATCHER_H_
