#include "client/dtensor.h"

#include <algorithm>
#include <cstring>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "transfer/tensor_stream.h"

namespace tessera::client {
namespace {

absl::StatusOr<DTensorSpec> SpecOf(const v1::TensorInfo& info) { return FromProto(info.meta()); }

}  // namespace

absl::StatusOr<std::shared_ptr<Session>> Session::Connect(const std::string& address,
                                                          SessionOptions options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(DeadlineAfter(options.timeout))) {
    return absl::UnavailableError(absl::StrCat("cannot reach tessera-coordinator at ", address,
                                               " within ", absl::FormatDuration(options.timeout)));
  }
  if (options.client_id.empty()) {
    absl::BitGen gen;
    options.client_id = absl::StrFormat("c-%016x", absl::Uniform<uint64_t>(gen));
  }
  std::shared_ptr<Session> session(new Session(channel, options));
  if (options.keep_alive) {
    grpc::ClientContext context;
    session->Prepare(&context);
    v1::KeepAliveReply reply;
    RETURN_IF_ERROR(FromGrpcStatus(session->stub_->KeepAlive(&context, {}, &reply)));
    const absl::Duration period =
        std::max(absl::Milliseconds(reply.grace_ms()) / 4, absl::Milliseconds(20));
    Session* raw = session.get();
    session->keeper_ = std::thread([raw, period] {
      while (!raw->stop_.WaitForNotificationWithTimeout(period)) {
        grpc::ClientContext context;
        raw->Prepare(&context, period);
        v1::KeepAliveReply ignored;
        raw->stub_->KeepAlive(&context, {}, &ignored);  // a missed renewal is retried next period
      }
    });
  }
  return session;
}

Session::Session(const std::shared_ptr<grpc::Channel>& channel, SessionOptions options)
    : stub_(v1::DTensorService::NewStub(channel)),
      meshes_(v1::MeshService::NewStub(channel)),
      options_(std::move(options)) {}

Session::~Session() {
  stop_.Notify();
  if (keeper_.joinable()) keeper_.join();
}

void Session::Prepare(grpc::ClientContext* context, absl::Duration timeout) const {
  context->set_deadline(DeadlineAfter(timeout > absl::ZeroDuration() ? timeout : options_.timeout));
  context->AddMetadata("tessera-client", options_.client_id);
}

absl::StatusOr<Mesh> InitDeviceMesh(Session& session, const std::string& device_type,
                                    const Shape& shape, const std::vector<std::string>& dim_names,
                                    const std::string& name) {
  v1::CreateMeshRequest request;
  request.set_name(name);
  request.set_device_type(device_type);
  for (int64_t d : shape) request.add_shape(d);
  for (const std::string& n : dim_names) request.add_dim_names(n);
  grpc::ClientContext context;
  session.Prepare(&context, absl::Minutes(2));
  v1::MeshInfo info;
  RETURN_IF_ERROR(FromGrpcStatus(session.meshes().CreateMesh(&context, request, &info)));
  ASSIGN_OR_RETURN(DeviceMesh mesh, FromProto(info.mesh()));
  return Mesh{info.name(), std::move(mesh)};
}

absl::StatusOr<Mesh> GetMesh(Session& session, const std::string& name) {
  v1::GetMeshRequest request;
  request.set_name(name);
  grpc::ClientContext context;
  session.Prepare(&context);
  v1::MeshInfo info;
  RETURN_IF_ERROR(FromGrpcStatus(session.meshes().GetMesh(&context, request, &info)));
  ASSIGN_OR_RETURN(DeviceMesh mesh, FromProto(info.mesh()));
  return Mesh{info.name(), std::move(mesh)};
}

absl::StatusOr<DTensor> DTensor::Adopt(std::shared_ptr<Session> session, const v1::TensorInfo& info,
                                       bool owned) {
  ASSIGN_OR_RETURN(DTensorSpec spec, SpecOf(info));
  DTensor t;
  t.state_ = std::make_shared<State>(std::move(session), info, std::move(spec), owned);
  return t;
}

DTensor::State::~State() {
  if (!owned || session == nullptr) return;
  grpc::ClientContext context;
  session->Prepare(&context, absl::Seconds(5));
  v1::FreeTensorRequest request;
  request.set_name(info.name());
  v1::FreeTensorReply reply;
  session->stub().FreeTensor(&context, request, &reply);  // best effort; leases reclaim the rest
}

absl::Status DTensor::Free() {
  if (state_ == nullptr) return absl::FailedPreconditionError("empty DTensor handle");
  grpc::ClientContext context;
  state_->session->Prepare(&context);
  v1::FreeTensorRequest request;
  request.set_name(name());
  v1::FreeTensorReply reply;
  state_->owned = false;
  return FromGrpcStatus(state_->session->stub().FreeTensor(&context, request, &reply));
}

absl::StatusOr<DTensor> DTensor::Redistribute(const std::vector<Placement>& placements,
                                              const std::string& mesh,
                                              const std::string& output) const {
  v1::RedistributeRequest request;
  request.set_name(name());
  *request.mutable_placements() = ToProto(placements);
  request.set_mesh(mesh);
  request.set_output(output);
  grpc::ClientContext context;
  state_->session->Prepare(&context, mesh.empty() ? absl::ZeroDuration() : kTransferTimeout);
  v1::RedistributeReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(state_->session->stub().Redistribute(&context, request, &reply)));
  ASSIGN_OR_RETURN(DTensor out, Adopt(state_->session, reply.output(), true));
  out.state_->plan = reply.plan();
  return out;
}

absl::StatusOr<v1::RedistributePlan> DTensor::ExplainRedistribute(
    const std::vector<Placement>& placements) const {
  v1::RedistributeRequest request;
  request.set_name(name());
  *request.mutable_placements() = ToProto(placements);
  request.set_explain(true);
  grpc::ClientContext context;
  state_->session->Prepare(&context);
  v1::RedistributeReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(state_->session->stub().Redistribute(&context, request, &reply)));
  return reply.plan();
}

absl::StatusOr<HostTensor> DTensor::FullTensor(const Progress& progress) const {
  v1::FullTensorRequest request;
  request.set_name(name());
  grpc::ClientContext context;
  state_->session->Prepare(&context, kTransferTimeout);
  auto reader = state_->session->stub().FullTensor(&context, request);
  return ReadTensorStream(context, *reader, absl::StrCat("full_tensor of '", name(), "'"),
                          progress);
}

absl::StatusOr<HostTensor> DTensor::ToLocal(int64_t rank) const {
  v1::ToLocalRequest request;
  request.set_name(name());
  request.set_rank(rank);
  grpc::ClientContext context;
  state_->session->Prepare(&context, kTransferTimeout);
  auto reader = state_->session->stub().ToLocal(&context, request);
  return ReadTensorStream(context, *reader,
                          absl::StrCat("to_local of '", name(), "' on rank ", rank));
}

absl::Status DTensor::Synchronize(absl::Duration timeout) const {
  v1::SynchronizeRequest request;
  request.add_names(name());
  grpc::ClientContext context;
  state_->session->Prepare(&context, timeout);
  v1::SynchronizeReply reply;
  return FromGrpcStatus(state_->session->stub().Synchronize(&context, request, &reply));
}

absl::StatusOr<v1::TensorInfo> DTensor::Refresh() const {
  v1::GetTensorRequest request;
  request.set_name(name());
  grpc::ClientContext context;
  state_->session->Prepare(&context);
  v1::TensorInfo info;
  RETURN_IF_ERROR(FromGrpcStatus(state_->session->stub().GetTensor(&context, request, &info)));
  return info;
}

absl::StatusOr<DTensor> DistributeTensor(Session& session, const HostTensor& tensor,
                                         const Mesh& mesh, const std::vector<Placement>& placements,
                                         const DistributeOptions& options) {
  grpc::ClientContext context;
  session.Prepare(&context, kTransferTimeout);
  v1::TensorInfo info;
  auto writer = session.stub().DistributeTensor(&context, &info);
  v1::DistributeChunk chunk;
  v1::DistributeHeader* h = chunk.mutable_header();
  h->set_name(options.name);
  h->set_mesh(mesh.name);
  *h->mutable_placements() = ToProto(placements);
  h->set_dtype(ToProto(tensor.dtype()));
  *h->mutable_shape() = ToProto(tensor.shape());
  h->set_src_data_rank(options.src_data_rank);
  int64_t sent = 0;
  WriteChunks(AsBytes(tensor), [&](absl::string_view piece) {
    chunk.set_data(piece.data(), piece.size());
    if (!writer->Write(chunk)) return false;  // the server ended the call; Finish says why
    chunk.Clear();
    sent += static_cast<int64_t>(piece.size());
    if (options.progress) options.progress(sent, static_cast<int64_t>(tensor.nbytes()));
    return true;
  });
  writer->WritesDone();
  RETURN_IF_ERROR(FromGrpcStatus(writer->Finish()));
  return DTensor::Adopt(session.shared_from_this(), info, true);
}

absl::StatusOr<DTensor> FromLocal(Session& session, absl::Span<const HostTensor> locals,
                                  const Mesh& mesh, const std::vector<Placement>& placements,
                                  const FromLocalOptions& options) {
  grpc::ClientContext context;
  session.Prepare(&context, kTransferTimeout);
  v1::TensorInfo info;
  auto writer = session.stub().FromLocal(&context, &info);
  for (size_t r = 0; r < locals.size(); ++r) {
    const HostTensor& t = locals[r];
    v1::FromLocalChunk chunk;
    if (r == 0) {
      v1::FromLocalHeader* h = chunk.mutable_header();
      h->set_name(options.name);
      h->set_mesh(mesh.name);
      *h->mutable_placements() = ToProto(placements);
      h->set_dtype(ToProto(t.dtype()));
      if (options.shape.has_value()) *h->mutable_shape() = ToProto(*options.shape);
      h->set_run_check(options.run_check);
    }
    chunk.set_begins_rank(true);
    chunk.set_rank(static_cast<int64_t>(r));
    *chunk.mutable_local_shape() = ToProto(t.shape());
    const bool open = WriteChunks(AsBytes(t), [&](absl::string_view piece) {
      chunk.set_data(piece.data(), piece.size());
      const bool sent = writer->Write(chunk);
      chunk.Clear();
      return sent;
    });
    if (!open) break;
  }
  writer->WritesDone();
  RETURN_IF_ERROR(FromGrpcStatus(writer->Finish()));
  return DTensor::Adopt(session.shared_from_this(), info, true);
}

absl::StatusOr<DTensor> CreateTensor(Session& session, v1::Factory factory, const Mesh& mesh,
                                     const Shape& shape, const std::vector<Placement>& placements,
                                     DType dtype, double value, uint64_t seed,
                                     const std::string& name) {
  v1::CreateTensorRequest request;
  request.set_name(name);
  request.set_mesh(mesh.name);
  *request.mutable_placements() = ToProto(placements);
  request.set_dtype(ToProto(dtype));
  *request.mutable_shape() = ToProto(shape);
  request.set_factory(factory);
  request.set_value(value);
  request.set_seed(seed);
  grpc::ClientContext context;
  session.Prepare(&context);
  v1::TensorInfo info;
  RETURN_IF_ERROR(FromGrpcStatus(session.stub().CreateTensor(&context, request, &info)));
  return DTensor::Adopt(session.shared_from_this(), info, true);
}

absl::StatusOr<DTensor> Zeros(Session& s, const Mesh& m, const Shape& shape,
                              const std::vector<Placement>& p, DType dtype) {
  return CreateTensor(s, v1::ZEROS, m, shape, p, dtype);
}
absl::StatusOr<DTensor> Ones(Session& s, const Mesh& m, const Shape& shape,
                             const std::vector<Placement>& p, DType dtype) {
  return CreateTensor(s, v1::ONES, m, shape, p, dtype);
}
absl::StatusOr<DTensor> Full(Session& s, const Mesh& m, const Shape& shape,
                             const std::vector<Placement>& p, double value, DType dtype) {
  return CreateTensor(s, v1::FULL, m, shape, p, dtype, value);
}
absl::StatusOr<DTensor> Rand(Session& s, const Mesh& m, const Shape& shape,
                             const std::vector<Placement>& p, uint64_t seed, DType dtype) {
  return CreateTensor(s, v1::RAND, m, shape, p, dtype, 0, seed);
}
absl::StatusOr<DTensor> Randn(Session& s, const Mesh& m, const Shape& shape,
                              const std::vector<Placement>& p, uint64_t seed, DType dtype) {
  return CreateTensor(s, v1::RANDN, m, shape, p, dtype, 0, seed);
}

absl::StatusOr<DTensor> GetTensor(Session& session, const std::string& name) {
  v1::GetTensorRequest request;
  request.set_name(name);
  grpc::ClientContext context;
  session.Prepare(&context);
  v1::TensorInfo info;
  RETURN_IF_ERROR(FromGrpcStatus(session.stub().GetTensor(&context, request, &info)));
  return DTensor::Adopt(session.shared_from_this(), info, false);
}

absl::StatusOr<DTensor> RunOp(const OpCall& op, absl::Span<const DTensor> inputs,
                              const std::string& output) {
  if (inputs.empty() || inputs[0].state_ == nullptr) {
    return absl::InvalidArgumentError("an op needs input tensors");
  }
  Session& session = *inputs[0].state_->session;
  v1::OpRequest request;
  *request.mutable_op() = ToProto(op);
  for (const DTensor& t : inputs) request.add_inputs(t.name());
  request.set_output(output);
  grpc::ClientContext context;
  session.Prepare(&context);
  v1::OpReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(session.stub().RunOp(&context, request, &reply)));
  ASSIGN_OR_RETURN(DTensor out, DTensor::Adopt(inputs[0].state_->session, reply.output(), true));
  out.state_->redistributions.assign(reply.redistributions().begin(),
                                     reply.redistributions().end());
  return out;
}

namespace {
absl::StatusOr<DTensor> Op(OpKind kind, absl::Span<const DTensor> inputs) {
  OpCall op;
  op.kind = kind;
  return RunOp(op, inputs);
}
absl::StatusOr<DTensor> Reduction(OpKind kind, const DTensor& x, std::vector<int> dims,
                                  bool keepdim) {
  OpCall op;
  op.kind = kind;
  op.dims = std::move(dims);
  op.keepdim = keepdim;
  return RunOp(op, {x});
}
}  // namespace

absl::StatusOr<DTensor> Mm(const DTensor& a, const DTensor& b) { return Op(OpKind::kMm, {a, b}); }
absl::StatusOr<DTensor> Matmul(const DTensor& a, const DTensor& b) {
  return Op(OpKind::kMatmul, {a, b});
}
absl::StatusOr<DTensor> Addmm(const DTensor& bias, const DTensor& a, const DTensor& b, double beta,
                              double alpha) {
  OpCall op;
  op.kind = OpKind::kAddmm;
  op.alpha = alpha;
  op.beta = beta;
  return RunOp(op, {bias, a, b});
}
absl::StatusOr<DTensor> Add(const DTensor& a, const DTensor& b) { return Op(OpKind::kAdd, {a, b}); }
absl::StatusOr<DTensor> Sub(const DTensor& a, const DTensor& b) { return Op(OpKind::kSub, {a, b}); }
absl::StatusOr<DTensor> Mul(const DTensor& a, const DTensor& b) { return Op(OpKind::kMul, {a, b}); }
absl::StatusOr<DTensor> Div(const DTensor& a, const DTensor& b) { return Op(OpKind::kDiv, {a, b}); }
absl::StatusOr<DTensor> Relu(const DTensor& x) { return Op(OpKind::kRelu, {x}); }
absl::StatusOr<DTensor> Gelu(const DTensor& x) { return Op(OpKind::kGelu, {x}); }
absl::StatusOr<DTensor> Tanh(const DTensor& x) { return Op(OpKind::kTanh, {x}); }
absl::StatusOr<DTensor> Sum(const DTensor& x, std::vector<int> dims, bool keepdim) {
  return Reduction(OpKind::kSum, x, std::move(dims), keepdim);
}
absl::StatusOr<DTensor> Mean(const DTensor& x, std::vector<int> dims, bool keepdim) {
  return Reduction(OpKind::kMean, x, std::move(dims), keepdim);
}
absl::StatusOr<DTensor> Max(const DTensor& x, std::vector<int> dims, bool keepdim) {
  return Reduction(OpKind::kMax, x, std::move(dims), keepdim);
}
absl::StatusOr<DTensor> Transpose(const DTensor& x, int dim0, int dim1) {
  OpCall op;
  op.kind = OpKind::kTranspose;
  op.dim0 = dim0;
  op.dim1 = dim1;
  return RunOp(op, {x});
}
absl::StatusOr<DTensor> Cast(const DTensor& x, DType dtype) {
  OpCall op;
  op.kind = OpKind::kCast;
  op.dtype = dtype;
  return RunOp(op, {x});
}

}  // namespace tessera::client
