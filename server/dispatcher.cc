#include "server/dispatcher.h"

#include <atomic>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "proto/grpc_status.h"

namespace tessera {
namespace {

// Lower is more telling about why a distributed call failed.
int Severity(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable: return 0;
    case absl::StatusCode::kResourceExhausted: return 1;
    case absl::StatusCode::kInvalidArgument: return 2;
    case absl::StatusCode::kNotFound: return 3;
    case absl::StatusCode::kFailedPrecondition: return 4;
    case absl::StatusCode::kDeadlineExceeded: return 6;
    default: return 5;
  }
}

}  // namespace

Dispatcher::Dispatcher(WorkerRegistry* registry, std::string secret)
    : registry_(registry), secret_(std::move(secret)) {}

void Dispatcher::Authorize(grpc::ClientContext* context) const {
  context->AddMetadata(kSecretMetadataKey, secret_);
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
  Post(workers, command, timeout, [&](absl::Status s, std::vector<v1::CommandReply> r) {
    status = std::move(s);
    replies = std::move(r);
    finished.Notify();
  });
  finished.WaitForNotification();
  if (!status.ok()) return status;
  return replies;
}

void Dispatcher::Post(const std::vector<WorkerHandle>& workers, const v1::Command& command,
                      absl::Duration timeout, Done done) {
  if (workers.empty()) {
    done(absl::OkStatus(), {});
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* n) { return *n < kMaxInFlight; }, &in_flight_));
    ++in_flight_;
  }
  const std::vector<int64_t> sequences = registry_->NextSequences(workers);
  // One post: its calls, and the count of those still outstanding.
  struct Batch {
    struct Call {
      grpc::ClientContext context;
      v1::Command request;
      v1::CommandReply reply;
    };
    std::vector<WorkerHandle> workers;
    std::vector<std::unique_ptr<Call>> calls;
    std::vector<grpc::Status> statuses;
    std::atomic<int> pending;
    Done done;
  };
  auto batch = std::make_shared<Batch>();
  batch->workers = workers;
  batch->statuses.resize(workers.size());
  batch->pending = static_cast<int>(workers.size());
  batch->done = std::move(done);
  const auto deadline = DeadlineAfter(timeout);
  for (size_t i = 0; i < workers.size(); ++i) {
    auto call = std::make_unique<Batch::Call>();
    call->request = command;
    call->request.set_sequence(sequences[i]);
    call->request.set_incarnation(workers[i].incarnation);
    call->context.set_deadline(deadline);
    Authorize(&call->context);
    batch->calls.push_back(std::move(call));
  }
  for (size_t i = 0; i < workers.size(); ++i) {
    Batch::Call* c = batch->calls[i].get();
    workers[i].stub->async()->Execute(
        &c->context, &c->request, &c->reply, [this, batch, i](grpc::Status s) {
          batch->statuses[i] = std::move(s);
          if (batch->pending.fetch_sub(1) != 1) return;
          absl::Status status = Combine(batch->workers, batch->statuses);
          std::vector<v1::CommandReply> replies;
          replies.reserve(batch->calls.size());
          for (auto& call : batch->calls) replies.push_back(std::move(call->reply));
          {
            absl::MutexLock lock(&mu_);
            --in_flight_;
          }
          batch->done(std::move(status), std::move(replies));
        });
  }
}

absl::Status Dispatcher::Combine(const std::vector<WorkerHandle>& workers,
                                 const std::vector<grpc::Status>& statuses) const {
  absl::Status worst;
  for (size_t i = 0; i < statuses.size(); ++i) {
    if (statuses[i].ok()) continue;
    absl::Status s = FromGrpcStatus(statuses[i]);
    s = absl::Status(s.code(), absl::StrCat("worker ", workers[i].id, " at ", workers[i].address,
                                            ": ", s.message()));
    if (worst.ok() || Severity(s.code()) < Severity(worst.code())) worst = s;
  }
  if (worst.ok()) return worst;
  // A peer's death surfaces on the survivors as I/O errors; name the worker that is gone.
  for (const WorkerHandle& w : workers) {
    absl::StatusOr<WorkerHandle> now = registry_->Get(w.id);
    if (!now.ok() && now.status().code() == absl::StatusCode::kUnavailable) {
      return absl::UnavailableError(
          absl::StrCat(now.status().message(), "; the command failed: ", worst.message()));
    }
  }
  return worst;
}

}  // namespace tessera
