// Reductions, scans and softmax on local shards. A reduction over a dim the strategy left sharded
// computes the rank's part of a Partial: its local sum (mean: over the global count), or its local
// extreme, the reduce identity where its block of that dim is empty.
#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/op_meta.h"
#include "core/status_macros.h"
#include "kernels/aten/aten_context.h"
#include "kernels/layout.h"

namespace tessera::kernels::aten {
namespace {

absl::StatusOr<ops::ReductionInfo> Info(const Context& ctx) {
  const ops::CallContext call{*ctx.call().op, ctx.args(), ctx.call().inputs};
  return ops::DescribeReduction(call);
}

const char* FirstArg(const Context& ctx) { return ctx.call().op->schema.args[0].name.c_str(); }

// The identity of max (or min) in `dtype`, as Fill takes it (saturating for integers).
double Identity(ReduceOp op, DType dtype) {
  const double inf = std::numeric_limits<double>::infinity();
  if (op == ReduceOp::kMax) return dtype == DType::kBool ? 0.0 : -inf;
  return dtype == DType::kBool ? 1.0 : inf;
}

}  // namespace

absl::StatusOr<ConstTensorView> ReduceKept(Context& ctx, ReduceOp op, const ConstTensorView& x,
                                           const std::vector<int>& dims) {
  Shape kept = x.shape;
  for (int d : dims) kept[d] = 1;
  if (op == ReduceOp::kMax || op == ReduceOp::kMin) {
    for (int d : dims) {
      if (x.shape[d] != 0) continue;
      ASSIGN_OR_RETURN(TensorView id, ctx.Temporary(x.dtype, kept));
      RETURN_IF_ERROR(ctx.backend.Fill(id, Identity(op, x.dtype)));
      return ConstTensorView(id);
    }
  }
  ConstTensorView current = x;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    Shape next_shape = current.shape;
    next_shape[*it] = 1;
    ASSIGN_OR_RETURN(TensorView next, ctx.Temporary(x.dtype, next_shape));
    RETURN_IF_ERROR(ctx.backend.ReduceAlongDim(op, current, *it, next));
    current = next;
  }
  return current;
}

namespace {

// The number of elements a reduction over `dims` of the global `shape` counts.
int64_t Count(const Shape& shape, const std::vector<int>& dims) {
  int64_t n = 1;
  for (int d : dims) n *= shape[d];
  return n;
}

// The dim of an along-dim op, and x seen with at least one dim.
int AlongDim(const ops::ReductionInfo& info) { return info.dims.empty() ? 0 : info.dims[0]; }
ConstTensorView AtLeast1D(const ConstTensorView& x) { return x.rank() == 0 ? Reshaped(x, {1}) : x; }

template <ReduceOp kOp, bool kMean = false>
absl::StatusOr<DeviceTensor> ReduceKernel(Context& ctx) {
  ASSIGN_OR_RETURN(const ops::ReductionInfo info, Info(ctx));
  ASSIGN_OR_RETURN(const ConstTensorView x, ctx.As(ctx.Input(FirstArg(ctx)), ctx.out_dtype));
  ASSIGN_OR_RETURN(ConstTensorView r, ReduceKept(ctx, kOp, x, info.dims));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  if (kMean) {
    const int64_t count = Count(ctx.InputSpec(FirstArg(ctx)).shape, info.dims);
    ASSIGN_OR_RETURN(const ConstTensorView n, ctx.Number(static_cast<double>(count), x.dtype));
    RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kDiv, r, n, Reshaped(out.View(), r.shape)));
    return out;
  }
  RETURN_IF_ERROR(ctx.backend.Copy(Reshaped(r, ctx.out_shape), out.View()));
  return out;
}

template <bool kMax>
absl::StatusOr<DeviceTensor> ArgReduceKernel(Context& ctx) {
  ASSIGN_OR_RETURN(const ops::ReductionInfo info, Info(ctx));
  ConstTensorView x = ctx.Input("self");
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  if (info.flattens || x.rank() == 0) {
    x = Reshaped(x, {x.num_elements()});
    RETURN_IF_ERROR(ctx.backend.ArgReduceAlongDim(kMax, x, 0, Reshaped(out.View(), {})));
    return out;
  }
  Shape kept = x.shape;
  kept[info.dims[0]] = 1;
  RETURN_IF_ERROR(ctx.backend.ArgReduceAlongDim(kMax, x, info.dims[0], Reshaped(out.View(), kept)));
  return out;
}

// var.correction (and std with `sqrt`) over dims the strategy keeps whole; var_mean and
// std_mean give the mean as their second output.
template <bool kSqrt>
absl::StatusOr<DeviceTensor> VarKernel(Context& ctx) {
  ASSIGN_OR_RETURN(const ops::ReductionInfo info, Info(ctx));
  ASSIGN_OR_RETURN(const ConstTensorView x, ctx.As(ctx.Input("self"), ctx.out_dtype));
  const int64_t n = Count(x.shape, info.dims);
  const double correction = ctx.args().IsNone("correction") ? 1.0 : ctx.args().Float("correction");
  ASSIGN_OR_RETURN(const ConstTensorView sum, ReduceKept(ctx, ReduceOp::kSum, x, info.dims));
  ASSIGN_OR_RETURN(const ConstTensorView count, ctx.Number(static_cast<double>(n), x.dtype));
  ASSIGN_OR_RETURN(TensorView mean, ctx.Temporary(x.dtype, sum.shape));
  RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kDiv, sum, count, mean));
  ASSIGN_OR_RETURN(TensorView diff, ctx.Temporary(x.dtype, x.shape));
  RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kSub, x, mean, diff));
  RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kMul, diff, diff, diff));
  ASSIGN_OR_RETURN(const ConstTensorView squares, ReduceKept(ctx, ReduceOp::kSum, diff, info.dims));
  ASSIGN_OR_RETURN(const ConstTensorView dof,
                   ctx.Number(std::max(static_cast<double>(n) - correction, 0.0), x.dtype));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  const TensorView o = Reshaped(out.View(), squares.shape);
  RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kDiv, squares, dof, o));
  if (kSqrt) RETURN_IF_ERROR(ctx.backend.Unary(UnaryOp::kSqrt, o, o));
  if (ctx.num_outputs() == 2) {
    ASSIGN_OR_RETURN(DeviceTensor m, ctx.OutputAt(1));
    RETURN_IF_ERROR(ctx.backend.Copy(Reshaped(mean, m.shape()), m.View()));
    ctx.more.push_back(std::move(m));
  }
  return out;
}

// max.dim and min.dim: the index of the first extreme along the dim (argmax's), and the values
// gathered there.
template <bool kMax>
absl::StatusOr<DeviceTensor> ValuesAndIndicesKernel(Context& ctx) {
  ASSIGN_OR_RETURN(const ops::ReductionInfo info, Info(ctx));
  const ConstTensorView x = AtLeast1D(ctx.Input("self"));
  const int dim = AlongDim(info);
  Shape kept = x.shape;
  kept[dim] = 1;
  ASSIGN_OR_RETURN(DeviceTensor values, ctx.Output());
  ASSIGN_OR_RETURN(DeviceTensor indices, ctx.OutputAt(1));
  const TensorView i = Reshaped(indices.View(), kept);
  RETURN_IF_ERROR(ctx.backend.ArgReduceAlongDim(kMax, x, dim, i));
  RETURN_IF_ERROR(ctx.backend.Gather(x, dim, i, Reshaped(values.View(), kept)));
  ctx.more.push_back(std::move(indices));
  return values;
}

// sort and topk: the line sorted (stably; topk descending when largest), topk keeping its first
// k elements.
absl::StatusOr<DeviceTensor> SortKernel(Context& ctx) {
  ASSIGN_OR_RETURN(const ops::ReductionInfo info, Info(ctx));
  const ConstTensorView x = AtLeast1D(ctx.Input("self"));
  const int dim = AlongDim(info);
  const bool topk = ctx.call().op->schema.name == "topk";
  const bool descending = topk ? ctx.args().Bool("largest") : ctx.args().Bool("descending");
  ASSIGN_OR_RETURN(DeviceTensor values, ctx.Output());
  ASSIGN_OR_RETURN(DeviceTensor indices, ctx.OutputAt(1));
  if (!topk) {
    RETURN_IF_ERROR(ctx.backend.SortAlongDim(x, dim, descending, Reshaped(values.View(), x.shape),
                                             Reshaped(indices.View(), x.shape)));
    ctx.more.push_back(std::move(indices));
    return values;
  }
  ASSIGN_OR_RETURN(const TensorView sorted, ctx.Temporary(x.dtype, x.shape));
  ASSIGN_OR_RETURN(const TensorView order, ctx.Temporary(DType::kInt64, x.shape));
  RETURN_IF_ERROR(ctx.backend.SortAlongDim(x, dim, descending, sorted, order));
  Shape first_k = x.shape;
  first_k[dim] = ctx.args().Int("k");
  for (auto [from, to] : {std::pair{ConstTensorView(sorted), values.View()},
                          std::pair{ConstTensorView(order), indices.View()}}) {
    ConstStridedView src = StridedOf(from);
    src.shape = first_k;
    RETURN_IF_ERROR(ctx.backend.CopyStrided(src, StridedOf(Reshaped(to, first_k))));
  }
  ctx.more.push_back(std::move(indices));
  return values;
}
// log(sum(exp(x - m))) + m with m the max, an infinite max taken as 0 (as torch).
absl::StatusOr<DeviceTensor> LogSumExpKernel(Context& ctx) {
  ASSIGN_OR_RETURN(const ops::ReductionInfo info, Info(ctx));
  ASSIGN_OR_RETURN(const ConstTensorView x, ctx.As(ctx.Input("self"), ctx.out_dtype));
  ASSIGN_OR_RETURN(const ConstTensorView m, ReduceKept(ctx, ReduceOp::kMax, x, info.dims));
  ASSIGN_OR_RETURN(TensorView finite, ctx.Temporary(DType::kBool, m.shape));
  RETURN_IF_ERROR(ctx.backend.Unary(UnaryOp::kIsInf, m, finite));
  ASSIGN_OR_RETURN(const ConstTensorView zero, ctx.Number(0.0, x.dtype));
  ASSIGN_OR_RETURN(TensorView shift, ctx.Temporary(x.dtype, m.shape));
  RETURN_IF_ERROR(ctx.backend.Where(finite, zero, m, shift));
  ASSIGN_OR_RETURN(TensorView e, ctx.Temporary(x.dtype, x.shape));
  RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kSub, x, shift, e));
  RETURN_IF_ERROR(ctx.backend.Unary(UnaryOp::kExp, e, e));
  ASSIGN_OR_RETURN(const ConstTensorView s, ReduceKept(ctx, ReduceOp::kSum, e, info.dims));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  const TensorView o = Reshaped(out.View(), s.shape);
  RETURN_IF_ERROR(ctx.backend.Unary(UnaryOp::kLog, s, o));
  RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kAdd, o, shift, o));
  return out;
}

template <ReduceOp kOp>
absl::StatusOr<DeviceTensor> ScanKernel(Context& ctx) {
  ASSIGN_OR_RETURN(const ops::ReductionInfo info, Info(ctx));
  ASSIGN_OR_RETURN(const ConstTensorView x, ctx.As(ctx.Input("self"), ctx.out_dtype));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  const ConstTensorView in = AtLeast1D(x);
  RETURN_IF_ERROR(
      ctx.backend.ScanAlongDim(kOp, in, AlongDim(info), Reshaped(out.View(), in.shape)));
  return out;
}

template <SoftmaxKind kKind>
absl::StatusOr<DeviceTensor> SoftmaxKernel(Context& ctx) {
  ASSIGN_OR_RETURN(const ops::ReductionInfo info, Info(ctx));
  ASSIGN_OR_RETURN(const ConstTensorView x, ctx.As(ctx.Input("self"), ctx.out_dtype));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  const ConstTensorView in = AtLeast1D(x);
  RETURN_IF_ERROR(
      ctx.backend.SoftmaxAlongDim(kKind, in, AlongDim(info), Reshaped(out.View(), in.shape)));
  return out;
}

template <SoftmaxKind kKind>
absl::StatusOr<DeviceTensor> SoftmaxBackwardKernel(Context& ctx) {
  ASSIGN_OR_RETURN(const ops::ReductionInfo info, Info(ctx));
  const ConstTensorView dy = AtLeast1D(ctx.Input("grad_output"));
  const ConstTensorView y = AtLeast1D(ctx.Input("output"));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(
      ctx.backend.SoftmaxBackward(kKind, y, dy, AlongDim(info), Reshaped(out.View(), dy.shape)));
  return out;
}

}  // namespace

void AddReductionKernels(LocalTable& t) {
  t["aten::sum"] = t["aten::sum.dim_IntList"] = ReduceKernel<ReduceOp::kSum>;
  t["aten::mean"] = t["aten::mean.dim"] = ReduceKernel<ReduceOp::kSum, true>;
  t["aten::amax"] = t["aten::max"] = t["aten::any"] = t["aten::any.dim"] =
      ReduceKernel<ReduceOp::kMax>;
  t["aten::amin"] = t["aten::min"] = t["aten::all"] = t["aten::all.dim"] =
      ReduceKernel<ReduceOp::kMin>;
  t["aten::prod"] = t["aten::prod.dim_int"] = ReduceKernel<ReduceOp::kProduct>;
  t["aten::argmax"] = ArgReduceKernel<true>;
  t["aten::argmin"] = ArgReduceKernel<false>;
  t["aten::var.correction"] = t["aten::var_mean.correction"] = VarKernel<false>;
  t["aten::std.correction"] = t["aten::std_mean.correction"] = VarKernel<true>;
  t["aten::max.dim"] = ValuesAndIndicesKernel<true>;
  t["aten::min.dim"] = ValuesAndIndicesKernel<false>;
  t["aten::sort"] = t["aten::sort.stable"] = t["aten::topk"] = SortKernel;
  t["aten::logsumexp"] = LogSumExpKernel;
  t["aten::cumsum"] = ScanKernel<ReduceOp::kSum>;
  t["aten::cumprod"] = ScanKernel<ReduceOp::kProduct>;
  t["aten::_softmax"] = t["aten::softmax.int"] = SoftmaxKernel<SoftmaxKind::kSoftmax>;
  t["aten::_log_softmax"] = t["aten::log_softmax.int"] = SoftmaxKernel<SoftmaxKind::kLogSoftmax>;
  t["aten::_safe_softmax"] = SoftmaxKernel<SoftmaxKind::kSafeSoftmax>;
  t["aten::_softmax_backward_data"] = SoftmaxBackwardKernel<SoftmaxKind::kSoftmax>;
  t["aten::_log_softmax_backward_data"] = SoftmaxBackwardKernel<SoftmaxKind::kLogSoftmax>;
}

}  // namespace tessera::kernels::aten
