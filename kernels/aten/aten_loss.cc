// nll_loss on local shards: each rank picks -weight[t] * self[..., t, ...] for the targets t of
// its rows that fall in its shard of the classes (0 for the others, and at ignore_index), so a
// class-sharded self gives this rank's part of a Partial(sum). The targets and weights are small
// and read on the host; the pick is one Gather and one multiply on the device, and the sum one
// reduction.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/sharding/dtensor_spec.h"
#include "core/status_macros.h"
#include "kernels/aten/aten_context.h"

namespace tessera::kernels::aten {
namespace {

// The values of a small floating tensor on the host, as doubles.
absl::StatusOr<std::vector<double>> HostDoubles(Context& ctx, const ConstTensorView& view) {
  ASSIGN_OR_RETURN(const ConstTensorView v, ctx.As(view, DType::kFloat64));
  std::vector<double> values(v.num_elements());
  RETURN_IF_ERROR(ctx.backend.CopyToHost(
      v, std::span<std::byte>(reinterpret_cast<std::byte*>(values.data()), v.nbytes())));
  return values;
}

template <typename T>
absl::StatusOr<TensorView> Uploaded(Context& ctx, DType dtype, const Shape& shape,
                                    const std::vector<T>& values) {
  ASSIGN_OR_RETURN(TensorView t, ctx.Temporary(dtype, shape));
  RETURN_IF_ERROR(ctx.backend.CopyFromHost(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(values.data()),
                                 values.size() * sizeof(T)),
      t));
  return t;
}

// `values` in a temporary of `dtype` (float32 or float64).
absl::StatusOr<TensorView> UploadedAs(Context& ctx, DType dtype, const Shape& shape,
                                      const std::vector<double>& values) {
  if (dtype == DType::kFloat64) return Uploaded(ctx, dtype, shape, values);
  return Uploaded(ctx, dtype, shape, std::vector<float>(values.begin(), values.end()));
}

// The class weights on the host; empty without a weight (every class weighs 1).
absl::StatusOr<std::vector<double>> ClassWeights(Context& ctx) {
  if (ctx.args().IsNone("weight")) return std::vector<double>{};
  return HostDoubles(ctx, ctx.Input("weight"));
}

// The rows of this rank's block of self (its local shape with the class dim 1, in row-major
// order), each with its target (from the target's local block, which holds every row of self's
// block, at `position` there), whether that target's class is in this rank's block, and its
// position there (0 where it is not).
struct Rows {
  Shape shape;
  std::vector<int64_t> position;
  std::vector<int64_t> target;
  std::vector<bool> mine;
  std::vector<int64_t> index;
};

absl::StatusOr<Rows> TargetRows(Context& ctx, const ConstTensorView& self,
                                const std::vector<int64_t>& targets) {
  const DTensorSpec& self_spec = ctx.InputSpec("self");
  const int rank = self.rank();
  const int cdim = rank == 1 ? 0 : 1;
  const int64_t classes = self_spec.shape[cdim];
  const int64_t ignore = ctx.args().Int("ignore_index");
  const LocalShard mine = LocalShapeAndOffsetAt(self_spec, ctx.local.coordinate);
  const LocalShard theirs = LocalShapeAndOffsetAt(ctx.InputSpec("target"), ctx.local.coordinate);
  Rows rows;
  rows.shape = self.shape;
  rows.shape[cdim] = 1;
  const int64_t n = NumElements(rows.shape);
  // Row-major strides of the target's local block, over self's dims but the class dim.
  std::vector<int64_t> target_stride(theirs.shape.size(), 1);
  for (int d = static_cast<int>(theirs.shape.size()) - 2; d >= 0; --d) {
    target_stride[d] = target_stride[d + 1] * theirs.shape[d + 1];
  }
  rows.position.assign(n, 0);
  rows.target.assign(n, ignore);
  rows.mine.assign(n, false);
  rows.index.assign(n, 0);
  std::vector<int64_t> at(rank, 0);  // the row's local coordinate in self (at[cdim] stays 0)
  const int64_t class_begin = mine.offset[cdim];
  const int64_t local_classes = self.shape[cdim];
  for (int64_t r = 0; r < n; ++r) {
    int64_t k = 0;
    for (int d = 0, t = 0; d < rank; ++d) {
      if (d == cdim) continue;
      k += (mine.offset[d] + at[d] - theirs.offset[t]) * target_stride[t];
      ++t;
    }
    const int64_t target = targets[k];
    rows.position[r] = k;
    rows.target[r] = target;
    if (target != ignore) {
      if (target < 0 || target >= classes) {
        return absl::InvalidArgumentError(absl::StrCat(ctx.name(), ": target ", target,
                                                       " at position ", k, " is out of bounds for ",
                                                       classes, " classes"));
      }
      const int64_t local = target - class_begin;
      if (local >= 0 && local < local_classes) {
        rows.index[r] = local;
        rows.mine[r] = true;
      }
    }
    for (int d = rank - 1; d >= 0; --d) {  // next row
      if (d == cdim) continue;
      if (++at[d] < self.shape[d]) break;
      at[d] = 0;
    }
  }
  return rows;
}

absl::StatusOr<DeviceTensor> NllLossKernel(Context& ctx) {
  const ConstTensorView self = ctx.Input("self");
  const DTensorSpec& self_spec = ctx.InputSpec("self");
  const int rank = self.rank();
  const int cdim = rank == 1 ? 0 : 1;
  const int64_t classes = self_spec.shape[cdim];
  const int64_t reduction = ctx.args().Int("reduction");
  const int64_t ignore = ctx.args().Int("ignore_index");
  ASSIGN_OR_RETURN(const std::vector<int64_t> targets, IndexValues(ctx, ctx.Input("target")));
  ASSIGN_OR_RETURN(const std::vector<double> weights, ClassWeights(ctx));
  auto weight_of = [&](int64_t t) { return weights.empty() ? 1.0 : weights[t]; };
  // Mean divides by the whole target's weight, which this rank holds (the strategies give mean a
  // Replicate target).
  double scale = 1.0;
  double whole_weight = 0;
  for (int64_t t : targets) {
    if (t != ignore && t >= 0 && t < classes) whole_weight += weight_of(t);
  }
  if (reduction == 1) {
    scale = whole_weight == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / whole_weight;
  }
  ASSIGN_OR_RETURN(const Rows rows, TargetRows(ctx, self, targets));
  std::vector<double> factor(rows.index.size(), 0.0);
  double rows_weight = 0;  // of this rank's rows
  for (size_t r = 0; r < factor.size(); ++r) {
    const int64_t target = rows.target[r];
    if (target == ignore) continue;
    rows_weight += weight_of(target);
    if (rows.mine[r]) factor[r] = -weight_of(target) * scale;
  }
  if (ctx.num_outputs() > 1) {
    // nll_loss_forward's total_weight, as torch's: a 1-D self's is its one target's weight (R);
    // a batch's is 0 for reduction none, the whole target's for mean (R), and this rank's rows'
    // for sum (P(sum) over a sharded batch, the whole target's otherwise).
    const double total = rank == 1        ? rows_weight
                         : reduction == 0 ? 0.0
                         : reduction == 1 ? whole_weight
                                          : rows_weight;
    ASSIGN_OR_RETURN(DeviceTensor t, ctx.OutputAt(1));
    RETURN_IF_ERROR(ctx.backend.Fill(t.View(), total));
    ctx.more.push_back(std::move(t));
  }
  const Shape& picked_shape = rows.shape;
  const std::vector<int64_t>& index = rows.index;
  const int64_t local_classes = self.shape[cdim];
  const DType compute = self.dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  ASSIGN_OR_RETURN(TensorView loss, ctx.Temporary(compute, picked_shape));
  const int64_t num_rows = static_cast<int64_t>(index.size());
  if (local_classes == 0 || num_rows == 0) {
    RETURN_IF_ERROR(ctx.backend.Fill(loss, 0.0));
  } else {
    ASSIGN_OR_RETURN(const ConstTensorView x, ctx.As(self, compute));
    ASSIGN_OR_RETURN(const TensorView where, Uploaded(ctx, DType::kInt64, picked_shape, index));
    RETURN_IF_ERROR(ctx.Named(ctx.backend.Gather(x, cdim, where, loss)));
    ASSIGN_OR_RETURN(const TensorView by, UploadedAs(ctx, compute, picked_shape, factor));
    RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kMul, loss, by, loss));
    // A row that picks nothing here (its target in another rank's classes, or at ignore_index)
    // is 0 exactly, as torch's: its stand-in pick times 0 is NaN where that value is -inf (a
    // masked log-probability).
    const std::vector<uint8_t> counted(rows.mine.begin(), rows.mine.end());
    ASSIGN_OR_RETURN(const TensorView keep, Uploaded(ctx, DType::kBool, picked_shape, counted));
    ASSIGN_OR_RETURN(const ConstTensorView zero, ctx.Number(0.0, compute));
    RETURN_IF_ERROR(ctx.backend.Where(keep, loss, zero, loss));
  }
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  if (reduction == 0) {
    RETURN_IF_ERROR(ctx.backend.Cast(Reshaped(ConstTensorView(loss), ctx.out_shape), out.View()));
    return out;
  }
  ASSIGN_OR_RETURN(TensorView sum, ctx.Temporary(compute, {}));
  RETURN_IF_ERROR(ctx.backend.ReduceAlongDim(ReduceOp::kSum,
                                             Reshaped(ConstTensorView(loss), {num_rows}), 0, sum));
  RETURN_IF_ERROR(ctx.backend.Cast(sum, out.View()));
  // No target counted (all at ignore_index): torch's mean is 0 / 0.
  if (std::isnan(scale)) RETURN_IF_ERROR(ctx.backend.Fill(out.View(), scale));
  return out;
}

// nll_loss_backward: zeros, and each row's -weight[target] * grad_output (over total_weight for
// mean) at its target's class where that class is in this rank's block.
absl::StatusOr<DeviceTensor> NllLossBackwardKernel(Context& ctx) {
  const ConstTensorView self = ctx.Input("self");
  const int cdim = self.rank() == 1 ? 0 : 1;
  const int64_t reduction = ctx.args().Int("reduction");
  const int64_t ignore = ctx.args().Int("ignore_index");
  ASSIGN_OR_RETURN(const std::vector<int64_t> targets, IndexValues(ctx, ctx.Input("target")));
  ASSIGN_OR_RETURN(const std::vector<double> weights, ClassWeights(ctx));
  // grad_output: one number, or (reduction none over a batch) one per target, laid out as the
  // target (the strategies give both the same placements).
  ASSIGN_OR_RETURN(const std::vector<double> grads, HostDoubles(ctx, ctx.Input("grad_output")));
  double scale = 1.0;
  if (reduction == 1) {
    ASSIGN_OR_RETURN(const std::vector<double> total, HostDoubles(ctx, ctx.Input("total_weight")));
    scale = 1.0 / total[0];  // 0: inf or nan, as torch
  }
  ASSIGN_OR_RETURN(const Rows rows, TargetRows(ctx, self, targets));
  const bool per_row = reduction == 0 && self.rank() == 2;
  std::vector<double> value(rows.index.size(), 0.0);
  for (size_t r = 0; r < value.size(); ++r) {
    if (!rows.mine[r] || rows.target[r] == ignore) continue;
    const double w = weights.empty() ? 1.0 : weights[rows.target[r]];
    value[r] = -w * (per_row ? grads[rows.position[r]] : grads[0]) * scale;
  }
  const DType compute = self.dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  TensorView acc = out.View();
  if (compute != out.dtype()) {
    ASSIGN_OR_RETURN(acc, ctx.Temporary(compute, ctx.out_shape));
  }
  RETURN_IF_ERROR(ctx.backend.Fill(acc, 0.0));
  if (self.shape[cdim] > 0 && !value.empty()) {
    ASSIGN_OR_RETURN(const TensorView where, Uploaded(ctx, DType::kInt64, rows.shape, rows.index));
    ASSIGN_OR_RETURN(const TensorView src, UploadedAs(ctx, compute, rows.shape, value));
    RETURN_IF_ERROR(
        ctx.Named(ctx.backend.ScatterInto(acc, cdim, where, src, ScatterReduce::kNone)));
  }
  if (acc.data != out.View().data) RETURN_IF_ERROR(ctx.backend.Cast(acc, out.View()));
  return out;
}

}  // namespace

void AddLossKernels(LocalTable& t) {
  t["aten::nll_loss"] = t["aten::nll_loss_forward"] = NllLossKernel;
  t["aten::nll_loss_backward"] = NllLossBackwardKernel;
}

}  // namespace tessera::kernels::aten
