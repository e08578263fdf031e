#include "client/coordinator_client.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "transfer/tensor_stream.h"

namespace tessera {
namespace {

// Transfers and mesh set-up may take longer than a plain call.
constexpr absl::Duration kLongCall = kTransferTimeout;

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const std::string& address, absl::Duration timeout) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(DeadlineAfter(timeout))) {
    return absl::UnavailableError(absl::StrCat("cannot reach tessera-coordinator at ", address,
                                               " within ", absl::FormatDuration(timeout)));
  }
  return std::unique_ptr<CoordinatorClient>(new CoordinatorClient(address, channel, timeout));
}

void CoordinatorClient::Prepare(grpc::ClientContext* context, absl::Duration timeout) const {
  context->set_deadline(DeadlineAfter(timeout));
}

absl::StatusOr<std::vector<v1::WorkerInfo>> CoordinatorClient::ListWorkers() {
  grpc::ClientContext context;
  Prepare(&context, timeout_);
  v1::ListWorkersReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(meshes_->ListWorkers(&context, {}, &reply)));
  return std::vector<v1::WorkerInfo>(reply.workers().begin(), reply.workers().end());
}

absl::StatusOr<v1::MeshInfo> CoordinatorClient::CreateMesh(
    const std::string& name, const std::string& device_type, const Shape& shape,
    const std::vector<std::string>& dim_names, const std::vector<int64_t>& worker_ids,
    absl::Duration collective_timeout) {
  v1::CreateMeshRequest request;
  request.set_name(name);
  request.set_device_type(device_type);
  for (int64_t d : shape) request.add_shape(d);
  for (const std::string& n : dim_names) request.add_dim_names(n);
  for (int64_t w : worker_ids) request.add_worker_ids(w);
  request.set_timeout_ms(absl::ToInt64Milliseconds(collective_timeout));
  grpc::ClientContext context;
  Prepare(&context, collective_timeout + timeout_);
  v1::MeshInfo reply;
  RETURN_IF_ERROR(FromGrpcStatus(meshes_->CreateMesh(&context, request, &reply)));
  return reply;
}

absl::StatusOr<v1::MeshInfo> CoordinatorClient::GetMesh(const std::string& name) {
  v1::GetMeshRequest request;
  request.set_name(name);
  grpc::ClientContext context;
  Prepare(&context, timeout_);
  v1::MeshInfo reply;
  RETURN_IF_ERROR(FromGrpcStatus(meshes_->GetMesh(&context, request, &reply)));
  return reply;
}

absl::StatusOr<std::vector<v1::MeshInfo>> CoordinatorClient::ListMeshes() {
  grpc::ClientContext context;
  Prepare(&context, timeout_);
  v1::ListMeshesReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(meshes_->ListMeshes(&context, {}, &reply)));
  return std::vector<v1::MeshInfo>(reply.meshes().begin(), reply.meshes().end());
}

absl::Status CoordinatorClient::DeleteMesh(const std::string& name) {
  v1::DeleteMeshRequest request;
  request.set_name(name);
  grpc::ClientContext context;
  Prepare(&context, timeout_);
  v1::DeleteMeshReply reply;
  return FromGrpcStatus(meshes_->DeleteMesh(&context, request, &reply));
}

absl::Status CoordinatorClient::PutLocal(const std::string& mesh, int64_t rank,
                                         const std::string& name, const HostTensor& tensor) {
  grpc::ClientContext context;
  Prepare(&context, kLongCall);
  v1::PutLocalReply reply;
  std::unique_ptr<grpc::ClientWriter<v1::PutLocalChunk>> writer =
      collectives_->PutLocal(&context, &reply);
  v1::PutLocalChunk chunk;
  chunk.set_mesh(mesh);
  chunk.set_rank(rank);
  chunk.set_tensor(name);
  chunk.set_dtype(ToProto(tensor.dtype()));
  *chunk.mutable_shape() = ToProto(tensor.shape());
  WriteChunks(AsBytes(tensor), [&](absl::string_view piece) {
    chunk.set_data(piece.data(), piece.size());
    if (!writer->Write(chunk)) return false;  // the server ended the call; Finish says why
    chunk.Clear();
    return true;
  });
  writer->WritesDone();
  return FromGrpcStatus(writer->Finish());
}

absl::StatusOr<HostTensor> CoordinatorClient::GetLocal(const std::string& mesh, int64_t rank,
                                                       const std::string& name) {
  v1::GetLocalRequest request;
  request.set_mesh(mesh);
  request.set_rank(rank);
  request.set_tensor(name);
  grpc::ClientContext context;
  Prepare(&context, kLongCall);
  std::unique_ptr<grpc::ClientReader<v1::TensorChunk>> reader =
      collectives_->GetLocal(&context, request);
  return ReadTensorStream(context, *reader, absl::StrCat("download of '", name, "'"));
}

absl::StatusOr<v1::CollectiveReply> CoordinatorClient::RunCollective(
    const v1::CollectiveRequest& request) {
  grpc::ClientContext context;
  Prepare(&context, kLongCall);
  v1::CollectiveReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(collectives_->RunCollective(&context, request, &reply)));
  return reply;
}

absl::StatusOr<std::vector<absl::StatusOr<v1::CollectiveReply>>> CoordinatorClient::WaitCollectives(
    const std::string& mesh, const std::vector<int64_t>& works, absl::Duration timeout) {
  grpc::ClientContext context;
  Prepare(&context, timeout == absl::InfiniteDuration() ? kLongCall : timeout);
  v1::WaitCollectivesRequest request;
  request.set_mesh(mesh);
  for (int64_t w : works) request.add_works(w);
  v1::WaitCollectivesReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(collectives_->WaitCollectives(&context, request, &reply)));
  if (reply.results_size() != request.works_size()) {
    return absl::InternalError(absl::StrCat("WaitCollectives answered ", reply.results_size(),
                                            " of ", request.works_size(), " works"));
  }
  std::vector<absl::StatusOr<v1::CollectiveReply>> outcomes;
  for (v1::CollectiveResult& r : *reply.mutable_results()) {
    if (r.code() == 0) {
      outcomes.emplace_back(std::move(*r.mutable_reply()));
    } else {
      outcomes.emplace_back(absl::Status(static_cast<absl::StatusCode>(r.code()), r.message()));
    }
  }
  return outcomes;
}

absl::StatusOr<std::unique_ptr<CollectiveStream>> CoordinatorClient::OpenCollectiveStream(
    absl::Duration timeout) {
  std::unique_ptr<CollectiveStream> stream(new CollectiveStream);
  Prepare(&stream->context_, timeout);
  stream->stream_ = collectives_->CollectiveStream(&stream->context_);
  return stream;
}

CollectiveStream::~CollectiveStream() {
  if (!closed_.exchange(true)) stream_->WritesDone();
  {
    absl::MutexLock lock(&end_mu_);
    if (ended_) return;
  }
  v1::CollectiveResult ignored;
  while (stream_->Read(&ignored)) {
  }
  End().IgnoreError();
}

absl::Status CollectiveStream::End() {
  absl::MutexLock lock(&end_mu_);
  if (!ended_) {
    ended_ = true;
    closed_ = true;
    grpc::Status s = stream_->Finish();
    end_status_ =
        s.ok() ? absl::UnavailableError("the collective stream ended early") : FromGrpcStatus(s);
  }
  return end_status_;
}

absl::Status CollectiveStream::Submit(const v1::CollectiveRequest& request) {
  if (closed_) return absl::FailedPreconditionError("the collective stream has ended");
  if (outstanding() >= kMaxUnread) {
    return absl::FailedPreconditionError(
        absl::StrCat(kMaxUnread, " outcomes are unread; call Next before submitting more"));
  }
  if (!stream_->Write(request)) {
    closed_ = true;
    return absl::UnavailableError("the collective stream broke; Next reports why");
  }
  ++submitted_;
  return absl::OkStatus();
}

absl::StatusOr<v1::CollectiveReply> CollectiveStream::Next() {
  if (reported_ >= submitted_) {
    return absl::FailedPreconditionError("no submitted collective is waiting to be reported");
  }
  {
    absl::MutexLock lock(&end_mu_);
    if (ended_) return end_status_;
  }
  v1::CollectiveResult result;
  if (!stream_->Read(&result)) return End();
  ++reported_;
  if (result.code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(result.code()), result.message());
  }
  return std::move(*result.mutable_reply());
}

absl::Status CoordinatorClient::DeleteTensor(const std::string& mesh, const std::string& name) {
  v1::DeleteTensorRequest request;
  request.set_mesh(mesh);
  request.set_tensor(name);
  grpc::ClientContext context;
  Prepare(&context, timeout_);
  v1::DeleteTensorReply reply;
  return FromGrpcStatus(collectives_->DeleteTensor(&context, request, &reply));
}

absl::StatusOr<std::vector<v1::TensorInfo>> CoordinatorClient::ListTensors() {
  grpc::ClientContext context;
  Prepare(&context, timeout_);
  v1::ListTensorsReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(dtensors_->ListTensors(&context, {}, &reply)));
  return std::vector<v1::TensorInfo>(reply.tensors().begin(), reply.tensors().end());
}

}  // namespace tessera
