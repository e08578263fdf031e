// Reductions, scans and softmax: a reduction whose reduced dim is sharded gives the Partial of its
// reduce op (sum, mean as a sum of local sums over the global count, amax as max, ...) where the
// reduction is linear in it, as DTensor's reduction strategies; the others (argmax, var, cumsum,
// softmax, ...) need their dims whole and make a sharded one Replicate first.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/op_meta.h"
#include "core/ops/op_registry.h"
#include "core/status_macros.h"

namespace tessera::ops {
namespace {

// How a reduction treats its dtype.
enum class ReductionDType {
  kSame,        // amax, amin, max, min
  kSumLike,     // bool and integers give int64 (sum, prod, cumsum), `dtype` when given
  kFloating,    // floating inputs only (mean, var, std), `dtype` when given
  kIntToFloat,  // integers give float32 (logsumexp)
  kBool,        // any, all
  kIndex,       // int64 (argmax, argmin)
  kGradOutput,  // the gradient's dtype (softmax backward)
};

// Which dims an op reduces and whether they vanish.
enum class DimsArg {
  kAll,       // every dim (sum, max, any: no dim argument)
  kList,      // `int[1]? dim` / `int[1] dim` with keepdim
  kOne,       // `int dim` with keepdim (prod.dim_int, any.dim)
  kOptional,  // `int? dim` with keepdim; None flattens (argmax)
  kAlong,     // `int dim`, the shape kept (cumsum, softmax)
};

// The outputs an op gives after its first.
enum class MoreOutputs {
  kNone,
  kIndices,  // (values, indices): int64 positions along the dim, of the values' shape
  kMean,     // var_mean, std_mean: the mean, of the first's shape and dtype
};

struct ReductionEntry {
  const char* schema;
  ReductionDType dtype;
  DimsArg dims;
  // The Partial a sharded reduced dim gives; nullopt: the dim must be whole.
  std::optional<ReduceOp> partial;
  // The Partials that pass through unchanged.
  std::vector<ReduceOp> kept;
  const char* implementation;
  const char* derivative;
  MoreOutputs more = MoreOutputs::kNone;
};

using RD = ReductionDType;
using DA = DimsArg;
constexpr ReduceOp kSum = ReduceOp::kSum;
constexpr ReduceOp kAvg = ReduceOp::kAvg;
constexpr ReduceOp kMax = ReduceOp::kMax;
constexpr ReduceOp kMin = ReduceOp::kMin;
constexpr ReduceOp kProd = ReduceOp::kProduct;

const std::vector<ReductionEntry>& Entries() {
  static const auto* const entries = new std::vector<ReductionEntry>{
      {"sum(Tensor self, *, ScalarType? dtype=None) -> Tensor",
       RD::kSumLike,
       DA::kAll,
       kSum,
       {kSum, kAvg},
       "kernel reduce.sum",
       "expand(grad, self.shape)"},
      {"sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) "
       "-> Tensor",
       RD::kSumLike,
       DA::kList,
       kSum,
       {kSum, kAvg},
       "kernel reduce.sum",
       "expand(unsqueeze(grad, dim), self.shape)"},
      {"mean(Tensor self, *, ScalarType? dtype=None) -> Tensor",
       RD::kFloating,
       DA::kAll,
       kSum,
       {kSum, kAvg},
       "kernel reduce.sum / global count",
       "div(expand(grad, self.shape), numel)"},
      {"mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> "
       "Tensor",
       RD::kFloating,
       DA::kList,
       kSum,
       {kSum, kAvg},
       "kernel reduce.sum / global count",
       "div(expand(unsqueeze(grad, dim), self.shape), count)"},
      {"amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
       RD::kSame,
       DA::kList,
       kMax,
       {kMax},
       "kernel reduce.max",
       "where.self(eq(self, result), grad / count, 0)"},
      {"amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
       RD::kSame,
       DA::kList,
       kMin,
       {kMin},
       "kernel reduce.min",
       "where.self(eq(self, result), grad / count, 0)"},
      {"max(Tensor self) -> Tensor",
       RD::kSame,
       DA::kAll,
       kMax,
       {kMax},
       "kernel reduce.max",
       "where.self(eq(self, result), grad / count, 0)"},
      {"min(Tensor self) -> Tensor",
       RD::kSame,
       DA::kAll,
       kMin,
       {kMin},
       "kernel reduce.min",
       "where.self(eq(self, result), grad / count, 0)"},
      {"prod(Tensor self, *, ScalarType? dtype=None) -> Tensor",
       RD::kSumLike,
       DA::kAll,
       kProd,
       {kProd},
       "kernel reduce.product",
       "div(mul(grad, result), self)"},
      {"prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> "
       "Tensor",
       RD::kSumLike,
       DA::kOne,
       kProd,
       {kProd},
       "kernel reduce.product",
       "div(mul(grad, result), self)"},
      {"any(Tensor self) -> Tensor",
       RD::kBool,
       DA::kAll,
       kMax,
       {kMax},
       "kernel reduce.max (bool)",
       ""},
      {"any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor",
       RD::kBool,
       DA::kOne,
       kMax,
       {kMax},
       "kernel reduce.max (bool)",
       ""},
      {"all(Tensor self) -> Tensor",
       RD::kBool,
       DA::kAll,
       kMin,
       {kMin},
       "kernel reduce.min (bool)",
       ""},
      {"all.dim(Tensor self, int dim, bool keepdim=False) -> Tensor",
       RD::kBool,
       DA::kOne,
       kMin,
       {kMin},
       "kernel reduce.min (bool)",
       ""},
      {"argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
       RD::kIndex,
       DA::kOptional,
       std::nullopt,
       {},
       "kernel argreduce.max",
       ""},
      {"argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
       RD::kIndex,
       DA::kOptional,
       std::nullopt,
       {},
       "kernel argreduce.min",
       ""},
      {"var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool "
       "keepdim=False) -> Tensor",
       RD::kFloating,
       DA::kList,
       std::nullopt,
       {},
       "decomposition: sum(square(sub(self, mean.dim(self, dim, True))), dim) / (n - correction)",
       "mul(grad, mul(sub(self, mean.dim(self, dim, True)), 2 / (n - correction)))"},
      {"std.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool "
       "keepdim=False) -> Tensor",
       RD::kFloating,
       DA::kList,
       std::nullopt,
       {},
       "decomposition: sqrt(var.correction(...))",
       "div(var_backward(grad, ...), mul(result, 2))"},
      {"logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor",
       RD::kIntToFloat,
       DA::kList,
       std::nullopt,
       {},
       "decomposition: add(log(sum(exp(sub(self, amax)))), amax)",
       "mul(grad, exp(sub(self, result)))"},
      {"cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor",
       RD::kSumLike,
       DA::kAlong,
       std::nullopt,
       {kSum, kAvg},
       "kernel scan.sum",
       "flip(cumsum(flip(grad, dim), dim), dim)"},
      {"cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor",
       RD::kSumLike,
       DA::kAlong,
       std::nullopt,
       {},
       "kernel scan.product",
       "cumprod_backward(grad, self, dim)"},
      {"max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
       RD::kSame,
       DA::kOne,
       std::nullopt,
       {},
       "kernel argreduce.max, gather",
       "values: value_selecting_reduction_backward(grad, dim, indices, self.shape, keepdim)",
       MoreOutputs::kIndices},
      {"min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
       RD::kSame,
       DA::kOne,
       std::nullopt,
       {},
       "kernel argreduce.min, gather",
       "values: value_selecting_reduction_backward(grad, dim, indices, self.shape, keepdim)",
       MoreOutputs::kIndices},
      {"var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool "
       "keepdim=False) -> (Tensor, Tensor)",
       RD::kFloating,
       DA::kList,
       std::nullopt,
       {},
       "kernel reduce.sum (the mean), then as var.correction",
       "var.correction's for the var, mean.dim's for the mean, summed",
       MoreOutputs::kMean},
      {"std_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool "
       "keepdim=False) -> (Tensor, Tensor)",
       RD::kFloating,
       DA::kList,
       std::nullopt,
       {},
       "kernel reduce.sum (the mean), then as std.correction",
       "std.correction's for the std, mean.dim's for the mean, summed",
       MoreOutputs::kMean},
      {"sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)",
       RD::kSame,
       DA::kAlong,
       std::nullopt,
       {},
       "kernel sort (stable)",
       "values: scatter.src(zeros_like(self), dim, indices, grad)",
       MoreOutputs::kIndices},
      {"sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor "
       "values, Tensor indices)",
       RD::kSame,
       DA::kAlong,
       std::nullopt,
       {},
       "kernel sort (stable)",
       "values: scatter.src(zeros_like(self), dim, indices, grad)",
       MoreOutputs::kIndices},
      {"topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor "
       "values, Tensor indices)",
       RD::kSame,
       DA::kAlong,
       std::nullopt,
       {},
       "kernel sort (stable), the first k",
       "values: scatter.src(zeros_like(self), dim, indices, grad)",
       MoreOutputs::kIndices},
      {"_softmax(Tensor self, int dim, bool half_to_float) -> Tensor",
       RD::kFloating,
       DA::kAlong,
       std::nullopt,
       {},
       "kernel softmax.softmax",
       "_softmax_backward_data(grad, result, dim, self.dtype)"},
      {"softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
       RD::kFloating,
       DA::kAlong,
       std::nullopt,
       {},
       "kernel softmax.softmax",
       "_softmax_backward_data(grad, result, dim, self.dtype)"},
      {"_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor",
       RD::kFloating,
       DA::kAlong,
       std::nullopt,
       {},
       "kernel softmax.log_softmax",
       "_log_softmax_backward_data(grad, result, dim, self.dtype)"},
      {"log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
       RD::kFloating,
       DA::kAlong,
       std::nullopt,
       {},
       "kernel softmax.log_softmax",
       "_log_softmax_backward_data(grad, result, dim, self.dtype)"},
      {"_safe_softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
       RD::kFloating,
       DA::kAlong,
       std::nullopt,
       {},
       "kernel softmax.safe_softmax",
       "_softmax_backward_data(grad, result, dim, self.dtype)"},
      {"_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType "
       "input_dtype) -> Tensor",
       RD::kGradOutput,
       DA::kAlong,
       std::nullopt,
       {},
       "kernel softmax.softmax_backward",
       ""},
      {"_log_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType "
       "input_dtype) -> Tensor",
       RD::kGradOutput,
       DA::kAlong,
       std::nullopt,
       {},
       "kernel softmax.log_softmax_backward",
       ""},
  };
  return *entries;
}

const ReductionEntry& EntryOf(const OpDef& op) { return Entries()[op.entry]; }

// The reduced dims of a call on a tensor of `rank` dims, and whether they are kept.
struct Reduced {
  std::vector<int> dims;
  bool keepdim = false;
  bool along = false;  // the shape is kept (scans, softmax)
};

absl::StatusOr<Reduced> ReducedOf(const CallContext& call, DimsArg kind, int rank) {
  Reduced r;
  const OpSchema& s = call.op.schema;
  if (s.ArgIndex("keepdim") >= 0) r.keepdim = call.args.Bool("keepdim");
  switch (kind) {
    case DimsArg::kAll:
      for (int d = 0; d < rank; ++d) r.dims.push_back(d);
      return r;
    case DimsArg::kList: {
      ASSIGN_OR_RETURN(r.dims, ReductionDims(call, "dim", rank));
      return r;
    }
    case DimsArg::kOptional:
      if (call.args.IsNone("dim")) {
        for (int d = 0; d < rank; ++d) r.dims.push_back(d);
        return r;
      }
      [[fallthrough]];
    case DimsArg::kOne:
    case DimsArg::kAlong: {
      ASSIGN_OR_RETURN(const int d, CallDim(call, "dim", call.args.Int("dim"), rank));
      if (rank > 0) r.dims.push_back(d);
      r.along = kind == DimsArg::kAlong;
      return r;
    }
  }
  return r;
}

absl::StatusOr<DType> ReductionOutputDType(const CallContext& call, ReductionDType rule, DType in) {
  const bool has_dtype = call.op.schema.ArgIndex("dtype") >= 0 && !call.args.IsNone("dtype");
  const DType given = has_dtype ? call.args.Dtype("dtype") : in;
  switch (rule) {
    case RD::kSame:
      return in;
    case RD::kSumLike:
      return has_dtype ? given : IsFloating(in) ? in : DType::kInt64;
    case RD::kFloating:
      if (!IsFloating(given)) {
        return absl::InvalidArgumentError(
            absl::StrCat(call.op.name(), " takes floating tensors (or a floating dtype=), not ",
                         DTypeName(given), " (as torch)"));
      }
      if (call.op.schema.ArgIndex("half_to_float") >= 0 && call.args.Bool("half_to_float")) {
        return DType::kFloat32;
      }
      return given;
    case RD::kIntToFloat:
      return IsFloating(in) ? in : DType::kFloat32;
    case RD::kBool:
      return DType::kBool;
    case RD::kIndex:
      return DType::kInt64;
    case RD::kGradOutput:
      return in;
  }
  return in;
}

absl::StatusOr<OutputMeta> ReductionMeta(const CallContext& call) {
  const ReductionEntry& e = EntryOf(call.op);
  const char* input = call.op.schema.args[0].name.c_str();
  ASSIGN_OR_RETURN(const TensorMeta x, InputTensor(call, input));
  const int rank = static_cast<int>(x.shape.size());
  ASSIGN_OR_RETURN(const Reduced r, ReducedOf(call, e.dims, rank));
  if (e.dtype == RD::kGradOutput) {
    ASSIGN_OR_RETURN(const TensorMeta y, InputTensor(call, "output"));
    if (y.shape != x.shape || y.dtype != x.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat(call.op.name(), ": grad_output ", DTypeName(x.dtype), ShapeToString(x.shape),
                       " and output ", DTypeName(y.dtype), ShapeToString(y.shape), " differ"));
    }
  }
  ASSIGN_OR_RETURN(const DType dtype, ReductionOutputDType(call, e.dtype, x.dtype));
  if (r.along && call.op.schema.name == "topk") {
    // torch: k in [0, size] of the dim (a 0-dim tensor has one element along its one dim).
    const int64_t size = rank == 0 ? 1 : x.shape[r.dims[0]];
    const int64_t k = call.args.Int("k");
    if (k < 0 || k > size || (rank == 0 && k != 1)) {
      return ArgError(call, "k",
                      absl::StrCat("is ", k, ", out of range for dim ", rank == 0 ? 0 : r.dims[0],
                                   " of size ", size, " (0 <= k <= ", size, ")"));
    }
    Shape shape = x.shape;
    if (rank > 0) shape[r.dims[0]] = k;
    return OutputMeta{shape, dtype};
  }
  if (r.along) return OutputMeta{x.shape, dtype};
  const bool needs_elements = e.dims == DA::kOptional || e.partial == kMax || e.partial == kMin ||
                              e.more == MoreOutputs::kIndices;
  Shape shape;
  for (int d = 0; d < rank; ++d) {
    const bool reduced = std::find(r.dims.begin(), r.dims.end(), d) != r.dims.end();
    if (reduced && needs_elements && x.shape[d] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(call.op.name(), ": reduced dim ", d, " of ", ShapeToString(x.shape),
                       " is empty, and has no ", e.dims == DA::kOptional ? "index" : "extreme"));
    }
    if (!reduced) {
      shape.push_back(x.shape[d]);
    } else if (r.keepdim) {
      shape.push_back(1);
    }
  }
  if (e.dims == DA::kOptional && call.args.IsNone("dim") && r.keepdim) {
    shape.assign(rank, 1);
  }
  return OutputMeta{shape, dtype};
}

absl::StatusOr<std::vector<OutputMeta>> ReductionMoreOutputs(const CallContext& call,
                                                             const OutputMeta& first) {
  switch (EntryOf(call.op).more) {
    case MoreOutputs::kIndices:
      return std::vector<OutputMeta>{{first.shape, DType::kInt64}};
    case MoreOutputs::kMean:
      return std::vector<OutputMeta>{first};
    case MoreOutputs::kNone:
      break;
  }
  return std::vector<OutputMeta>{};
}

absl::StatusOr<StrategyCandidates> ReductionStrategies(const CallContext& call,
                                                       std::span<const DTensorSpec> specs,
                                                       const OutputMeta& out) {
  (void)specs;
  (void)out;
  const ReductionEntry& e = EntryOf(call.op);
  const int n = static_cast<int>(call.inputs.size());
  const int rank = static_cast<int>(call.inputs[0].shape.size());
  ASSIGN_OR_RETURN(const Reduced r, ReducedOf(call, e.dims, rank));
  const bool flattens = e.dims == DA::kOptional && call.args.IsNone("dim");
  StrategyCandidates c;
  int removed = 0;
  for (int d = 0; d < rank; ++d) {
    const bool reduced = std::find(r.dims.begin(), r.dims.end(), d) != r.dims.end();
    if (reduced && !r.along) ++removed;
    if (flattens) continue;
    std::vector<Placement> inputs(n, Placement::Shard(d));
    if (reduced) {
      if (e.partial.has_value()) c.per_dim.push_back({inputs, Placement::Partial(*e.partial)});
      continue;
    }
    const int o = r.along || r.keepdim ? d : d - removed;
    c.per_dim.push_back({inputs, Placement::Shard(o)});
  }
  c.per_dim.push_back({std::vector<Placement>(n, Placement::Replicate()), Placement::Replicate()});
  for (ReduceOp op : e.kept) {
    c.per_dim.push_back(
        {std::vector<Placement>(n, Placement::Partial(op)), Placement::Partial(op)});
  }
  return c;
}

std::string StrategyText(const ReductionEntry& e) {
  std::string text = e.more == MoreOutputs::kNone ? "S(d) kept on other dims, R"
                                                  : "S(d) kept on other dims (every output), R";
  if (e.partial.has_value()) {
    absl::StrAppend(&text, "; a sharded reduced dim gives P(", ReduceOpName(*e.partial), ")");
  } else if (e.dims == DA::kAlong) {
    absl::StrAppend(&text, "; the dim it runs along whole (Replicate) first");
  } else {
    absl::StrAppend(&text, "; the reduced dim whole (Replicate) first");
  }
  for (ReduceOp op : e.kept) absl::StrAppend(&text, "; P(", ReduceOpName(op), ") kept");
  return text;
}

}  // namespace

absl::StatusOr<ReductionInfo> DescribeReduction(const CallContext& call) {
  const ReductionEntry& e = EntryOf(call.op);
  ASSIGN_OR_RETURN(const TensorMeta x, InputTensor(call, call.op.schema.args[0].name));
  ASSIGN_OR_RETURN(const Reduced r, ReducedOf(call, e.dims, static_cast<int>(x.shape.size())));
  ReductionInfo info;
  info.dims = r.dims;
  info.keepdim = r.keepdim;
  info.along = r.along;
  info.flattens = e.dims == DA::kOptional && call.args.IsNone("dim");
  info.partial = e.partial;
  return info;
}

void RegisterReductionOps(OpRegistry& registry) {
  for (size_t i = 0; i < Entries().size(); ++i) {
    const ReductionEntry& e = Entries()[i];
    OpDef& op = DefineOp(registry, e.schema, OpFamily::kReduction);
    op.entry = static_cast<int>(i);
    op.meta = ReductionMeta;
    if (e.more != MoreOutputs::kNone) op.more_outputs = ReductionMoreOutputs;
    op.strategies = ReductionStrategies;
    op.implementation = e.implementation;
    op.derivative = e.derivative;
    op.strategy_text = StrategyText(e);
  }
}

}  // namespace tessera::ops
