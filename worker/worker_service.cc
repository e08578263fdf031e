#include "worker/worker_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "proto/command_label.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "spdlog/spdlog.h"
#include "transfer/tensor_stream.h"

namespace tessera {

WorkerService::WorkerService(std::string secret, std::string device, int64_t memory_budget_bytes,
                             absl::Duration stall_limit)
    : secret_(std::move(secret)),
      device_(std::move(device)),
      store_(memory_budget_bytes),
      sequencer_(stall_limit) {}

void WorkerService::BeginIncarnation(int64_t worker_id, int64_t incarnation,
                                     std::unique_ptr<gloo::rendezvous::Store> rendezvous,
                                     const std::string& collective_host) {
  absl::MutexLock lock(&mu_);
  executor_.reset();
  store_.Clear();
  sequencer_.Reset();
  rendezvous_ = std::move(rendezvous);
  executor_ = std::make_unique<CommandExecutor>(worker_id, device_, &store_, rendezvous_.get(),
                                                collective_host);
  worker_id_ = worker_id;
  incarnation_ = incarnation;
}

grpc::Status WorkerService::Admit(const grpc::ServerContext& context, int64_t incarnation) const {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kSecretMetadataKey);
  if (it == metadata.end() || std::string(it->second.data(), it->second.size()) != secret_) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "this worker accepts commands from its coordinator only (bad secret)");
  }
  if (const int64_t current = incarnation_.load(); incarnation != current) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat("command for incarnation ", incarnation, " reached incarnation ", current));
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::AwaitTurn(const grpc::ServerContext& context, int64_t sequence) {
  return ToGrpcStatus(sequencer_.Acquire(sequence, absl::FromChrono(context.deadline())));
}

grpc::Status WorkerService::RunInTurn(const grpc::ServerContext& context,
                                      const v1::Command& command, v1::CommandReply* reply) {
  grpc::Status status = AdmitAndRun(context, command, reply);
  if (!status.ok()) {
    spdlog::error("{} failed on worker {}: {}: {}", CommandLabel(command), worker_id_.load(),
                  absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                  status.error_message());
  }
  return status;
}

grpc::Status WorkerService::AdmitAndRun(const grpc::ServerContext& context,
                                        const v1::Command& command, v1::CommandReply* reply) {
  if (grpc::Status s = Admit(context, command.incarnation()); !s.ok()) return s;
  if (grpc::Status s = AwaitTurn(context, command.sequence()); !s.ok()) return s;
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    result = executor_->Execute(command, reply);  // fills the reply even on failure
  }
  sequencer_.Done(command.sequence());
  return ToGrpcStatus(result);
}

grpc::Status WorkerService::Execute(grpc::ServerContext* context, const v1::Command* command,
                                    v1::CommandReply* reply) {
  return RunInTurn(*context, *command, reply);
}

grpc::Status WorkerService::ExecuteBatch(grpc::ServerContext* context,
                                         const v1::CommandBatch* batch,
                                         v1::CommandBatchReply* reply) {
  // Run in sequence order whatever order the batch lists them in; report in the batch's order.
  std::vector<int> order(static_cast<size_t>(batch->commands_size()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return batch->commands(a).sequence() < batch->commands(b).sequence();
  });
  for (size_t i = 0; i < order.size(); ++i) reply->add_results();
  for (int i : order) {
    v1::CommandResult* result = reply->mutable_results(i);
    grpc::Status s = RunInTurn(*context, batch->commands(i), result->mutable_reply());
    result->set_code(static_cast<int>(s.error_code()));
    result->set_message(s.error_message());
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::Upload(grpc::ServerContext* context,
                                   grpc::ServerReader<v1::TensorChunk>* reader,
                                   v1::UploadReply* reply) {
  v1::TensorChunk chunk;
  if (!reader->Read(&chunk)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "upload had no chunks");
  }
  if (grpc::Status s = Admit(*context, chunk.incarnation()); !s.ok()) return s;
  const int64_t sequence = chunk.sequence();
  if (grpc::Status s = AwaitTurn(*context, sequence); !s.ok()) return s;
  auto finish = [&](absl::Status s) {
    sequencer_.Done(sequence);
    return ToGrpcStatus(s);
  };
  const std::string name = chunk.tensor();
  absl::StatusOr<DType> dtype = FromProto(chunk.dtype());
  if (!dtype.ok()) return finish(dtype.status());
  absl::StatusOr<Shape> shape = FromProto(chunk.shape());
  if (!shape.ok()) return finish(shape.status());
  // Its byte count must fit in int64 before it is counted against the budget.
  if (absl::Status s = ValidateTensorShape(*dtype, *shape); !s.ok()) return finish(s);
  const int64_t want = NumElements(*shape) * static_cast<int64_t>(DTypeSize(*dtype));
  // Check the budget before taking the bytes; the old tensor of the same name is replaced.
  if (absl::Status s = store_.Reserve(want, name); !s.ok()) return finish(s);
  TensorAssembler tensor(absl::StrCat("upload of '", name, "'"),
                         absl::StatusCode::kInvalidArgument);
  absl::Status status = tensor.Start(*dtype, *shape);
  do {
    if (status.ok()) status = tensor.Append(chunk.data());
  } while (status.ok() && reader->Read(&chunk));
  if (!status.ok()) return finish(status);
  absl::StatusOr<HostTensor> received = std::move(tensor).Finish();
  if (!received.ok()) return finish(received.status());
  if (absl::Status s = store_.Put(name, *std::move(received)); !s.ok()) return finish(s);
  reply->set_bytes(want);
  return finish(absl::OkStatus());
}

grpc::Status WorkerService::Download(grpc::ServerContext* context,
                                     const v1::DownloadRequest* request,
                                     grpc::ServerWriter<v1::TensorChunk>* writer) {
  if (grpc::Status s = Admit(*context, request->incarnation()); !s.ok()) return s;
  if (grpc::Status s = AwaitTurn(*context, request->sequence()); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<const HostTensor>> tensor = store_.Get(request->tensor());
  // The tensor is shared: later commands may run while the bytes stream out.
  sequencer_.Done(request->sequence());
  if (!tensor.ok()) return ToGrpcStatus(tensor.status());
  const HostTensor& t = **tensor;
  v1::TensorChunk chunk;
  chunk.set_tensor(request->tensor());
  chunk.set_dtype(ToProto(t.dtype()));
  *chunk.mutable_shape() = ToProto(t.shape());
  WriteChunks(AsBytes(t), [&](absl::string_view piece) {
    chunk.set_data(piece.data(), piece.size());
    const bool sent = writer->Write(chunk);
    chunk.Clear();
    return sent;
  });
  return grpc::Status::OK;
}

grpc::Status WorkerService::Release(grpc::ServerContext* context, const v1::ReleaseRequest* request,
                                    v1::ReleaseReply*) {
  if (grpc::Status s = Admit(*context, request->incarnation()); !s.ok()) return s;
  for (int64_t sequence : request->sequences()) sequencer_.Release(sequence);
  return grpc::Status::OK;
}

}  // namespace tessera
