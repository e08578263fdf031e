#include "server/cluster/worker_stream.h"

#include <algorithm>
#include <utility>

namespace tessera {

std::shared_ptr<WorkerStream> WorkerStream::Open(
    v1::Worker::Stub& stub, const std::function<void(grpc::ClientContext*)>& authorize,
    std::function<void()> closed) {
  std::shared_ptr<WorkerStream> stream(new WorkerStream(std::move(closed)));
  authorize(&stream->context_);
  {
    absl::MutexLock lock(&stream->mu_);
    stream->self_ = stream;
  }
  stub.async()->CommandStream(&stream->context_, stream.get());
  // A read is always pending, so that the stream's end is seen while it is idle too; the hold keeps
  // a stream that fails at once from ending before its first batch is taken.
  stream->AddHold();
  stream->StartRead(&stream->reply_);
  stream->StartCall();
  return stream;
}

bool WorkerStream::Send(std::shared_ptr<const v1::CommandBatch> batch, absl::Time deadline,
                        Replied replied) {
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    if (done_) return false;
    // On a stream that is ending the write fails, and OnDone answers the batch.
    replied_ = std::move(replied);
    deadline_ = deadline;
    waiting_ = std::move(batch);
    first = std::exchange(held_, false);
  }
  WriteNext();
  if (first) RemoveHold();
  return true;
}

void WorkerStream::WriteNext() {
  const v1::CommandBatch* next = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (writing_ || waiting_ == nullptr) return;
    writing_ = true;
    writing_batch_ = std::move(waiting_);
    next = writing_batch_.get();
  }
  // Outside the lock: a reaction may run inline.
  StartWrite(next);
}

void WorkerStream::Cancel(grpc::Status why) {
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    if (!why_) why_ = std::move(why);
    ending_ = true;
  }
  context_.TryCancel();
}

bool WorkerStream::ended() const {
  absl::MutexLock lock(&mu_);
  return ending_;
}

std::optional<absl::Time> WorkerStream::in_flight_deadline() const {
  absl::MutexLock lock(&mu_);
  if (replied_ == nullptr) return std::nullopt;
  return deadline_;
}

void WorkerStream::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    writing_batch_.reset();  // a module input of MiBs is not kept past its write
    if (!ok) return;         // the stream is ending: the pending read fails, then OnDone
  }
  WriteNext();
}

void WorkerStream::OnReadDone(bool ok) {
  if (!ok) return;  // the stream is ending: OnDone follows
  v1::CommandBatchReply reply;
  Replied replied;
  {
    // gRPC orders this read after the last one's StartRead, but inside its core, where TSan does
    // not see it; under mu_ the order is visible.
    absl::MutexLock lock(&mu_);
    reply = std::move(reply_);
    reply_.Clear();
    replied = std::move(replied_);
    replied_ = nullptr;
    deadline_ = absl::InfiniteFuture();
  }
  StartRead(&reply_);
  if (replied) replied(grpc::Status::OK, std::move(reply));
}

void WorkerStream::OnDone(const grpc::Status& status) {
  Replied replied;
  std::shared_ptr<WorkerStream> self;
  grpc::Status ended;
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
    ending_ = true;
    ended = why_.value_or(status);
    if (ended.ok()) {
      ended = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the worker ended its command stream");
    }
    replied = std::move(replied_);
    replied_ = nullptr;
    self = std::move(self_);
  }
  if (replied) replied(ended, {});
  if (closed_) closed_();
  // `self` goes last: it may be the stream's last owner.
}

}  // namespace tessera
