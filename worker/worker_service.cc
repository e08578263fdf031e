#include "worker/worker_service.h"

#include <algorithm>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "metrics/registry.h"
#include "proto/command_label.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "proto/tls_files.h"
#include "security/constant_time.h"
#include "security/direct_grants.h"
#include "spdlog/spdlog.h"
#include "transfer/tensor_stream.h"

namespace tessera {
namespace {

// The worker's command metrics, in the process's registry.
struct CommandMetrics {
  metrics::Gauge& queued;
  metrics::Gauge& in_flight;
  metrics::Family<metrics::Counter>& done;
  metrics::Family<metrics::Histogram>& seconds;
};

const CommandMetrics& Metrics() {
  static const CommandMetrics m{
      metrics::DefaultRegistry()
          .AddGauge("tessera_worker_commands_queued",
                    "commands admitted and waiting for their turn in sequence order")
          .With({}),
      metrics::DefaultRegistry()
          .AddGauge("tessera_worker_commands_in_flight", "commands running on this worker")
          .With({}),
      metrics::DefaultRegistry().AddCounter(
          "tessera_worker_commands_total", "commands this worker answered, by kind and status code",
          {"kind", "code"}),
      metrics::DefaultRegistry().AddHistogram(
          "tessera_worker_command_seconds",
          "time a command ran on this worker, from its turn to its result (waiting excluded)",
          {"kind"}, metrics::LatencyBounds())};
  return m;
}

// Writes the bytes of `first` and of the chunks after it on `reader` into `tensor` through
// `memory`, its memory space; INVALID_ARGUMENT, naming the stream as `what`, for more or fewer
// bytes than it has.
absl::Status ReceiveInto(grpc::ServerReaderInterface<v1::TensorChunk>& reader,
                         v1::TensorChunk& first, const std::string& what,
                         kernels::MemorySpace& memory, kernels::DeviceTensor& tensor) {
  TensorByteCount count(what, absl::StatusCode::kInvalidArgument, tensor.dtype(), tensor.shape());
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::HostToSpaceWriter> writer,
                   memory.WriteFromHost(tensor.View()));
  v1::TensorChunk& chunk = first;
  do {
    const std::string& piece = chunk.data();
    RETURN_IF_ERROR(count.Add(piece.size()));
    RETURN_IF_ERROR(writer->Write(std::as_bytes(std::span(piece.data(), piece.size()))));
  } while (reader.Read(&chunk));
  RETURN_IF_ERROR(count.CheckComplete());
  return writer->Finish();
}

// Stores in `store` the upload whose first chunk (its header) is `first` and whose other chunks
// follow on `reader`, under the tensor name of its header; the upload's byte count.
absl::StatusOr<int64_t> ReceiveUpload(ShardStore& store,
                                      grpc::ServerReaderInterface<v1::TensorChunk>& reader,
                                      v1::TensorChunk& first) {
  const std::string name = first.tensor();
  ASSIGN_OR_RETURN(const DType dtype, FromProto(first.dtype()));
  ASSIGN_OR_RETURN(const Shape shape, FromProto(first.shape()));
  // Its byte count must fit in int64 before it is counted against the budget.
  RETURN_IF_ERROR(ValidateTensorShape(dtype, shape));
  const int64_t want = NumElements(shape) * static_cast<int64_t>(DTypeSize(dtype));
  // Check the budget before taking the bytes; the old tensor of the same name is replaced.
  RETURN_IF_ERROR(store.Reserve(want, name));
  // The bytes go straight into the device's memory as they arrive (ReceiveInto).
  ASSIGN_OR_RETURN(kernels::DeviceTensor received, store.memory().Allocate(dtype, shape));
  const std::string what = absl::StrCat("upload of '", name, "'");
  RETURN_IF_ERROR(ReceiveInto(reader, first, what, store.memory(), received));
  RETURN_IF_ERROR(store.Put(name, std::move(received)));
  return want;
}

}  // namespace

WorkerService::WorkerService(std::string secret, std::unique_ptr<kernels::KernelBackend> kernels,
                             int64_t memory_budget_bytes, absl::Duration stall_limit,
                             absl::Duration stream_idle_timeout)
    : secret_(std::move(secret)),
      kernels_(std::move(kernels)),
      device_(kernels_->device()),
      store_(memory_budget_bytes, *kernels_),
      sequencer_(stall_limit),
      idle_(stream_idle_timeout, "the worker's --stream_idle_timeout") {}

void WorkerService::BeginIncarnation(int64_t worker_id, int64_t incarnation,
                                     std::unique_ptr<gloo::rendezvous::Store> rendezvous,
                                     const std::string& collective_host, bool keep_tensors,
                                     const std::vector<std::string>& drop_tensors) {
  absl::MutexLock lock(&mu_);
  executor_.reset();
  if (keep_tensors) {
    for (const std::string& name : drop_tensors) store_.Erase(name);
  } else {
    store_.Clear();
  }
  sequencer_.Reset();
  {
    // A new incarnation numbers its commands afresh: the old one's granted numbers mean nothing
    // (kept, a grant of the new one for the same number would be refused as a replay).
    absl::MutexLock grants(&grant_mu_);
    granted_.clear();
    failed_grants_.clear();
    failed_order_.clear();
  }
  rendezvous_ = std::move(rendezvous);
  executor_ = std::make_unique<CommandExecutor>(
      worker_id, kernels_.get(), &store_, rendezvous_.get(), collective_host, checkpoint_root_);
  worker_id_ = worker_id;
  incarnation_.Take(incarnation);
}

absl::Status WorkerService::Admit(const grpc::ServerContext& context, const char* method,
                                  int64_t incarnation, absl::Time deadline) const {
  RETURN_IF_ERROR(Authenticate(context, method));
  return incarnation_.Admit(incarnation, deadline);
}

absl::Status WorkerService::Authenticate(const grpc::ServerContext& context,
                                         const char* method) const {
  std::string refused;
  if (!coordinator_identity_.empty()) {
    const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
    if (auth == nullptr || !PeerIs(*auth, coordinator_identity_)) {
      const std::vector<std::string> names =
          auth == nullptr ? std::vector<std::string>() : PeerIdentities(*auth);
      refused = absl::StrCat(
          "this worker accepts commands from its coordinator only: the caller's certificate names ",
          names.empty() ? "nothing" : absl::StrCat("'", absl::StrJoin(names, "', '"), "'"),
          ", not '", coordinator_identity_, "'");
    }
  } else {
    const auto& metadata = context.client_metadata();
    auto it = metadata.find(kSecretMetadataKey);
    if (it == metadata.end() || secret_.empty() ||
        !ConstantTimeEqual(absl::string_view(it->second.data(), it->second.size()), secret_)) {
      refused = "this worker accepts commands from its coordinator only (bad secret)";
    }
  }
  if (!refused.empty()) {
    // Checked before it is counted: a stranger's failures never refuse the coordinator.
    return auth_failures_.Refuse(AuthFailures::PeerHost(context.peer()),
                                 absl::StrCat("tessera.v1.Worker/", method),
                                 absl::PermissionDeniedError(refused));
  }
  return absl::OkStatus();
}

std::optional<v1::DirectGrant> WorkerService::GrantOf(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kGrantMetadataKey);
  v1::DirectGrant grant;
  if (it == metadata.end() ||
      !grant.ParseFromArray(it->second.data(), static_cast<int>(it->second.size()))) {
    return std::nullopt;
  }
  return grant;
}

absl::Status WorkerService::CheckGrantSignature(const grpc::ServerContext& context,
                                                const v1::DirectGrant& grant, bool read) {
  absl::Status refused;
  {
    absl::MutexLock lock(&grant_mu_);
    refused = CheckGrant(grant_key_, grant, worker_id_.load(), incarnation_.current(), absl::Now());
  }
  if (refused.ok() && grant.read() != read) {
    refused = absl::PermissionDeniedError(
        absl::StrCat("the grant for sequence ", grant.sequence(), " is ",
                     grant.read() ? "a read grant" : "an upload's grant", ", not one for ",
                     read ? "a download" : "an upload"));
  }
  if (refused.ok()) return absl::OkStatus();
  return grant_failures_.Refuse(AuthFailures::PeerHost(context.peer()),
                                absl::StrCat("tessera.v1.Worker/", read ? "Download" : "Upload"),
                                std::move(refused));
}

absl::Status WorkerService::AdmitGrant(const grpc::ServerContext& context,
                                       const v1::DirectGrant& grant, bool read, bool matches,
                                       absl::string_view call) {
  absl::Status refused;
  {
    absl::MutexLock lock(&grant_mu_);
    refused = CheckGrant(grant_key_, grant, worker_id_.load(), incarnation_.current(), absl::Now());
    if (refused.ok() && grant.read() != read) {
      refused = absl::PermissionDeniedError(absl::StrCat(
          "the grant for sequence ", grant.sequence(), " is ",
          grant.read() ? "a read grant" : "an upload's grant", ", not one for ", call));
    }
    if (refused.ok() && !matches) {
      refused = absl::PermissionDeniedError(
          absl::StrCat("the ", call, " does not match its grant (for '", grant.tensor(),
                       "' at sequence ", grant.sequence(), ")"));
    }
    // Numbers behind the head of the order were used or released: a grant for one is a replay.
    const int64_t head = sequencer_.next();
    // Those behind the head are kept (a Release asking about a stored upload's number says it is
    // held), the latest kGrantsKept of them.
    while (granted_.size() > kGrantsKept && *granted_.begin() < head)
      granted_.erase(granted_.begin());
    if (refused.ok() && (grant.sequence() < head || granted_.contains(grant.sequence()) ||
                         failed_grants_.contains(grant.sequence()))) {
      refused = absl::PermissionDeniedError(absl::StrCat(
          "the grant for sequence ", grant.sequence(), " was already used or released"));
    }
    if (refused.ok()) granted_.insert(grant.sequence());
  }
  if (refused.ok()) return absl::OkStatus();
  return grant_failures_.Refuse(AuthFailures::PeerHost(context.peer()),
                                absl::StrCat("tessera.v1.Worker/", read ? "Download" : "Upload"),
                                std::move(refused));
}

void WorkerService::GrantFailed(int64_t sequence) {
  granted_.erase(sequence);
  if (failed_grants_.insert(sequence).second) failed_order_.push_back(sequence);
  if (failed_order_.size() > kFailedGrantsKept) {
    failed_grants_.erase(failed_order_.front());
    failed_order_.pop_front();
  }
}

absl::Status WorkerService::AwaitTurn(int64_t sequence, absl::Time deadline) {
  return sequencer_.Acquire(sequence, deadline);
}

grpc::Status WorkerService::RunInTurn(const grpc::ServerContext& context, absl::Time deadline,
                                      const v1::Command& command, v1::CommandReply* reply,
                                      bool* admitted) {
  grpc::Status status = ToGrpcStatus(AdmitAndRun(context, deadline, command, reply, admitted));
  const std::string code =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
  Metrics().done.With({CommandKind(command), code}).Increment();
  if (!status.ok()) {
    spdlog::error("command failed worker={} incarnation={} {} code={}: {}", worker_id_.load(),
                  incarnation_.current(), CommandFields(command), code, status.error_message());
  }
  return status;
}

absl::Status WorkerService::AdmitAndRun(const grpc::ServerContext& context, absl::Time deadline,
                                        const v1::Command& command, v1::CommandReply* reply,
                                        bool* admitted) {
  *admitted = false;
  RETURN_IF_ERROR(Admit(context, "Execute", command.incarnation(), deadline));
  *admitted = true;
  const CommandMetrics& m = Metrics();
  m.queued.Add(1);
  absl::Status turn = AwaitTurn(command.sequence(), deadline);
  m.queued.Add(-1);
  RETURN_IF_ERROR(turn);
  m.in_flight.Add(1);
  const absl::Time start = absl::Now();
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    result = executor_->Execute(command, reply);  // fills the reply even on failure
  }
  sequencer_.Done(command.sequence());
  const absl::Duration took = absl::Now() - start;
  m.in_flight.Add(-1);
  m.seconds.With({CommandKind(command)}).Observe(absl::ToDoubleSeconds(took));
  if (spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("command ran worker={} incarnation={} {} seconds={:.6f}", worker_id_.load(),
                  incarnation_.current(), CommandFields(command), absl::ToDoubleSeconds(took));
  }
  return result;
}

grpc::Status WorkerService::Execute(grpc::ServerContext* context, const v1::Command* command,
                                    v1::CommandReply* reply) {
  bool admitted = false;
  return RunInTurn(*context, absl::FromChrono(context->deadline()), *command, reply, &admitted);
}

void WorkerService::RunBatch(const grpc::ServerContext& context, absl::Time deadline,
                             const v1::CommandBatch& batch, v1::CommandBatchReply* reply) {
  // Run in sequence order whatever order the batch lists them in; report in the batch's order.
  std::vector<int> order(static_cast<size_t>(batch.commands_size()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return batch.commands(a).sequence() < batch.commands(b).sequence();
  });
  for (size_t i = 0; i < order.size(); ++i) reply->add_results();
  for (int i : order) {
    v1::CommandResult* result = reply->mutable_results(i);
    bool admitted = false;
    grpc::Status s =
        RunInTurn(context, deadline, batch.commands(i), result->mutable_reply(), &admitted);
    result->set_not_admitted(!admitted);
    result->set_code(static_cast<int>(s.error_code()));
    result->set_message(s.error_message());
  }
}

grpc::Status WorkerService::ExecuteBatch(grpc::ServerContext* context,
                                         const v1::CommandBatch* batch,
                                         v1::CommandBatchReply* reply) {
  RunBatch(*context, absl::FromChrono(context->deadline()), *batch, reply);
  return grpc::Status::OK;
}

grpc::Status WorkerService::CommandStream(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::CommandBatchReply, v1::CommandBatch>* stream) {
  return ToGrpcStatus(CommandStreamImpl(*context, stream));
}

absl::Status WorkerService::CommandStreamImpl(
    const grpc::ServerContext& context,
    grpc::ServerReaderWriter<v1::CommandBatchReply, v1::CommandBatch>* stream) {
  // Only the coordinator's: a stranger's stream ends before a byte of it is read.
  RETURN_IF_ERROR(Authenticate(context, "CommandStream"));
  v1::CommandBatch batch;
  while (stream->Read(&batch)) {
    const absl::Time deadline = absl::Now() + absl::Microseconds(batch.timeout_micros());
    v1::CommandBatchReply reply;
    RunBatch(context, deadline, batch, &reply);
    if (!stream->Write(reply)) break;  // the coordinator ended the stream (it fails the batch)
  }
  return absl::OkStatus();
}

grpc::Status WorkerService::Upload(grpc::ServerContext* context,
                                   grpc::ServerReader<v1::TensorChunk>* reader,
                                   v1::UploadReply* reply) {
  return ToGrpcStatus(UploadImpl(*context, reader, *reply));
}

absl::Status WorkerService::UploadImpl(const grpc::ServerContext& context,
                                       grpc::ServerReader<v1::TensorChunk>* reader,
                                       v1::UploadReply& reply) {
  // The caller is known before a byte is read: a client by the grant in its call's metadata (its
  // signature, worker and expiry checked now, the rest once the header arrives), the coordinator
  // by its secret or certificate. A client's streams count against its share (StreamLimits).
  const std::optional<v1::DirectGrant> grant = GrantOf(context);
  StreamLimits::Ticket admitted;
  if (grant.has_value()) {
    RETURN_IF_ERROR(CheckGrantSignature(context, *grant, /*read=*/false));
    ASSIGN_OR_RETURN(admitted, AdmitStream(limits_, context, "Upload"));
  } else {
    RETURN_IF_ERROR(Authenticate(context, "Upload"));
  }
  // A client that stops sending is cut, and the turn it holds released (the coordinator cuts the
  // clients of what it relays itself).
  const std::unique_ptr<IdleStreams::Watch> watch =
      (grant.has_value() ? idle_ : unwatched_).Start(context, "Upload");
  WatchedReader<v1::TensorChunk> watched(reader, watch.get());
  auto cut = [&](absl::Status s) { return watch->expired() ? watch->ExpiredError() : s; };
  v1::TensorChunk chunk;
  if (!watched.Read(&chunk)) {
    return cut(absl::InvalidArgumentError("upload had no chunks"));
  }
  RETURN_IF_ERROR(AdmitUploadHeader(context, grant, chunk));
  const int64_t sequence = chunk.sequence();
  if (absl::Status s = AwaitTurn(sequence, absl::FromChrono(context.deadline())); !s.ok()) {
    if (grant.has_value()) {
      // Its turn never came: the number is not used, and Release frees it.
      absl::MutexLock lock(&grant_mu_);
      GrantFailed(sequence);
    }
    return s;
  }
  const absl::Status stored = StoreUpload(watched, chunk, grant, sequence, reply);
  sequencer_.Done(sequence);
  return cut(stored);
}

absl::Status WorkerService::AdmitUploadHeader(const grpc::ServerContext& context,
                                              const std::optional<v1::DirectGrant>& grant,
                                              const v1::TensorChunk& header) {
  if (!grant.has_value()) {
    return incarnation_.Admit(header.incarnation(), absl::FromChrono(context.deadline()));
  }
  const bool matches = header.tensor() == grant->tensor() && header.dtype() == grant->dtype() &&
                       header.shape().SerializeAsString() == grant->shape().SerializeAsString() &&
                       header.sequence() == grant->sequence() &&
                       header.incarnation() == grant->incarnation();
  return AdmitGrant(
      context, *grant, /*read=*/false, matches,
      absl::StrCat("upload of '", header.tensor(), "' at sequence ", header.sequence()));
}

absl::Status WorkerService::StoreUpload(grpc::ServerReaderInterface<v1::TensorChunk>& reader,
                                        v1::TensorChunk& header,
                                        const std::optional<v1::DirectGrant>& grant,
                                        int64_t sequence, v1::UploadReply& reply) {
  const absl::StatusOr<int64_t> stored = ReceiveUpload(store_, reader, header);
  if (stored.ok()) {
    reply.set_bytes(*stored);
    if (grant.has_value()) {
      absl::MutexLock lock(&grant_mu_);
      reply.set_receipt(GrantReceipt(grant_key_, *grant));
    }
  } else if (grant.has_value()) {
    // A granted upload that failed holds its sequence no more (Release then says so).
    absl::MutexLock lock(&grant_mu_);
    GrantFailed(sequence);
  }
  return stored.status();
}

grpc::Status WorkerService::Download(grpc::ServerContext* context,
                                     const v1::DownloadRequest* request,
                                     grpc::ServerWriter<v1::TensorChunk>* writer) {
  return ToGrpcStatus(DownloadImpl(*context, *request, writer));
}

absl::Status WorkerService::DownloadImpl(const grpc::ServerContext& context,
                                         const v1::DownloadRequest& request,
                                         grpc::ServerWriter<v1::TensorChunk>* writer) {
  const v1::DirectGrant& grant = request.grant();
  const bool matches = request.tensor() == grant.tensor() &&
                       request.sequence() == grant.sequence() &&
                       request.incarnation() == grant.incarnation();
  RETURN_IF_ERROR(request.has_grant()
                      ? AdmitGrant(context, grant, /*read=*/true, matches,
                                   absl::StrCat("download of '", request.tensor(), "' at sequence ",
                                                request.sequence()))
                      : Admit(context, "Download", request.incarnation(),
                              absl::FromChrono(context.deadline())));
  // A client's downloads count against its share; one that stops reading is cut.
  StreamLimits::Ticket admitted;
  if (request.has_grant()) {
    absl::StatusOr<StreamLimits::Ticket> ticket = AdmitStream(limits_, context, "Download");
    if (!ticket.ok()) {
      sequencer_.Release(request.sequence());  // the grant was taken: its turn goes unused
      return ticket.status();
    }
    admitted = *std::move(ticket);
  }
  if (absl::Status s = AwaitTurn(request.sequence(), absl::FromChrono(context.deadline()));
      !s.ok()) {
    if (request.has_grant()) {
      absl::MutexLock lock(&grant_mu_);
      GrantFailed(request.sequence());  // Release frees the number that was never used
    }
    return s;
  }
  absl::StatusOr<std::shared_ptr<const kernels::DeviceTensor>> tensor =
      store_.Get(request.tensor());
  // The tensor is shared: later commands may run while the bytes stream out.
  sequencer_.Done(request.sequence());
  ASSIGN_OR_RETURN(const std::shared_ptr<const kernels::DeviceTensor> held, std::move(tensor));
  const kernels::DeviceTensor& t = *held;
  v1::TensorChunk chunk;
  chunk.set_tensor(request.tensor());
  chunk.set_dtype(ToProto(t.dtype()));
  *chunk.mutable_shape() = ToProto(t.shape());
  // Chunk by chunk out of the device's memory (a GPU copies the next chunk while this one is sent).
  const std::unique_ptr<IdleStreams::Watch> watch =
      (request.has_grant() ? idle_ : unwatched_).Start(context, "Download");
  const absl::Status sent =
      store_.memory().ReadToHost(t.View(), kChunkBytes, [&](std::span<const std::byte> piece) {
        chunk.set_data(reinterpret_cast<const char*>(piece.data()), piece.size());
        const bool written = watch->Write(*writer, chunk);
        chunk.Clear();
        return written;
      });
  return watch->expired() ? watch->ExpiredError() : sent;
}

grpc::Status WorkerService::Release(grpc::ServerContext* context, const v1::ReleaseRequest* request,
                                    v1::ReleaseReply* reply) {
  return ToGrpcStatus(ReleaseImpl(*context, *request, *reply));
}

absl::Status WorkerService::ReleaseImpl(const grpc::ServerContext& context,
                                        const v1::ReleaseRequest& request,
                                        v1::ReleaseReply& reply) {
  RETURN_IF_ERROR(
      Admit(context, "Release", request.incarnation(), absl::FromChrono(context.deadline())));
  // A number whose granted upload was admitted is that upload's: it waits for its turn (behind a
  // long command, say) and uses it, whatever the coordinator gave up on.
  absl::MutexLock lock(&grant_mu_);
  for (int64_t sequence : request.sequences()) {
    if (granted_.contains(sequence)) {
      reply.add_held(sequence);
    } else if (failed_grants_.contains(sequence)) {
      reply.add_failed(sequence);
      sequencer_.Release(sequence);  // ignored when the failed upload had its turn
    } else {
      sequencer_.Release(sequence);
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera
