#include "kernels/run_op.h"

#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/status_macros.h"
#include "kernels/layout.h"

namespace tessera::kernels {
namespace {

BinaryOp BinaryOpOf(OpKind kind) {
  switch (kind) {
    case OpKind::kSub:
      return BinaryOp::kSub;
    case OpKind::kMul:
      return BinaryOp::kMul;
    case OpKind::kDiv:
      return BinaryOp::kDiv;
    default:
      return BinaryOp::kAdd;
  }
}

Activation ActivationOf(OpKind kind) {
  switch (kind) {
    case OpKind::kGelu:
      return Activation::kGelu;
    case OpKind::kTanh:
      return Activation::kTanh;
    default:
      return Activation::kRelu;
  }
}

// a[..., K] @ b[K, N] into out[..., N], with out = alpha * a @ b + beta * out.
absl::Status MatmulInto(KernelBackend& backend, double alpha, const ConstTensorView& a,
                        const ConstTensorView& b, double beta, const TensorView& out) {
  const int64_t k = a.shape.back();
  const int64_t rows = NumElements(std::span<const int64_t>(a.shape).first(a.shape.size() - 1));
  return backend.Gemm(false, false, alpha, Reshaped(a, {rows, k}), b, beta,
                      Reshaped(out, {rows, b.shape[1]}));
}

// The identity of max in `dtype`, as Fill takes it: -inf (saturating to an integer type's lowest
// value), false for bool.
double MaxIdentity(DType dtype) {
  return dtype == DType::kBool ? 0.0 : -std::numeric_limits<double>::infinity();
}

// sum / mean / max over the reduced dims, one dim at a time, from the last.
absl::StatusOr<DeviceTensor> Reduce(KernelBackend& backend, const OpCall& op,
                                    const ConstTensorView& x, const Shape& global_shape,
                                    const OpOutput& out) {
  ASSIGN_OR_RETURN(std::vector<int> dims, ReducedDims(op, x.rank()));
  if (op.kind == OpKind::kMax) {
    for (int d : dims) {
      if (x.shape[d] != 0) continue;
      // Nothing local to reduce: the identity, which Partial(max) combines away.
      ASSIGN_OR_RETURN(DeviceTensor identity, backend.Allocate(out.dtype, out.shape));
      RETURN_IF_ERROR(backend.Fill(identity.View(), MaxIdentity(out.dtype)));
      return identity;
    }
  }
  ASSIGN_OR_RETURN(DeviceTensor current, backend.Allocate(out.dtype, x.shape));
  // A copy, or a cast where an integer sum accumulates in int64.
  RETURN_IF_ERROR(backend.Cast(x, current.View()));
  const ReduceOp reduce = op.kind == OpKind::kMax ? ReduceOp::kMax : ReduceOp::kSum;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    Shape kept = current.shape();
    kept[*it] = 1;
    ASSIGN_OR_RETURN(DeviceTensor next, backend.Allocate(out.dtype, kept));
    RETURN_IF_ERROR(backend.ReduceAlongDim(reduce, current.View(), *it, next.View()));
    current = std::move(next);
  }
  RETURN_IF_ERROR(current.Reshape(out.shape));
  if (op.kind == OpKind::kMean) {
    // The local sum over the global count, so that shards of a reduced dim sum to the mean.
    int64_t count = 1;
    for (int d : dims) count *= global_shape[d];
    ASSIGN_OR_RETURN(DeviceTensor divisor, backend.Allocate(out.dtype, {}));
    RETURN_IF_ERROR(backend.Fill(divisor.View(), static_cast<double>(count)));
    RETURN_IF_ERROR(backend.Binary(BinaryOp::kDiv, current.View(), divisor.View(), current.View()));
  }
  return current;
}

absl::Status CheckGlobalShapes(absl::Span<const ConstTensorView> inputs,
                               absl::Span<const Shape> global) {
  if (global.size() != inputs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("run op: ", inputs.size(), " inputs but ", global.size(), " global shapes"));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (static_cast<int>(global[i].size()) != inputs[i].rank()) {
      return absl::InvalidArgumentError(
          absl::StrCat("run op: input ", i, " has local shape ", ShapeToString(inputs[i].shape),
                       " but global shape ", ShapeToString(global[i]), " of another rank"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DeviceTensor> RunLocalOp(KernelBackend& backend, const OpCall& op,
                                        absl::Span<const ConstTensorView> inputs,
                                        absl::Span<const Shape> global_input_shapes) {
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const ConstTensorView& in : inputs) {
    shapes.push_back(in.shape);
    dtypes.push_back(in.dtype);
  }
  ASSIGN_OR_RETURN(OpOutput out, InferOpOutput(op, shapes, dtypes));
  RETURN_IF_ERROR(CheckGlobalShapes(inputs, global_input_shapes));
  if (op.kind == OpKind::kTranspose) {
    ASSIGN_OR_RETURN(const int d0, NormalizeDim(op.dim0, inputs[0].rank()));
    ASSIGN_OR_RETURN(const int d1, NormalizeDim(op.dim1, inputs[0].rank()));
    return Transposed(backend, inputs[0], d0, d1);
  }
  if (op.kind == OpKind::kSum || op.kind == OpKind::kMean || op.kind == OpKind::kMax) {
    return Reduce(backend, op, inputs[0], global_input_shapes[0], out);
  }
  ASSIGN_OR_RETURN(DeviceTensor result, backend.Allocate(out.dtype, out.shape));
  absl::Status s;
  switch (op.kind) {
    case OpKind::kMm:
    case OpKind::kMatmul:
      s = MatmulInto(backend, 1.0, inputs[0], inputs[1], 0.0, result.View());
      break;
    case OpKind::kAddmm:
      // beta * bias enters through Gemm's C, the bias broadcast to the output's shape first.
      s = backend.Fill(result.View(), 0.0);
      if (s.ok() && op.beta != 0.0) {
        s = backend.Binary(BinaryOp::kAdd, result.View(), inputs[0], result.View());
      }
      if (s.ok()) s = MatmulInto(backend, op.alpha, inputs[1], inputs[2], op.beta, result.View());
      break;
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kDiv:
      s = backend.Binary(BinaryOpOf(op.kind), inputs[0], inputs[1], result.View());
      break;
    case OpKind::kRelu:
    case OpKind::kGelu:
    case OpKind::kTanh:
      s = backend.Activate(ActivationOf(op.kind), inputs[0], result.View());
      break;
    case OpKind::kCast:
      s = backend.Cast(inputs[0], result.View());
      break;
    default:
      s = absl::InvalidArgumentError(
          absl::StrCat("run op: no local kernel for ", OpKindName(op.kind)));
  }
  if (!s.ok()) return s;
  return result;
}

absl::StatusOr<HostTensor> RunLocalOp(KernelBackend& backend, const OpCall& op,
                                      absl::Span<const HostTensor* const> inputs,
                                      absl::Span<const Shape> global_input_shapes) {
  std::vector<DeviceTensor> uploaded;
  std::vector<ConstTensorView> views;
  for (const HostTensor* t : inputs) {
    ASSIGN_OR_RETURN(uploaded.emplace_back(), backend.Upload(*t));
    views.push_back(std::as_const(uploaded.back()).View());
  }
  ASSIGN_OR_RETURN(DeviceTensor result, RunLocalOp(backend, op, views, global_input_shapes));
  return backend.Download(std::as_const(result).View());
}

}  // namespace tessera::kernels
