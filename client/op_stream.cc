#include "client/op_stream.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/grpc_status.h"

namespace tessera::client::internal {

void StreamOutcome::Set(absl::Status status) {
  if (known_.HasBeenNotified()) return;
  status_ = std::move(status);
  known_.Notify();
}

bool StreamOutcome::WaitUntil(absl::Time deadline) const {
  return known_.WaitForNotificationWithDeadline(deadline);
}

// One gRPC stream: the calls waiting to be written, those written and not answered (in order),
// and its writer and reader threads.
struct OpStream::Channel {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::StreamCalls, v1::StreamResults>> stream;
  absl::Time opened;
  absl::Mutex mu;
  std::deque<v1::StreamCall> outbox ABSL_GUARDED_BY(mu);
  std::deque<std::shared_ptr<StreamOutcome>> unanswered ABSL_GUARDED_BY(mu);
  bool closing ABSL_GUARDED_BY(mu) = false;  // no more calls: half-close once the outbox is sent
  bool broken ABSL_GUARDED_BY(mu) = false;   // the stream ended or failed
  absl::Status why_broken ABSL_GUARDED_BY(mu);
  std::thread writer, reader;
};

OpStream::OpStream(v1::DTensorService::Stub* stub, Prepare prepare)
    : stub_(stub), prepare_(std::move(prepare)) {}

OpStream::~OpStream() {
  absl::MutexLock lock(&mu_);
  if (channel_ != nullptr) Close(std::move(channel_), kCloseTimeout);
}

std::shared_ptr<StreamOutcome> OpStream::Send(v1::StreamCall call) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  call.set_id(id);
  auto outcome = std::make_shared<StreamOutcome>(id);
  while (true) {
    EnsureOpen();
    Channel& c = *channel_;
    absl::MutexLock channel_lock(&c.mu);
    // A channel that closed itself for idleness since EnsureOpen looked takes no more calls: the
    // next one takes this call (the writer closes one only with nothing unanswered, so waiting for
    // room below never meets it).
    if (c.closing) continue;
    const auto room = [&c]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
      return c.broken || c.unanswered.size() < kMaxUnanswered;
    };
    c.mu.Await(absl::Condition(&room));
    if (c.broken) {
      outcome->Set(c.why_broken);
      return outcome;
    }
    c.outbox.push_back(std::move(call));
    c.unanswered.push_back(outcome);
    return outcome;
  }
}

absl::Status OpStream::Await(const std::shared_ptr<StreamOutcome>& outcome,
                             absl::Duration timeout) {
  if (!outcome->WaitUntil(absl::Now() + timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("the coordinator did not answer op stream call ", outcome->id(), " within ",
                     absl::FormatDuration(timeout)));
  }
  return outcome->status();
}

absl::Status OpStream::AwaitSent(absl::Duration timeout) {
  std::shared_ptr<StreamOutcome> last;  // answers come in order: the last one comes last
  {
    absl::MutexLock lock(&mu_);
    if (channel_ == nullptr) return absl::OkStatus();
    absl::MutexLock channel_lock(&channel_->mu);
    if (channel_->unanswered.empty()) return absl::OkStatus();
    last = channel_->unanswered.back();
  }
  if (absl::Status s = Await(last, timeout); absl::IsDeadlineExceeded(s) && !last->known()) {
    return s;
  }
  return absl::OkStatus();  // each call's own failure is its caller's to report
}

void OpStream::EnsureOpen() {
  if (channel_ != nullptr) {
    bool broken;
    {
      absl::MutexLock lock(&channel_->mu);
      // Closed for idleness: drained already, it goes as a broken one does.
      broken = channel_->broken || channel_->closing;
    }
    // A stream near its deadline is replaced before it expires; the old one drains first, so the
    // order of calls holds across the two.
    const bool aging = absl::Now() > channel_->opened + kLifetime - absl::Minutes(5);
    if (!broken && !aging) return;
    Close(std::move(channel_), broken ? absl::ZeroDuration() : kCloseTimeout);
  }
  auto c = std::make_unique<Channel>();
  prepare_(&c->context, kLifetime);
  c->opened = absl::Now();
  c->stream = stub_->OpStream(&c->context);
  Channel* raw = c.get();
  c->writer = std::thread([this, raw] { WriteLoop(raw); });
  c->reader = std::thread([this, raw] { ReadLoop(raw); });
  channel_ = std::move(c);
}

void OpStream::Close(std::unique_ptr<Channel> channel, absl::Duration timeout) {
  Channel& c = *channel;
  {
    absl::MutexLock lock(&c.mu);
    c.closing = true;
    const auto answered = [&c]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
      return c.broken || (c.outbox.empty() && c.unanswered.empty());
    };
    c.mu.AwaitWithTimeout(absl::Condition(&answered), timeout);
  }
  c.context.TryCancel();  // a no-op once the stream ended by itself
  c.writer.join();
  c.reader.join();
}

void OpStream::WriteLoop(Channel* c) {
  const auto work = [c]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu) {
    return c->broken || c->closing || !c->outbox.empty();
  };
  while (true) {
    std::deque<v1::StreamCall> batch;
    {
      absl::MutexLock lock(&c->mu);
      // Idle, with nothing sent awaiting an answer either: the client closes the stream itself
      // rather than let the coordinator cut it (Send then opens another).
      while (!c->mu.AwaitWithTimeout(absl::Condition(&work), kIdleClose)) {
        if (c->unanswered.empty()) {
          c->closing = true;
          break;
        }
      }
      if (c->broken) return;
      if (c->outbox.empty()) {  // closing, everything sent
        c->stream->WritesDone();
        return;
      }
      batch.swap(c->outbox);
    }
    // One message: the coordinator answers it with one message of results.
    v1::StreamCalls calls;
    calls.mutable_calls()->Reserve(static_cast<int>(batch.size()));
    for (v1::StreamCall& call : batch) *calls.add_calls() = std::move(call);
    if (!c->stream->Write(calls)) return;  // the stream ended; the reader says why
  }
}

void OpStream::ReadLoop(Channel* c) {
  v1::StreamResults results;
  while (c->stream->Read(&results)) {
    for (const v1::StreamResult& result : results.results()) {
      std::shared_ptr<StreamOutcome> outcome;
      {
        absl::MutexLock lock(&c->mu);
        if (!c->unanswered.empty()) {
          outcome = std::move(c->unanswered.front());
          c->unanswered.pop_front();
        }
      }
      if (outcome == nullptr || outcome->id() != result.id()) {
        if (outcome != nullptr) {
          outcome->Set(absl::InternalError(absl::StrCat("op stream call ", outcome->id(),
                                                        " was answered as call ", result.id())));
        }
        c->context.TryCancel();
        break;
      }
      outcome->Set(result.code() == 0 ? absl::OkStatus()
                                      : absl::Status(static_cast<absl::StatusCode>(result.code()),
                                                     result.message()));
    }
  }
  const grpc::Status finished = c->stream->Finish();
  FailUnanswered(c, absl::UnavailableError(absl::StrCat(
                        "the op stream to the coordinator ended before answering (",
                        finished.ok() ? std::string("closed") : finished.error_message(), ")")));
}

void OpStream::FailUnanswered(Channel* c, const absl::Status& why) {
  std::deque<std::shared_ptr<StreamOutcome>> unanswered;
  {
    absl::MutexLock lock(&c->mu);
    c->broken = true;
    c->why_broken = why;
    unanswered.swap(c->unanswered);
    c->outbox.clear();
  }
  for (const std::shared_ptr<StreamOutcome>& outcome : unanswered) outcome->Set(why);
}

}  // namespace tessera::client::internal
