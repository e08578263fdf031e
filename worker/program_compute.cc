// The local compute steps of a module program, on the kernels.

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/layout.h"
#include "worker/program_steps.h"

namespace tessera {
namespace {

using kernels::ConstTensorView;
using kernels::DeviceTensor;
using kernels::KernelBackend;
using kernels::Reshaped;
using kernels::TensorView;
using kernels::ViewOf;

// The number of rows of `shape` (its leading dims folded), as the kernels fold them.
int64_t RowsOf(const Shape& shape) {
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
  return rows;
}

// `t` as a 2-D [rows, last] view: leading dims folded into rows (an empty last dim, a rank's
// empty shard of the features, keeps its rows: [8, 0]).
template <typename T>
auto Rows(T& t) {
  return Reshaped(ViewOf(t), {RowsOf(t.shape()), t.shape().back()});
}

absl::Status NeedRank(absl::string_view what, const DeviceTensor& t, int at_least) {
  if (t.rank() >= at_least) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " is ", DTypeName(t.dtype()),
                                                 ShapeToString(t.shape()), "; it needs at least ",
                                                 at_least, " dims"));
}

absl::Status NeedShape(absl::string_view what, const DeviceTensor& t, const Shape& shape) {
  if (t.shape() == shape) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " is ", ShapeToString(t.shape()), "; ",
                                                 ShapeToString(shape), " expected"));
}

// A new output, or the memory of `input` when this is its last use and it has the right dtype and
// size (the kernels that allow it then write in place).
absl::StatusOr<DeviceTensor> OutputLike(KernelBackend& k, const StepInput& input, DType dtype,
                                        const Shape& shape) {
  DeviceTensor& in = *input.tensor;
  if (input.last_use && in.dtype() == dtype && in.shape() == shape) return std::move(in);
  return k.Allocate(dtype, shape);
}

// The input itself when this is its last use, else a copy of it.
absl::StatusOr<DeviceTensor> TakeOrClone(KernelBackend& k, const StepInput& input) {
  if (input.last_use) return std::move(*input.tensor);
  return k.Clone(std::as_const(*input.tensor).View());
}

// The kernel of an activation other than the identity (which steps run as a copy).
kernels::Activation KernelActivation(ActivationKind f) {
  switch (f) {
    case ActivationKind::kGelu:
      return kernels::Activation::kGelu;
    case ActivationKind::kGeluTanh:
      return kernels::Activation::kGeluTanh;
    case ActivationKind::kSilu:
      return kernels::Activation::kSilu;
    case ActivationKind::kRelu:
    case ActivationKind::kIdentity:
      break;
  }
  return kernels::Activation::kRelu;
}

// A null view pointer for a missing parameter; else a view of it in `storage`.
const ConstTensorView* Optional(const StepParameter& p, ConstTensorView& storage) {
  if (p.value == nullptr) return nullptr;
  storage = ViewOf(*p.value);
  return &storage;
}
const TensorView* OptionalGrad(const StepParameter& p, TensorView& storage) {
  if (p.value == nullptr) return nullptr;
  storage = ViewOf(*p.grad);
  return &storage;
}

// The gradient of a parameter a backward step accumulates into.
absl::Status NeedGrad(absl::string_view field, const StepParameter& p) {
  if (p.value == nullptr || p.grad != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("the ", field, " has no gradient here"));
}

absl::StatusOr<std::vector<DeviceTensor>> Linear(KernelBackend& k, const StepInput& in,
                                                 const StepParameter& weight,
                                                 const StepParameter& bias) {
  const DeviceTensor& x = *in.tensor;
  const DeviceTensor& w = *weight.value;
  RETURN_IF_ERROR(NeedRank("the input", x, 1));
  if (w.rank() != 2 || x.shape().back() != w.shape()[1]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the input ", ShapeToString(x.shape()), " has ", x.shape().back(), " features; the weight ",
        ShapeToString(w.shape()), " takes ", w.rank() == 2 ? w.shape()[1] : -1));
  }
  ASSIGN_OR_RETURN(DeviceTensor y,
                   k.Allocate(w.dtype(), WithDimSize(x.shape(), x.rank() - 1, w.shape()[0])));
  RETURN_IF_ERROR(k.LinearProduct(Rows(x), ViewOf(w), weight.prepared, Rows(y)));
  if (bias.value != nullptr) RETURN_IF_ERROR(k.BiasAdd(Rows(y), ViewOf(*bias.value)));
  std::vector<DeviceTensor> out;
  out.push_back(std::move(y));
  return out;
}

// grad[b] += dy summed over rows; `bias` holds the bias's value and gradient.
absl::Status AccumulateBiasGrad(KernelBackend& k, const DeviceTensor& dy,
                                const StepParameter& bias) {
  RETURN_IF_ERROR(NeedGrad("bias", bias));
  RETURN_IF_ERROR(NeedRank("dy", dy, 1));
  const DeviceTensor& b = *bias.value;
  if (b.shape() != Shape{dy.shape().back()}) {
    return absl::InvalidArgumentError(absl::StrCat("dy ", ShapeToString(dy.shape()), " has ",
                                                   dy.shape().back(), " features; the bias is ",
                                                   ShapeToString(b.shape())));
  }
  ASSIGN_OR_RETURN(DeviceTensor sum, k.Allocate(dy.dtype(), b.shape()));
  RETURN_IF_ERROR(k.ReduceAlongDim(ReduceOp::kSum, Rows(dy), 0, ViewOf(sum)));
  return k.Binary(kernels::BinaryOp::kAdd, ViewOf(*bias.grad), ViewOf(sum), ViewOf(*bias.grad));
}

// out = in0 + b over the last dim (a rowwise Linear's bias after its reduction).
absl::StatusOr<std::vector<DeviceTensor>> BiasAdd(KernelBackend& k, const StepInput& in,
                                                  const StepParameter& bias) {
  const DeviceTensor& x = *in.tensor;
  const DeviceTensor& b = *bias.value;
  RETURN_IF_ERROR(NeedRank("the input", x, 1));
  if (b.shape() != Shape{x.shape().back()}) {
    return absl::InvalidArgumentError(absl::StrCat("the input ", ShapeToString(x.shape()), " has ",
                                                   x.shape().back(), " features; the bias is ",
                                                   ShapeToString(b.shape())));
  }
  ASSIGN_OR_RETURN(DeviceTensor y, TakeOrClone(k, in));
  RETURN_IF_ERROR(k.BiasAdd(Rows(y), ViewOf(b)));
  std::vector<DeviceTensor> out;
  out.push_back(std::move(y));
  return out;
}

absl::StatusOr<std::vector<DeviceTensor>> LinearBackward(KernelBackend& k, const ProgramStep& step,
                                                         std::span<const StepInput> in,
                                                         const StepParameter& weight,
                                                         const StepParameter& bias) {
  const DeviceTensor& x = *in[0].tensor;
  const DeviceTensor& dy = *in[1].tensor;
  const DeviceTensor& w = *weight.value;
  RETURN_IF_ERROR(NeedGrad("weight", weight));
  RETURN_IF_ERROR(NeedRank("x", x, 1));
  if (w.rank() != 2) return absl::InvalidArgumentError("the weight is not 2-D");
  RETURN_IF_ERROR(NeedShape("dy", dy, WithDimSize(x.shape(), x.rank() - 1, w.shape()[0])));
  // grad[W] += dy^T x; grad[b] += dy summed over rows.
  RETURN_IF_ERROR(k.Gemm(true, false, 1.0, Rows(dy), Rows(x), 1.0, ViewOf(*weight.grad)));
  if (bias.value != nullptr) RETURN_IF_ERROR(AccumulateBiasGrad(k, dy, bias));
  std::vector<DeviceTensor> out;
  if (step.outputs.empty()) return out;
  // dx = dy W.
  ASSIGN_OR_RETURN(DeviceTensor dx, k.Allocate(dy.dtype(), x.shape()));
  RETURN_IF_ERROR(k.Gemm(false, false, 1.0, Rows(dy), ViewOf(w), 0.0, Rows(dx)));
  out.push_back(std::move(dx));
  return out;
}

absl::StatusOr<std::vector<DeviceTensor>> Embedding(KernelBackend& k, const ProgramStep& step,
                                                    const StepInput& in,
                                                    const StepParameter& weight) {
  const DeviceTensor& ids = *in.tensor;
  const DeviceTensor& w = *weight.value;
  if (w.rank() != 2) return absl::InvalidArgumentError("the weight is not 2-D");
  Shape shape = ids.shape();
  shape.push_back(w.shape()[1]);
  ASSIGN_OR_RETURN(DeviceTensor y, k.Allocate(w.dtype(), shape));
  RETURN_IF_ERROR(k.Embedding(ViewOf(ids), ViewOf(w), weight.row_offset(), step.size, ViewOf(y)));
  std::vector<DeviceTensor> out;
  out.push_back(std::move(y));
  return out;
}

absl::StatusOr<std::vector<DeviceTensor>> LayerNorm(KernelBackend& k, const ProgramStep& step,
                                                    const StepInput& in,
                                                    const StepParameter& weight,
                                                    const StepParameter& bias) {
  const DeviceTensor& x = *in.tensor;
  RETURN_IF_ERROR(NeedRank("the input", x, 1));
  const Shape rows = {RowsOf(x.shape())};
  std::vector<DeviceTensor> out;
  ASSIGN_OR_RETURN(out.emplace_back(), k.Allocate(x.dtype(), x.shape()));
  ASSIGN_OR_RETURN(out.emplace_back(), k.Allocate(DType::kFloat32, rows));
  ASSIGN_OR_RETURN(out.emplace_back(), k.Allocate(DType::kFloat32, rows));
  ConstTensorView w, b;
  RETURN_IF_ERROR(k.LayerNorm(ViewOf(x), Optional(weight, w), Optional(bias, b), step.eps,
                              ViewOf(out[0]), ViewOf(out[1]), ViewOf(out[2])));
  return out;
}

absl::StatusOr<std::vector<DeviceTensor>> LayerNormBackward(KernelBackend& k,
                                                            const ProgramStep& step,
                                                            std::span<const StepInput> in,
                                                            const StepParameter& weight,
                                                            const StepParameter& bias) {
  const DeviceTensor& x = *in[0].tensor;
  const DeviceTensor& dy = *in[3].tensor;
  RETURN_IF_ERROR(NeedGrad("weight", weight));
  RETURN_IF_ERROR(NeedGrad("bias", bias));
  RETURN_IF_ERROR(NeedShape("dy", dy, x.shape()));
  ASSIGN_OR_RETURN(DeviceTensor dx, k.Allocate(x.dtype(), x.shape()));
  ConstTensorView w;
  TensorView dw, db;
  RETURN_IF_ERROR(k.LayerNormBackward(ViewOf(dy), ViewOf(x), Optional(weight, w),
                                      ViewOf(*in[1].tensor), ViewOf(*in[2].tensor), ViewOf(dx),
                                      OptionalGrad(weight, dw), OptionalGrad(bias, db)));
  std::vector<DeviceTensor> out;
  if (!step.outputs.empty()) out.push_back(std::move(dx));
  return out;
}

absl::StatusOr<std::vector<DeviceTensor>> RmsNorm(KernelBackend& k, const ProgramStep& step,
                                                  const StepInput& in,
                                                  const StepParameter& weight) {
  const DeviceTensor& x = *in.tensor;
  RETURN_IF_ERROR(NeedRank("the input", x, 1));
  std::vector<DeviceTensor> out;
  ASSIGN_OR_RETURN(out.emplace_back(), k.Allocate(x.dtype(), x.shape()));
  ASSIGN_OR_RETURN(out.emplace_back(), k.Allocate(DType::kFloat32, {RowsOf(x.shape())}));
  ConstTensorView w;
  RETURN_IF_ERROR(
      k.RmsNorm(ViewOf(x), Optional(weight, w), step.eps, ViewOf(out[0]), ViewOf(out[1])));
  return out;
}

absl::StatusOr<std::vector<DeviceTensor>> RmsNormBackward(KernelBackend& k, const ProgramStep& step,
                                                          std::span<const StepInput> in,
                                                          const StepParameter& weight) {
  const DeviceTensor& x = *in[0].tensor;
  const DeviceTensor& dy = *in[2].tensor;
  RETURN_IF_ERROR(NeedGrad("weight", weight));
  RETURN_IF_ERROR(NeedShape("dy", dy, x.shape()));
  ASSIGN_OR_RETURN(DeviceTensor dx, k.Allocate(x.dtype(), x.shape()));
  ConstTensorView w;
  TensorView dw;
  RETURN_IF_ERROR(k.RmsNormBackward(ViewOf(dy), ViewOf(x), Optional(weight, w),
                                    ViewOf(*in[1].tensor), ViewOf(dx), OptionalGrad(weight, dw)));
  std::vector<DeviceTensor> out;
  if (!step.outputs.empty()) out.push_back(std::move(dx));
  return out;
}

absl::StatusOr<std::vector<DeviceTensor>> Activation(KernelBackend& k, const ProgramStep& step,
                                                     const StepInput& in) {
  const DeviceTensor& x = *in.tensor;
  std::vector<DeviceTensor> out;
  if (step.activation == ActivationKind::kIdentity) {
    ASSIGN_OR_RETURN(out.emplace_back(), TakeOrClone(k, in));
    return out;
  }
  ASSIGN_OR_RETURN(DeviceTensor y, OutputLike(k, in, x.dtype(), x.shape()));
  // `y` may be `x` itself, moved: the kernel reads it in place.
  const ConstTensorView source = in.last_use ? ConstTensorView(ViewOf(y)) : ViewOf(x);
  RETURN_IF_ERROR(k.Activate(KernelActivation(step.activation), source, ViewOf(y)));
  out.push_back(std::move(y));
  return out;
}

absl::StatusOr<std::vector<DeviceTensor>> ActivationBackward(KernelBackend& k,
                                                             const ProgramStep& step,
                                                             std::span<const StepInput> in) {
  const DeviceTensor& x = *in[0].tensor;
  const DeviceTensor& dy = *in[1].tensor;
  RETURN_IF_ERROR(NeedShape("dy", dy, x.shape()));
  std::vector<DeviceTensor> out;
  if (step.activation == ActivationKind::kIdentity) {
    ASSIGN_OR_RETURN(out.emplace_back(), TakeOrClone(k, in[1]));
    return out;
  }
  ASSIGN_OR_RETURN(DeviceTensor dx, k.Allocate(dy.dtype(), dy.shape()));
  RETURN_IF_ERROR(
      k.ActivateBackward(KernelActivation(step.activation), ViewOf(x), ViewOf(dy), ViewOf(dx)));
  out.push_back(std::move(dx));
  return out;
}

absl::Status NeedAttentionInput(absl::string_view what, const DeviceTensor& t, const Shape& q) {
  if (t.rank() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is ", ShapeToString(t.shape()), "; attention takes [batch, sequence, features]"));
  }
  return NeedShape(what, t, q);
}

absl::StatusOr<std::vector<DeviceTensor>> Attention(KernelBackend& k, const ProgramStep& step,
                                                    std::span<const StepInput> in) {
  const DeviceTensor& q = *in[0].tensor;
  RETURN_IF_ERROR(NeedAttentionInput("q", q, q.shape()));
  RETURN_IF_ERROR(NeedAttentionInput("k", *in[1].tensor, q.shape()));
  RETURN_IF_ERROR(NeedAttentionInput("v", *in[2].tensor, q.shape()));
  const Shape probs = {q.shape()[0], step.heads, q.shape()[1], q.shape()[1]};
  std::vector<DeviceTensor> out;
  ASSIGN_OR_RETURN(out.emplace_back(), k.Allocate(q.dtype(), q.shape()));
  ASSIGN_OR_RETURN(out.emplace_back(), k.Allocate(DType::kFloat32, probs));
  RETURN_IF_ERROR(k.Attention(ViewOf(q), ViewOf(*in[1].tensor), ViewOf(*in[2].tensor), step.heads,
                              step.causal, ViewOf(out[0]), ViewOf(out[1])));
  return out;
}

absl::StatusOr<std::vector<DeviceTensor>> AttentionBackward(KernelBackend& k,
                                                            const ProgramStep& step,
                                                            std::span<const StepInput> in) {
  const DeviceTensor& q = *in[0].tensor;
  RETURN_IF_ERROR(NeedAttentionInput("q", q, q.shape()));
  RETURN_IF_ERROR(NeedAttentionInput("k", *in[1].tensor, q.shape()));
  RETURN_IF_ERROR(NeedAttentionInput("v", *in[2].tensor, q.shape()));
  RETURN_IF_ERROR(NeedAttentionInput("dout", *in[4].tensor, q.shape()));
  std::vector<DeviceTensor> out;
  for (int i = 0; i < 3; ++i) {
    ASSIGN_OR_RETURN(out.emplace_back(), k.Allocate(q.dtype(), q.shape()));
  }
  RETURN_IF_ERROR(k.AttentionBackward(ViewOf(q), ViewOf(*in[1].tensor), ViewOf(*in[2].tensor),
                                      ViewOf(*in[3].tensor), ViewOf(*in[4].tensor), step.heads,
                                      ViewOf(out[0]), ViewOf(out[1]), ViewOf(out[2])));
  return out;
}

// in0 + in1, into the memory of an input read for the last time where there is one.
absl::StatusOr<std::vector<DeviceTensor>> Add(KernelBackend& k, std::span<const StepInput> in) {
  const DeviceTensor& a = *in[0].tensor;
  const DeviceTensor& b = *in[1].tensor;
  RETURN_IF_ERROR(NeedShape("in1", b, a.shape()));
  std::vector<DeviceTensor> out;
  if (in[0].last_use || in[1].last_use) {
    // The sum is written over the input whose memory it takes; the other is read as it is.
    const int into = in[0].last_use ? 0 : 1;
    DeviceTensor sum = std::move(*in[into].tensor);
    const DeviceTensor& other = *in[1 - into].tensor;
    RETURN_IF_ERROR(k.Binary(kernels::BinaryOp::kAdd, ViewOf(sum), ViewOf(other), ViewOf(sum)));
    out.push_back(std::move(sum));
    return out;
  }
  ASSIGN_OR_RETURN(DeviceTensor sum, k.Allocate(a.dtype(), a.shape()));
  RETURN_IF_ERROR(k.Binary(kernels::BinaryOp::kAdd, ViewOf(a), ViewOf(b), ViewOf(sum)));
  out.push_back(std::move(sum));
  return out;
}

absl::StatusOr<std::vector<DeviceTensor>> Scale(KernelBackend& k, const ProgramStep& step,
                                                const StepInput& in) {
  const DeviceTensor& x = *in.tensor;
  ASSIGN_OR_RETURN(DeviceTensor factor, k.Allocate(x.dtype(), {}));
  RETURN_IF_ERROR(k.Fill(ViewOf(factor), step.scale));
  ASSIGN_OR_RETURN(DeviceTensor y, OutputLike(k, in, x.dtype(), x.shape()));
  const ConstTensorView source = in.last_use ? ConstTensorView(ViewOf(y)) : ViewOf(x);
  RETURN_IF_ERROR(k.Binary(kernels::BinaryOp::kMul, source, ViewOf(factor), ViewOf(y)));
  std::vector<DeviceTensor> out;
  out.push_back(std::move(y));
  return out;
}

// grad[weight] += this rank's block (its shard's offset and shape) of `full`, the whole gradient.
absl::Status ShardGrad(KernelBackend& k, const DeviceTensor& full, const StepParameter& weight) {
  RETURN_IF_ERROR(NeedGrad("weight", weight));
  DeviceTensor& grad = *weight.grad;
  if (full.rank() != grad.rank() || static_cast<int>(weight.offset.size()) != grad.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the whole gradient ", ShapeToString(full.shape()),
                     " does not hold the shard ", ShapeToString(grad.shape())));
  }
  if (grad.num_elements() == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(DeviceTensor block,
                   kernels::PackBlock(k, full.View(), weight.offset, grad.shape()));
  return k.Binary(kernels::BinaryOp::kAdd, ViewOf(grad), ViewOf(block), ViewOf(grad));
}

}  // namespace

absl::StatusOr<std::vector<DeviceTensor>> RunComputeStep(KernelBackend& kernels,
                                                         const ProgramStep& step,
                                                         std::span<const StepInput> inputs,
                                                         const StepParameter& weight,
                                                         const StepParameter& bias) {
  switch (step.kind) {
    case ProgramOpKind::kLinear:
      return Linear(kernels, inputs[0], weight, bias);
    case ProgramOpKind::kEmbedding:
      return Embedding(kernels, step, inputs[0], weight);
    case ProgramOpKind::kLayerNorm:
      return LayerNorm(kernels, step, inputs[0], weight, bias);
    case ProgramOpKind::kRmsNorm:
      return RmsNorm(kernels, step, inputs[0], weight);
    case ProgramOpKind::kActivation:
      return Activation(kernels, step, inputs[0]);
    case ProgramOpKind::kAttention:
      return Attention(kernels, step, inputs);
    case ProgramOpKind::kAdd:
    case ProgramOpKind::kAccumulate:
      return Add(kernels, inputs);
    case ProgramOpKind::kBiasAdd:
      return BiasAdd(kernels, inputs[0], bias);
    case ProgramOpKind::kBiasAddBackward:
      RETURN_IF_ERROR(AccumulateBiasGrad(kernels, *inputs[0].tensor, bias));
      return std::vector<DeviceTensor>{};
    case ProgramOpKind::kLinearBackward:
      return LinearBackward(kernels, step, inputs, weight, bias);
    case ProgramOpKind::kEmbeddingBackward: {
      RETURN_IF_ERROR(NeedGrad("weight", weight));
      RETURN_IF_ERROR(kernels.EmbeddingBackward(ViewOf(*inputs[0].tensor),
                                                ViewOf(*inputs[1].tensor), weight.row_offset(),
                                                ViewOf(*weight.grad)));
      return std::vector<DeviceTensor>{};
    }
    case ProgramOpKind::kLayerNormBackward:
      return LayerNormBackward(kernels, step, inputs, weight, bias);
    case ProgramOpKind::kRmsNormBackward:
      return RmsNormBackward(kernels, step, inputs, weight);
    case ProgramOpKind::kActivationBackward:
      return ActivationBackward(kernels, step, inputs);
    case ProgramOpKind::kAttentionBackward:
      return AttentionBackward(kernels, step, inputs);
    case ProgramOpKind::kScale:
      return Scale(kernels, step, inputs[0]);
    case ProgramOpKind::kShardGrad:
      RETURN_IF_ERROR(ShardGrad(kernels, *inputs[0].tensor, weight));
      return std::vector<DeviceTensor>{};
    case ProgramOpKind::kAllReduce:
    case ProgramOpKind::kAllGather:
    case ProgramOpKind::kReduceScatter:
    case ProgramOpKind::kChunk:
    case ProgramOpKind::kAllToAll:
    case ProgramOpKind::kGatherParameter:
    case ProgramOpKind::kGradAllReduce:
      break;
  }
  return absl::InternalError(
      absl::StrCat(ProgramOpKindName(step.kind), " is not a local compute step"));
}

}  // namespace tessera
