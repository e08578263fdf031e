// Norms, attention, the vector norm and the backward ops of slicing and embedding on local shards.
// The strategies keep whole on every rank the dims these ops normalize, attend over or write
// into, so each rank computes its block as a single process would; a sharded batch of the
// embedding's gradient, or a reduced dim of the vector norm, gives this rank's part of a Partial.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/op_meta.h"
#include "core/status_macros.h"
#include "kernels/aten/aten_context.h"
#include "kernels/layout.h"

namespace tessera::kernels::aten {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The dtype the nn kernels compute `dtype` in: float64 as itself, the rest in float32.
DType KernelDType(DType dtype) {
  return dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
}

absl::StatusOr<int> Dim(const Context& ctx, absl::string_view arg, int rank) {
  const ops::CallContext call{*ctx.call().op, ctx.args(), ctx.call().inputs};
  return ops::CallDim(call, arg, ctx.args().Int(arg), rank);
}

// layer_norm and rms_norm: the kernel over [rows, cols], cols the normalized dims' elements,
// with mean and rstd into temporaries.
template <bool kLayerNorm>
absl::StatusOr<DeviceTensor> NormKernel(Context& ctx) {
  const ConstTensorView x = ctx.Input("input");
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  // native_layer_norm: the mean and rstd as outputs too.
  const bool statistics = ctx.num_outputs() == 3;
  if (statistics) {
    for (size_t k = 1; k < 3; ++k) {
      ASSIGN_OR_RETURN(DeviceTensor t, ctx.OutputAt(k));
      ctx.more.push_back(std::move(t));
    }
  }
  if (out.num_elements() == 0) return out;
  const int64_t cols = NumElements(ctx.args().Ints("normalized_shape"));
  const int64_t rows = x.num_elements() / cols;
  const DType compute = KernelDType(x.dtype);
  ASSIGN_OR_RETURN(const ConstTensorView xc, ctx.As(x, compute));
  ConstTensorView params[2];
  const ConstTensorView* weight = nullptr;
  const ConstTensorView* bias = nullptr;
  if (!ctx.args().IsNone("weight")) {
    ASSIGN_OR_RETURN(params[0], ctx.As(ctx.Input("weight"), compute));
    params[0] = Reshaped(params[0], {cols});
    weight = &params[0];
  }
  if (kLayerNorm && !ctx.args().IsNone("bias")) {
    ASSIGN_OR_RETURN(params[1], ctx.As(ctx.Input("bias"), compute));
    params[1] = Reshaped(params[1], {cols});
    bias = &params[1];
  }
  TensorView y = out.View();
  if (compute != out.dtype()) {
    ASSIGN_OR_RETURN(y, ctx.Temporary(compute, x.shape));
  }
  ASSIGN_OR_RETURN(const TensorView rstd, ctx.Temporary(DType::kFloat32, {rows}));
  const ConstTensorView x2 = Reshaped(xc, {rows, cols});
  const TensorView y2 = Reshaped(y, {rows, cols});
  if (kLayerNorm) {
    ASSIGN_OR_RETURN(const TensorView mean, ctx.Temporary(DType::kFloat32, {rows}));
    RETURN_IF_ERROR(
        ctx.backend.LayerNorm(x2, weight, bias, ctx.args().Float("eps"), y2, mean, rstd));
    if (statistics) {
      RETURN_IF_ERROR(ctx.backend.Cast(mean, Reshaped(ctx.more[0].View(), {rows})));
      RETURN_IF_ERROR(ctx.backend.Cast(rstd, Reshaped(ctx.more[1].View(), {rows})));
    }
  } else {
    // torch: eps None is the epsilon of the dtype it computes in (float32 for float16/bfloat16).
    const double eps = !ctx.args().IsNone("eps")    ? ctx.args().Float("eps")
                       : compute == DType::kFloat64 ? std::numeric_limits<double>::epsilon()
                                                    : std::numeric_limits<float>::epsilon();
    RETURN_IF_ERROR(ctx.backend.RmsNorm(x2, weight, eps, y2, rstd));
  }
  if (y.data != out.View().data) RETURN_IF_ERROR(ctx.backend.Cast(y, out.View()));
  return out;
}

// native_layer_norm_backward: the kernel over [rows, cols] with mean and rstd in float32; the
// gradients of weight and bias summed over this rank's rows (a sharded batch's Partial).
absl::StatusOr<DeviceTensor> NormBackwardKernel(Context& ctx) {
  const ConstTensorView x = ctx.Input("input");
  ASSIGN_OR_RETURN(DeviceTensor dx, ctx.Output());
  for (size_t k = 1; k < 3; ++k) {
    ASSIGN_OR_RETURN(DeviceTensor t, ctx.OutputAt(k));
    ctx.more.push_back(std::move(t));
  }
  const std::vector<int64_t>& mask = ctx.args().Ints("output_mask");
  const bool want_weight = mask[1] != 0 && !ctx.args().IsNone("weight");
  const bool want_bias = mask[2] != 0 && !ctx.args().IsNone("bias");
  const int64_t cols = NumElements(ctx.args().Ints("normalized_shape"));
  const int64_t rows = cols == 0 ? 0 : x.num_elements() / cols;
  if (rows == 0 || cols == 0) {
    for (DeviceTensor& t : ctx.more) RETURN_IF_ERROR(ctx.backend.Fill(t.View(), 0.0));
    return dx;
  }
  const DType compute = KernelDType(x.dtype);
  ASSIGN_OR_RETURN(const ConstTensorView xc, ctx.As(x, compute));
  ASSIGN_OR_RETURN(const ConstTensorView dyc, ctx.As(ctx.Input("grad_out"), compute));
  ASSIGN_OR_RETURN(const ConstTensorView mean, ctx.As(ctx.Input("mean"), DType::kFloat32));
  ASSIGN_OR_RETURN(const ConstTensorView rstd, ctx.As(ctx.Input("rstd"), DType::kFloat32));
  ConstTensorView weight_view;
  const ConstTensorView* weight = nullptr;
  if (!ctx.args().IsNone("weight")) {
    ASSIGN_OR_RETURN(weight_view, ctx.As(ctx.Input("weight"), compute));
    weight_view = Reshaped(weight_view, {cols});
    weight = &weight_view;
  }
  TensorView dxc = dx.View();
  if (compute != dx.dtype()) {
    ASSIGN_OR_RETURN(dxc, ctx.Temporary(compute, x.shape));
  }
  // The parameters' gradients accumulate (+=) into zeroed buffers of the compute dtype.
  TensorView sums[2];
  TensorView* dweight = nullptr;
  TensorView* dbias = nullptr;
  for (int k = 0; k < 2; ++k) {
    if (!(k == 0 ? want_weight : want_bias)) continue;
    const TensorView out = ctx.more[k].View();
    if (compute == out.dtype) {
      sums[k] = Reshaped(out, {cols});
    } else {
      ASSIGN_OR_RETURN(sums[k], ctx.Temporary(compute, {cols}));
    }
    RETURN_IF_ERROR(ctx.backend.Fill(sums[k], 0.0));
    (k == 0 ? dweight : dbias) = &sums[k];
  }
  RETURN_IF_ERROR(ctx.backend.LayerNormBackward(
      Reshaped(dyc, {rows, cols}), Reshaped(xc, {rows, cols}), weight, Reshaped(mean, {rows}),
      Reshaped(rstd, {rows}), Reshaped(dxc, {rows, cols}), dweight, dbias));
  if (dxc.data != dx.View().data) RETURN_IF_ERROR(ctx.backend.Cast(dxc, dx.View()));
  for (int k = 0; k < 2; ++k) {
    const TensorView out = ctx.more[k].View();
    if (!(k == 0 ? want_weight : want_bias)) continue;
    if (sums[k].data != out.data) RETURN_IF_ERROR(ctx.backend.Cast(sums[k], Reshaped(out, {cols})));
  }
  return dx;
}

// A bool [rows, cols] mask of the lower triangle (j <= i), torch's is_causal mask.
absl::StatusOr<ConstTensorView> CausalMask(Context& ctx, int64_t rows, int64_t cols) {
  ASSIGN_OR_RETURN(HostTensor mask, HostTensor::Zeros(DType::kBool, {rows, cols}));
  auto* m = reinterpret_cast<bool*>(mask.data());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) m[i * cols + j] = j <= i;
  }
  ASSIGN_OR_RETURN(DeviceTensor device, ctx.backend.Upload(mask));
  ctx.temporaries.push_back(std::move(device));
  return ConstTensorView(ctx.temporaries.back().View());
}

// softmax(scale * q k^T + mask) v per batch and head, each query head h using key and value head
// h / (query heads / key heads) (enable_gqa); fully masked rows give 0 (torch's _safe_softmax).
absl::StatusOr<DeviceTensor> AttentionKernel(Context& ctx) {
  const ConstTensorView q = ctx.Input("query");
  const ConstTensorView k = ctx.Input("key");
  const ConstTensorView v = ctx.Input("value");
  const int rank = q.rank();
  const int64_t length = q.shape[rank - 2], features = q.shape[rank - 1];
  const int64_t source = k.shape[rank - 2], values = v.shape[rank - 1];
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  if (out.num_elements() == 0) return out;
  if (source == 0) {
    RETURN_IF_ERROR(ctx.backend.Fill(out.View(), 0.0));
    return out;
  }
  const double scale = ctx.args().IsNone("scale") ? 1.0 / std::sqrt(static_cast<double>(features))
                                                  : ctx.args().Float("scale");
  const int64_t count = out.num_elements() / (length * values);
  const int64_t query_heads = rank >= 3 ? q.shape[rank - 3] : 1;
  const int64_t key_heads = rank >= 3 ? k.shape[rank - 3] : 1;
  const int64_t group = query_heads / key_heads;
  Shape scores_shape(q.shape.begin(), q.shape.end() - 1);
  scores_shape.push_back(source);
  ASSIGN_OR_RETURN(const TensorView scores, ctx.Temporary(q.dtype, scores_shape));
  auto key_batch = [&](int64_t i) {
    return (i / query_heads) * key_heads + (i % query_heads) / group;
  };
  for (int64_t i = 0; i < count; ++i) {
    const TensorView s = At(scores, i * length * source, {length, source});
    if (features == 0) {
      RETURN_IF_ERROR(ctx.backend.Fill(s, 0.0));
      continue;
    }
    RETURN_IF_ERROR(
        ctx.backend.Gemm(false, true, scale, At(q, i * length * features, {length, features}),
                         At(k, key_batch(i) * source * features, {source, features}), 0.0, s));
  }
  ASSIGN_OR_RETURN(const ConstTensorView neg_inf, ctx.Number(-kInf, q.dtype));
  if (!ctx.args().IsNone("attn_mask")) {
    const ConstTensorView mask = ctx.Input("attn_mask");
    RETURN_IF_ERROR(mask.dtype == DType::kBool
                        ? ctx.backend.Where(mask, scores, neg_inf, scores)
                        : ctx.backend.Binary(BinaryOp::kAdd, scores, mask, scores));
  }
  if (ctx.args().Bool("is_causal")) {
    ASSIGN_OR_RETURN(const ConstTensorView causal, CausalMask(ctx, length, source));
    RETURN_IF_ERROR(ctx.backend.Where(causal, scores, neg_inf, scores));
  }
  ASSIGN_OR_RETURN(const TensorView probs, ctx.Temporary(q.dtype, scores_shape));
  RETURN_IF_ERROR(ctx.backend.SoftmaxAlongDim(SoftmaxKind::kSafeSoftmax, scores, rank - 1, probs));
  for (int64_t i = 0; i < count; ++i) {
    RETURN_IF_ERROR(ctx.backend.Gemm(false, false, 1.0,
                                     At(probs, i * length * source, {length, source}),
                                     At(v, key_batch(i) * source * values, {source, values}), 0.0,
                                     At(out.View(), i * length * values, {length, values})));
  }
  return out;
}

// linalg_vector_norm over dims the strategy keeps whole, or this rank's part of the Partial a
// sharded one gives (sum for ord 0 and 1, max for inf, min for -inf).
absl::StatusOr<DeviceTensor> VectorNormKernel(Context& ctx) {
  const ops::CallContext call{*ctx.call().op, ctx.args(), ctx.call().inputs};
  ASSIGN_OR_RETURN(const ConstTensorView x, ctx.As(ctx.Input("self"), ctx.out_dtype));
  ASSIGN_OR_RETURN(const std::vector<int> dims, ops::ReductionDims(call, "dim", x.rank()));
  const double ord = ctx.args().Float("ord");
  ASSIGN_OR_RETURN(const TensorView a, ctx.Temporary(x.dtype, x.shape));
  ConstTensorView r;
  if (ord == 0.0) {
    ASSIGN_OR_RETURN(const ConstTensorView zero, ctx.Number(0.0, x.dtype));
    ASSIGN_OR_RETURN(const TensorView nonzero, ctx.Temporary(DType::kBool, x.shape));
    RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kNe, x, zero, nonzero));
    RETURN_IF_ERROR(ctx.backend.Cast(nonzero, a));
    ASSIGN_OR_RETURN(r, ReduceKept(ctx, ReduceOp::kSum, a, dims));
  } else {
    RETURN_IF_ERROR(ctx.backend.Unary(UnaryOp::kAbs, x, a));
    if (std::isinf(ord)) {
      ASSIGN_OR_RETURN(r, ReduceKept(ctx, ord > 0 ? ReduceOp::kMax : ReduceOp::kMin, a, dims));
    } else if (ord == 1.0) {
      ASSIGN_OR_RETURN(r, ReduceKept(ctx, ReduceOp::kSum, a, dims));
    } else {
      ASSIGN_OR_RETURN(const ConstTensorView p, ctx.Number(ord, x.dtype));
      if (ord == 2.0) {
        RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kMul, a, a, a));
      } else {
        RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kPow, a, p, a));
      }
      ASSIGN_OR_RETURN(const ConstTensorView sum, ReduceKept(ctx, ReduceOp::kSum, a, dims));
      ASSIGN_OR_RETURN(const TensorView root, ctx.Temporary(x.dtype, sum.shape));
      if (ord == 2.0) {
        RETURN_IF_ERROR(ctx.backend.Unary(UnaryOp::kSqrt, sum, root));
      } else {
        ASSIGN_OR_RETURN(const ConstTensorView inverse, ctx.Number(1.0 / ord, x.dtype));
        RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kPow, sum, inverse, root));
      }
      r = root;
    }
  }
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Copy(Reshaped(r, ctx.out_shape), out.View()));
  return out;
}

// slice_backward and select_backward: zeros with grad_output written at the slice (or index)
// along `dim`, which is whole here.
absl::StatusOr<DeviceTensor> SliceBackwardKernel(Context& ctx) {
  const ConstTensorView grad = ctx.Input("grad_output");
  const bool select = ctx.call().op->schema.name == "select_backward";
  const int rank = static_cast<int>(ctx.out_shape.size());
  ASSIGN_OR_RETURN(const int dim, Dim(ctx, "dim", rank));
  const int64_t size = ctx.out_shape[dim];
  int64_t start = ctx.args().Int(select ? "index" : "start");
  if (start < 0) start += size;
  start = std::clamp<int64_t>(start, 0, size);
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Fill(out.View(), 0.0));
  if (grad.num_elements() == 0) return out;
  StridedView dst = StridedOf(out.View());
  dst.data += start * dst.strides[dim] * static_cast<int64_t>(DTypeSize(grad.dtype));
  if (select) {
    dst.shape.erase(dst.shape.begin() + dim);
    dst.strides.erase(dst.strides.begin() + dim);
  } else {
    dst.shape[dim] = grad.shape[dim];
    dst.strides[dim] *= ctx.args().Int("step");
  }
  RETURN_IF_ERROR(ctx.backend.CopyStrided(StridedOf(grad), dst));
  return out;
}

// embedding_dense_backward: each row of grad_output added to the row its index names (the rows of
// this rank's block of the output), padding_idx's row left 0.
absl::StatusOr<DeviceTensor> EmbeddingBackwardKernel(Context& ctx) {
  const ConstTensorView grad = ctx.Input("grad_output");
  const int64_t num_weights = ctx.args().Int("num_weights");
  const int64_t padding_idx = ctx.args().Int("padding_idx");
  ASSIGN_OR_RETURN(std::vector<int64_t> ids, IndexValues(ctx, ctx.Input("indices")));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= num_weights) {
      return absl::InvalidArgumentError(absl::StrCat(ctx.name(), ": index ", ids[i], " at ", i,
                                                     " is out of range for num_weights ",
                                                     num_weights));
    }
    if (ids[i] == padding_idx) ids[i] = -1;  // below every row: skipped
  }
  const Shape id_shape = ctx.Input("indices").shape;
  ASSIGN_OR_RETURN(const TensorView kept, ctx.Temporary(DType::kInt64, id_shape));
  RETURN_IF_ERROR(ctx.backend.CopyFromHost(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(ids.data()), kept.nbytes()),
      kept));
  const DType compute = KernelDType(grad.dtype);
  ASSIGN_OR_RETURN(const ConstTensorView dy, ctx.As(grad, compute));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  TensorView acc = out.View();
  if (compute != out.dtype()) {
    ASSIGN_OR_RETURN(acc, ctx.Temporary(compute, ctx.out_shape));
  }
  RETURN_IF_ERROR(ctx.backend.Fill(acc, 0.0));
  const int64_t row_offset =
      LocalShapeAndOffsetAt(*ctx.local.output, ctx.local.coordinate).offset[0];
  RETURN_IF_ERROR(ctx.backend.EmbeddingBackward(kept, dy, row_offset, acc));
  if (acc.data != out.View().data) RETURN_IF_ERROR(ctx.backend.Cast(acc, out.View()));
  return out;
}

}  // namespace

void AddNormKernels(LocalTable& t) {
  t["aten::native_layer_norm"] = NormKernel<true>;
  t["aten::layer_norm"] = NormKernel<true>;
  t["aten::native_layer_norm_backward"] = NormBackwardKernel;
  t["aten::rms_norm"] = NormKernel<false>;
  t["aten::scaled_dot_product_attention"] = AttentionKernel;
  t["aten::linalg_vector_norm"] = VectorNormKernel;
  t["aten::slice_backward"] = t["aten::select_backward"] = SliceBackwardKernel;
  t["aten::embedding_dense_backward"] = EmbeddingBackwardKernel;
}

}  // namespace tessera::kernels::aten
