// CoordinatorService's streaming RPCs: a rank's local tensor passes through as a bounded pipeline
// of chunks, one read then one write, so the coordinator never holds a whole tensor.

#include "absl/strings/str_cat.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "server/coordinator_service.h"

namespace tessera {
namespace {

constexpr absl::Duration kTransferTimeout = absl::Minutes(10);

}  // namespace

grpc::Status CoordinatorService::PutLocal(grpc::ServerContext* context,
                                          grpc::ServerReader<v1::PutLocalChunk>* reader,
                                          v1::PutLocalReply* reply) {
  v1::PutLocalChunk chunk;
  if (!reader->Read(&chunk)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "PutLocal stream had no chunks");
  }
  absl::StatusOr<std::shared_ptr<Mesh>> found = ReadyMesh(chunk.mesh());
  if (!found.ok()) return ToGrpcStatus(found.status());
  Mesh& mesh = **found;
  if (chunk.rank() < 0 || chunk.rank() >= mesh.mesh.size()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("rank ", chunk.rank(), " is not in mesh '", mesh.name, "' of ",
                                     mesh.mesh.size(), " ranks"));
  }
  if (chunk.tensor().empty() || chunk.tensor().find('/') != std::string::npos) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("tensor name '", chunk.tensor(), "' must be non-empty and have no '/'"));
  }
  const absl::StatusOr<DType> dtype = FromProto(chunk.dtype());
  if (!dtype.ok()) return ToGrpcStatus(dtype.status());
  const absl::StatusOr<Shape> shape = FromProto(chunk.shape());
  if (!shape.ok()) return ToGrpcStatus(shape.status());

  const std::string name = chunk.tensor();
  const int64_t rank = chunk.rank();
  absl::StatusOr<WorkerHandle> worker =
      dispatcher_->registry().Get(mesh.mesh.ranks()[chunk.rank()]);
  if (!worker.ok()) return ToGrpcStatus(worker.status());
  const int64_t sequence = dispatcher_->registry().NextSequences({*worker})[0];

  grpc::ClientContext upstream;
  upstream.set_deadline(std::min(context->deadline(), DeadlineAfter(kTransferTimeout)));
  dispatcher_->Authorize(&upstream);
  v1::UploadReply uploaded;
  std::unique_ptr<grpc::ClientWriter<v1::TensorChunk>> writer =
      worker->stub->Upload(&upstream, &uploaded);
  v1::TensorChunk out;
  out.set_tensor(WorkerTensorName(mesh, chunk.tensor()));
  out.set_dtype(chunk.dtype());
  *out.mutable_shape() = chunk.shape();
  out.set_sequence(sequence);
  out.set_incarnation(worker->incarnation);
  out.set_data(std::move(*chunk.mutable_data()));
  bool open = writer->Write(out);
  out.Clear();
  while (open && reader->Read(&chunk)) {
    out.set_data(std::move(*chunk.mutable_data()));
    open = writer->Write(out);
  }
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!status.ok()) {
    return grpc::Status(
        status.error_code(),
        absl::StrCat("worker ", worker->id, " at ", worker->address, ": ", status.error_message()));
  }
  reply->set_bytes(uploaded.bytes());
  absl::MutexLock lock(&mesh.mu);
  mesh.tensors.try_emplace(name, static_cast<size_t>(mesh.mesh.size()))
      .first->second[static_cast<size_t>(rank)] = LocalLayout{*dtype, *shape};
  // The upload is the name's last writer now: collectives still writing it leave its entry be.
  mesh.last_writer[name] = mesh.next_write++;
  mesh.failed_writes.erase(name);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetLocal(grpc::ServerContext* context,
                                          const v1::GetLocalRequest* request,
                                          grpc::ServerWriter<v1::TensorChunk>* writer) {
  absl::StatusOr<std::shared_ptr<Mesh>> found = ReadyMesh(request->mesh());
  if (!found.ok()) return ToGrpcStatus(found.status());
  Mesh& mesh = **found;
  if (request->rank() < 0 || request->rank() >= mesh.mesh.size()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("rank ", request->rank(), " is not in mesh '", mesh.name,
                                     "' of ", mesh.mesh.size(), " ranks"));
  }
  {
    absl::MutexLock lock(&mesh.mu);
    auto it = mesh.tensors.find(request->tensor());
    if (it == mesh.tensors.end() || !it->second[static_cast<size_t>(request->rank())].has_value()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("mesh '", mesh.name, "' has no tensor '", request->tensor(),
                                       "' on rank ", request->rank()));
    }
  }
  absl::StatusOr<WorkerHandle> worker =
      dispatcher_->registry().Get(mesh.mesh.ranks()[request->rank()]);
  if (!worker.ok()) return ToGrpcStatus(worker.status());
  v1::DownloadRequest down;
  down.set_tensor(WorkerTensorName(mesh, request->tensor()));
  down.set_sequence(dispatcher_->registry().NextSequences({*worker})[0]);
  down.set_incarnation(worker->incarnation);
  grpc::ClientContext upstream;
  upstream.set_deadline(std::min(context->deadline(), DeadlineAfter(kTransferTimeout)));
  dispatcher_->Authorize(&upstream);
  std::unique_ptr<grpc::ClientReader<v1::TensorChunk>> reader =
      worker->stub->Download(&upstream, down);
  v1::TensorChunk chunk;
  bool first = true;
  while (reader->Read(&chunk)) {
    if (first) chunk.set_tensor(request->tensor());
    first = false;
    if (!writer->Write(chunk)) {
      upstream.TryCancel();
      break;
    }
  }
  grpc::Status status = reader->Finish();
  if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) {
    return grpc::Status(
        status.error_code(),
        absl::StrCat("worker ", worker->id, " at ", worker->address, ": ", status.error_message()));
  }
  return grpc::Status::OK;
}

}  // namespace tessera
