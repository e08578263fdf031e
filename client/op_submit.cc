#include "client/op_submit.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/dtensor_access.h"
#include "client/op_stream.h"
#include "client/session_impl.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "tessera/session.h"

namespace tessera::client::internal {
namespace {

std::string Prefixed(absl::string_view what, absl::string_view message) {
  return what.empty() ? std::string(message) : absl::StrCat(what, ": ", message);
}

// Every input a handle of `session` on the first input's mesh whose own op is not known to have
// failed (that op's failure, with its reason, otherwise).
absl::Status CheckStreamInputs(const std::shared_ptr<Session>& session,
                               absl::Span<const DTensor> inputs, absl::string_view what) {
  for (const DTensor& t : inputs) {
    const auto& state = DTensorAccess::StateOf(t);
    if (state == nullptr) {
      return absl::InvalidArgumentError(Prefixed(what, "an op input is an empty DTensor handle"));
    }
    if (state->session != session) {
      return absl::InvalidArgumentError(
          Prefixed(what, absl::StrCat("inputs '", inputs[0].name(), "' and '", t.name(),
                                      "' belong to different sessions")));
    }
    if (t.info().mesh != inputs[0].info().mesh) {
      return absl::InvalidArgumentError(
          Prefixed(what, absl::StrCat("inputs '", inputs[0].name(), "' and '", t.name(),
                                      "' are on different meshes ('", inputs[0].info().mesh, "', '",
                                      t.info().mesh, "'); redistribute one to the other's mesh")));
    }
    if (state->created != nullptr && state->created->known() && !state->created->status().ok()) {
      RETURN_IF_ERROR(DTensorAccess::AwaitCreated(*state));
    }
  }
  return absl::OkStatus();
}

// On the op stream: the handle at once, with the planned metadata; the op queued.
absl::StatusOr<DTensor> SubmitOnStream(const std::shared_ptr<Session>& session,
                                       v1::OpRequest request, absl::Span<const DTensor> inputs,
                                       absl::string_view what, PlanOp plan) {
  SessionImpl& impl = internal_impl(*session);
  RETURN_IF_ERROR(CheckStreamInputs(session, inputs, what));
  ASSIGN_OR_RETURN(PlannedOp planned, plan());
  if (request.output().empty()) request.set_output(impl.NextTensorName());
  v1::TensorInfo info;
  info.set_name(request.output());
  info.set_mesh(inputs[0].info().mesh);
  *info.mutable_meta() = ToProto(planned.output);
  info.set_owner(impl.options.client_id);
  info.set_state(v1::PENDING);
  ASSIGN_OR_RETURN(DTensor out, DTensorAccess::Adopt(session, info, true));
  auto& state = DTensorAccess::StateOf(out);
  state.redistributions = std::move(planned.redistributions);
  v1::StreamCall call;
  *call.mutable_op() = std::move(request);
  state.created = impl.ops.Send(std::move(call));
  return out;
}

// SubmitOnStream of an op with several outputs: a handle for each planned output.
absl::StatusOr<std::vector<DTensor>> SubmitOutputsOnStream(const std::shared_ptr<Session>& session,
                                                           v1::OpRequest request,
                                                           absl::Span<const DTensor> inputs,
                                                           absl::string_view what, PlanOp plan) {
  SessionImpl& impl = internal_impl(*session);
  RETURN_IF_ERROR(CheckStreamInputs(session, inputs, what));
  ASSIGN_OR_RETURN(PlannedOp planned, plan());
  std::vector<DTensorSpec> specs = {planned.output};
  specs.insert(specs.end(), planned.more_outputs.begin(), planned.more_outputs.end());
  request.clear_output();
  request.clear_outputs();
  std::vector<DTensor> outs;
  for (const DTensorSpec& spec : specs) {
    v1::TensorInfo info;
    info.set_name(impl.NextTensorName());
    request.add_outputs(info.name());
    info.set_mesh(inputs[0].info().mesh);
    *info.mutable_meta() = ToProto(spec);
    info.set_owner(impl.options.client_id);
    info.set_state(v1::PENDING);
    ASSIGN_OR_RETURN(DTensor out, DTensorAccess::Adopt(session, info, true));
    DTensorAccess::StateOf(out).redistributions = planned.redistributions;
    outs.push_back(std::move(out));
  }
  v1::StreamCall call;
  *call.mutable_op() = std::move(request);
  const std::shared_ptr<StreamOutcome> created = impl.ops.Send(std::move(call));
  for (DTensor& out : outs) DTensorAccess::StateOf(out).created = created;
  return outs;
}

}  // namespace

absl::StatusOr<std::vector<DTensor>> SubmitOpOutputs(v1::OpRequest request,
                                                     absl::Span<const DTensor> inputs,
                                                     absl::string_view what, PlanOp plan) {
  const std::shared_ptr<Session>& session = DTensorAccess::StateOf(inputs[0])->session;
  SessionImpl& impl = internal_impl(*session);
  if (impl.options.op_stream) {
    return SubmitOutputsOnStream(session, std::move(request), inputs, what, plan);
  }
  grpc::ClientContext context;
  impl.Prepare(&context);
  v1::OpReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl.dtensors->RunOp(&context, request, &reply)));
  std::vector<DTensor> outs;
  for (const v1::TensorInfo& info : reply.outputs()) {
    ASSIGN_OR_RETURN(DTensor out, DTensorAccess::Adopt(session, info, true));
    const int mesh_ndim = out.spec().mesh.ndim();
    for (const v1::InputRedistribution& r : reply.redistributions()) {
      ASSIGN_OR_RETURN(InputRedistribution moved, FromWire(r, mesh_ndim));
      DTensorAccess::StateOf(out).redistributions.push_back(std::move(moved));
    }
    outs.push_back(std::move(out));
  }
  if (outs.empty()) {  // an op with one output answers `output` alone
    ASSIGN_OR_RETURN(DTensor out, DTensorAccess::Adopt(session, reply.output(), true));
    outs.push_back(std::move(out));
  }
  return outs;
}

absl::StatusOr<DTensor> SubmitOp(v1::OpRequest request, absl::Span<const DTensor> inputs,
                                 absl::string_view what, PlanOp plan) {
  const std::shared_ptr<Session>& session = DTensorAccess::StateOf(inputs[0])->session;
  SessionImpl& impl = internal_impl(*session);
  if (impl.options.op_stream)
    return SubmitOnStream(session, std::move(request), inputs, what, plan);
  grpc::ClientContext context;
  impl.Prepare(&context);
  v1::OpReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl.dtensors->RunOp(&context, request, &reply)));
  ASSIGN_OR_RETURN(DTensor out, DTensorAccess::Adopt(session, reply.output(), true));
  const int mesh_ndim = out.spec().mesh.ndim();
  for (const v1::InputRedistribution& r : reply.redistributions()) {
    ASSIGN_OR_RETURN(InputRedistribution moved, FromWire(r, mesh_ndim));
    DTensorAccess::StateOf(out).redistributions.push_back(std::move(moved));
  }
  return out;
}

}  // namespace tessera::client::internal
