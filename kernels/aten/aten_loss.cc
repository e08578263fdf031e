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

absl::StatusOr<DeviceTensor> NllLossKernel(Context& ctx) {
  const ConstTensorView self = ctx.Input("self");
  const DTensorSpec& self_spec = ctx.InputSpec("self");
  const DTensorSpec& target_spec = ctx.InputSpec("target");
  const int rank = self.rank();
  const int cdim = rank == 1 ? 0 : 1;
  const int64_t classes = self_spec.shape[cdim];
  const int64_t reduction = ctx.args().Int("reduction");
  const int64_t ignore = ctx.args().Int("ignore_index");
  const LocalShard mine = LocalShapeAndOffsetAt(self_spec, ctx.local.coordinate);
  const LocalShard theirs = LocalShapeAndOffsetAt(target_spec, ctx.local.coordinate);
  ASSIGN_OR_RETURN(const std::vector<int64_t> targets, IndexValues(ctx, ctx.Input("target")));
  std::vector<double> weights;
  if (!ctx.args().IsNone("weight")) {
    ASSIGN_OR_RETURN(weights, HostDoubles(ctx, ctx.Input("weight")));
  }
  auto weight_of = [&](int64_t t) { return weights.empty() ? 1.0 : weights[t]; };
  // Mean divides by the whole target's weight, which this rank holds (the strategies give mean a
  // Replicate target).
  double scale = 1.0;
  if (reduction == 1) {
    double total = 0;
    for (int64_t t : targets) {
      if (t != ignore && t >= 0 && t < classes) total += weight_of(t);
    }
    scale = total == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / total;
  }
  // The rows of this rank: self's local shape with the class dim 1, in row-major order.
  Shape picked_shape = self.shape;
  picked_shape[cdim] = 1;
  const int64_t rows = NumElements(picked_shape);
  // Row-major strides of the target's local block, over self's dims but the class dim.
  std::vector<int64_t> target_stride(theirs.shape.size(), 1);
  for (int d = static_cast<int>(theirs.shape.size()) - 2; d >= 0; --d) {
    target_stride[d] = target_stride[d + 1] * theirs.shape[d + 1];
  }
  std::vector<int64_t> index(rows, 0);
  std::vector<double> factor(rows, 0.0);
  std::vector<int64_t> at(rank, 0);  // the row's local coordinate in self (at[cdim] stays 0)
  const int64_t class_begin = mine.offset[cdim];
  const int64_t local_classes = self.shape[cdim];
  for (int64_t r = 0; r < rows; ++r) {
    int64_t k = 0;
    for (int d = 0, t = 0; d < rank; ++d) {
      if (d == cdim) continue;
      k += (mine.offset[d] + at[d] - theirs.offset[t]) * target_stride[t];
      ++t;
    }
    const int64_t target = targets[k];
    if (target != ignore) {
      if (target < 0 || target >= classes) {
        return absl::InvalidArgumentError(absl::StrCat(ctx.name(), ": target ", target,
                                                       " at position ", k, " is out of bounds for ",
                                                       classes, " classes"));
      }
      const int64_t local = target - class_begin;
      if (local >= 0 && local < local_classes) {
        index[r] = local;
        factor[r] = -weight_of(target) * scale;
      }
    }
    for (int d = rank - 1; d >= 0; --d) {  // next row
      if (d == cdim) continue;
      if (++at[d] < self.shape[d]) break;
      at[d] = 0;
    }
  }
  const DType compute = self.dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  ASSIGN_OR_RETURN(TensorView loss, ctx.Temporary(compute, picked_shape));
  if (local_classes == 0 || rows == 0) {
    RETURN_IF_ERROR(ctx.backend.Fill(loss, 0.0));
  } else {
    ASSIGN_OR_RETURN(const ConstTensorView x, ctx.As(self, compute));
    ASSIGN_OR_RETURN(const TensorView where, Uploaded(ctx, DType::kInt64, picked_shape, index));
    RETURN_IF_ERROR(ctx.Named(ctx.backend.Gather(x, cdim, where, loss)));
    TensorView by;
    if (compute == DType::kFloat64) {
      ASSIGN_OR_RETURN(by, Uploaded(ctx, compute, picked_shape, factor));
    } else {
      const std::vector<float> f(factor.begin(), factor.end());
      ASSIGN_OR_RETURN(by, Uploaded(ctx, compute, picked_shape, f));
    }
    RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kMul, loss, by, loss));
  }
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  if (reduction == 0) {
    RETURN_IF_ERROR(ctx.backend.Cast(Reshaped(ConstTensorView(loss), ctx.out_shape), out.View()));
    return out;
  }
  ASSIGN_OR_RETURN(TensorView sum, ctx.Temporary(compute, {}));
  RETURN_IF_ERROR(
      ctx.backend.ReduceAlongDim(ReduceOp::kSum, Reshaped(ConstTensorView(loss), {rows}), 0, sum));
  RETURN_IF_ERROR(ctx.backend.Cast(sum, out.View()));
  // No target counted (all at ignore_index): torch's mean is 0 / 0.
  if (std::isnan(scale)) RETURN_IF_ERROR(ctx.backend.Fill(out.View(), scale));
  return out;
}

}  // namespace

void AddLossKernels(LocalTable& t) { t["aten::nll_loss"] = NllLossKernel; }

}  // namespace tessera::kernels::aten
