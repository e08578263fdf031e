// torch.distributed's collectives on local tensors: the requests, and the CollectiveService
// calls of a Session (uploads, downloads, sync, async_op and the ordered stream).

#include "tessera/collectives.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/session_impl.h"
#include "client/wire.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "tessera/session.h"
#include "transfer/tensor_stream.h"

namespace tessera::client {
namespace {

// Uploads, downloads and collectives may take longer than a plain call.
constexpr absl::Duration kLongCall = kTransferTimeout;

CollectiveRequest Request(CollectiveOp op, ProcessGroup group, std::string input,
                          std::string output) {
  CollectiveRequest request;
  request.op = op;
  request.group = std::move(group);
  request.input = std::move(input);
  request.output = std::move(output);
  return request;
}

}  // namespace

absl::string_view CollectiveOpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kBroadcast:
      return "broadcast";
    case CollectiveOp::kAllReduce:
      return "all_reduce";
    case CollectiveOp::kReduce:
      return "reduce";
    case CollectiveOp::kAllGather:
      return "all_gather";
    case CollectiveOp::kGather:
      return "gather";
    case CollectiveOp::kScatter:
      return "scatter";
    case CollectiveOp::kReduceScatter:
      return "reduce_scatter";
    case CollectiveOp::kAllToAll:
      return "all_to_all";
    case CollectiveOp::kBarrier:
      return "barrier";
    case CollectiveOp::kSendRecv:
      return "send_recv";
  }
  return "unknown";
}

CollectiveRequest AllReduce(ProcessGroup group, std::string input, std::string output,
                            ReduceOp op) {
  CollectiveRequest r =
      Request(CollectiveOp::kAllReduce, std::move(group), std::move(input), std::move(output));
  r.reduce_op = op;
  return r;
}

CollectiveRequest Broadcast(ProcessGroup group, std::string input, int64_t src,
                            std::string output) {
  CollectiveRequest r =
      Request(CollectiveOp::kBroadcast, std::move(group), std::move(input), std::move(output));
  r.root = src;
  return r;
}

CollectiveRequest Reduce(ProcessGroup group, std::string input, int64_t dst, std::string output,
                         ReduceOp op) {
  CollectiveRequest r =
      Request(CollectiveOp::kReduce, std::move(group), std::move(input), std::move(output));
  r.root = dst;
  r.reduce_op = op;
  return r;
}

CollectiveRequest AllGather(ProcessGroup group, std::string input, std::string output) {
  return Request(CollectiveOp::kAllGather, std::move(group), std::move(input), std::move(output));
}

CollectiveRequest Gather(ProcessGroup group, std::string input, int64_t dst, std::string output) {
  CollectiveRequest r =
      Request(CollectiveOp::kGather, std::move(group), std::move(input), std::move(output));
  r.root = dst;
  return r;
}

CollectiveRequest Scatter(ProcessGroup group, std::string input, int64_t src, std::string output) {
  CollectiveRequest r =
      Request(CollectiveOp::kScatter, std::move(group), std::move(input), std::move(output));
  r.root = src;
  return r;
}

CollectiveRequest ReduceScatter(ProcessGroup group, std::string input, std::string output,
                                ReduceOp op) {
  CollectiveRequest r =
      Request(CollectiveOp::kReduceScatter, std::move(group), std::move(input), std::move(output));
  r.reduce_op = op;
  return r;
}

CollectiveRequest AllToAll(ProcessGroup group, std::string input, std::string output) {
  return Request(CollectiveOp::kAllToAll, std::move(group), std::move(input), std::move(output));
}

CollectiveRequest SendRecv(ProcessGroup group, std::string input, int64_t src, int64_t dst,
                           std::string output) {
  CollectiveRequest r =
      Request(CollectiveOp::kSendRecv, std::move(group), std::move(input), std::move(output));
  r.root = src;
  r.peer = dst;
  return r;
}

CollectiveRequest Barrier(ProcessGroup group) {
  return Request(CollectiveOp::kBarrier, std::move(group), "", "");
}

absl::Status Session::PutLocal(const std::string& mesh, int64_t rank, const std::string& name,
                               const HostTensor& tensor) {
  grpc::ClientContext context;
  impl_->Prepare(&context, kLongCall);
  v1::PutLocalReply reply;
  std::unique_ptr<grpc::ClientWriter<v1::PutLocalChunk>> writer =
      impl_->collectives->PutLocal(&context, &reply);
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

absl::StatusOr<HostTensor> Session::GetLocal(const std::string& mesh, int64_t rank,
                                             const std::string& name) {
  v1::GetLocalRequest request;
  request.set_mesh(mesh);
  request.set_rank(rank);
  request.set_tensor(name);
  grpc::ClientContext context;
  impl_->Prepare(&context, kLongCall);
  std::unique_ptr<grpc::ClientReader<v1::TensorChunk>> reader =
      impl_->collectives->GetLocal(&context, request);
  return ReadTensorStream(context, *reader, absl::StrCat("download of '", name, "'"));
}

absl::Status Session::DeleteLocal(const std::string& mesh, const std::string& name) {
  v1::DeleteTensorRequest request;
  request.set_mesh(mesh);
  request.set_tensor(name);
  grpc::ClientContext context;
  impl_->Prepare(&context);
  v1::DeleteTensorReply reply;
  return FromGrpcStatus(impl_->collectives->DeleteTensor(&context, request, &reply));
}

absl::StatusOr<CollectiveResult> Session::RunCollective(const CollectiveRequest& request) {
  grpc::ClientContext context;
  impl_->Prepare(&context, kLongCall);
  v1::CollectiveReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(
      impl_->collectives->RunCollective(&context, ToWire(request, /*async_op=*/false), &reply)));
  return FromWire(reply);
}

absl::StatusOr<Work> Session::StartCollective(const CollectiveRequest& request) {
  grpc::ClientContext context;
  impl_->Prepare(&context, kLongCall);
  v1::CollectiveReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(
      impl_->collectives->RunCollective(&context, ToWire(request, /*async_op=*/true), &reply)));
  return Work(shared_from_this(), request.group.mesh, reply.work());
}

absl::StatusOr<std::vector<absl::StatusOr<CollectiveResult>>> Session::WaitCollectives(
    const std::string& mesh, absl::Span<const int64_t> works, absl::Duration timeout) {
  grpc::ClientContext context;
  impl_->Prepare(&context, timeout == absl::InfiniteDuration() ? kLongCall : timeout);
  v1::WaitCollectivesRequest request;
  request.set_mesh(mesh);
  for (int64_t w : works) request.add_works(w);
  v1::WaitCollectivesReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl_->collectives->WaitCollectives(&context, request, &reply)));
  if (reply.results_size() != request.works_size()) {
    return absl::InternalError(absl::StrCat("WaitCollectives answered ", reply.results_size(),
                                            " of ", request.works_size(), " works"));
  }
  std::vector<absl::StatusOr<CollectiveResult>> outcomes;
  for (const v1::CollectiveResult& r : reply.results()) outcomes.push_back(FromWire(r));
  return outcomes;
}

absl::StatusOr<CollectiveResult> Work::Wait(absl::Duration timeout) const {
  ASSIGN_OR_RETURN(std::vector<absl::StatusOr<CollectiveResult>> outcomes,
                   session_->WaitCollectives(mesh_, {id_}, timeout));
  return std::move(outcomes[0]);
}

// The gRPC stream and the counts behind a CollectiveStream.
struct CollectiveStream::Impl {
  // Ends the stream once (gRPC allows one Finish) and returns why it ended.
  absl::Status End();

  std::shared_ptr<Session> session;  // keeps the channel up
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::CollectiveRequest, v1::CollectiveResult>> stream;
  std::atomic<int64_t> submitted{0};
  std::atomic<int64_t> reported{0};
  std::atomic<bool> closed{false};  // no more writes
  absl::Mutex end_mu;
  bool ended ABSL_GUARDED_BY(end_mu) = false;  // Finish was called
  absl::Status end_status ABSL_GUARDED_BY(end_mu);
};

absl::StatusOr<std::unique_ptr<CollectiveStream>> Session::OpenCollectiveStream(
    absl::Duration timeout) {
  auto impl = std::make_unique<CollectiveStream::Impl>();
  impl->session = shared_from_this();
  impl_->Prepare(&impl->context, timeout);
  impl->stream = impl_->collectives->CollectiveStream(&impl->context);
  return std::unique_ptr<CollectiveStream>(new CollectiveStream(std::move(impl)));
}

CollectiveStream::CollectiveStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CollectiveStream::~CollectiveStream() {
  if (!impl_->closed.exchange(true)) impl_->stream->WritesDone();
  {
    absl::MutexLock lock(&impl_->end_mu);
    if (impl_->ended) return;
  }
  v1::CollectiveResult ignored;
  while (impl_->stream->Read(&ignored)) {
  }
  impl_->End().IgnoreError();
}

absl::Status CollectiveStream::Impl::End() {
  absl::MutexLock lock(&end_mu);
  if (!ended) {
    ended = true;
    closed = true;
    grpc::Status s = stream->Finish();
    end_status =
        s.ok() ? absl::UnavailableError("the collective stream ended early") : FromGrpcStatus(s);
  }
  return end_status;
}

int64_t CollectiveStream::outstanding() const { return impl_->submitted - impl_->reported; }

absl::Status CollectiveStream::Submit(const CollectiveRequest& request) {
  if (impl_->closed) return absl::FailedPreconditionError("the collective stream has ended");
  if (outstanding() >= kMaxUnread) {
    return absl::FailedPreconditionError(
        absl::StrCat(kMaxUnread, " outcomes are unread; call Next before submitting more"));
  }
  if (!impl_->stream->Write(ToWire(request, /*async_op=*/true))) {
    impl_->closed = true;
    return absl::UnavailableError("the collective stream broke; Next reports why");
  }
  ++impl_->submitted;
  return absl::OkStatus();
}

absl::StatusOr<CollectiveResult> CollectiveStream::Next() {
  if (impl_->reported >= impl_->submitted) {
    return absl::FailedPreconditionError("no submitted collective is waiting to be reported");
  }
  {
    absl::MutexLock lock(&impl_->end_mu);
    if (impl_->ended) return impl_->end_status;
  }
  v1::CollectiveResult result;
  if (!impl_->stream->Read(&result)) return impl_->End();
  ++impl_->reported;
  return FromWire(result);
}

}  // namespace tessera::client
