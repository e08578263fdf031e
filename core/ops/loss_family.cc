// Losses: nll_loss (and the nll_loss_forward and nll_loss_backward autograd records) with its own
// kernel and strategies (class-sharded log-probabilities give a Partial(sum) loss, the
// loss_parallel of DTensor), and cross_entropy_loss, mse_loss and l1_loss as
// decompositions into registered ops, so that cross-entropy on logits sharded by class runs as
// DTensor's loss_parallel does: a max and a sum of exps reduced across ranks (one number per row),
// never the logits gathered.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ops/op_meta.h"
#include "core/status_macros.h"

namespace tessera::ops {
namespace {

using B = GraphBuilder;

enum class Kind { kNll, kNllForward, kNllBackward, kCrossEntropy, kMse, kL1 };

struct LossEntry {
  const char* schema;
  Kind kind;
  const char* implementation;
  const char* derivative;
  const char* strategy_text;
};

const std::vector<LossEntry>& Entries() {
  static const auto* const entries = new std::vector<LossEntry>{
      {"nll_loss(Tensor self, Tensor target, Tensor? weight=None, int reduction=Mean, SymInt "
       "ignore_index=-100) -> Tensor",
       Kind::kNll, "kernel gather of -weight[target] (rows outside a class shard give 0)",
       "mul.Tensor(scatter.value(zeros_like(self), 1, unsqueeze(target, 1), -1), grad) weighted, "
       "divided by the total weight for mean, 0 at ignore_index",
       "R x R -> R; classes sharded S(1) (S(0) when self is 1-D) with target R -> P(sum); a batch "
       "or spatial dim sharded with target sharded alike -> that dim of the result (reduction "
       "none) or P(sum) (sum), with target R -> P(sum) (mean: each rank divides by the whole "
       "target's weight); a P(sum|avg) self with target R passes (the loss is linear in self); "
       "weight R"},
      {"nll_loss_forward(Tensor self, Tensor target, Tensor? weight, int reduction, SymInt "
       "ignore_index) -> (Tensor output, Tensor total_weight)",
       Kind::kNllForward,
       "kernel nll_loss's gather of -weight[target], and total_weight, the weights of the targets "
       "not at ignore_index (self 1-D: that of its one target whatever the reduction; 2-D with "
       "reduction none: 0, as torch)",
       "nll_loss_backward(grad, self, target, weight, reduction, ignore_index, total_weight)",
       "nll_loss's, total_weight R but P(sum) where the loss is a sum over a sharded batch (the "
       "weights of this rank's rows)"},
      {"nll_loss_backward(Tensor grad_output, Tensor self, Tensor target, Tensor? weight, int "
       "reduction, SymInt ignore_index, Tensor total_weight) -> Tensor",
       Kind::kNllBackward,
       "kernel: zeros, then -weight[target] * grad_output (divided by total_weight for mean) "
       "scattered to each row's target class (rows outside a class shard and at ignore_index "
       "stay 0)",
       "",
       "R -> R; classes sharded S(1) (S(0) when self is 1-D) with the rest R -> S(1); a batch dim "
       "sharded with target (and grad_output for reduction none) sharded alike -> that dim, "
       "total_weight R (P(sum) for sum, which reads none of it); a P(sum|avg) grad_output with "
       "the rest R passes (the gradient is linear in it); weight R"},
      {"cross_entropy_loss(Tensor self, Tensor target, Tensor? weight=None, int reduction=Mean, "
       "SymInt ignore_index=-100, float label_smoothing=0.0) -> Tensor",
       Kind::kCrossEntropy,
       "decomposition: log_softmax over classes as amax, sub.Tensor, exp, sum.dim_IntList, log, "
       "sub.Tensor, then nll_loss (class indices) or mul.Tensor and sum.dim_IntList (class "
       "probabilities); label smoothing adds the weighted sum of log-probabilities",
       "through its decomposition",
       "each node's own: logits sharded by class stay sharded (the row max and the sum of exps "
       "are reduced across ranks, as DTensor's loss_parallel), the loss P(sum)"},
      {"mse_loss(Tensor self, Tensor target, int reduction=Mean) -> Tensor", Kind::kMse,
       "decomposition: sub.Tensor, mul.Tensor, then mean or sum", "through its decomposition",
       "each node's own (pointwise, then a reduction)"},
      {"l1_loss(Tensor self, Tensor target, int reduction=Mean) -> Tensor", Kind::kL1,
       "decomposition: sub.Tensor, abs, then mean or sum", "through its decomposition",
       "each node's own (pointwise, then a reduction)"},
  };
  return *entries;
}

Kind KindOf(const CallContext& call) { return Entries()[call.op.entry].kind; }

// The class dim of `self`: 1, or 0 for a 1-D self (one sample), as torch's nll_loss.
int ClassDim(const Shape& self) { return self.size() == 1 ? 0 : 1; }

absl::Status CheckReduction(const CallContext& call) {
  const int64_t r = call.args.Int("reduction");
  if (r < 0 || r > 2) {
    return ArgError(call, "reduction",
                    absl::StrCat("is ", r, "; it is 0 (none), 1 (mean) or 2 (sum)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorMeta> FloatingSelf(const CallContext& call) {
  ASSIGN_OR_RETURN(const TensorMeta self, InputTensor(call, "self"));
  if (!IsFloating(self.dtype)) {
    return ArgError(call, "self",
                    absl::StrCat("must be a floating tensor, not ", DTypeName(self.dtype)));
  }
  return self;
}

// The checks torch's nll_loss and cross_entropy make of self, target and weight; the result's
// shape for reduction none (self's without the class dim).
absl::StatusOr<Shape> ClassLossShape(const CallContext& call, bool probabilities) {
  ASSIGN_OR_RETURN(const TensorMeta self, FloatingSelf(call));
  ASSIGN_OR_RETURN(const TensorMeta target, InputTensor(call, "target"));
  if (self.shape.empty()) {
    return ArgError(call, "self",
                    "must have 1 or more dims (the classes at dim 1, or at 0 if 1-D)");
  }
  const int cdim = ClassDim(self.shape);
  const int64_t classes = self.shape[cdim];
  Shape rows = self.shape;
  rows.erase(rows.begin() + cdim);
  if (probabilities) {
    if (target.shape != self.shape || target.dtype != self.dtype) {
      return ArgError(
          call, "target",
          absl::StrCat("holds class probabilities (a floating tensor), so it must have "
                       "self's shape [",
                       absl::StrJoin(self.shape, ", "), "] and dtype ", DTypeName(self.dtype),
                       ", not [", absl::StrJoin(target.shape, ", "), "] ",
                       DTypeName(target.dtype)));
    }
  } else {
    if (target.dtype != DType::kInt64) {
      return ArgError(call, "target",
                      absl::StrCat("holds class indices, which must be int64 (torch.long), not ",
                                   DTypeName(target.dtype)));
    }
    if (target.shape != rows) {
      return ArgError(call, "target",
                      absl::StrCat("has shape [", absl::StrJoin(target.shape, ", "),
                                   "], but self of shape [", absl::StrJoin(self.shape, ", "),
                                   "] needs [", absl::StrJoin(rows, ", "), "]"));
    }
  }
  if (!call.args.IsNone("weight")) {
    ASSIGN_OR_RETURN(const TensorMeta w, InputTensor(call, "weight"));
    if (w.shape != Shape{classes} || w.dtype != self.dtype) {
      return ArgError(
          call, "weight",
          absl::StrCat("must be 1-D of the ", classes, " classes in ", DTypeName(self.dtype),
                       ", not [", absl::StrJoin(w.shape, ", "), "] ", DTypeName(w.dtype)));
    }
  }
  RETURN_IF_ERROR(CheckReduction(call));
  return rows;
}

// nll_loss_backward's grad_output or total_weight: of self's dtype, and one element where `shape`
// is 0-dim (torch takes any shape of one element there), `shape` otherwise.
absl::Status CheckBackwardOperand(const CallContext& call, absl::string_view arg, DType dtype,
                                  const Shape& shape) {
  ASSIGN_OR_RETURN(const TensorMeta t, InputTensor(call, arg));
  if (t.dtype != dtype) {
    return ArgError(
        call, arg,
        absl::StrCat("is ", DTypeName(t.dtype), "; it must have self's dtype ", DTypeName(dtype)));
  }
  const bool fits = shape.empty() ? NumElements(t.shape) == 1 : t.shape == shape;
  if (!fits) {
    return ArgError(call, arg,
                    absl::StrCat("has shape [", absl::StrJoin(t.shape, ", "), "]; it must be ",
                                 shape.empty() ? std::string("one element")
                                               : absl::StrCat("[", absl::StrJoin(shape, ", "), "]"),
                                 " here"));
  }
  return absl::OkStatus();
}

// nll_loss_forward's total_weight: a 0-dim tensor of self's dtype.
absl::StatusOr<std::vector<OutputMeta>> TotalWeight(const CallContext& call,
                                                    const OutputMeta& first) {
  (void)call;
  return std::vector<OutputMeta>{OutputMeta{Shape{}, first.dtype}};
}

bool HoldsProbabilities(const CallContext& call) {
  const int t = call.args.Tensor("target");
  return t >= 0 && IsFloating(call.inputs[t].dtype);
}

absl::StatusOr<OutputMeta> LossMeta(const CallContext& call) {
  const int64_t reduction = call.args.Int("reduction");
  switch (KindOf(call)) {
    case Kind::kNllForward:
    case Kind::kNllBackward: {
      const TensorMeta self = call.inputs[call.args.Tensor("self")];
      if (self.shape.size() != 1 && self.shape.size() != 2) {
        return ArgError(call, "self",
                        absl::StrCat("has ", self.shape.size(),
                                     " dims; it must be 1-D (one sample) or 2-D (a batch), as "
                                     "nll_loss gives nll_loss2d the others"));
      }
      ASSIGN_OR_RETURN(const Shape rows, ClassLossShape(call, false));
      if (KindOf(call) == Kind::kNllForward) {
        return OutputMeta{reduction == 0 ? rows : Shape{}, self.dtype};
      }
      RETURN_IF_ERROR(
          CheckBackwardOperand(call, "grad_output", self.dtype, reduction == 0 ? rows : Shape{}));
      RETURN_IF_ERROR(CheckBackwardOperand(call, "total_weight", self.dtype, Shape{}));
      return OutputMeta{self.shape, self.dtype};
    }
    case Kind::kNll:
    case Kind::kCrossEntropy: {
      const bool probabilities = KindOf(call) == Kind::kCrossEntropy && HoldsProbabilities(call);
      ASSIGN_OR_RETURN(const Shape rows, ClassLossShape(call, probabilities));
      if (KindOf(call) == Kind::kCrossEntropy) {
        const double eps = call.args.Float("label_smoothing");
        if (!(eps >= 0.0 && eps <= 1.0)) {
          return ArgError(call, "label_smoothing",
                          absl::StrCat("is ", eps, "; it must be between 0.0 and 1.0"));
        }
      }
      const DType dtype = call.inputs[call.args.Tensor("self")].dtype;
      return OutputMeta{reduction == 0 ? rows : Shape{}, dtype};
    }
    case Kind::kMse:
    case Kind::kL1: {
      ASSIGN_OR_RETURN(const TensorMeta self, FloatingSelf(call));
      ASSIGN_OR_RETURN(const TensorMeta target, InputTensor(call, "target"));
      RETURN_IF_ERROR(CheckReduction(call));
      const std::vector<Shape> shapes = {self.shape, target.shape};
      ASSIGN_OR_RETURN(const Shape shape, BroadcastShapes(call.op.name(), shapes));
      if (!IsFloating(target.dtype)) {
        return ArgError(call, "target",
                        absl::StrCat("must be a floating tensor, not ", DTypeName(target.dtype)));
      }
      const DType dtype = PromoteTypes(self.dtype, target.dtype);
      return OutputMeta{reduction == 0 ? shape : Shape{}, dtype};
    }
  }
  return absl::InternalError("unknown loss");
}

absl::StatusOr<StrategyCandidates> NllStrategies(const CallContext& call,
                                                 std::span<const DTensorSpec> specs,
                                                 const OutputMeta& out) {
  (void)specs;
  (void)out;
  const int self = call.args.Tensor("self");
  const int target = call.args.Tensor("target");
  const int rank = static_cast<int>(call.inputs[self].shape.size());
  const int cdim = ClassDim(call.inputs[self].shape);
  const int64_t reduction = call.args.Int("reduction");
  // nll_loss_forward's total_weight: the weights of every target this rank holds (R), but for a
  // sum over a sharded batch those of its rows (P(sum)); nll_loss has no second output.
  const bool total_weight = KindOf(call) == Kind::kNllForward;
  StrategyCandidates c;
  const Placement sum = Placement::Partial(ReduceOp::kSum);
  auto choice = [&](Placement ps, Placement pt, Placement po, Placement pw) {
    std::vector<Placement> in(call.inputs.size(), Placement::Replicate());
    in[self] = ps;
    in[target] = pt;
    c.per_dim.push_back(
        {in, po, total_weight ? std::vector<Placement>{pw} : std::vector<Placement>{}});
  };
  const Placement r = Placement::Replicate();
  choice(Placement::Shard(cdim), r, sum, r);
  for (int d = 0; d < rank; ++d) {
    if (d == cdim) continue;
    const int t = d < cdim ? d : d - 1;
    // The target sharded alike, so that every rank holds the targets of its rows whatever the
    // other mesh dims do; mean needs the whole target (its total weight) instead.
    if (reduction == 0) {
      choice(Placement::Shard(d), Placement::Shard(t), Placement::Shard(t), r);
    } else if (reduction == 2) {
      choice(Placement::Shard(d), Placement::Shard(t), sum, sum);
    } else {
      choice(Placement::Shard(d), r, sum, r);
    }
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    choice(Placement::Partial(op), r, Placement::Partial(op), r);
  }
  choice(r, r, r, r);
  return c;
}

absl::StatusOr<StrategyCandidates> NllBackwardStrategies(const CallContext& call,
                                                         std::span<const DTensorSpec> specs,
                                                         const OutputMeta& out) {
  (void)specs;
  (void)out;
  const int grad = call.args.Tensor("grad_output");
  const int self = call.args.Tensor("self");
  const int target = call.args.Tensor("target");
  const int total = call.args.Tensor("total_weight");
  const int rank = static_cast<int>(call.inputs[self].shape.size());
  const int cdim = ClassDim(call.inputs[self].shape);
  const int64_t reduction = call.args.Int("reduction");
  StrategyCandidates c;
  const Placement r = Placement::Replicate();
  auto choice = [&](Placement pg, Placement ps, Placement pt, Placement pw, Placement po) {
    std::vector<Placement> in(call.inputs.size(), r);
    in[grad] = pg;
    in[self] = ps;
    in[target] = pt;
    in[total] = pw;
    c.per_dim.push_back({in, po});
  };
  // Classes sharded: each rank writes its classes' entries of every row.
  choice(r, Placement::Shard(cdim), r, r, Placement::Shard(cdim));
  for (int d = 0; d < rank; ++d) {
    if (d == cdim) continue;
    const int t = d < cdim ? d : d - 1;
    const Placement g = reduction == 0 ? Placement::Shard(t) : r;
    choice(g, Placement::Shard(d), Placement::Shard(t), r, Placement::Shard(d));
    // A sum reads no total_weight: a Partial one needs no reduction first (as DTensor).
    if (reduction != 1) {
      choice(g, Placement::Shard(d), Placement::Shard(t), Placement::Partial(ReduceOp::kSum),
             Placement::Shard(d));
    }
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    choice(Placement::Partial(op), r, r, r, Placement::Partial(op));
  }
  if (reduction != 1) choice(r, r, r, Placement::Partial(ReduceOp::kSum), r);
  choice(r, r, r, r, r);
  return c;
}

// log_softmax of value `x` over `dim` as six ops, so that a shard of `dim` stays a shard: the max
// and the sum of exps along it are Partials reduced across ranks (a number per row).
int LogSoftmax(B& b, int x, int dim) {
  const std::vector<int64_t> dims = {dim};
  const int m = b.Add("amax", {B::V(x), B::P(dims), B::P(true)});
  const int z = b.Add("sub.Tensor", {B::V(x), B::V(m)});
  const int e = b.Add("exp", {B::V(z)});
  const int s = b.Add("sum.dim_IntList", {B::V(e), B::P(dims), B::P(true)});
  const int l = b.Add("log", {B::V(s)});
  return b.Add("sub.Tensor", {B::V(z), B::V(l)});
}

// The reduction of per-row losses `v`: none, mean or sum.
int Reduce(B& b, int v, int64_t reduction) {
  if (reduction == 0) return v;
  return b.Add(reduction == 1 ? "mean" : "sum", {B::V(v)});
}

absl::StatusOr<OpGraph> CrossEntropyGraph(const CallContext& call) {
  const int self = call.args.Tensor("self");
  const int target = call.args.Tensor("target");
  const int weight = call.args.Tensor("weight");
  const Shape& shape = call.inputs[self].shape;
  const int cdim = ClassDim(shape);
  const int64_t classes = shape[cdim];
  const int64_t reduction = call.args.Int("reduction");
  const int64_t ignore = call.args.Int("ignore_index");
  const double eps = call.args.Float("label_smoothing");
  const std::vector<int64_t> class_dims = {cdim};
  B b(static_cast<int>(call.inputs.size()));
  const int logp = LogSoftmax(b, self, cdim);
  // The log-probabilities times the class weights (weight viewed along the class dim).
  auto weighted = [&]() {
    if (weight < 0) return logp;
    std::vector<int64_t> along(shape.size() - cdim, 1);
    along[0] = classes;
    const int w = b.Add("view", {B::V(weight), B::P(along)});
    return b.Add("mul.Tensor", {B::V(logp), B::V(w)});
  };
  if (HoldsProbabilities(call)) {
    int p = target;
    if (eps > 0) {
      const int scaled = b.Add("mul.Tensor", {B::V(target), B::P(1.0 - eps)});
      p = b.Add("add.Tensor", {B::V(scaled), B::P(eps / static_cast<double>(classes))});
    }
    const int prod = b.Add("mul.Tensor", {B::V(weighted()), B::V(p)});
    const int rows = b.Add("sum.dim_IntList", {B::V(prod), B::P(class_dims), B::P(false)});
    const int loss = b.Add("neg", {B::V(rows)});
    Reduce(b, loss, reduction);
    return std::move(b).Finish();
  }
  std::vector<NamedValue> nll = {B::V(logp), B::V(target),
                                 weight < 0 ? B::P(NoneValue{}) : B::V(weight), B::P(reduction),
                                 B::P(ignore)};
  const int loss = b.Add("nll_loss", std::move(nll));
  if (eps == 0) return std::move(b).Finish();
  // torch's label smoothing: (1 - eps) * nll + eps / C * smooth, where smooth is minus the
  // (weighted) sum of log-probabilities over the classes, 0 at ignore_index, reduced as the loss
  // (mean divides by the number of targets, or their total weight).
  const int rows = b.Add("sum.dim_IntList", {B::V(weighted()), B::P(class_dims), B::P(false)});
  const int valid = b.Add("ne.Scalar", {B::V(target), B::P(ignore)});
  const int kept = b.Add("where.self", {B::V(valid), B::V(rows), B::P(0.0)});
  int smooth = kept;
  if (reduction != 0) smooth = b.Add("sum", {B::V(kept)});
  if (reduction == 1) {
    int denominator = 0;
    if (weight < 0) {
      denominator = b.Add("sum", {B::V(valid)});
    } else {
      const int safe = b.Add("where.self", {B::V(valid), B::V(target), B::P(int64_t{0})});
      const int picked = b.Add("index.Tensor", {B::V(weight), B::P(TensorList{{safe}})});
      const int counted = b.Add("where.self", {B::V(valid), B::V(picked), B::P(0.0)});
      denominator = b.Add("sum", {B::V(counted)});
    }
    smooth = b.Add("div.Tensor", {B::V(smooth), B::V(denominator)});
  }
  const int a = b.Add("mul.Tensor", {B::V(loss), B::P(1.0 - eps)});
  const int s = b.Add("mul.Tensor", {B::V(smooth), B::P(-eps / static_cast<double>(classes))});
  b.Add("add.Tensor", {B::V(a), B::V(s)});
  return std::move(b).Finish();
}

absl::StatusOr<OpGraph> PointwiseLossGraph(const CallContext& call) {
  B b(static_cast<int>(call.inputs.size()));
  const int d =
      b.Add("sub.Tensor", {B::V(call.args.Tensor("self")), B::V(call.args.Tensor("target"))});
  const int v = KindOf(call) == Kind::kMse ? b.Add("mul.Tensor", {B::V(d), B::V(d)})
                                           : b.Add("abs", {B::V(d)});
  Reduce(b, v, call.args.Int("reduction"));
  return std::move(b).Finish();
}

}  // namespace

void RegisterLossOps(OpRegistry& registry) {
  for (size_t i = 0; i < Entries().size(); ++i) {
    const LossEntry& e = Entries()[i];
    OpDef& op = DefineOp(registry, e.schema, OpFamily::kNn);
    op.entry = static_cast<int>(i);
    op.meta = LossMeta;
    switch (e.kind) {
      case Kind::kNll:
        op.strategies = NllStrategies;
        break;
      case Kind::kNllForward:
        op.strategies = NllStrategies;
        op.more_outputs = TotalWeight;
        break;
      case Kind::kNllBackward:
        op.strategies = NllBackwardStrategies;
        break;
      case Kind::kCrossEntropy:
        op.decompose = CrossEntropyGraph;
        break;
      case Kind::kMse:
      case Kind::kL1:
        op.decompose = PointwiseLossGraph;
        break;
    }
    op.implementation = e.implementation;
    op.derivative = e.derivative;
    op.strategy_text = e.strategy_text;
  }
}

}  // namespace tessera::ops
