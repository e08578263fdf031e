#include "server/cluster/dispatcher.h"

#include <algorithm>
#include <atomic>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "proto/command_label.h"
#include "proto/grpc_status.h"
#include "server/cluster/worker_stream.h"
#include "spdlog/spdlog.h"
#include "transfer/tensor_stream.h"

namespace tessera {
namespace {

// Set while this thread runs a post's `done`: a Post from there must not wait for room, since
// room is made by completions like the one this thread is in the middle of.
thread_local bool completing = false;

std::vector<int64_t> Ids(const std::vector<WorkerHandle>& workers) {
  std::vector<int64_t> ids;
  for (const WorkerHandle& w : workers) ids.push_back(w.id);
  return ids;
}

// Lower is more telling about why a distributed call failed.
int Severity(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
      return 0;
    case absl::StatusCode::kResourceExhausted:
      return 1;
    case absl::StatusCode::kInvalidArgument:
      return 2;
    case absl::StatusCode::kNotFound:
      return 3;
    case absl::StatusCode::kFailedPrecondition:
      return 4;
    case absl::StatusCode::kDeadlineExceeded:
      return 6;
    case absl::StatusCode::kAborted:  // a rank stopped by a peer's failure (ProgramRunner::Run)
      return 7;
    default:
      return 5;
  }
}

// One line per command that failed on a worker.
void LogFailure(int64_t worker_id, const v1::Command& command, const absl::Status& status) {
  spdlog::error("command failed worker={} {} code={}: {}", worker_id, CommandFields(command),
                absl::StatusCodeToString(status.code()), std::string(status.message()));
}

}  // namespace

// One Post: every worker's outcome, and how many are still outstanding.
struct Dispatcher::PostState {
  std::vector<WorkerHandle> workers;
  std::vector<absl::Status> statuses;
  std::vector<v1::CommandReply> replies;
  std::atomic<int> pending{0};
  Done done;
};

Dispatcher::Dispatcher(WorkerRegistry* registry, std::string secret)
    : registry_(registry), secret_(std::move(secret)) {
  sender_ = std::thread([this] { SendLoop(); });
  for (int i = 0; i < kFanOutThreads; ++i) fanout_threads_.emplace_back([this] { FanOutLoop(); });
  watcher_ = std::thread([this] { WatchLoop(); });
}

// One batch on a worker's stream: what was sent, what came back, and the commands' posts.
struct Dispatcher::Call {
  WorkerHandle worker;
  std::shared_ptr<v1::CommandBatch> request;  // kept for the failure log
  v1::CommandBatchReply reply;
  std::vector<Queued> items;
};

Dispatcher::~Dispatcher() {
  {
    absl::MutexLock lock(&watch_mu_);
    watch_stopping_ = true;
  }
  watcher_.join();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  sender_.join();
  {
    absl::MutexLock lock(&fanout_mu_);
    fanout_stopping_ = true;
  }
  for (std::thread& t : fanout_threads_) t.join();
  // Every stream ends (a batch in flight fails) before the members its callbacks use go.
  {
    absl::MutexLock lock(&streams_mu_);
    streams_closing_ = true;
  }
  std::vector<std::shared_ptr<WorkerStream>> streams;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, box] : outboxes_) {
      if (box.stream != nullptr) streams.push_back(std::move(box.stream));
    }
  }
  for (const std::shared_ptr<WorkerStream>& stream : streams) {
    stream->Cancel(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is stopping"));
  }
  absl::MutexLock lock(&streams_mu_);
  streams_mu_.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &open_streams_));
}

void Dispatcher::WatchLoop() {
  absl::Duration wait = kWatchPeriod;
  while (true) {
    {
      absl::MutexLock lock(&watch_mu_);
      if (watch_mu_.AwaitWithTimeout(absl::Condition(&watch_stopping_), wait)) return;
    }
    std::vector<std::pair<int64_t, std::shared_ptr<WorkerStream>>> streams;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [id, box] : outboxes_) {
        if (box.sending && box.stream != nullptr) streams.emplace_back(id, box.stream);
      }
    }
    // Outside the lock: a cancelled stream's callback may run inline and takes it.
    const absl::Time now = absl::Now();
    absl::Time next = now + kWatchPeriod;
    for (const auto& [id, stream] : streams) {
      const std::optional<absl::Time> deadline = stream->in_flight_deadline();
      if (!deadline) continue;
      if (*deadline <= now) {
        stream->Cancel(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded"));
      } else if (!registry_->Get(id).ok()) {
        // Declared dead: the batch's failure names the worker (Replied asks the registry).
        stream->Cancel(grpc::Status(grpc::StatusCode::CANCELLED, "the worker was declared dead"));
      } else {
        next = std::min(next, *deadline);
      }
    }
    wait = std::max(next - absl::Now(), absl::Milliseconds(1));
  }
}

void Dispatcher::Authorize(grpc::ClientContext* context) const {
  if (!secret_.empty()) context->AddMetadata(kSecretMetadataKey, secret_);
}

absl::StatusOr<std::vector<v1::CommandReply>> Dispatcher::Run(
    const std::vector<int64_t>& worker_ids, const v1::Command& command, absl::Duration timeout) {
  std::vector<WorkerHandle> workers;
  workers.reserve(worker_ids.size());
  for (int64_t id : worker_ids) {
    absl::StatusOr<WorkerHandle> h = registry_->Get(id);
    if (!h.ok()) return h.status();
    workers.push_back(*std::move(h));
  }
  absl::Notification finished;
  absl::Status status;
  std::vector<v1::CommandReply> replies;
  Post(
      workers, command, timeout,
      [&](absl::Status s, std::vector<v1::CommandReply> r) {
        status = std::move(s);
        replies = std::move(r);
        finished.Notify();
      },
      /*send_here=*/true);
  finished.WaitForNotification();
  if (!status.ok()) return status;
  return replies;
}

void Dispatcher::Post(const std::vector<WorkerHandle>& workers, const v1::Command& command,
                      absl::Duration timeout, Done done, bool send_here) {
  PostEach(workers, std::vector<v1::Command>(workers.size(), command), timeout, std::move(done),
           send_here);
}

void Dispatcher::PostEach(const std::vector<WorkerHandle>& workers,
                          std::vector<v1::Command> commands, absl::Duration timeout, Done done,
                          bool send_here) {
  if (commands.size() != workers.size()) {
    done(absl::InternalError(
             absl::StrCat(commands.size(), " commands for ", workers.size(), " workers")),
         {});
    return;
  }
  if (workers.empty()) {
    done(absl::OkStatus(), {});
    return;
  }
  auto post = std::make_shared<PostState>();
  post->workers = workers;
  post->statuses.resize(workers.size());
  post->replies.resize(workers.size());
  post->pending = static_cast<int>(workers.size());
  post->done = std::move(done);
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  if (!completing) {
    mu_.Await(absl::Condition(
        +[](int* n) { return *n < kMaxInFlight; }, &in_flight_));
  }
  ++in_flight_;
  // Sequences are taken and queued under one lock, so each worker's queue is in sequence order (the
  // ordering rule at Reserve: a batch waiting on a later sequence while an earlier one sits behind
  // it would stall).
  std::vector<SequenceLease> leases = Reserve(workers);
  for (size_t i = 0; i < workers.size(); ++i) {
    Queued q{std::move(commands[i]), std::move(leases[i]), deadline, post, i};
    q.command.set_sequence(q.lease.sequence());
    q.command.set_incarnation(workers[i].incarnation);
    Outbox& box = outboxes_[workers[i].id];
    box.worker = workers[i];
    box.queue.push_back(std::move(q));
  }
  if (send_here) {
    Batches batches = TakeReady();
    mu_.Unlock();
    SendAll(std::move(batches));
    mu_.Lock();
  }
}

Dispatcher::Load Dispatcher::CurrentLoad() {
  Load load;
  absl::MutexLock lock(&mu_);
  load.posts_in_flight = in_flight_;
  for (const auto& [id, box] : outboxes_) {
    load.commands_queued += static_cast<int64_t>(box.queue.size());
    load.batches_in_flight += box.sending ? 1 : 0;
  }
  return load;
}

std::vector<SequenceLease> Dispatcher::Reserve(const std::vector<WorkerHandle>& workers) {
  const std::vector<int64_t> sequences = registry_->NextSequences(workers);
  std::vector<SequenceLease> leases;
  leases.reserve(workers.size());
  for (size_t i = 0; i < workers.size(); ++i) leases.emplace_back(this, workers[i], sequences[i]);
  return leases;
}

void Dispatcher::Release(const WorkerHandle& worker, std::vector<int64_t> sequences,
                         Released done) {
  if (sequences.empty() || worker.stub == nullptr) {
    if (done) done(absl::OkStatus(), v1::ReleaseReply());
    return;
  }
  struct Call {
    grpc::ClientContext context;
    v1::ReleaseRequest request;
    v1::ReleaseReply reply;
  };
  auto call = std::make_shared<Call>();
  for (int64_t s : sequences) call->request.add_sequences(s);
  call->request.set_incarnation(worker.incarnation);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + kReleaseTimeout));
  call->context.set_wait_for_ready(true);  // a worker briefly unreachable still gets it
  Authorize(&call->context);
  worker.stub->async()->Release(
      &call->context, &call->request, &call->reply,
      [call, id = worker.id, address = worker.address, done = std::move(done)](grpc::Status s) {
        if (done) done(FromGrpcStatus(s), call->reply);
        // A stale incarnation has no use for the numbers; any other failure leaves a gap.
        if (s.ok() || s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) return;
        spdlog::error("{} (releasing command sequences {}; its later commands wait for them)",
                      WorkerError(id, address, s).ToString(), call->request.ShortDebugString());
      });
}

Dispatcher::Batches Dispatcher::TakeReady() {
  Batches batches;
  for (auto& [id, box] : outboxes_) {
    if (box.sending || box.queue.empty()) continue;
    box.sending = true;
    batches.emplace_back(box.worker, std::vector<Queued>(std::make_move_iterator(box.queue.begin()),
                                                         std::make_move_iterator(box.queue.end())));
    box.queue.clear();
  }
  return batches;
}

Dispatcher::HoldSends::HoldSends(Dispatcher& dispatcher) : dispatcher_(dispatcher) {
  absl::MutexLock lock(&dispatcher_.mu_);
  ++dispatcher_.holds_;
}

Dispatcher::HoldSends::~HoldSends() {
  absl::MutexLock lock(&dispatcher_.mu_);
  --dispatcher_.holds_;
}

void Dispatcher::SendLoop() {
  auto work_or_stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stopping_) return true;
    // Held: what queues goes when the hold ends, or once Post must wait for room.
    if (holds_ > 0 && in_flight_ < kMaxInFlight) return false;
    for (const auto& [id, box] : outboxes_) {
      if (!box.sending && !box.queue.empty()) return true;
    }
    return false;
  };
  while (true) {
    Batches batches;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&work_or_stop));
      if (stopping_) return;
      batches = TakeReady();
    }
    SendAll(std::move(batches));
  }
}

void Dispatcher::SendAll(Batches batches) {
  // Small batches (an op's commands) go from here one after another: a hand-off to another thread
  // costs more than writing them.
  const auto large = [](const std::vector<Queued>& batch) {
    size_t bytes = 0;
    for (const Queued& q : batch) bytes += q.command.ByteSizeLong();
    return bytes >= kFanOutBytes;
  };
  for (size_t i = 1; i < batches.size(); ++i) {
    if (!large(batches[i].second)) {
      Send(std::move(batches[i].first), std::move(batches[i].second));
      continue;
    }
    absl::MutexLock lock(&fanout_mu_);
    fanout_.push_back(std::move(batches[i]));
  }
  if (!batches.empty()) Send(std::move(batches[0].first), std::move(batches[0].second));
}

void Dispatcher::FanOutLoop() {
  auto work_or_stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(fanout_mu_) {
    return fanout_stopping_ || !fanout_.empty();
  };
  while (true) {
    std::pair<WorkerHandle, std::vector<Queued>> next;
    {
      absl::MutexLock lock(&fanout_mu_);
      fanout_mu_.Await(absl::Condition(&work_or_stop));
      // Stops only once drained: every queued command gets its reply or its failure.
      if (fanout_.empty()) return;
      next = std::move(fanout_.front());
      fanout_.pop_front();
    }
    Send(std::move(next.first), std::move(next.second));
  }
}

std::shared_ptr<WorkerStream> Dispatcher::StreamTo(const WorkerHandle& worker) {
  std::shared_ptr<WorkerStream> stale;
  {
    absl::MutexLock lock(&mu_);
    Outbox& box = outboxes_[worker.id];
    // A stream stays with the registration whose channel it was opened on; the commands on it
    // carry their own incarnation, which the worker checks.
    if (box.stream != nullptr && !box.stream->ended() && box.stream_stub == worker.stub) {
      return box.stream;
    }
    stale = std::move(box.stream);
  }
  if (stale != nullptr) {
    stale->Cancel(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the worker registered again"));
  }
  {
    absl::MutexLock lock(&streams_mu_);
    if (streams_closing_) return nullptr;
    ++open_streams_;
  }
  std::shared_ptr<WorkerStream> stream = WorkerStream::Open(
      *worker.stub, [this](grpc::ClientContext* context) { Authorize(context); },
      [this] {
        absl::MutexLock lock(&streams_mu_);
        --open_streams_;
      });
  absl::MutexLock lock(&mu_);
  Outbox& box = outboxes_[worker.id];
  box.stream = stream;
  box.stream_stub = worker.stub;
  return stream;
}

void Dispatcher::Send(WorkerHandle worker, std::vector<Queued> batch) {
  auto call = std::make_shared<Call>();
  call->worker = worker;
  call->request = std::make_shared<v1::CommandBatch>();
  absl::Time deadline = absl::InfinitePast();
  for (Queued& q : batch) {
    // Moved, not copied: a command may carry a tensor (a module run's input); the request keeps it
    // for the failure log.
    *call->request->add_commands() = std::move(q.command);
    deadline = std::max(deadline, q.deadline);
  }
  call->items = std::move(batch);
  call->request->set_timeout_micros(
      std::max<int64_t>(0, absl::ToInt64Microseconds(deadline - absl::Now())));
  // A stream that ended since StreamTo looked is replaced; a new one always takes the batch.
  while (true) {
    std::shared_ptr<WorkerStream> stream = StreamTo(worker);
    if (stream == nullptr) {
      Replied(call, grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is stopping"));
      return;
    }
    if (stream->Send(call->request, deadline,
                     [this, call](grpc::Status s, v1::CommandBatchReply reply) {
                       call->reply = std::move(reply);
                       Replied(call, s);
                     })) {
      return;
    }
  }
}

void Dispatcher::Replied(const std::shared_ptr<Call>& call, const grpc::Status& s) {
  const WorkerHandle& worker = call->worker;
  const int64_t id = worker.id;
  // Cancelled by WatchLoop: the worker was declared dead (missed its heartbeats).
  absl::Status gone;
  if (s.error_code() == grpc::StatusCode::CANCELLED) {
    if (absl::StatusOr<WorkerHandle> now = registry_->Get(id); !now.ok()) gone = now.status();
  }
  // What queued up for this worker meanwhile goes from here, without waking the sender.
  std::vector<Queued> next;
  WorkerHandle next_worker;
  {
    absl::MutexLock lock(&mu_);
    Outbox& box = outboxes_[id];
    if (box.queue.empty()) {
      box.sending = false;
    } else {
      next_worker = box.worker;
      next.assign(std::make_move_iterator(box.queue.begin()),
                  std::make_move_iterator(box.queue.end()));
      box.queue.clear();
    }
  }
  if (!next.empty()) Send(std::move(next_worker), std::move(next));
  // The stream could not reach the worker (refused, reset): it is gone, and its peers' failures in
  // the same posts follow from that.
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    registry_->MarkUnreachable(id, worker.incarnation, s.error_message());
  }
  // A command the worker admitted has spent its sequence (one it refused for waiting past its
  // deadline counts as released there); one it refused before its turn, and the rest of a failed
  // batch, which may never have reached it, are released in one call per incarnation, each under
  // its own (the batch went with the handle of the last post queued, which may be of another
  // incarnation). A batch is never sent again.
  std::map<int64_t, std::pair<WorkerHandle, std::vector<int64_t>>> unused;
  for (size_t i = 0; i < call->items.size(); ++i) {
    SequenceLease& lease = call->items[i].lease;
    if (s.ok() && i < static_cast<size_t>(call->reply.results_size()) &&
        !call->reply.results(static_cast<int>(i)).not_admitted()) {
      lease.MarkUsed();
    } else if (lease.held()) {
      auto& [handle, sequences] = unused[lease.worker().incarnation];
      handle = lease.worker();
      sequences.push_back(lease.TakeForRelease());
    }
  }
  for (auto& [incarnation, release] : unused) {
    Release(release.first, std::move(release.second));
  }
  for (size_t i = 0; i < call->items.size(); ++i) {
    Queued& q = call->items[i];
    if (!s.ok() || i >= static_cast<size_t>(call->reply.results_size())) {
      absl::Status failure = !gone.ok() ? gone
                             : s.ok()   ? absl::InternalError("batch reply is short")
                                        : FromGrpcStatus(s);
      LogFailure(id, call->request->commands(static_cast<int>(i)), failure);
      Complete(q.post, q.index, std::move(failure), {});
      continue;
    }
    v1::CommandResult& r = *call->reply.mutable_results(static_cast<int>(i));
    if (r.reply().has_broken() && observe_broken_) {
      const bool outer = completing;
      completing = true;  // its Posts must not wait for room, as in a post's `done`
      observe_broken_(worker, r.reply().broken());
      completing = outer;
    }
    absl::Status status(static_cast<absl::StatusCode>(r.code()), r.message());
    if (!status.ok()) LogFailure(id, call->request->commands(static_cast<int>(i)), status);
    Complete(q.post, q.index, std::move(status), std::move(*r.mutable_reply()));
  }
}

void Dispatcher::Complete(const std::shared_ptr<PostState>& post, size_t index, absl::Status status,
                          v1::CommandReply reply) {
  post->statuses[index] = std::move(status);
  post->replies[index] = std::move(reply);
  if (post->pending.fetch_sub(1) != 1) return;
  bool probe = false;
  absl::Status combined = Combine(post->workers, post->statuses, &probe);
  if (!probe) {
    Finish(post, std::move(combined));
    return;
  }
  // This runs on one of gRPC's few callback threads, which the probes' replies need too: it must
  // not wait for them here (once every such thread waited, no reply could arrive).
  Probe(post->workers, [this, post, combined = std::move(combined)]() mutable {
    if (absl::Status gone = registry_->CheckAlive(Ids(post->workers)); !gone.ok()) {
      combined = std::move(gone);
    }
    Finish(post, std::move(combined));
  });
}

void Dispatcher::Finish(const std::shared_ptr<PostState>& post, absl::Status combined) {
  {
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }
  const bool outer = completing;
  completing = true;
  post->done(std::move(combined), std::move(post->replies));
  completing = outer;
}

absl::Status Dispatcher::Combine(const std::vector<WorkerHandle>& workers,
                                 const std::vector<absl::Status>& statuses, bool* probe) const {
  *probe = false;
  absl::Status worst;
  absl::Status cause;  // the worst failure that is not an I/O error
  for (size_t i = 0; i < statuses.size(); ++i) {
    if (statuses[i].ok()) continue;
    absl::Status s(statuses[i].code(),
                   absl::StrCat("worker ", workers[i].id, " at ", workers[i].address, ": ",
                                statuses[i].message()));
    if (worst.ok() || Severity(s.code()) < Severity(worst.code())) worst = s;
    if (s.code() != absl::StatusCode::kUnavailable &&
        (cause.ok() || Severity(s.code()) < Severity(cause.code()))) {
      cause = s;
    }
  }
  if (worst.ok()) return worst;
  // A peer's death surfaces on the survivors as I/O errors (or as missing inputs, when it ended a
  // command before this one): the answer is the worker that is gone, named alone. A survivor's
  // I/O error with no worker known to be gone yet: ask them all whether they are there.
  if (absl::Status gone = registry_->CheckAlive(Ids(workers)); !gone.ok()) return gone;
  *probe = worst.code() == absl::StatusCode::kUnavailable;
  // A rank that failed on its own (bad data, its budget) stops its peers by breaking their
  // collectives: their I/O errors follow from it, and it is the answer whichever came first.
  return cause.ok() ? worst : cause;
}

void Dispatcher::Probe(const std::vector<WorkerHandle>& workers) const {
  absl::Notification probed;
  Probe(workers, [&probed] { probed.Notify(); });
  probed.WaitForNotification();
}

void Dispatcher::Probe(const std::vector<WorkerHandle>& workers, std::function<void()> then) const {
  if (workers.empty()) {
    then();
    return;
  }
  struct Call {
    grpc::ClientContext context;
    v1::CommandBatch request;
    v1::CommandBatchReply reply;
  };
  auto remaining = std::make_shared<std::atomic<size_t>>(workers.size());
  auto last = std::make_shared<std::function<void()>>(std::move(then));
  for (const WorkerHandle& w : workers) {
    auto call = std::make_shared<Call>();
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + kProbeTimeout));
    Authorize(&call->context);
    w.stub->async()->ExecuteBatch(&call->context, &call->request, &call->reply,
                                  [this, call, w, remaining, last](grpc::Status s) {
                                    if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
                                      registry_->MarkUnreachable(w.id, w.incarnation,
                                                                 s.error_message());
                                    }
                                    if (remaining->fetch_sub(1) == 1) (*last)();
                                  });
  }
}

}  // namespace tessera
