// DTensors on the service: the handles, distribute / from_local / factories, redistribute and the
// ops, over a Session's DTensorService stub.

#include "tessera/dtensor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/direct_distribute.h"
#include "client/direct_download.h"
#include "client/dtensor_access.h"
#include "client/op_stream.h"
#include "client/op_submit.h"
#include "client/session_impl.h"
#include "client/wire.h"
#include "core/sharding/sharding_propagation.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "tessera/session.h"
#include "transfer/tensor_stream.h"

namespace tessera::client {

namespace {

internal::SessionImpl& ImplOf(const std::shared_ptr<Session>& session) {
  return internal_impl(*session);
}

}  // namespace

absl::Status DTensorAccess::AwaitCreated(const DTensor::State& state) {
  if (state.created == nullptr) return absl::OkStatus();
  internal::SessionImpl& impl = internal_impl(*state.session);
  const absl::Status s = impl.ops.Await(state.created, impl.options.timeout);
  if (s.ok()) return s;
  return WithContext(absl::StrCat("the op that makes '", state.info.name, "' failed"), s);
}

namespace {

// A free on the op stream, ordered after the ops queued there that read the tensor.
std::shared_ptr<internal::StreamOutcome> SendFree(internal::SessionImpl& impl,
                                                  const std::string& name) {
  v1::StreamCall call;
  call.mutable_free()->set_name(name);
  return impl.ops.Send(std::move(call));
}

}  // namespace

DTensor::State::~State() {
  if (!owned || session == nullptr) return;
  internal::SessionImpl& impl = internal_impl(*session);
  if (impl.options.op_stream) {
    SendFree(impl, info.name);  // best effort, as below
    return;
  }
  grpc::ClientContext context;
  impl.Prepare(&context, absl::Seconds(5));
  v1::FreeTensorRequest request;
  request.set_name(info.name);
  v1::FreeTensorReply reply;
  impl.dtensors->FreeTensor(&context, request, &reply);  // best effort; leases reclaim the rest
}

absl::Status DTensor::Free() {
  if (state_ == nullptr) return absl::FailedPreconditionError("empty DTensor handle");
  internal::SessionImpl& impl = ImplOf(state_->session);
  if (impl.options.op_stream) {
    RETURN_IF_ERROR(DTensorAccess::AwaitCreated(*state_));
    state_->owned = false;
    return impl.ops.Await(SendFree(impl, name()), impl.options.timeout);
  }
  grpc::ClientContext context;
  impl.Prepare(&context);
  v1::FreeTensorRequest request;
  request.set_name(name());
  v1::FreeTensorReply reply;
  state_->owned = false;
  return FromGrpcStatus(impl.dtensors->FreeTensor(&context, request, &reply));
}

absl::StatusOr<DTensor> DTensor::Redistribute(const std::vector<Placement>& placements,
                                              const std::string& mesh, const std::string& output,
                                              PlannerKind planner) const {
  const internal::SessionImpl& impl = ImplOf(state_->session);
  RETURN_IF_ERROR(DTensorAccess::AwaitCreated(*state_));
  v1::RedistributeRequest request;
  request.set_name(name());
  *request.mutable_placements() = ToProto(placements);
  request.set_mesh(mesh);
  request.set_output(output);
  request.set_planner(ToWire(planner));
  grpc::ClientContext context;
  // A move across meshes streams the tensor through the coordinator.
  impl.Prepare(&context, mesh.empty() ? absl::ZeroDuration() : kTransferTimeout);
  v1::RedistributeReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl.dtensors->Redistribute(&context, request, &reply)));
  ASSIGN_OR_RETURN(DTensor out, DTensorAccess::Adopt(state_->session, reply.output(), true));
  ASSIGN_OR_RETURN(out.state_->plan, FromProto(reply.plan(), spec().mesh.ndim()));
  out.state_->relayed_bytes = reply.relayed_bytes();
  return out;
}

absl::StatusOr<RedistributePlan> DTensor::ExplainRedistribute(
    const std::vector<Placement>& placements, PlannerKind planner) const {
  const internal::SessionImpl& impl = ImplOf(state_->session);
  RETURN_IF_ERROR(DTensorAccess::AwaitCreated(*state_));
  v1::RedistributeRequest request;
  request.set_name(name());
  *request.mutable_placements() = ToProto(placements);
  request.set_explain(true);
  request.set_planner(ToWire(planner));
  grpc::ClientContext context;
  impl.Prepare(&context);
  v1::RedistributeReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl.dtensors->Redistribute(&context, request, &reply)));
  return FromProto(reply.plan(), spec().mesh.ndim());
}

absl::StatusOr<HostTensor> DTensor::FullTensor(const Progress& progress) const {
  internal::SessionImpl& impl = ImplOf(state_->session);
  RETURN_IF_ERROR(DTensorAccess::AwaitCreated(*state_));
  if (impl.options.direct_data != DirectData::kOff) {
    v1::PlanDownloadRequest plan;
    plan.set_name(name());
    plan.set_full(true);
    // A read changes nothing: kAuto relays after any failure, whose answer (e.g. why the
    // tensor's write failed) is then the relay's.
    bool may_relay = false;
    absl::StatusOr<HostTensor> direct =
        DownloadDirect(impl, plan, progress, kWorkerReachTimeout, may_relay);
    if (direct.ok() || impl.options.direct_data == DirectData::kOn) return direct;
  }
  v1::FullTensorRequest request;
  request.set_name(name());
  grpc::ClientContext context;
  impl.Prepare(&context, kTransferTimeout);
  auto reader = impl.dtensors->FullTensor(&context, request);
  return ReadTensorStream(context, *reader, absl::StrCat("full_tensor of '", name(), "'"),
                          progress);
}

absl::StatusOr<HostTensor> DTensor::ToLocal(int64_t rank) const {
  internal::SessionImpl& impl = ImplOf(state_->session);
  RETURN_IF_ERROR(DTensorAccess::AwaitCreated(*state_));
  if (impl.options.direct_data != DirectData::kOff) {
    v1::PlanDownloadRequest plan;
    plan.set_name(name());
    plan.set_rank(rank);
    bool may_relay = false;  // unused: as in FullTensor, kAuto relays after any failure
    absl::StatusOr<HostTensor> direct =
        DownloadDirect(impl, plan, nullptr, kWorkerReachTimeout, may_relay);
    if (direct.ok() || impl.options.direct_data == DirectData::kOn) return direct;
  }
  v1::ToLocalRequest request;
  request.set_name(name());
  request.set_rank(rank);
  grpc::ClientContext context;
  impl.Prepare(&context, kTransferTimeout);
  auto reader = impl.dtensors->ToLocal(&context, request);
  return ReadTensorStream(context, *reader,
                          absl::StrCat("to_local of '", name(), "' on rank ", rank));
}

absl::Status DTensor::Synchronize(absl::Duration timeout) const {
  const internal::SessionImpl& impl = ImplOf(state_->session);
  RETURN_IF_ERROR(DTensorAccess::AwaitCreated(*state_));
  v1::SynchronizeRequest request;
  request.add_names(name());
  grpc::ClientContext context;
  impl.Prepare(&context, timeout);
  v1::SynchronizeReply reply;
  return FromGrpcStatus(impl.dtensors->Synchronize(&context, request, &reply));
}

absl::StatusOr<DTensorInfo> DTensor::Refresh() const {
  const internal::SessionImpl& impl = ImplOf(state_->session);
  RETURN_IF_ERROR(DTensorAccess::AwaitCreated(*state_));
  v1::GetTensorRequest request;
  request.set_name(name());
  grpc::ClientContext context;
  impl.Prepare(&context);
  v1::TensorInfo info;
  RETURN_IF_ERROR(FromGrpcStatus(impl.dtensors->GetTensor(&context, request, &info)));
  return FromWire(info);
}

absl::StatusOr<DTensor> DistributeTensor(Session& session, const HostTensor& tensor,
                                         const Mesh& mesh, const std::vector<Placement>& placements,
                                         const DistributeOptions& options) {
  internal::SessionImpl& impl = internal_impl(session);
  v1::DistributeChunk chunk;
  v1::DistributeHeader* h = chunk.mutable_header();
  h->set_name(options.name);
  h->set_mesh(mesh.name);
  *h->mutable_placements() = ToProto(placements);
  h->set_dtype(ToProto(tensor.dtype()));
  *h->mutable_shape() = ToProto(tensor.shape());
  h->set_src_data_rank(options.src_data_rank);
  if (impl.options.direct_data != DirectData::kOff) {
    v1::PlanUploadRequest request;
    *request.mutable_header() = *h;
    request.set_transfer_timeout_ms(absl::ToInt64Milliseconds(kTransferTimeout));
    bool may_relay = false;
    absl::StatusOr<v1::TensorInfo> direct =
        UploadDirect(impl, request, absl::MakeConstSpan(&tensor, 1), options.progress,
                     kWorkerReachTimeout, may_relay);
    if (direct.ok()) return DTensorAccess::Adopt(session.shared_from_this(), *direct, true);
    if (impl.options.direct_data == DirectData::kOn || !may_relay) return direct.status();
  }
  grpc::ClientContext context;
  impl.Prepare(&context, kTransferTimeout);
  v1::TensorInfo info;
  auto writer = impl.dtensors->DistributeTensor(&context, &info);
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
  return DTensorAccess::Adopt(session.shared_from_this(), info, true);
}

absl::StatusOr<DTensor> FromLocal(Session& session, absl::Span<const HostTensor> locals,
                                  const Mesh& mesh, const std::vector<Placement>& placements,
                                  const FromLocalOptions& options) {
  internal::SessionImpl& impl = internal_impl(session);
  v1::FromLocalHeader header;
  header.set_name(options.name);
  header.set_mesh(mesh.name);
  *header.mutable_placements() = ToProto(placements);
  if (!locals.empty()) header.set_dtype(ToProto(locals[0].dtype()));
  if (options.shape.has_value()) *header.mutable_shape() = ToProto(*options.shape);
  header.set_run_check(options.run_check);
  if (impl.options.direct_data != DirectData::kOff && !locals.empty()) {
    v1::PlanUploadRequest request;
    *request.mutable_from_local() = header;
    for (const HostTensor& t : locals) {
      if (t.dtype() != locals[0].dtype()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "from_local's local tensors differ in dtype: ", DTypeName(locals[0].dtype()), " and ",
            DTypeName(t.dtype())));
      }
      *request.add_local_shapes() = ToProto(t.shape());
    }
    request.set_transfer_timeout_ms(absl::ToInt64Milliseconds(kTransferTimeout));
    bool may_relay = false;
    absl::StatusOr<v1::TensorInfo> direct =
        UploadDirect(impl, request, locals, nullptr, kWorkerReachTimeout, may_relay);
    if (direct.ok()) return DTensorAccess::Adopt(session.shared_from_this(), *direct, true);
    if (impl.options.direct_data == DirectData::kOn || !may_relay) return direct.status();
  }
  grpc::ClientContext context;
  impl.Prepare(&context, kTransferTimeout);
  v1::TensorInfo info;
  auto writer = impl.dtensors->FromLocal(&context, &info);
  for (size_t r = 0; r < locals.size(); ++r) {
    const HostTensor& t = locals[r];
    v1::FromLocalChunk chunk;
    if (r == 0) *chunk.mutable_header() = header;
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
  return DTensorAccess::Adopt(session.shared_from_this(), info, true);
}

absl::StatusOr<DTensor> CreateTensor(Session& session, Factory factory, const Mesh& mesh,
                                     const Shape& shape, const std::vector<Placement>& placements,
                                     DType dtype, double value, uint64_t seed,
                                     const std::string& name) {
  const internal::SessionImpl& impl = internal_impl(session);
  v1::CreateTensorRequest request;
  request.set_name(name);
  request.set_mesh(mesh.name);
  *request.mutable_placements() = ToProto(placements);
  request.set_dtype(ToProto(dtype));
  *request.mutable_shape() = ToProto(shape);
  request.set_factory(ToWire(factory));
  request.set_value(value);
  request.set_seed(seed);
  grpc::ClientContext context;
  impl.Prepare(&context);
  v1::TensorInfo info;
  RETURN_IF_ERROR(FromGrpcStatus(impl.dtensors->CreateTensor(&context, request, &info)));
  return DTensorAccess::Adopt(session.shared_from_this(), info, true);
}

absl::StatusOr<DTensor> Zeros(Session& s, const Mesh& m, const Shape& shape,
                              const std::vector<Placement>& p, DType dtype) {
  return CreateTensor(s, Factory::kZeros, m, shape, p, dtype);
}
absl::StatusOr<DTensor> Ones(Session& s, const Mesh& m, const Shape& shape,
                             const std::vector<Placement>& p, DType dtype) {
  return CreateTensor(s, Factory::kOnes, m, shape, p, dtype);
}
absl::StatusOr<DTensor> Full(Session& s, const Mesh& m, const Shape& shape,
                             const std::vector<Placement>& p, double value, DType dtype) {
  return CreateTensor(s, Factory::kFull, m, shape, p, dtype, value);
}
absl::StatusOr<DTensor> Rand(Session& s, const Mesh& m, const Shape& shape,
                             const std::vector<Placement>& p, uint64_t seed, DType dtype) {
  return CreateTensor(s, Factory::kRand, m, shape, p, dtype, 0, seed);
}
absl::StatusOr<DTensor> Randn(Session& s, const Mesh& m, const Shape& shape,
                              const std::vector<Placement>& p, uint64_t seed, DType dtype) {
  return CreateTensor(s, Factory::kRandn, m, shape, p, dtype, 0, seed);
}

absl::StatusOr<SaveInfo> DTensor::Save(const std::string& path) const {
  const internal::SessionImpl& impl = ImplOf(state_->session);
  RETURN_IF_ERROR(DTensorAccess::AwaitCreated(*state_));
  v1::SaveTensorRequest request;
  request.set_name(name());
  request.set_path(path);
  grpc::ClientContext context;
  impl.Prepare(&context, kTransferTimeout);
  v1::SaveTensorReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl.dtensors->SaveTensor(&context, request, &reply)));
  return SaveInfo{reply.path(), reply.data_dir(), reply.files(), reply.saved_layout()};
}

absl::StatusOr<DTensor> LoadTensor(Session& session, const std::string& path, const Mesh& mesh,
                                   const std::vector<Placement>& placements,
                                   const LoadOptions& options) {
  const internal::SessionImpl& impl = internal_impl(session);
  v1::LoadTensorRequest request;
  request.set_path(path);
  request.set_mesh(mesh.name);
  *request.mutable_placements() = ToProto(placements);
  request.set_output(options.name);
  request.set_tensor(options.tensor);
  grpc::ClientContext context;
  impl.Prepare(&context);
  v1::TensorInfo info;
  RETURN_IF_ERROR(FromGrpcStatus(impl.dtensors->LoadTensor(&context, request, &info)));
  return DTensorAccess::Adopt(session.shared_from_this(), info, true);
}

absl::StatusOr<DTensor> GetTensor(Session& session, const std::string& name) {
  const internal::SessionImpl& impl = internal_impl(session);
  v1::GetTensorRequest request;
  request.set_name(name);
  grpc::ClientContext context;
  impl.Prepare(&context);
  v1::TensorInfo info;
  RETURN_IF_ERROR(FromGrpcStatus(impl.dtensors->GetTensor(&context, request, &info)));
  return DTensorAccess::Adopt(session.shared_from_this(), info, false);
}

absl::StatusOr<std::vector<DTensorInfo>> Session::ListTensors(const std::string& mesh) {
  // Frees of dropped handles (and ops) still on the op stream come first: a tensor this session
  // let go of before listing is not listed.
  if (impl_->options.op_stream) RETURN_IF_ERROR(impl_->ops.AwaitSent(impl_->options.timeout));
  v1::ListTensorsRequest request;
  request.set_mesh(mesh);
  grpc::ClientContext context;
  impl_->Prepare(&context);
  v1::ListTensorsReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl_->dtensors->ListTensors(&context, request, &reply)));
  std::vector<DTensorInfo> tensors;
  for (const v1::TensorInfo& t : reply.tensors()) {
    ASSIGN_OR_RETURN(DTensorInfo info, FromWire(t));
    tensors.push_back(std::move(info));
  }
  return tensors;
}

absl::StatusOr<DTensor> RunOp(const OpCall& op, absl::Span<const DTensor> inputs,
                              const std::string& output) {
  if (inputs.empty() || DTensorAccess::StateOf(inputs[0]) == nullptr) {
    return absl::InvalidArgumentError("an op needs input tensors");
  }
  v1::OpRequest request;
  *request.mutable_op() = ToProto(op);
  for (const DTensor& t : inputs) request.add_inputs(t.name());
  request.set_output(output);
  // On the op stream, the output's metadata and the inputs' redistributions come from the planner
  // the coordinator runs for OpKind ops (core/sharding/sharding_propagation).
  const auto plan = [&op, inputs]() -> absl::StatusOr<internal::PlannedOp> {
    if (static_cast<int>(inputs.size()) != op.num_inputs()) {
      return absl::InvalidArgumentError(absl::StrCat(
          OpKindName(op.kind), " takes ", op.num_inputs(), " inputs, not ", inputs.size()));
    }
    std::vector<DTensorSpec> specs;
    for (const DTensor& t : inputs) specs.push_back(t.spec());
    ASSIGN_OR_RETURN(OpSharding sharding, PropagateSharding(op, specs));
    internal::PlannedOp planned{std::move(sharding.output), {}};
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (sharding.input_plans[i].steps.empty()) continue;
      planned.redistributions.push_back({inputs[i].name(), specs[i].placements,
                                         sharding.strategy.inputs[i], sharding.input_plans[i]});
    }
    return planned;
  };
  return internal::SubmitOp(std::move(request), inputs, "", plan);
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
