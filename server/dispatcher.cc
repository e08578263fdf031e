#include "server/dispatcher.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
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
  const std::vector<int64_t> sequences = registry_->NextSequences(workers);

  struct Call {
    grpc::ClientContext context;
    v1::Command request;
    v1::CommandReply reply;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<Call>> calls;
  absl::BlockingCounter pending(static_cast<int>(workers.size()));
  const auto deadline = DeadlineAfter(timeout);
  for (size_t i = 0; i < workers.size(); ++i) {
    auto call = std::make_unique<Call>();
    call->request = command;
    call->request.set_sequence(sequences[i]);
    call->request.set_incarnation(workers[i].incarnation);
    call->context.set_deadline(deadline);
    Authorize(&call->context);
    Call* c = call.get();
    calls.push_back(std::move(call));
    workers[i].stub->async()->Execute(&c->context, &c->request, &c->reply,
                                      [c, &pending](grpc::Status s) {
                                        c->status = std::move(s);
                                        pending.DecrementCount();
                                      });
  }
  pending.Wait();

  absl::Status worst;
  std::vector<v1::CommandReply> replies;
  replies.reserve(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!calls[i]->status.ok()) {
      absl::Status s = FromGrpcStatus(calls[i]->status);
      s = absl::Status(s.code(), absl::StrCat("worker ", workers[i].id, " at ", workers[i].address,
                                              ": ", s.message()));
      if (worst.ok() || Severity(s.code()) < Severity(worst.code())) worst = s;
    }
    replies.push_back(std::move(calls[i]->reply));
  }
  if (!worst.ok()) {
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
  return replies;
}

}  // namespace tessera
