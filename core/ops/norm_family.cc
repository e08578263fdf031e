// Norms, attention, the vector norm and the backward ops of slicing and embedding. A norm needs
// its normalized dims whole and keeps the shards of the others (DTensor's layer_norm strategy);
// attention keeps the shards of its batch and head dims (DTensor's SDPA strategy shards heads);
// the vector norm reduces as a reduction, with the Partial of a sharded reduced dim only where
// the norm is a sum or an extreme of local parts; the backward ops keep the shards of the dims
// they do not touch, and the embedding's gradient is P(sum) over a sharded batch.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/op_graph.h"
#include "core/ops/op_meta.h"
#include "core/ops/op_propagation.h"
#include "core/ops/op_registry.h"
#include "core/status_macros.h"

namespace tessera::ops {
namespace {

enum class Kind {
  kLayerNorm,
  kNativeLayerNorm,  // layer_norm with its mean and rstd as outputs
  kNativeLayerNormBackward,
  kRmsNorm,
  kFusedRmsNorm,  // rms_norm with its rstd as an output
  kFusedRmsNormBackward,
  kAttention,
  kFlashAttention,  // the attention torch's CPU SDPA runs, with the logsumexp of the scores
  kFlashAttentionBackward,
  kVectorNorm,
  kSliceBackward,
  kSelectBackward,
  kEmbeddingBackward
};

struct NormEntry {
  const char* schema;
  Kind kind;
  OpFamily family;
  const char* implementation;
  const char* derivative;
  const char* strategy_text;
};

const std::vector<NormEntry>& Entries() {
  static const auto* const entries = new std::vector<NormEntry>{
      {"layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? "
       "bias=None, float eps=1e-05, bool cudnn_enable=True) -> Tensor",
       Kind::kLayerNorm, OpFamily::kNn,
       "kernel layer_norm over the flattened normalized dims (float16/bfloat16 in float32)",
       "native_layer_norm_backward(grad, input, normalized_shape, mean, rstd, weight, bias)",
       "S(d) kept on the leading dims; the normalized dims whole (R); weight and bias R"},
      {"native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, "
       "float eps) -> (Tensor, Tensor, Tensor)",
       Kind::kNativeLayerNorm, OpFamily::kNn,
       "kernel layer_norm over the flattened normalized dims, its mean and rstd (computed in "
       "float32) as outputs of the input's shape with the normalized dims 1",
       "native_layer_norm_backward(grad, input, normalized_shape, mean, rstd, weight, bias)",
       "S(d) kept on the leading dims (the output, mean and rstd alike); the normalized dims "
       "whole (R); weight and bias R"},
      {"native_layer_norm_backward(Tensor grad_out, Tensor input, SymInt[] normalized_shape, "
       "Tensor mean, Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask) -> (Tensor, "
       "Tensor, Tensor)",
       Kind::kNativeLayerNormBackward, OpFamily::kNn,
       "kernel layer_norm_backward over the flattened normalized dims (mean and rstd read in "
       "float32); grad_weight and grad_bias summed over this rank's rows; an output the mask (or "
       "a None weight or bias) leaves out is an empty tensor where torch gives None",
       "",
       "S(d) of grad_out, input, mean and rstd on a leading dim gives grad_input S(d) and "
       "grad_weight, grad_bias P(sum); P(sum) of grad_out alone gives P(sum) of all three (the "
       "backward is linear in it); the normalized dims whole (R); weight and bias R"},
      {"rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) "
       "-> Tensor",
       Kind::kRmsNorm, OpFamily::kNn,
       "kernel rms_norm over the flattened normalized dims (float16/bfloat16 in float32)",
       "_fused_rms_norm_backward(grad, input, normalized_shape, rstd, weight)",
       "S(d) kept on the leading dims; the normalized dims whole (R); weight R"},
      {"_fused_rms_norm(Tensor input, int[] normalized_shape, Tensor? weight, float? eps) -> "
       "(Tensor, Tensor)",
       Kind::kFusedRmsNorm, OpFamily::kNn,
       "kernel rms_norm over the flattened normalized dims, its rstd (computed in float32, or "
       "float64 for a float64 input) as an output of the input's shape with the normalized dims 1",
       "_fused_rms_norm_backward(grad, input, normalized_shape, rstd, weight)",
       "S(d) kept on the leading dims (the output and rstd alike); the normalized dims whole (R); "
       "weight R"},
      {"_fused_rms_norm_backward(Tensor grad_out, Tensor input, int[] normalized_shape, Tensor "
       "rstd, Tensor? weight, bool[2] output_mask) -> (Tensor, Tensor)",
       Kind::kFusedRmsNormBackward, OpFamily::kNn,
       "kernel rms_norm_backward over the flattened normalized dims (rstd read in float32); "
       "grad_weight summed over this rank's rows; an output the mask (or a None weight) leaves "
       "out is an empty tensor where torch gives None",
       "",
       "S(d) of grad_out, input and rstd on a leading dim gives grad_input S(d) and grad_weight "
       "P(sum); P(sum) of grad_out alone gives P(sum) of both (the backward is linear in it); "
       "the normalized dims whole (R); weight R"},
      {"scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? "
       "attn_mask=None, float dropout_p=0.0, bool is_causal=False, *, float? scale=None, bool "
       "enable_gqa=False) -> Tensor",
       Kind::kAttention, OpFamily::kNn,
       "decomposition: gemm per batch and head (scale q k^T, + mask, causal -inf), "
       "softmax.safe_softmax, gemm with value",
       "p = _safe_softmax(add(mul(matmul(query, transpose.int(key, -2, -1)), scale), mask), -1); "
       "value: matmul(transpose.int(p, -2, -1), grad); ds = _softmax_backward_data(matmul(grad, "
       "transpose.int(value, -2, -1)), p, -1, query.dtype); query: mul(matmul(ds, key), scale); "
       "key: mul(matmul(transpose.int(ds, -2, -1), query), scale); key and value summed over "
       "each group of query heads with enable_gqa",
       "S(d) on a batch or head dim of query, key, value (and the mask where it has that dim); "
       "the sequence and feature dims whole (R)"},
      {"_scaled_dot_product_flash_attention_for_cpu(Tensor query, Tensor key, Tensor value, "
       "float dropout_p=0.0, bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None) "
       "-> (Tensor output, Tensor logsumexp)",
       Kind::kFlashAttention, OpFamily::kNn,
       "kernel: gemm per batch and head (scale q k^T, + mask, causal -inf) in float32 (float64 "
       "for float64), softmax.safe_softmax, gemm with value; logsumexp of the masked scores "
       "(float32, or float64 for float64; 0 for a fully masked row, as torch)",
       "_scaled_dot_product_flash_attention_for_cpu_backward(grad, query, key, value, output, "
       "logsumexp, dropout_p, is_causal, attn_mask, scale)",
       "S(d) on the batch (0) or head (1) dim of query, key, value (and the mask where it has "
       "that dim), the output and logsumexp alike; the sequence and feature dims whole (R)"},
      {"_scaled_dot_product_flash_attention_for_cpu_backward(Tensor grad_out, Tensor query, "
       "Tensor key, Tensor value, Tensor out, Tensor logsumexp, float dropout_p, bool is_causal, "
       "*, Tensor? attn_mask=None, float? scale=None) -> (Tensor grad_query, Tensor grad_key, "
       "Tensor grad_value)",
       Kind::kFlashAttentionBackward, OpFamily::kNn,
       "kernel: the probabilities recomputed from query and key; grad_value = p^T grad, ds = "
       "_softmax_backward_data(grad value^T, p), grad_query = scale ds key, grad_key = scale ds^T "
       "query; key and value gradients summed over each group of query heads",
       "",
       "S(d) on the batch (0) or head (1) dim of every tensor input gives the three gradients "
       "S(d); P(sum) of grad_out alone gives P(sum) of all three (the backward is linear in it); "
       "R"},
      {"linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, "
       "ScalarType? dtype=None) -> Tensor",
       Kind::kVectorNorm, OpFamily::kReduction,
       "decomposition: pow(sum(pow(abs(x), ord)), 1 / ord); sum(abs) for 1, sqrt(sum(x * x)) for "
       "2, amax(abs) for inf, amin(abs) for -inf, sum(ne(x, 0)) for 0",
       "mul(mul(sign(self), pow.Tensor_Scalar(abs(self), ord - 1)), div(grad, "
       "pow.Tensor_Scalar(result, ord - 1))), grad and result unsqueezed at dim unless keepdim; "
       "for inf and -inf the grad goes to the elements equal to the result, shared among them",
       "S(d) kept on other dims, R; a sharded reduced dim gives P(sum) for ord 0 and 1, P(max) "
       "for inf, P(min) for -inf, and is made whole (R) first for every other ord"},
      {"slice_backward(Tensor grad_output, SymInt[] input_sizes, int dim, SymInt start, SymInt "
       "end, SymInt step) -> Tensor",
       Kind::kSliceBackward, OpFamily::kTensor,
       "kernel fill 0, then copy (strided) of grad_output into the slice",
       "slice.Tensor(grad, dim, start, end, step)",
       "S(d) kept on the dims but `dim`, which is whole (R); every Partial kept (zeros are fixed "
       "by each reduce op)"},
      {"select_backward(Tensor grad_output, SymInt[] input_sizes, int dim, SymInt index) -> "
       "Tensor",
       Kind::kSelectBackward, OpFamily::kTensor,
       "kernel fill 0, then copy (strided) of grad_output into the selected index",
       "select.int(grad, dim, index)",
       "S(d) of grad_output kept on the output's dims but `dim`; every Partial kept"},
      {"embedding_dense_backward(Tensor grad_output, Tensor indices, SymInt num_weights, SymInt "
       "padding_idx, bool scale_grad_by_freq) -> Tensor",
       Kind::kEmbeddingBackward, OpFamily::kTensor,
       "kernel embedding_backward (rows of padding_idx left 0)",
       "masked_fill.Scalar(embedding(grad, indices), unsqueeze(eq.Scalar(indices, padding_idx), "
       "-1), 0)",
       "grad_output and indices R give R; grad_output sharded on its last dim S(1); "
       "grad_output and indices sharded on one batch dim P(sum); P(sum|avg) of grad_output kept"},
  };
  return *entries;
}

Kind KindOf(const CallContext& call) { return Entries()[call.op.entry].kind; }
bool IsLayerNorm(const CallContext& call) {
  return KindOf(call) == Kind::kLayerNorm || KindOf(call) == Kind::kNativeLayerNorm ||
         KindOf(call) == Kind::kNativeLayerNormBackward;
}

absl::Status CheckFloatingInput(const CallContext& call, absl::string_view arg,
                                const TensorMeta& t) {
  if (!IsFloating(t.dtype)) {
    return ArgError(call, arg, absl::StrCat("must be a floating tensor, not ", DTypeName(t.dtype)));
  }
  return absl::OkStatus();
}

// --- layer_norm, rms_norm ---

// The first normalized dim of a norm's input: the input's shape must end with normalized_shape.
absl::StatusOr<int> NormAxis(const CallContext& call) {
  ASSIGN_OR_RETURN(const TensorMeta x, InputTensor(call, "input"));
  const std::vector<int64_t>& normalized = call.args.Ints("normalized_shape");
  if (normalized.empty()) {
    return ArgError(call, "normalized_shape", "must name at least one dim, not []");
  }
  const int rank = static_cast<int>(x.shape.size());
  const int n = static_cast<int>(normalized.size());
  if (rank < n || !std::equal(normalized.begin(), normalized.end(), x.shape.end() - n)) {
    return ArgError(call, "normalized_shape",
                    absl::StrCat("is ", ShapeToString(normalized), ", but input of shape ",
                                 ShapeToString(x.shape), " does not end with it"));
  }
  return rank - n;
}

// A norm's weight or bias: None, or of normalized_shape and a dtype the norm takes with x's.
absl::Status CheckNormParameter(const CallContext& call, absl::string_view arg,
                                const TensorMeta& x) {
  if (call.args.IsNone(arg)) return absl::OkStatus();
  ASSIGN_OR_RETURN(const TensorMeta w, InputTensor(call, arg));
  const std::vector<int64_t>& normalized = call.args.Ints("normalized_shape");
  if (w.shape != normalized) {
    return ArgError(call, arg,
                    absl::StrCat("of shape ", ShapeToString(w.shape),
                                 " must have normalized_shape ", ShapeToString(normalized)));
  }
  RETURN_IF_ERROR(CheckFloatingInput(call, arg, w));
  // torch's CPU layer_norm takes float32 parameters with a float16/bfloat16 input, else x's
  // dtype; rms_norm (its composite) any floating dtype.
  const bool reduced = x.dtype == DType::kFloat16 || x.dtype == DType::kBFloat16;
  if (IsLayerNorm(call) && w.dtype != x.dtype && !(reduced && w.dtype == DType::kFloat32)) {
    return ArgError(call, arg,
                    absl::StrCat("is ", DTypeName(w.dtype), " but input is ", DTypeName(x.dtype),
                                 " (layer_norm's parameters share the input's dtype, or are "
                                 "float32 for a float16 or bfloat16 input)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<OutputMeta> NormMeta(const CallContext& call) {
  ASSIGN_OR_RETURN(const TensorMeta x, InputTensor(call, "input"));
  RETURN_IF_ERROR(CheckFloatingInput(call, "input", x));
  RETURN_IF_ERROR(NormAxis(call).status());
  RETURN_IF_ERROR(CheckNormParameter(call, "weight", x));
  if (IsLayerNorm(call)) RETURN_IF_ERROR(CheckNormParameter(call, "bias", x));
  if (!call.args.IsNone("eps") && !(call.args.Float("eps") >= 0)) {
    return ArgError(
        call, "eps",
        absl::StrCat("is ", call.args.Float("eps"), "; Tessera's norm kernels take eps >= 0"));
  }
  return OutputMeta{x.shape, x.dtype};
}

// The input's shape with the normalized dims 1: the shape of a norm's statistics.
absl::StatusOr<Shape> StatisticsShape(const CallContext& call, const Shape& input) {
  ASSIGN_OR_RETURN(const int axis, NormAxis(call));
  Shape shape = input;
  for (size_t d = axis; d < shape.size(); ++d) shape[d] = 1;
  return shape;
}

// native_layer_norm's mean and rstd (the input's dtype), _fused_rms_norm's rstd (float32, or
// float64 for a float64 input: the dtype it is computed in): of StatisticsShape.
absl::StatusOr<std::vector<OutputMeta>> NormStatistics(const CallContext& call,
                                                       const OutputMeta& first) {
  ASSIGN_OR_RETURN(const int axis, NormAxis(call));
  for (size_t d = axis; d < first.shape.size(); ++d) {
    if (first.shape[d] == 0) {
      return ArgError(call, "normalized_shape",
                      absl::StrCat("is ", ShapeToString(call.args.Ints("normalized_shape")),
                                   ", with no element: its statistics are undefined"));
    }
  }
  ASSIGN_OR_RETURN(const Shape shape, StatisticsShape(call, first.shape));
  if (KindOf(call) == Kind::kFusedRmsNorm) {
    return std::vector<OutputMeta>{
        {shape, first.dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32}};
  }
  return std::vector<OutputMeta>{{shape, first.dtype}, {shape, first.dtype}};
}

// The statistics a norm backward reads: native_layer_norm_backward's mean and rstd,
// _fused_rms_norm_backward's rstd.
std::vector<const char*> BackwardStatistics(const CallContext& call) {
  if (KindOf(call) == Kind::kFusedRmsNormBackward) return {"rstd"};
  return {"mean", "rstd"};
}
// The parameters whose gradients a norm backward gives after grad_input.
std::vector<const char*> BackwardParameters(const CallContext& call) {
  if (KindOf(call) == Kind::kFusedRmsNormBackward) return {"weight"};
  return {"weight", "bias"};
}

// A norm backward's inputs: grad_out and input alike, the statistics as the forward gives them
// (the input's shape with the normalized dims 1); grad_input always computed (output_mask[0]
// True).
absl::StatusOr<OutputMeta> NormBackwardMeta(const CallContext& call) {
  ASSIGN_OR_RETURN(const TensorMeta x, InputTensor(call, "input"));
  ASSIGN_OR_RETURN(const TensorMeta dy, InputTensor(call, "grad_out"));
  RETURN_IF_ERROR(CheckFloatingInput(call, "input", x));
  if (dy.shape != x.shape || dy.dtype != x.dtype) {
    return ArgError(call, "grad_out",
                    absl::StrCat("is ", DTypeName(dy.dtype), ShapeToString(dy.shape),
                                 " but input is ", DTypeName(x.dtype), ShapeToString(x.shape)));
  }
  ASSIGN_OR_RETURN(const Shape statistics, StatisticsShape(call, x.shape));
  for (const char* arg : BackwardStatistics(call)) {
    ASSIGN_OR_RETURN(const TensorMeta t, InputTensor(call, arg));
    RETURN_IF_ERROR(CheckFloatingInput(call, arg, t));
    if (t.shape != statistics) {
      return ArgError(
          call, arg,
          absl::StrCat("of shape ", ShapeToString(t.shape), " must be ", ShapeToString(statistics),
                       " (the input's with the normalized dims 1, as the forward "
                       "gives it)"));
    }
  }
  for (const char* arg : BackwardParameters(call)) {
    RETURN_IF_ERROR(CheckNormParameter(call, arg, x));
  }
  if (call.args.Ints("output_mask")[0] == 0) {
    return ArgError(call, "output_mask",
                    "[0] is False; Tessera always computes grad_input (give True)");
  }
  return OutputMeta{x.shape, x.dtype};
}

// Whether a norm backward gives the gradient of BackwardParameters(call)[k - 1] (output k): its
// mask bit set and the parameter given.
bool NormBackwardGives(const CallContext& call, int k) {
  return call.args.Ints("output_mask")[k] != 0 &&
         !call.args.IsNone(BackwardParameters(call)[k - 1]);
}

// The parameters' gradients: of normalized_shape and the parameter's dtype, or empty.
absl::StatusOr<std::vector<OutputMeta>> NormBackwardMore(const CallContext& call,
                                                         const OutputMeta& first) {
  std::vector<OutputMeta> more;
  const std::vector<const char*> parameters = BackwardParameters(call);
  for (int k = 1; k <= static_cast<int>(parameters.size()); ++k) {
    if (!NormBackwardGives(call, k)) {
      more.push_back({{0}, first.dtype});
      continue;
    }
    ASSIGN_OR_RETURN(const TensorMeta w, InputTensor(call, parameters[k - 1]));
    more.push_back({w.shape, w.dtype});
  }
  return more;
}

absl::StatusOr<StrategyCandidates> NormBackwardStrategies(const CallContext& call) {
  ASSIGN_OR_RETURN(const int axis, NormAxis(call));
  const int n = static_cast<int>(call.inputs.size());
  const Placement sum = Placement::Partial(ReduceOp::kSum);
  const int parameters = static_cast<int>(BackwardParameters(call).size());
  std::vector<Placement> given, replicated(parameters, Placement::Replicate());
  for (int k = 1; k <= parameters; ++k) {
    given.push_back(NormBackwardGives(call, k) ? sum : Placement::Replicate());
  }
  std::vector<const char*> sharded = BackwardStatistics(call);
  sharded.insert(sharded.begin(), {"grad_out", "input"});
  StrategyCandidates c;
  for (int d = 0; d < axis; ++d) {
    std::vector<Placement> in(n, Placement::Replicate());
    for (const char* arg : sharded) in[call.args.Tensor(arg)] = Placement::Shard(d);
    c.per_dim.push_back({in, Placement::Shard(d), given});
  }
  std::vector<Placement> partial(n, Placement::Replicate());
  partial[call.args.Tensor("grad_out")] = sum;
  c.per_dim.push_back({partial, sum, given});
  c.per_dim.push_back(
      {std::vector<Placement>(n, Placement::Replicate()), Placement::Replicate(), replicated});
  return c;
}

absl::StatusOr<StrategyCandidates> NormStrategies(const CallContext& call) {
  ASSIGN_OR_RETURN(const int axis, NormAxis(call));
  const int n = static_cast<int>(call.inputs.size());
  const int input = call.args.Tensor("input");
  StrategyCandidates c;
  for (int d = 0; d < axis; ++d) {
    std::vector<Placement> in(n, Placement::Replicate());
    in[input] = Placement::Shard(d);
    c.per_dim.push_back({in, Placement::Shard(d)});
  }
  c.per_dim.push_back({std::vector<Placement>(n, Placement::Replicate()), Placement::Replicate()});
  return c;
}

// --- scaled_dot_product_attention ---

absl::StatusOr<OutputMeta> AttentionMeta(const CallContext& call) {
  ASSIGN_OR_RETURN(const TensorMeta q, InputTensor(call, "query"));
  ASSIGN_OR_RETURN(const TensorMeta k, InputTensor(call, "key"));
  ASSIGN_OR_RETURN(const TensorMeta v, InputTensor(call, "value"));
  RETURN_IF_ERROR(CheckFloatingInput(call, "query", q));
  const int rank = static_cast<int>(q.shape.size());
  if (rank < 2) return ArgError(call, "query", "must have at least 2 dims ([..., L, E])");
  for (const char* arg : {"key", "value"}) {
    const TensorMeta& t = std::string(arg) == "key" ? k : v;
    if (t.dtype != q.dtype) {
      return ArgError(call, arg,
                      absl::StrCat("is ", DTypeName(t.dtype), " but query is ", DTypeName(q.dtype),
                                   " (one dtype for all three)"));
    }
    if (static_cast<int>(t.shape.size()) != rank) {
      return ArgError(call, arg,
                      absl::StrCat("of shape ", ShapeToString(t.shape), " must have query's ", rank,
                                   " dims (query ", ShapeToString(q.shape), ")"));
    }
  }
  const int64_t features = q.shape[rank - 1];
  const int64_t source = k.shape[rank - 2];
  if (k.shape[rank - 1] != features) {
    return ArgError(call, "key",
                    absl::StrCat("of shape ", ShapeToString(k.shape), " must end with query's ",
                                 features, " features (query ", ShapeToString(q.shape), ")"));
  }
  if (v.shape[rank - 2] != source) {
    return ArgError(call, "value",
                    absl::StrCat("of shape ", ShapeToString(v.shape), " must have key's ", source,
                                 " positions (key ", ShapeToString(k.shape), ")"));
  }
  const bool gqa = call.args.Bool("enable_gqa");
  for (int d = 0; d < rank - 2; ++d) {
    if (v.shape[d] != k.shape[d]) {
      return ArgError(call, "value",
                      absl::StrCat("of shape ", ShapeToString(v.shape), " differs from key's ",
                                   ShapeToString(k.shape), " in dim ", d));
    }
    const bool heads = d == rank - 3;
    const bool grouped = heads && gqa && k.shape[d] > 0 && q.shape[d] % k.shape[d] == 0;
    if (q.shape[d] != k.shape[d] && !grouped) {
      return ArgError(call, "key",
                      absl::StrCat("of shape ", ShapeToString(k.shape), " does not fit query's ",
                                   ShapeToString(q.shape), " in dim ", d,
                                   heads ? (gqa ? " (key's heads must divide query's)"
                                                : " (different heads need enable_gqa=True)")
                                         : " (Tessera's attention does not broadcast batch dims)"));
    }
  }
  const double dropout = call.args.Float("dropout_p");
  if (dropout != 0.0) {
    return ArgError(call, "dropout_p",
                    absl::StrCat("is ", dropout,
                                 ": dropout comes with the random ops; Tessera's attention takes "
                                 "dropout_p=0"));
  }
  Shape scores(q.shape.begin(), q.shape.end() - 1);
  scores.push_back(source);
  if (!call.args.IsNone("attn_mask")) {
    if (call.args.Bool("is_causal")) {
      return ArgError(call, "attn_mask", "must be None when is_causal=True (as torch)");
    }
    ASSIGN_OR_RETURN(const TensorMeta mask, InputTensor(call, "attn_mask"));
    if (mask.dtype != DType::kBool && mask.dtype != q.dtype) {
      return ArgError(call, "attn_mask",
                      absl::StrCat("is ", DTypeName(mask.dtype), "; it must be bool or query's ",
                                   DTypeName(q.dtype)));
    }
    std::vector<Shape> shapes = {mask.shape, scores};
    ASSIGN_OR_RETURN(const Shape b, BroadcastShapes(call.op.name(), shapes));
    if (b != scores) {
      return ArgError(call, "attn_mask",
                      absl::StrCat("of shape ", ShapeToString(mask.shape),
                                   " does not broadcast to the scores' ", ShapeToString(scores)));
    }
  }
  Shape out(q.shape.begin(), q.shape.end() - 1);
  out.push_back(v.shape[rank - 1]);
  return OutputMeta{out, q.dtype};
}

absl::StatusOr<StrategyCandidates> AttentionStrategies(const CallContext& call,
                                                       std::span<const DTensorSpec> specs,
                                                       const OutputMeta& out) {
  const int n = static_cast<int>(call.inputs.size());
  const int rank = static_cast<int>(out.shape.size());
  const int q = call.args.Tensor("query"), k = call.args.Tensor("key");
  const int v = call.args.Tensor("value"), mask = call.args.Tensor("attn_mask");
  const int64_t ranks = specs.empty() ? 1 : specs[0].mesh.size();
  StrategyCandidates c;
  for (int d = 0; d < rank - 2; ++d) {
    const int64_t q_size = call.inputs[q].shape[d], k_size = call.inputs[k].shape[d];
    // Grouped heads shard alike only where every rank's query heads use its own key heads.
    if (q_size != k_size && k_size % ranks != 0) continue;
    std::vector<Placement> in(n, Placement::Replicate());
    in[q] = in[k] = in[v] = Placement::Shard(d);
    if (mask >= 0) {
      const Shape& m = call.inputs[mask].shape;
      const int md = d - (rank - static_cast<int>(m.size()));
      if (md >= 0 && (m[md] != 1 || out.shape[d] == 1)) in[mask] = Placement::Shard(md);
    }
    c.per_dim.push_back({in, Placement::Shard(d)});
  }
  c.per_dim.push_back({std::vector<Placement>(n, Placement::Replicate()), Placement::Replicate()});
  return c;
}

// --- _scaled_dot_product_flash_attention_for_cpu and its backward ---

// query [B, H, L, E], key and value [B, Hkv, S, E] with Hkv dividing H (grouped heads), one
// floating dtype; dropout_p 0; attn_mask None or of query's dtype, 2-D or 4-D, broadcasting to
// the scores [B, H, L, S]; is_causal may come with a mask (both apply), as torch's CPU kernel.
absl::StatusOr<OutputMeta> FlashAttentionMeta(const CallContext& call) {
  ASSIGN_OR_RETURN(const TensorMeta q, InputTensor(call, "query"));
  ASSIGN_OR_RETURN(const TensorMeta k, InputTensor(call, "key"));
  ASSIGN_OR_RETURN(const TensorMeta v, InputTensor(call, "value"));
  RETURN_IF_ERROR(CheckFloatingInput(call, "query", q));
  for (const char* arg : {"query", "key", "value"}) {
    const TensorMeta& t = arg[0] == 'q' ? q : arg[0] == 'k' ? k : v;
    if (t.shape.size() != 4) {
      return ArgError(call, arg,
                      absl::StrCat("of shape ", ShapeToString(t.shape),
                                   " must have 4 dims [batch, heads, positions, features]"));
    }
    if (t.dtype != q.dtype) {
      return ArgError(call, arg,
                      absl::StrCat("is ", DTypeName(t.dtype), " but query is ", DTypeName(q.dtype),
                                   " (one dtype for all three)"));
    }
  }
  for (const char* arg : {"key", "value"}) {
    const TensorMeta& t = arg[0] == 'k' ? k : v;
    if (t.shape[3] != q.shape[3]) {
      return ArgError(call, arg,
                      absl::StrCat("of shape ", ShapeToString(t.shape), " must end with query's ",
                                   q.shape[3], " features (query ", ShapeToString(q.shape),
                                   "; this kernel takes one head size for all three)"));
    }
    if (t.shape[0] != q.shape[0]) {
      return ArgError(call, arg,
                      absl::StrCat("of shape ", ShapeToString(t.shape), " must have query's batch ",
                                   q.shape[0], " (Tessera's attention does not broadcast it)"));
    }
  }
  if (v.shape[1] != k.shape[1] || v.shape[2] != k.shape[2]) {
    return ArgError(call, "value",
                    absl::StrCat("of shape ", ShapeToString(v.shape), " must have key's heads and ",
                                 "positions (key ", ShapeToString(k.shape), ")"));
  }
  if (k.shape[1] == 0 ? q.shape[1] != 0 : q.shape[1] % k.shape[1] != 0) {
    return ArgError(
        call, "key",
        absl::StrCat("has ", k.shape[1], " heads, which must divide query's ", q.shape[1]));
  }
  const double dropout = call.args.Float("dropout_p");
  if (dropout != 0.0) {
    return ArgError(call, "dropout_p",
                    absl::StrCat("is ", dropout, "; this kernel takes dropout_p=0 (as torch's)"));
  }
  const Shape scores = {q.shape[0], q.shape[1], q.shape[2], k.shape[2]};
  if (!call.args.IsNone("attn_mask")) {
    ASSIGN_OR_RETURN(const TensorMeta mask, InputTensor(call, "attn_mask"));
    if (mask.dtype != q.dtype) {
      return ArgError(call, "attn_mask",
                      absl::StrCat("is ", DTypeName(mask.dtype), "; it must be query's ",
                                   DTypeName(q.dtype), " (an additive mask)"));
    }
    if (mask.shape.size() != 2 && mask.shape.size() != 4) {
      return ArgError(
          call, "attn_mask",
          absl::StrCat("of shape ", ShapeToString(mask.shape), " must have 2 or 4 dims"));
    }
    std::vector<Shape> shapes = {mask.shape, scores};
    absl::StatusOr<Shape> b = BroadcastShapes(call.op.name(), shapes);
    if (!b.ok() || *b != scores) {
      return ArgError(call, "attn_mask",
                      absl::StrCat("of shape ", ShapeToString(mask.shape),
                                   " does not broadcast to the scores' ", ShapeToString(scores)));
    }
  }
  return OutputMeta{q.shape, q.dtype};
}

// The logsumexp: [B, H, L] in float32 (float64 for float64), as torch's.
absl::StatusOr<std::vector<OutputMeta>> FlashAttentionMore(const CallContext&,
                                                           const OutputMeta& first) {
  const Shape& s = first.shape;
  return std::vector<OutputMeta>{
      {{s[0], s[1], s[2]}, first.dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32}};
}

// The forward's checks, then grad_out and out of the output's shape and dtype, logsumexp of its.
absl::StatusOr<OutputMeta> FlashAttentionBackwardMeta(const CallContext& call) {
  ASSIGN_OR_RETURN(const OutputMeta forward, FlashAttentionMeta(call));
  ASSIGN_OR_RETURN(const std::vector<OutputMeta> more, FlashAttentionMore(call, forward));
  for (const char* arg : {"grad_out", "out", "logsumexp"}) {
    ASSIGN_OR_RETURN(const TensorMeta t, InputTensor(call, arg));
    const OutputMeta& want = arg[0] == 'l' ? more[0] : forward;
    if (t.shape != want.shape || t.dtype != want.dtype) {
      return ArgError(
          call, arg,
          absl::StrCat("is ", DTypeName(t.dtype), ShapeToString(t.shape), " but the forward gives ",
                       DTypeName(want.dtype), ShapeToString(want.shape)));
    }
  }
  return forward;
}

// grad_key and grad_value: of key's and value's shapes.
absl::StatusOr<std::vector<OutputMeta>> FlashAttentionBackwardMore(const CallContext& call,
                                                                   const OutputMeta& first) {
  ASSIGN_OR_RETURN(const TensorMeta k, InputTensor(call, "key"));
  ASSIGN_OR_RETURN(const TensorMeta v, InputTensor(call, "value"));
  return std::vector<OutputMeta>{{k.shape, first.dtype}, {v.shape, first.dtype}};
}

// Batch or heads sharded alike on every tensor input (the mask where it has that dim); the
// backward also passes a P(sum) grad_out through.
absl::StatusOr<StrategyCandidates> FlashAttentionStrategies(const CallContext& call,
                                                            std::span<const DTensorSpec> specs) {
  const bool backward = KindOf(call) == Kind::kFlashAttentionBackward;
  const int n = static_cast<int>(call.inputs.size());
  const int q = call.args.Tensor("query"), k = call.args.Tensor("key");
  const int mask = call.args.Tensor("attn_mask");
  const int64_t ranks = specs.empty() ? 1 : specs[0].mesh.size();
  StrategyCandidates c;
  for (int d = 0; d < 2; ++d) {
    // Grouped heads shard alike only where every rank's query heads use its own key heads.
    if (d == 1 && call.inputs[q].shape[1] != call.inputs[k].shape[1] &&
        call.inputs[k].shape[1] % ranks != 0) {
      continue;
    }
    std::vector<Placement> in(n, Placement::Shard(d));
    if (mask >= 0) {
      const Shape& m = call.inputs[mask].shape;
      const int md = d - (4 - static_cast<int>(m.size()));
      in[mask] = md >= 0 && (m[md] != 1 || call.inputs[q].shape[d] == 1) ? Placement::Shard(md)
                                                                         : Placement::Replicate();
    }
    c.per_dim.push_back({in, Placement::Shard(d)});
  }
  if (backward) {
    const Placement sum = Placement::Partial(ReduceOp::kSum);
    std::vector<Placement> partial(n, Placement::Replicate());
    partial[call.args.Tensor("grad_out")] = sum;
    c.per_dim.push_back({partial, sum, {sum, sum}});
  }
  c.per_dim.push_back({std::vector<Placement>(n, Placement::Replicate()), Placement::Replicate()});
  return c;
}

// --- linalg_vector_norm ---

// The Partial a sharded reduced dim gives for `ord`, if any.
std::optional<ReduceOp> VectorNormPartial(double ord) {
  if (ord == 0.0 || ord == 1.0) return ReduceOp::kSum;
  if (ord == std::numeric_limits<double>::infinity()) return ReduceOp::kMax;
  if (ord == -std::numeric_limits<double>::infinity()) return ReduceOp::kMin;
  return std::nullopt;
}

absl::StatusOr<OutputMeta> VectorNormMeta(const CallContext& call) {
  ASSIGN_OR_RETURN(const TensorMeta x, InputTensor(call, "self"));
  RETURN_IF_ERROR(CheckFloatingInput(call, "self", x));
  DType dtype = x.dtype;
  if (!call.args.IsNone("dtype")) {
    dtype = call.args.Dtype("dtype");
    if (!IsFloating(dtype)) {
      return ArgError(call, "dtype", absl::StrCat("must be floating, not ", DTypeName(dtype)));
    }
  }
  const int rank = static_cast<int>(x.shape.size());
  ASSIGN_OR_RETURN(const std::vector<int> dims, ReductionDims(call, "dim", rank));
  const double ord = call.args.Float("ord");
  const bool keepdim = call.args.Bool("keepdim");
  Shape shape;
  for (int d = 0; d < rank; ++d) {
    const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (reduced && x.shape[d] == 0 && (ord < 0 || std::isinf(ord))) {
      return ArgError(call, "ord",
                      absl::StrCat("is ", ord, ": that norm of the empty dim ", d, " of ",
                                   ShapeToString(x.shape), " has no identity"));
    }
    if (!reduced) {
      shape.push_back(x.shape[d]);
    } else if (keepdim) {
      shape.push_back(1);
    }
  }
  return OutputMeta{shape, dtype};
}

absl::StatusOr<StrategyCandidates> VectorNormStrategies(const CallContext& call) {
  const int rank = static_cast<int>(call.inputs[0].shape.size());
  ASSIGN_OR_RETURN(const std::vector<int> dims, ReductionDims(call, "dim", rank));
  const std::optional<ReduceOp> partial = VectorNormPartial(call.args.Float("ord"));
  const bool keepdim = call.args.Bool("keepdim");
  StrategyCandidates c;
  int removed = 0;
  for (int d = 0; d < rank; ++d) {
    const std::vector<Placement> in = {Placement::Shard(d)};
    if (std::find(dims.begin(), dims.end(), d) != dims.end()) {
      ++removed;
      if (partial.has_value()) c.per_dim.push_back({in, Placement::Partial(*partial)});
      continue;
    }
    c.per_dim.push_back({in, Placement::Shard(keepdim ? d : d - removed)});
  }
  c.per_dim.push_back({{Placement::Replicate()}, Placement::Replicate()});
  return c;
}

// --- slice_backward, select_backward ---

absl::StatusOr<OutputMeta> SliceBackwardMeta(const CallContext& call) {
  ASSIGN_OR_RETURN(const TensorMeta grad, InputTensor(call, "grad_output"));
  const Shape sizes = call.args.Ints("input_sizes");
  const int rank = static_cast<int>(sizes.size());
  for (int64_t s : sizes) {
    if (s < 0) {
      return ArgError(call, "input_sizes",
                      absl::StrCat("is ", ShapeToString(sizes), ", with a negative size"));
    }
  }
  if (rank == 0) return ArgError(call, "input_sizes", "must have at least one dim");
  ASSIGN_OR_RETURN(const int dim, CallDim(call, "dim", call.args.Int("dim"), rank));
  Shape expected = sizes;
  const int64_t size = sizes[dim];
  if (KindOf(call) == Kind::kSliceBackward) {
    const int64_t step = call.args.Int("step");
    if (step <= 0) return ArgError(call, "step", absl::StrCat("must be positive, not ", step));
    auto clamp = [size](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + size : v, 0, size); };
    const int64_t start = clamp(call.args.Int("start")), end = clamp(call.args.Int("end"));
    expected[dim] = end > start ? (end - start + step - 1) / step : 0;
  } else {
    const int64_t index = call.args.Int("index");
    if (index < -size || index >= size) {
      return ArgError(
          call, "index",
          absl::StrCat("is ", index, ", out of range for dim ", dim, " of size ", size));
    }
    expected.erase(expected.begin() + dim);
  }
  if (grad.shape != expected) {
    return ArgError(call, "grad_output",
                    absl::StrCat("of shape ", ShapeToString(grad.shape), " is not the ",
                                 ShapeToString(expected), " this call takes from input_sizes ",
                                 ShapeToString(sizes)));
  }
  return OutputMeta{sizes, grad.dtype};
}

absl::StatusOr<StrategyCandidates> SliceBackwardStrategies(const CallContext& call,
                                                           const OutputMeta& out) {
  const int rank = static_cast<int>(out.shape.size());
  ASSIGN_OR_RETURN(const int dim, CallDim(call, "dim", call.args.Int("dim"), rank));
  const bool select = KindOf(call) == Kind::kSelectBackward;
  StrategyCandidates c;
  for (int d = 0; d < rank; ++d) {
    if (d == dim) continue;
    const int g = select && d > dim ? d - 1 : d;
    c.per_dim.push_back({{Placement::Shard(g)}, Placement::Shard(d)});
  }
  c.per_dim.push_back({{Placement::Replicate()}, Placement::Replicate()});
  for (ReduceOp op : kAllReduceOps) {
    c.per_dim.push_back({{Placement::Partial(op)}, Placement::Partial(op)});
  }
  return c;
}

// --- embedding_dense_backward ---

absl::StatusOr<OutputMeta> EmbeddingBackwardMeta(const CallContext& call) {
  ASSIGN_OR_RETURN(const TensorMeta grad, InputTensor(call, "grad_output"));
  ASSIGN_OR_RETURN(const TensorMeta ids, InputTensor(call, "indices"));
  RETURN_IF_ERROR(CheckFloatingInput(call, "grad_output", grad));
  if (ids.dtype != DType::kInt64 && ids.dtype != DType::kInt32) {
    return ArgError(call, "indices",
                    absl::StrCat("must be int64 or int32, not ", DTypeName(ids.dtype)));
  }
  const bool fits = grad.shape.size() == ids.shape.size() + 1 &&
                    std::equal(ids.shape.begin(), ids.shape.end(), grad.shape.begin());
  if (!fits) {
    return ArgError(call, "grad_output",
                    absl::StrCat("of shape ", ShapeToString(grad.shape), " must be indices' shape ",
                                 ShapeToString(ids.shape), " and the embedding dim"));
  }
  const int64_t num_weights = call.args.Int("num_weights");
  if (num_weights < 0) {
    return ArgError(call, "num_weights", absl::StrCat("is ", num_weights, "; it must be >= 0"));
  }
  if (call.args.Bool("scale_grad_by_freq")) {
    return ArgError(call, "scale_grad_by_freq",
                    "is True: scaling by the global count of each index is not supported yet");
  }
  return OutputMeta{{num_weights, grad.shape.back()}, grad.dtype};
}

absl::StatusOr<StrategyCandidates> EmbeddingBackwardStrategies(const CallContext& call) {
  const int grad = call.args.Tensor("grad_output");
  const int ids = call.args.Tensor("indices");
  const int id_rank = static_cast<int>(call.inputs[ids].shape.size());
  StrategyCandidates c;
  auto choice = [&](Placement pg, Placement pi, Placement out) {
    std::vector<Placement> in(call.inputs.size(), Placement::Replicate());
    in[grad] = pg;
    in[ids] = pi;
    c.per_dim.push_back({in, out});
  };
  choice(Placement::Replicate(), Placement::Replicate(), Placement::Replicate());
  choice(Placement::Shard(id_rank), Placement::Replicate(), Placement::Shard(1));
  for (int d = 0; d < id_rank; ++d) {
    choice(Placement::Shard(d), Placement::Shard(d), Placement::Partial(ReduceOp::kSum));
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    choice(Placement::Partial(op), Placement::Replicate(), Placement::Partial(op));
  }
  return c;
}

// --- norm.Scalar, norm.ScalarOpt_dim: torch.norm's overloads as linalg_vector_norm ---

// linalg_vector_norm(self, p (2 when None), dim, keepdim): over every dim for norm.Scalar.
absl::StatusOr<OpGraph> NormOverloadGraph(const CallContext& call) {
  using B = GraphBuilder;
  B b(static_cast<int>(call.inputs.size()));
  const double p = call.args.IsNone("p") ? 2.0 : call.args.Float("p");
  std::vector<NamedValue> args = {B::V(call.args.Tensor("self")), B::P(p)};
  if (call.op.schema.overload == "ScalarOpt_dim") {
    args.push_back(B::P(call.args.Ints("dim")));
    args.push_back(B::P(call.args.Bool("keepdim")));
  }
  b.Add("linalg_vector_norm", std::move(args));
  return std::move(b).Finish();
}

// The meta of the linalg_vector_norm it runs as (its errors name that op's arguments).
absl::StatusOr<OutputMeta> NormOverloadMeta(const CallContext& call) {
  ASSIGN_OR_RETURN(const OpGraph graph, NormOverloadGraph(call));
  ASSIGN_OR_RETURN(const OpDef* norm, Registry().Find(graph.nodes[0].op));
  ASSIGN_OR_RETURN(const PreparedCall p, PrepareCall(*norm, graph.nodes[0].args, call.inputs));
  return p.call.output;
}

// --- the family's meta and strategies ---

absl::StatusOr<OutputMeta> NormFamilyMeta(const CallContext& call) {
  switch (KindOf(call)) {
    case Kind::kLayerNorm:
    case Kind::kNativeLayerNorm:
    case Kind::kRmsNorm:
    case Kind::kFusedRmsNorm:
      return NormMeta(call);
    case Kind::kNativeLayerNormBackward:
    case Kind::kFusedRmsNormBackward:
      return NormBackwardMeta(call);
    case Kind::kAttention:
      return AttentionMeta(call);
    case Kind::kFlashAttention:
      return FlashAttentionMeta(call);
    case Kind::kFlashAttentionBackward:
      return FlashAttentionBackwardMeta(call);
    case Kind::kVectorNorm:
      return VectorNormMeta(call);
    case Kind::kSliceBackward:
    case Kind::kSelectBackward:
      return SliceBackwardMeta(call);
    case Kind::kEmbeddingBackward:
      return EmbeddingBackwardMeta(call);
  }
  return absl::InternalError("unknown kind");
}

absl::StatusOr<StrategyCandidates> NormFamilyStrategies(const CallContext& call,
                                                        std::span<const DTensorSpec> specs,
                                                        const OutputMeta& out) {
  switch (KindOf(call)) {
    case Kind::kLayerNorm:
    case Kind::kNativeLayerNorm:
    case Kind::kRmsNorm:
    case Kind::kFusedRmsNorm:
      return NormStrategies(call);
    case Kind::kNativeLayerNormBackward:
    case Kind::kFusedRmsNormBackward:
      return NormBackwardStrategies(call);
    case Kind::kAttention:
      return AttentionStrategies(call, specs, out);
    case Kind::kFlashAttention:
    case Kind::kFlashAttentionBackward:
      return FlashAttentionStrategies(call, specs);
    case Kind::kVectorNorm:
      return VectorNormStrategies(call);
    case Kind::kSliceBackward:
    case Kind::kSelectBackward:
      return SliceBackwardStrategies(call, out);
    case Kind::kEmbeddingBackward:
      return EmbeddingBackwardStrategies(call);
  }
  return absl::InternalError("unknown kind");
}

}  // namespace

void RegisterNormOps(OpRegistry& registry) {
  for (size_t i = 0; i < Entries().size(); ++i) {
    const NormEntry& e = Entries()[i];
    OpDef& op = DefineOp(registry, e.schema, e.family);
    op.entry = static_cast<int>(i);
    op.meta = NormFamilyMeta;
    if (e.kind == Kind::kNativeLayerNorm || e.kind == Kind::kFusedRmsNorm) {
      op.more_outputs = NormStatistics;
    }
    if (e.kind == Kind::kNativeLayerNormBackward || e.kind == Kind::kFusedRmsNormBackward) {
      op.more_outputs = NormBackwardMore;
    }
    if (e.kind == Kind::kFlashAttention) op.more_outputs = FlashAttentionMore;
    if (e.kind == Kind::kFlashAttentionBackward) op.more_outputs = FlashAttentionBackwardMore;
    op.strategies = NormFamilyStrategies;
    op.implementation = e.implementation;
    op.derivative = e.derivative;
    op.strategy_text = e.strategy_text;
  }
  for (const char* schema : {"norm.Scalar(Tensor self, Scalar p=2) -> Tensor",
                             "norm.ScalarOpt_dim(Tensor self, Scalar? p, int[1] dim, bool "
                             "keepdim=False) -> Tensor"}) {
    OpDef& op = DefineOp(registry, schema, OpFamily::kReduction);
    op.meta = NormOverloadMeta;
    op.decompose = NormOverloadGraph;
    op.implementation = "decomposition: linalg_vector_norm(self, p (2 for None), dim, keepdim)";
    op.strategy_text = "linalg_vector_norm's";
  }
}

}  // namespace tessera::ops
