#include "tests/support/fake_worker.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "transfer/tensor_stream.h"

namespace tessera::testing {

v1::Command LabeledCommand(const std::string& label) {
  v1::Command command;
  command.mutable_delete_tensors()->add_names(label);
  return command;
}

std::string LabelOf(const v1::Command& command) {
  if (!command.has_delete_tensors() || command.delete_tensors().names_size() != 1) return "";
  return command.delete_tensors().names(0);
}

CommandMatcher HasLabel(std::string label) {
  return [label = std::move(label)](const v1::Command& c) { return LabelOf(c) == label; };
}

CommandMatcher AnyCommand() {
  return [](const v1::Command&) { return true; };
}

std::unique_ptr<FakeWorker> FakeWorker::Start() {
  std::unique_ptr<FakeWorker> fake(new FakeWorker);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  builder.RegisterService(fake.get());
  fake->server_ = builder.BuildAndStart();
  if (fake->server_ == nullptr || port == 0) return nullptr;
  fake->address_ = absl::StrCat("127.0.0.1:", port);
  return fake;
}

FakeWorker::~FakeWorker() { Stop(); }

v1::RegisterReply FakeWorker::RegisterWith(WorkerRegistry& registry, const std::string& device) {
  v1::RegisterRequest request;
  request.set_address(address_);
  request.set_device(device);
  request.set_memory_budget_bytes(int64_t{1} << 30);
  request.set_hostname("fake");
  return registry.Register(request);
}

void FakeWorker::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    // A dead worker's idle streams end at once (a server shutting down would keep them to the
    // deadline); a busy one ends UNAVAILABLE once its batch returns.
    for (const auto& [stream, busy] : streams_) {
      if (!busy) stream->TryCancel();
    }
  }
  // Held commands see stopped_ and return; streams in progress are cancelled at the deadline.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
}

void FakeWorker::BreakStreams() {
  absl::MutexLock lock(&mu_);
  for (const auto& [stream, busy] : streams_) stream->TryCancel();
}

void FakeWorker::Reset() {
  absl::MutexLock lock(&mu_);
  streams_opened_ = 0;
  ++releases_;
  rules_.clear();
  transfer_failure_ = absl::OkStatus();
  download_chunk_bytes_ = size_t{1} << 20;
  tensors_.clear();
  batches_.clear();
  commands_received_ = 0;
  uploads_.clear();
  downloads_.clear();
  release_requests_.clear();
  secrets_.clear();
}

void FakeWorker::FailCommands(CommandMatcher match, absl::Status status) {
  absl::MutexLock lock(&mu_);
  rules_.push_back({std::move(match), Action::kFail, std::move(status), absl::ZeroDuration()});
}

void FakeWorker::RefuseCommands(CommandMatcher match, absl::Status status) {
  absl::MutexLock lock(&mu_);
  rules_.push_back({std::move(match), Action::kRefuse, std::move(status), absl::ZeroDuration()});
}

void FakeWorker::DelayCommands(CommandMatcher match, absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  rules_.push_back({std::move(match), Action::kDelay, absl::OkStatus(), delay});
}

void FakeWorker::HoldCommands(CommandMatcher match) {
  absl::MutexLock lock(&mu_);
  rules_.push_back({std::move(match), Action::kHold, absl::OkStatus(), absl::ZeroDuration()});
}

void FakeWorker::ReleaseHeld() {
  absl::MutexLock lock(&mu_);
  ++releases_;
  std::erase_if(rules_, [](const Rule& r) { return r.action == Action::kHold; });
}

void FakeWorker::FailTransfers(absl::Status status) {
  absl::MutexLock lock(&mu_);
  transfer_failure_ = std::move(status);
}

void FakeWorker::SetDownloadChunkBytes(size_t bytes) {
  absl::MutexLock lock(&mu_);
  download_chunk_bytes_ = std::max<size_t>(1, bytes);
}

void FakeWorker::Put(const std::string& name, FakeTensor tensor) {
  absl::MutexLock lock(&mu_);
  tensors_[name] = std::move(tensor);
}

std::vector<std::vector<v1::Command>> FakeWorker::batches() const {
  absl::MutexLock lock(&mu_);
  return batches_;
}

std::vector<v1::Command> FakeWorker::commands() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Command> out;
  for (const auto& batch : batches_) out.insert(out.end(), batch.begin(), batch.end());
  return out;
}

std::vector<ReceivedUpload> FakeWorker::uploads() const {
  absl::MutexLock lock(&mu_);
  return uploads_;
}

std::vector<v1::DownloadRequest> FakeWorker::downloads() const {
  absl::MutexLock lock(&mu_);
  return downloads_;
}

std::vector<std::string> FakeWorker::secrets() const {
  absl::MutexLock lock(&mu_);
  return secrets_;
}

std::optional<FakeTensor> FakeWorker::tensor(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return std::nullopt;
  return it->second;
}

bool FakeWorker::WaitForCommands(size_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto arrived = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return commands_received_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout);
}

void FakeWorker::RecordSecret(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kSecretMetadataKey);
  secrets_.push_back(it == metadata.end() ? "" : std::string(it->second.data(), it->second.size()));
}

v1::CommandResult FakeWorker::Run(const grpc::ServerContext& context, const v1::Command& command) {
  v1::CommandResult result;
  std::optional<Rule> rule;
  int64_t releases = 0;
  {
    absl::MutexLock lock(&mu_);
    releases = releases_;
    for (const Rule& r : rules_) {
      if (r.match(command)) {
        rule = r;
        break;
      }
    }
  }
  if (rule && (rule->action == Action::kFail || rule->action == Action::kRefuse)) {
    result.set_code(static_cast<int>(rule->status.code()));
    result.set_message(std::string(rule->status.message()));
    result.set_not_admitted(rule->action == Action::kRefuse);
    return result;
  }
  if (rule && rule->action == Action::kDelay) absl::SleepFor(rule->delay);
  if (rule && rule->action == Action::kHold) {
    absl::MutexLock lock(&mu_);
    auto let_go = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return releases_ != releases || stopped_;
    };
    while (!mu_.AwaitWithTimeout(absl::Condition(&let_go), absl::Milliseconds(20))) {
      if (context.IsCancelled()) break;
    }
  }
  v1::CommandReply& reply = *result.mutable_reply();
  reply.set_sequence(command.sequence());
  reply.add_tensors()->set_name(ReplyName(LabelOf(command)));
  return result;
}

grpc::Status FakeWorker::Execute(grpc::ServerContext* context, const v1::Command* command,
                                 v1::CommandReply* reply) {
  {
    absl::MutexLock lock(&mu_);
    RecordSecret(*context);
    batches_.push_back({*command});
    ++commands_received_;
  }
  v1::CommandResult result = Run(*context, *command);
  if (result.code() != 0) {
    return grpc::Status(static_cast<grpc::StatusCode>(result.code()), result.message());
  }
  *reply = std::move(*result.mutable_reply());
  return grpc::Status::OK;
}

grpc::Status FakeWorker::ExecuteBatch(grpc::ServerContext* context, const v1::CommandBatch* batch,
                                      v1::CommandBatchReply* reply) {
  {
    absl::MutexLock lock(&mu_);
    RecordSecret(*context);
    batches_.emplace_back(batch->commands().begin(), batch->commands().end());
    commands_received_ += static_cast<size_t>(batch->commands_size());
  }
  // In order, one at a time, as a worker runs a batch.
  for (const v1::Command& command : batch->commands()) {
    *reply->add_results() = Run(*context, command);
  }
  return grpc::Status::OK;
}

grpc::Status FakeWorker::CommandStream(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::CommandBatchReply, v1::CommandBatch>* stream) {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the fake worker stopped");
    streams_[context] = false;
    ++streams_opened_;
  }
  const grpc::Status stopped(grpc::StatusCode::UNAVAILABLE, "the fake worker stopped");
  v1::CommandBatch batch;
  grpc::Status status;
  while (stream->Read(&batch)) {
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) {
        status = stopped;
        break;
      }
      streams_[context] = true;
    }
    v1::CommandBatchReply reply;
    ExecuteBatch(context, &batch, &reply);
    {
      absl::MutexLock lock(&mu_);
      streams_[context] = false;
      if (stopped_) {
        status = stopped;
        break;
      }
    }
    if (!stream->Write(reply)) break;
  }
  absl::MutexLock lock(&mu_);
  streams_.erase(context);
  return status;
}

int64_t FakeWorker::streams_opened() const {
  absl::MutexLock lock(&mu_);
  return streams_opened_;
}

grpc::Status FakeWorker::Upload(grpc::ServerContext* context,
                                grpc::ServerReader<v1::TensorChunk>* reader,
                                v1::UploadReply* reply) {
  v1::TensorChunk chunk;
  absl::Status failure;
  {
    absl::MutexLock lock(&mu_);
    RecordSecret(*context);
    failure = transfer_failure_;
  }
  if (!reader->Read(&chunk)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "upload had no chunks");
  }
  ReceivedUpload upload;
  upload.header = chunk;
  upload.header.clear_data();
  if (!failure.ok()) {
    absl::MutexLock lock(&mu_);
    uploads_.push_back(std::move(upload));
    return ToGrpcStatus(failure);
  }
  do {
    if (!chunk.data().empty()) {
      upload.chunk_sizes.push_back(chunk.data().size());
      upload.bytes += chunk.data();
    }
  } while (reader->Read(&chunk));
  const absl::StatusOr<DType> dtype = FromProto(upload.header.dtype());
  const absl::StatusOr<Shape> shape = FromProto(upload.header.shape());
  if (!dtype.ok() || !shape.ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "upload header is not a tensor");
  }
  const size_t want = static_cast<size_t>(NumElements(*shape)) * DTypeSize(*dtype);
  upload.complete = !context->IsCancelled() && upload.bytes.size() == want;
  const bool complete = upload.complete;
  const size_t got = upload.bytes.size();
  const std::string name = upload.header.tensor();
  {
    absl::MutexLock lock(&mu_);
    if (complete) tensors_[name] = FakeTensor{*dtype, *shape, upload.bytes};
    uploads_.push_back(std::move(upload));
  }
  if (!complete) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("upload of '", name, "' ended after ", got, " of the ", want, " bytes"));
  }
  reply->set_bytes(static_cast<int64_t>(got));
  return grpc::Status::OK;
}

std::vector<v1::ReleaseRequest> FakeWorker::release_requests() const {
  absl::MutexLock lock(&mu_);
  return release_requests_;
}

grpc::Status FakeWorker::Release(grpc::ServerContext* context, const v1::ReleaseRequest* request,
                                 v1::ReleaseReply*) {
  absl::MutexLock lock(&mu_);
  RecordSecret(*context);
  release_requests_.push_back(*request);
  return grpc::Status::OK;
}

grpc::Status FakeWorker::Download(grpc::ServerContext* context, const v1::DownloadRequest* request,
                                  grpc::ServerWriter<v1::TensorChunk>* writer) {
  std::optional<FakeTensor> stored;
  size_t chunk_bytes = 0;
  {
    absl::MutexLock lock(&mu_);
    RecordSecret(*context);
    downloads_.push_back(*request);
    if (!transfer_failure_.ok()) return ToGrpcStatus(transfer_failure_);
    auto it = tensors_.find(request->tensor());
    if (it != tensors_.end()) stored = it->second;
    chunk_bytes = download_chunk_bytes_;
  }
  if (!stored) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no local tensor '", request->tensor(), "'"));
  }
  // The header rides on the first chunk, which goes even when there are no bytes.
  v1::TensorChunk chunk;
  chunk.set_tensor(request->tensor());
  chunk.set_dtype(ToProto(stored->dtype));
  *chunk.mutable_shape() = ToProto(stored->shape);
  WriteChunks(
      stored->bytes,
      [&](absl::string_view piece) {
        chunk.set_data(piece.data(), piece.size());
        if (!writer->Write(chunk)) return false;
        chunk.Clear();
        return true;
      },
      chunk_bytes);
  return grpc::Status::OK;
}

std::vector<FakeWorker*> SharedFakeWorkers(size_t n) {
  static auto* const fakes = new std::vector<std::unique_ptr<FakeWorker>>;
  static absl::Mutex mu;
  absl::MutexLock lock(&mu);
  while (fakes->size() < n) {
    std::unique_ptr<FakeWorker> fake = FakeWorker::Start();
    if (fake == nullptr) {
      ADD_FAILURE() << "a fake worker did not start";
      return {};
    }
    fakes->push_back(std::move(fake));
  }
  std::vector<FakeWorker*> out;
  for (size_t i = 0; i < n; ++i) out.push_back((*fakes)[i].get());
  return out;
}

namespace {

// gRPC 1.51 without a background poller runs callback-API completions (the dispatcher's
// ExecuteBatch) on a process-wide queue that lives while some channel that used the callback API
// lives; tearing it down races with a completion still running on it (grpc/grpc#32584) and aborts
// the process. Every FakeCluster makes and drops its channels, so one channel that used the
// callback API is kept for the whole process (in the coordinator the registry's channels do that).
void KeepCallbackQueueAlive() {
  [[maybe_unused]] static const bool kept = [] {
    auto* stub =
        v1::Worker::NewStub(grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()))
            .release();
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(absl::Seconds(5)));
    v1::Command command;
    v1::CommandReply reply;
    absl::Notification done;
    stub->async()->Execute(&context, &command, &reply, [&](grpc::Status) { done.Notify(); });
    done.WaitForNotification();
    return true;
  }();
}

}  // namespace

FakeCluster::FakeCluster(std::vector<FakeWorker*> workers, absl::Duration dead_after)
    : registry_(absl::Seconds(1), dead_after), workers_(std::move(workers)) {
  KeepCallbackQueueAlive();
  for (FakeWorker* w : workers_) {
    w->Reset();
    incarnations_.push_back(w->RegisterWith(registry_).incarnation());
  }
  dispatcher_ = std::make_unique<Dispatcher>(&registry_, kFakeSecret);
}

}  // namespace tessera::testing
