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
  // native_layer_norm: the mean and rstd as outputs too; _fused_rms_norm: the rstd.
  const bool statistics = ctx.num_outputs() > 1;
  if (statistics) {
    for (size_t k = 1; k < ctx.num_outputs(); ++k) {
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
    if (statistics) {
      // The rstd output in the dtype it is computed in (the kernel's is float32 whatever the
      // input): 1 / sqrt(mean(x^2) + eps).
      ASSIGN_OR_RETURN(const TensorView squares, ctx.Temporary(compute, {rows, cols}));
      RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kMul, x2, x2, squares));
      ASSIGN_OR_RETURN(const TensorView r, ctx.Temporary(compute, {rows}));
      RETURN_IF_ERROR(ctx.backend.ReduceAlongDim(ReduceOp::kAvg, squares, 1, r));
      ASSIGN_OR_RETURN(const ConstTensorView epsilon, ctx.Number(eps, compute));
      RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kAdd, r, epsilon, r));
      RETURN_IF_ERROR(ctx.backend.Unary(UnaryOp::kRsqrt, r, r));
      RETURN_IF_ERROR(ctx.backend.Cast(r, Reshaped(ctx.more[0].View(), {rows})));
    }
  }
  if (y.data != out.View().data) RETURN_IF_ERROR(ctx.backend.Cast(y, out.View()));
  return out;
}

// native_layer_norm_backward and _fused_rms_norm_backward: the kernel over [rows, cols] with the
// statistics in float32; the gradients of the parameters summed over this rank's rows (a sharded
// batch's Partial).
template <bool kLayerNorm>
absl::StatusOr<DeviceTensor> NormBackwardKernel(Context& ctx) {
  constexpr int kParameters = kLayerNorm ? 2 : 1;
  const char* const parameter_names[2] = {"weight", "bias"};
  const ConstTensorView x = ctx.Input("input");
  ASSIGN_OR_RETURN(DeviceTensor dx, ctx.Output());
  for (size_t k = 1; k <= kParameters; ++k) {
    ASSIGN_OR_RETURN(DeviceTensor t, ctx.OutputAt(k));
    ctx.more.push_back(std::move(t));
  }
  const std::vector<int64_t>& mask = ctx.args().Ints("output_mask");
  bool wanted[2] = {false, false};
  for (int k = 0; k < kParameters; ++k) {
    wanted[k] = mask[k + 1] != 0 && !ctx.args().IsNone(parameter_names[k]);
  }
  const int64_t cols = NumElements(ctx.args().Ints("normalized_shape"));
  const int64_t rows = cols == 0 ? 0 : x.num_elements() / cols;
  if (rows == 0 || cols == 0) {
    for (DeviceTensor& t : ctx.more) RETURN_IF_ERROR(ctx.backend.Fill(t.View(), 0.0));
    return dx;
  }
  const DType compute = KernelDType(x.dtype);
  ASSIGN_OR_RETURN(const ConstTensorView xc, ctx.As(x, compute));
  ASSIGN_OR_RETURN(const ConstTensorView dyc, ctx.As(ctx.Input("grad_out"), compute));
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
  TensorView* grads[2] = {nullptr, nullptr};
  for (int k = 0; k < kParameters; ++k) {
    if (!wanted[k]) continue;
    const TensorView out = ctx.more[k].View();
    if (compute == out.dtype) {
      sums[k] = Reshaped(out, {cols});
    } else {
      ASSIGN_OR_RETURN(sums[k], ctx.Temporary(compute, {cols}));
    }
    RETURN_IF_ERROR(ctx.backend.Fill(sums[k], 0.0));
    grads[k] = &sums[k];
  }
  const ConstTensorView dy2 = Reshaped(dyc, {rows, cols}), x2 = Reshaped(xc, {rows, cols});
  const TensorView dx2 = Reshaped(dxc, {rows, cols});
  if constexpr (kLayerNorm) {
    ASSIGN_OR_RETURN(const ConstTensorView mean, ctx.As(ctx.Input("mean"), DType::kFloat32));
    RETURN_IF_ERROR(ctx.backend.LayerNormBackward(dy2, x2, weight, Reshaped(mean, {rows}),
                                                  Reshaped(rstd, {rows}), dx2, grads[0], grads[1]));
  } else {
    RETURN_IF_ERROR(
        ctx.backend.RmsNormBackward(dy2, x2, weight, Reshaped(rstd, {rows}), dx2, grads[0]));
  }
  if (dxc.data != dx.View().data) RETURN_IF_ERROR(ctx.backend.Cast(dxc, dx.View()));
  for (int k = 0; k < kParameters; ++k) {
    const TensorView out = ctx.more[k].View();
    if (!wanted[k]) continue;
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

// _scaled_dot_product_flash_attention_for_cpu and its backward: query [B, H, L, E], key and
// value [B, Hkv, S, E], query head h using key head h / (H / Hkv); computed in float32 (float64
// for float64) as torch's CPU kernel accumulates.
struct FlashShapes {
  int64_t batch, heads, key_heads, length, source, features;
  double scale;
  DType compute;

  int64_t count() const { return batch * heads; }
  // The key and value block of query block i (batch * heads + head).
  int64_t key_block(int64_t i) const {
    return (i / heads) * key_heads + (i % heads) / (heads / key_heads);
  }
};

FlashShapes FlashShapesOf(Context& ctx) {
  const ConstTensorView q = ctx.Input("query"), k = ctx.Input("key");
  FlashShapes f{q.shape[0], q.shape[1], k.shape[1], q.shape[2],
                k.shape[2], q.shape[3], 0.0,        KernelDType(q.dtype)};
  f.scale = ctx.args().IsNone("scale") ? 1.0 / std::sqrt(static_cast<double>(f.features))
                                       : ctx.args().Float("scale");
  return f;
}

// Query, key and value in the compute dtype with the masked, scaled scores [B, H, L, S] and their
// safe softmax; L and S are at least 1.
struct FlashProbs {
  ConstTensorView q, k, v;
  TensorView scores, probs;
};

absl::StatusOr<FlashProbs> ComputeProbs(Context& ctx, const FlashShapes& f) {
  FlashProbs p;
  ASSIGN_OR_RETURN(p.q, ctx.As(ctx.Input("query"), f.compute));
  ASSIGN_OR_RETURN(p.k, ctx.As(ctx.Input("key"), f.compute));
  ASSIGN_OR_RETURN(p.v, ctx.As(ctx.Input("value"), f.compute));
  const int64_t l = f.length, s = f.source, e = f.features;
  const Shape scores_shape = {f.batch, f.heads, l, s};
  ASSIGN_OR_RETURN(p.scores, ctx.Temporary(f.compute, scores_shape));
  ASSIGN_OR_RETURN(p.probs, ctx.Temporary(f.compute, scores_shape));
  for (int64_t i = 0; i < f.count(); ++i) {
    const TensorView block = At(p.scores, i * l * s, {l, s});
    if (e == 0) {
      RETURN_IF_ERROR(ctx.backend.Fill(block, 0.0));
      continue;
    }
    RETURN_IF_ERROR(ctx.backend.Gemm(false, true, f.scale, At(p.q, i * l * e, {l, e}),
                                     At(p.k, f.key_block(i) * s * e, {s, e}), 0.0, block));
  }
  if (!ctx.args().IsNone("attn_mask")) {
    ASSIGN_OR_RETURN(const ConstTensorView mask, ctx.As(ctx.Input("attn_mask"), f.compute));
    RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kAdd, p.scores, mask, p.scores));
  }
  if (ctx.args().Bool("is_causal")) {
    ASSIGN_OR_RETURN(const ConstTensorView causal, CausalMask(ctx, l, s));
    ASSIGN_OR_RETURN(const ConstTensorView neg_inf, ctx.Number(-kInf, f.compute));
    RETURN_IF_ERROR(ctx.backend.Where(causal, p.scores, neg_inf, p.scores));
  }
  RETURN_IF_ERROR(ctx.backend.SoftmaxAlongDim(SoftmaxKind::kSafeSoftmax, p.scores, 3, p.probs));
  return p;
}

absl::StatusOr<DeviceTensor> FlashAttentionKernel(Context& ctx) {
  const FlashShapes f = FlashShapesOf(ctx);
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  ASSIGN_OR_RETURN(DeviceTensor lse, ctx.OutputAt(1));
  const int64_t l = f.length, s = f.source, e = f.features;
  if (f.count() == 0 || l == 0 || s == 0) {
    // No key: every row fully masked, which torch answers with 0 (its logsumexp too).
    RETURN_IF_ERROR(ctx.backend.Fill(out.View(), 0.0));
    RETURN_IF_ERROR(ctx.backend.Fill(lse.View(), 0.0));
    ctx.more.push_back(std::move(lse));
    return out;
  }
  ASSIGN_OR_RETURN(const FlashProbs p, ComputeProbs(ctx, f));
  const TensorView& scores = p.scores;
  TensorView o = out.View();
  if (o.dtype != f.compute) {
    ASSIGN_OR_RETURN(o, ctx.Temporary(f.compute, out.shape()));
  }
  for (int64_t i = 0; i < f.count(); ++i) {
    const TensorView block = At(o, i * l * e, {l, e});
    if (e == 0) continue;
    RETURN_IF_ERROR(ctx.backend.Gemm(false, false, 1.0, At(p.probs, i * l * s, {l, s}),
                                     At(p.v, f.key_block(i) * s * e, {s, e}), 0.0, block));
  }
  if (o.data != out.View().data) RETURN_IF_ERROR(ctx.backend.Cast(o, out.View()));
  // logsumexp = log(sum(exp(x - m))) + m with m the row's max; a fully masked row (m = -inf)
  // gives 0, as torch's kernel.
  const Shape rows = {f.batch, f.heads, l, 1};
  ASSIGN_OR_RETURN(const TensorView m, ctx.Temporary(f.compute, rows));
  RETURN_IF_ERROR(ctx.backend.ReduceAlongDim(ReduceOp::kMax, scores, 3, m));
  ASSIGN_OR_RETURN(const ConstTensorView neg_inf, ctx.Number(-kInf, f.compute));
  ASSIGN_OR_RETURN(const ConstTensorView zero, ctx.Number(0.0, f.compute));
  ASSIGN_OR_RETURN(const TensorView masked, ctx.Temporary(DType::kBool, rows));
  RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kEq, m, neg_inf, masked));
  ASSIGN_OR_RETURN(const TensorView shift, ctx.Temporary(f.compute, rows));
  RETURN_IF_ERROR(ctx.backend.Where(masked, zero, m, shift));
  RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kSub, scores, shift, scores));
  RETURN_IF_ERROR(ctx.backend.Unary(UnaryOp::kExp, scores, scores));
  ASSIGN_OR_RETURN(const TensorView sum, ctx.Temporary(f.compute, rows));
  RETURN_IF_ERROR(ctx.backend.ReduceAlongDim(ReduceOp::kSum, scores, 3, sum));
  RETURN_IF_ERROR(ctx.backend.Unary(UnaryOp::kLog, sum, sum));
  RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kAdd, sum, shift, sum));
  RETURN_IF_ERROR(ctx.backend.Where(masked, zero, sum, sum));
  RETURN_IF_ERROR(ctx.backend.Cast(sum, Reshaped(lse.View(), rows)));
  ctx.more.push_back(std::move(lse));
  return out;
}

// The backward from the probabilities recomputed: grad_value = p^T grad, ds = p * (grad v^T -
// sum(grad v^T * p)), grad_query = scale ds key, grad_key = scale ds^T query; the key and value
// gradients summed over each key head's group of query heads.
absl::StatusOr<DeviceTensor> FlashAttentionBackwardKernel(Context& ctx) {
  const FlashShapes f = FlashShapesOf(ctx);
  ASSIGN_OR_RETURN(DeviceTensor dq, ctx.Output());
  for (size_t k = 1; k < 3; ++k) {
    ASSIGN_OR_RETURN(DeviceTensor t, ctx.OutputAt(k));
    ctx.more.push_back(std::move(t));
  }
  const int64_t l = f.length, s = f.source, e = f.features;
  if (f.count() == 0 || l == 0 || s == 0 || e == 0) {
    RETURN_IF_ERROR(ctx.backend.Fill(dq.View(), 0.0));
    for (DeviceTensor& t : ctx.more) RETURN_IF_ERROR(ctx.backend.Fill(t.View(), 0.0));
    return dq;
  }
  ASSIGN_OR_RETURN(const FlashProbs p, ComputeProbs(ctx, f));
  ASSIGN_OR_RETURN(const ConstTensorView dout, ctx.As(ctx.Input("grad_out"), f.compute));
  const ConstTensorView &q = p.q, &k = p.k, &v = p.v;
  const TensorView &scores = p.scores, &probs = p.probs;
  // The gradients in the compute dtype; key's and value's accumulate over each group.
  TensorView grads[3];
  DeviceTensor* outs[3] = {&dq, &ctx.more[0], &ctx.more[1]};
  for (int g = 0; g < 3; ++g) {
    grads[g] = outs[g]->View();
    if (grads[g].dtype != f.compute) {
      ASSIGN_OR_RETURN(grads[g], ctx.Temporary(f.compute, outs[g]->shape()));
    }
  }
  RETURN_IF_ERROR(ctx.backend.Fill(grads[1], 0.0));
  RETURN_IF_ERROR(ctx.backend.Fill(grads[2], 0.0));
  // dp = grad v^T into `scores`, which the probabilities no longer need.
  for (int64_t i = 0; i < f.count(); ++i) {
    const int64_t j = f.key_block(i);
    const ConstTensorView p = At(probs, i * l * s, {l, s});
    const ConstTensorView d = At(dout, i * l * e, {l, e});
    RETURN_IF_ERROR(ctx.backend.Gemm(true, false, 1.0, p, d, 1.0, At(grads[2], j * s * e, {s, e})));
    RETURN_IF_ERROR(ctx.backend.Gemm(false, true, 1.0, d, At(v, j * s * e, {s, e}), 0.0,
                                     At(scores, i * l * s, {l, s})));
  }
  RETURN_IF_ERROR(ctx.backend.SoftmaxBackward(SoftmaxKind::kSafeSoftmax, probs, scores, 3, scores));
  for (int64_t i = 0; i < f.count(); ++i) {
    const int64_t j = f.key_block(i);
    const ConstTensorView ds = At(scores, i * l * s, {l, s});
    RETURN_IF_ERROR(ctx.backend.Gemm(false, false, f.scale, ds, At(k, j * s * e, {s, e}), 0.0,
                                     At(grads[0], i * l * e, {l, e})));
    RETURN_IF_ERROR(ctx.backend.Gemm(true, false, f.scale, ds, At(q, i * l * e, {l, e}), 1.0,
                                     At(grads[1], j * s * e, {s, e})));
  }
  for (int g = 0; g < 3; ++g) {
    if (grads[g].data != outs[g]->View().data) {
      RETURN_IF_ERROR(ctx.backend.Cast(grads[g], outs[g]->View()));
    }
  }
  return dq;
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
  t["aten::native_layer_norm_backward"] = NormBackwardKernel<true>;
  t["aten::rms_norm"] = t["aten::_fused_rms_norm"] = NormKernel<false>;
  t["aten::_fused_rms_norm_backward"] = NormBackwardKernel<false>;
  t["aten::scaled_dot_product_attention"] = AttentionKernel;
  t["aten::_scaled_dot_product_flash_attention_for_cpu"] = FlashAttentionKernel;
  t["aten::_scaled_dot_product_flash_attention_for_cpu_backward"] = FlashAttentionBackwardKernel;
  t["aten::linalg_vector_norm"] = VectorNormKernel;
  t["aten::slice_backward"] = t["aten::select_backward"] = SliceBackwardKernel;
  t["aten::embedding_dense_backward"] = EmbeddingBackwardKernel;
}

}  // namespace tessera::kernels::aten
