// The matmul family on local shards: one GEMM where the batch folds into rows, one per batch
// otherwise (broadcast batches walked by their strides).
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/aten/aten_context.h"

namespace tessera::kernels::aten {
namespace {

// out = a @ b (torch.matmul on local blocks): a [..., M, K] or [K], b [..., K, N] or [K].
absl::Status Matmul(Context& ctx, const ConstTensorView& a_in, const ConstTensorView& b_in,
                    const TensorView& out) {
  const ConstTensorView a = a_in.rank() == 1 ? Reshaped(a_in, {1, a_in.shape[0]}) : a_in;
  const ConstTensorView b = b_in.rank() == 1 ? Reshaped(b_in, {b_in.shape[0], 1}) : b_in;
  const int64_t m = a.shape[a.rank() - 2], k = a.shape.back(), n = b.shape.back();
  if (out.num_elements() == 0) return absl::OkStatus();
  if (b.rank() == 2) {
    // The batch of a folds into its rows.
    const int64_t rows = a.num_elements() / std::max<int64_t>(k, 1);
    if (k == 0) return ctx.backend.Fill(out, 0.0);
    return ctx.backend.Gemm(false, false, 1.0, Reshaped(a, {rows, k}), b, 0.0,
                            Reshaped(out, {rows, n}));
  }
  const int batch_rank = std::max(a.rank(), b.rank()) - 2;
  Shape batch(batch_rank, 1);
  auto batch_of = [&](const ConstTensorView& t) {
    Shape s(batch_rank, 1);
    for (int i = 0; i < t.rank() - 2; ++i) s[batch_rank - (t.rank() - 2) + i] = t.shape[i];
    return s;
  };
  const Shape ba = batch_of(a), bb = batch_of(b);
  for (int i = 0; i < batch_rank; ++i) batch[i] = std::max(ba[i], bb[i]);
  const int64_t count = NumElements(batch);
  const std::vector<int64_t> strides = ContiguousStrides(batch);
  for (int64_t i = 0; i < count; ++i) {
    int64_t ia = 0, ib = 0, sa = 1, sb = 1;
    for (int d = batch_rank - 1; d >= 0; --d) {
      const int64_t c = (i / strides[d]) % batch[d];
      ia += (ba[d] == 1 ? 0 : c) * sa;
      ib += (bb[d] == 1 ? 0 : c) * sb;
      sa *= ba[d];
      sb *= bb[d];
    }
    const TensorView o = At(out, i * m * n, {m, n});
    if (k == 0) {
      RETURN_IF_ERROR(ctx.backend.Fill(o, 0.0));
      continue;
    }
    RETURN_IF_ERROR(ctx.backend.Gemm(false, false, 1.0, At(a, ia * m * k, {m, k}),
                                     At(b, ib * k * n, {k, n}), 0.0, o));
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceTensor> MatmulKernel(Context& ctx) {
  const ops::OpSchema& s = ctx.call().op->schema;
  const ConstTensorView a = ctx.Input(s.args[0].name);
  const ConstTensorView b = ctx.Input(s.args[1].name);
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(Matmul(ctx, a, b, out.View()));
  return out;
}

absl::StatusOr<DeviceTensor> AddmmKernel(Context& ctx) {
  const double beta = ctx.args().Float("beta");
  const double alpha = ctx.args().Float("alpha");
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Fill(out.View(), 0.0));
  if (beta != 0.0) {
    RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kAdd, out.View(), ctx.Input("self"), out.View()));
  }
  const ConstTensorView a = ctx.Input("mat1");
  const ConstTensorView b = ctx.Input("mat2");
  if (out.num_elements() == 0) return out;
  if (a.shape[1] == 0) {
    ASSIGN_OR_RETURN(const ConstTensorView scale, ctx.Number(beta, out.dtype()));
    RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kMul, out.View(), scale, out.View()));
    return out;
  }
  RETURN_IF_ERROR(ctx.backend.Gemm(false, false, alpha, a, b, beta, out.View()));
  return out;
}

absl::StatusOr<DeviceTensor> LinearKernel(Context& ctx) {
  const ConstTensorView x = ctx.Input("input");
  const ConstTensorView w = ctx.Input("weight");
  const int64_t k = x.shape.back(), n = w.shape[0];
  const int64_t rows =
      k == 0 ? NumElements(ctx.out_shape) / std::max<int64_t>(n, 1) : x.num_elements() / k;
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  const TensorView y = Reshaped(out.View(), {rows, n});
  if (out.num_elements() == 0) return out;
  if (k == 0) {
    RETURN_IF_ERROR(ctx.backend.Fill(y, 0.0));
  } else {
    RETURN_IF_ERROR(ctx.backend.LinearProduct(Reshaped(x, {rows, k}), w, nullptr, y));
  }
  if (!ctx.args().IsNone("bias")) {
    RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kAdd, out.View(), ctx.Input("bias"), out.View()));
  }
  return out;
}

}  // namespace

void AddMatmulKernels(LocalTable& t) {
  t["aten::mm"] = t["aten::bmm"] = t["aten::matmul"] = MatmulKernel;
  t["aten::addmm"] = AddmmKernel;
  t["aten::linear"] = LinearKernel;
}

}  // namespace tessera::kernels::aten
