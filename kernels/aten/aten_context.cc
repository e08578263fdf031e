#include "kernels/aten/aten_context.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/layout.h"

namespace tessera::kernels {
namespace aten {

ConstTensorView Context::Input(absl::string_view arg) const { return inputs[args().Tensor(arg)]; }

const DTensorSpec& Context::InputSpec(absl::string_view arg) const {
  return local.inputs[args().Tensor(arg)];
}

absl::StatusOr<int> Context::Dim(absl::string_view arg, int rank) const {
  const ops::CallContext call{*local.call->op, args(), local.call->inputs};
  return ops::CallDim(call, arg, args().Int(arg), rank);
}

absl::Status Context::Named(absl::Status status) const {
  if (status.code() != absl::StatusCode::kInvalidArgument) return status;
  return absl::InvalidArgumentError(absl::StrCat(name(), ": ", status.message()));
}

absl::StatusOr<TensorView> Context::Temporary(DType dtype, Shape shape) {
  ASSIGN_OR_RETURN(DeviceTensor t, backend.Allocate(dtype, std::move(shape)));
  temporaries.push_back(std::move(t));
  return temporaries.back().View();
}

absl::StatusOr<ConstTensorView> Context::As(const ConstTensorView& view, DType dtype) {
  if (view.dtype == dtype) return view;
  ASSIGN_OR_RETURN(TensorView out, Temporary(dtype, view.shape));
  RETURN_IF_ERROR(backend.Cast(view, out));
  return ConstTensorView(out);
}

absl::StatusOr<ConstTensorView> Context::Number(double value, DType dtype) {
  ASSIGN_OR_RETURN(TensorView out, Temporary(dtype, {}));
  RETURN_IF_ERROR(backend.Fill(out, value));
  return ConstTensorView(out);
}

absl::StatusOr<ConstTensorView> Context::Operand(absl::string_view arg, DType dtype) {
  const ops::OpValue& v = args().Get(arg);
  if (std::holds_alternative<ops::TensorRef>(v)) return As(Input(arg), dtype);
  return Number(ops::ScalarAsDouble(v), dtype);
}

absl::StatusOr<ConstTensorView> Context::Broadcast(const ConstTensorView& view,
                                                   const Shape& shape) {
  if (view.shape == shape) return view;
  const ConstStridedView src = StridedOf(view);
  const int lead = static_cast<int>(shape.size()) - view.rank();
  ConstStridedView expanded{src.data, src.dtype, shape, std::vector<int64_t>(shape.size(), 0)};
  for (int d = 0; d < view.rank(); ++d) {
    if (view.shape[d] == shape[lead + d]) expanded.strides[lead + d] = src.strides[d];
  }
  ASSIGN_OR_RETURN(TensorView out, Temporary(view.dtype, shape));
  RETURN_IF_ERROR(backend.CopyStrided(expanded, StridedOf(out)));
  return ConstTensorView(out);
}

const LocalTable& Table() {
  static const LocalTable* const table = [] {
    auto* t = new LocalTable;
    AddPointwiseKernels(*t);
    AddReductionKernels(*t);
    AddMatmulKernels(*t);
    AddViewKernels(*t);
    AddTensorKernels(*t);
    AddNormKernels(*t);
    AddIndexKernels(*t);
    AddLossKernels(*t);
    AddFactoryKernels(*t);
    return t;
  }();
  return *table;
}

}  // namespace aten

absl::StatusOr<std::vector<DeviceTensor>> RunLocalCallOutputs(
    KernelBackend& backend, const LocalCall& call, std::span<const ConstTensorView> inputs) {
  const std::string& name = call.call->op->qualified_name;
  auto it = aten::Table().find(name);
  if (it == aten::Table().end()) {
    return absl::UnimplementedError(absl::StrCat(name, " has no local implementation"));
  }
  if (inputs.size() != call.inputs.size() || inputs.size() != call.call->inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", inputs.size(), " local inputs for ",
                                                   call.call->inputs.size(), " inputs"));
  }
  if (call.more_outputs.size() != call.call->more_outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", call.more_outputs.size() + 1,
                                                   " output specs for ",
                                                   call.call->more_outputs.size() + 1, " outputs"));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Shape expected = LocalShapeAndOffsetAt(call.inputs[i], call.coordinate).shape;
    if (inputs[i].shape != expected || inputs[i].dtype != call.inputs[i].dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": input ", i, " is ", DTypeName(inputs[i].dtype), ShapeToString(inputs[i].shape),
          " locally, not the ", DTypeName(call.inputs[i].dtype), ShapeToString(expected),
          " of its spec ", call.inputs[i].ToString()));
    }
  }
  aten::Context ctx{backend,
                    call,
                    inputs,
                    LocalShapeAndOffsetAt(*call.output, call.coordinate).shape,
                    call.output->dtype,
                    {}};
  for (const DTensorSpec& spec : call.more_outputs) {
    ctx.more_shapes.push_back(LocalShapeAndOffsetAt(spec, call.coordinate).shape);
    ctx.more_dtypes.push_back(spec.dtype);
  }
  ASSIGN_OR_RETURN(DeviceTensor first, it->second(ctx));
  std::vector<DeviceTensor> outs;
  outs.push_back(std::move(first));
  if (ctx.more.size() != ctx.more_shapes.size()) {
    return absl::InternalError(
        absl::StrCat(name, " computed ", ctx.more.size() + 1, " outputs of ", ctx.num_outputs()));
  }
  for (DeviceTensor& t : ctx.more) outs.push_back(std::move(t));
  for (size_t k = 0; k < outs.size(); ++k) {
    const Shape& shape = k == 0 ? ctx.out_shape : ctx.more_shapes[k - 1];
    const DType dtype = k == 0 ? ctx.out_dtype : ctx.more_dtypes[k - 1];
    if (outs[k].shape() != shape || outs[k].dtype() != dtype) {
      return absl::InternalError(absl::StrCat(name, " computed ", DTypeName(outs[k].dtype()),
                                              ShapeToString(outs[k].shape()), " for local output ",
                                              k, " of ", DTypeName(dtype), ShapeToString(shape)));
    }
  }
  return outs;
}

absl::StatusOr<DeviceTensor> RunLocalCall(KernelBackend& backend, const LocalCall& call,
                                          std::span<const ConstTensorView> inputs) {
  ASSIGN_OR_RETURN(std::vector<DeviceTensor> outs, RunLocalCallOutputs(backend, call, inputs));
  return std::move(outs[0]);
}

std::vector<std::string> LocalImplementations() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : aten::Table()) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace tessera::kernels
