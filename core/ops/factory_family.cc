// The factories and random ops: tensors made from their arguments (arange, full, zeros, eye,
// rand, randint, ...), from another tensor's shape or dtype (new_zeros, zeros_like, rand_like,
// ...), and the random ops on a tensor (dropout, bernoulli). A factory's output takes the layout
// the caller asks for (core/ops/factory_call.h); the random ones draw, element by element, from
// the caller's random stream at the element's global index, so a shard holds exactly its slice of
// the tensor whatever the layout.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/op_meta.h"
#include "core/ops/op_registry.h"
#include "core/status_macros.h"

namespace tessera::ops {
namespace {

enum class Kind {
  kArange,   // arange, arange.start, arange.start_step
  kFill,     // full, zeros, ones, empty.memory_format
  kScalar,   // scalar_tensor
  kEye,      // eye, eye.m
  kRandom,   // rand, randn, randint, randint.low
  kNewFill,  // new_zeros, new_ones, new_full, new_empty
  kLike,     // zeros_like, ones_like, empty_like, full_like, rand_like, randn_like, randint_like
  kDropout,  // dropout, native_dropout, bernoulli.p: random, and reading their input
};

struct FactoryEntry {
  const char* schema;
  Kind kind;
  bool random;
  const char* implementation;
};

#define FACTORY_OPTIONS "Layout? layout=None, Device? device=None, bool? pin_memory=None"

const std::vector<FactoryEntry>& Entries() {
  static const auto* const entries = new std::vector<FactoryEntry>{
      {"arange(Scalar end, *, ScalarType? dtype=None, " FACTORY_OPTIONS ") -> Tensor",
       Kind::kArange, false, "kernel upload (each rank its indices)"},
      {"arange.start(Scalar start, Scalar end, *, ScalarType? dtype=None, " FACTORY_OPTIONS
       ") -> Tensor",
       Kind::kArange, false, "kernel upload (each rank its indices)"},
      {"arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? "
       "dtype=None, " FACTORY_OPTIONS ") -> Tensor",
       Kind::kArange, false, "kernel upload (each rank its indices)"},
      {"full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, " FACTORY_OPTIONS
       ") -> Tensor",
       Kind::kFill, false, "kernel fill"},
      {"zeros(SymInt[] size, *, ScalarType? dtype=None, " FACTORY_OPTIONS ") -> Tensor",
       Kind::kFill, false, "kernel fill"},
      {"ones(SymInt[] size, *, ScalarType? dtype=None, " FACTORY_OPTIONS ") -> Tensor", Kind::kFill,
       false, "kernel fill"},
      {"empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, " FACTORY_OPTIONS
       ", MemoryFormat? memory_format=None) -> Tensor",
       Kind::kFill, false, "kernel fill (zeros)"},
      {"scalar_tensor(Scalar s, *, ScalarType? dtype=None, " FACTORY_OPTIONS ") -> Tensor",
       Kind::kScalar, false, "kernel fill"},
      {"eye(SymInt n, *, ScalarType? dtype=None, " FACTORY_OPTIONS ") -> Tensor", Kind::kEye, false,
       "kernel upload (each rank its block)"},
      {"eye.m(SymInt n, SymInt m, *, ScalarType? dtype=None, " FACTORY_OPTIONS ") -> Tensor",
       Kind::kEye, false, "kernel upload (each rank its block)"},
      {"rand(SymInt[] size, *, ScalarType? dtype=None, " FACTORY_OPTIONS ") -> Tensor",
       Kind::kRandom, true, "kernel random fill (uniform)"},
      {"randn(SymInt[] size, *, ScalarType? dtype=None, " FACTORY_OPTIONS ") -> Tensor",
       Kind::kRandom, true, "kernel random fill (normal)"},
      {"randint(SymInt high, SymInt[] size, *, ScalarType? dtype=long, " FACTORY_OPTIONS
       ") -> Tensor",
       Kind::kRandom, true, "kernel upload (random integers)"},
      {"randint.low(SymInt low, SymInt high, SymInt[] size, *, ScalarType? "
       "dtype=long, " FACTORY_OPTIONS ") -> Tensor",
       Kind::kRandom, true, "kernel upload (random integers)"},
      {"new_zeros(Tensor self, SymInt[] size, *, ScalarType? dtype=None, " FACTORY_OPTIONS
       ") -> Tensor",
       Kind::kNewFill, false, "kernel fill"},
      {"new_ones(Tensor self, SymInt[] size, *, ScalarType? dtype=None, " FACTORY_OPTIONS
       ") -> Tensor",
       Kind::kNewFill, false, "kernel fill"},
      {"new_full(Tensor self, SymInt[] size, Scalar fill_value, *, ScalarType? "
       "dtype=None, " FACTORY_OPTIONS ") -> Tensor",
       Kind::kNewFill, false, "kernel fill"},
      {"new_empty(Tensor self, SymInt[] size, *, ScalarType? dtype=None, " FACTORY_OPTIONS
       ") -> Tensor",
       Kind::kNewFill, false, "kernel fill (zeros)"},
      {"zeros_like(Tensor self, *, ScalarType? dtype=None, " FACTORY_OPTIONS
       ", MemoryFormat? memory_format=None) -> Tensor",
       Kind::kLike, false, "kernel fill"},
      {"ones_like(Tensor self, *, ScalarType? dtype=None, " FACTORY_OPTIONS
       ", MemoryFormat? memory_format=None) -> Tensor",
       Kind::kLike, false, "kernel fill"},
      {"empty_like(Tensor self, *, ScalarType? dtype=None, " FACTORY_OPTIONS
       ", MemoryFormat? memory_format=None) -> Tensor",
       Kind::kLike, false, "kernel fill (zeros)"},
      {"full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, " FACTORY_OPTIONS
       ", MemoryFormat? memory_format=None) -> Tensor",
       Kind::kLike, false, "kernel fill"},
      {"rand_like(Tensor self, *, ScalarType? dtype=None, " FACTORY_OPTIONS
       ", MemoryFormat? memory_format=None) -> Tensor",
       Kind::kLike, true, "kernel random fill (uniform)"},
      {"randn_like(Tensor self, *, ScalarType? dtype=None, " FACTORY_OPTIONS
       ", MemoryFormat? memory_format=None) -> Tensor",
       Kind::kLike, true, "kernel random fill (normal)"},
      {"randint_like(Tensor self, SymInt high, *, ScalarType? dtype=None, " FACTORY_OPTIONS
       ", MemoryFormat? memory_format=None) -> Tensor",
       Kind::kLike, true, "kernel upload (random integers)"},
      {"randint_like.low_dtype(Tensor self, SymInt low, SymInt high, *, ScalarType? "
       "dtype=None, " FACTORY_OPTIONS ", MemoryFormat? memory_format=None) -> Tensor",
       Kind::kLike, true, "kernel upload (random integers)"},
      {"dropout(Tensor input, float p, bool train) -> Tensor", Kind::kDropout, true,
       "kernel random fill (uniform), where"},
      {"native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)", Kind::kDropout,
       true, "kernel random fill (uniform), where; the mask (bool, True where kept) as output"},
      {"bernoulli.p(Tensor self, float p, *, Generator? generator=None) -> Tensor", Kind::kDropout,
       true, "kernel random fill (uniform), cast"},
  };
  return *entries;
}

#undef FACTORY_OPTIONS

Kind KindOf(const CallContext& call) { return Entries()[call.op.entry].kind; }
const std::string& NameOf(const CallContext& call) { return call.op.schema.name; }

// A `size` argument checked: no negative dim.
absl::StatusOr<Shape> SizeArg(const CallContext& call) {
  const std::vector<int64_t>& size = call.args.Ints("size");
  for (int64_t d : size) {
    if (d < 0) {
      return ArgError(call, "size",
                      absl::StrCat("has a negative dim, ", d, ", in ", ShapeToString(size)));
    }
  }
  return Shape(size.begin(), size.end());
}

// The `dtype` argument, or `fallback` where it is None.
DType DTypeOr(const CallContext& call, DType fallback) {
  return call.args.IsNone("dtype") ? fallback : call.args.Dtype("dtype");
}

// torch's dtype of a tensor made from a number: bool, int64, or the default float dtype.
DType NumberDType(const OpValue& v) {
  if (std::holds_alternative<bool>(v)) return DType::kBool;
  if (std::holds_alternative<int64_t>(v)) return DType::kInt64;
  return DType::kFloat32;
}

absl::Status NeedsFloating(const CallContext& call, DType dtype) {
  if (IsFloating(dtype)) return absl::OkStatus();
  return ArgError(call, "dtype", absl::StrCat("must be a floating dtype, not ", DTypeName(dtype)));
}

// low < high for randint and randint_like (low 0 when not an argument).
absl::Status CheckRandintBounds(const CallContext& call, DType dtype) {
  const int64_t low = call.op.schema.ArgIndex("low") >= 0 ? call.args.Int("low") : 0;
  const int64_t high = call.args.Int("high");
  if (low >= high) {
    return ArgError(call, "high", absl::StrCat("must be greater than low (", low, "), not ", high));
  }
  if (dtype == DType::kBool && (low < 0 || high > 2)) {
    return ArgError(call, "dtype",
                    absl::StrCat("bool holds values in [0, 2), not [", low, ", ", high, ")"));
  }
  return absl::OkStatus();
}

// The length of arange(start, end, step) in `dtype`, as torch counts it: on the values cast to
// int64 for an int64 result, ceil((end - start) / step) in double otherwise.
absl::StatusOr<int64_t> ArangeSize(const CallContext& call, const OpValue& start,
                                   const OpValue& end, const OpValue& step, DType dtype) {
  const double xstart = ScalarAsDouble(start), xend = ScalarAsDouble(end);
  const double xstep = ScalarAsDouble(step);
  if (!std::isfinite(xstart))
    return ArgError(call, "start", absl::StrCat("must be finite, not ", xstart));
  if (!std::isfinite(xend))
    return ArgError(call, "end", absl::StrCat("must be finite, not ", xend));
  if (xstep == 0 || !std::isfinite(xstep)) {
    return ArgError(call, "step", absl::StrCat("must be finite and nonzero, not ", xstep));
  }
  double size_d;
  if (dtype == DType::kInt64) {
    const int64_t s = static_cast<int64_t>(xstart), e = static_cast<int64_t>(xend);
    const int64_t st = static_cast<int64_t>(xstep);
    if (st == 0) return ArgError(call, "step", absl::StrCat("is ", xstep, ", which is 0 as int64"));
    if ((st > 0 && e < s) || (st < 0 && e > s)) {
      return ArgError(call, "step",
                      absl::StrCat("(", st, ") has the wrong sign for start ", s, " and end ", e));
    }
    const int64_t sgn = (st > 0) - (st < 0);
    size_d = static_cast<double>((e - s + st - sgn) / st);  // ceil, in integers
  } else {
    if ((xstep > 0 && xend < xstart) || (xstep < 0 && xend > xstart)) {
      return ArgError(
          call, "step",
          absl::StrCat("(", xstep, ") has the wrong sign for start ", xstart, " and end ", xend));
    }
    size_d = std::ceil((xend - xstart) / xstep);
  }
  if (!(size_d >= 0) || size_d > 9.2e18) {
    return ArgError(call, "end",
                    absl::StrCat("gives ", size_d, " elements, too many for a tensor"));
  }
  return static_cast<int64_t>(size_d);
}

absl::StatusOr<OutputMeta> ArangeMeta(const CallContext& call) {
  const bool has_start = call.op.schema.ArgIndex("start") >= 0;
  const bool has_step = call.op.schema.ArgIndex("step") >= 0;
  const OpValue& end = call.args.Get("end");
  const OpValue start = has_start ? call.args.Get("start") : OpValue(int64_t{0});
  const OpValue step = has_step ? call.args.Get("step") : OpValue(int64_t{1});
  bool floating = false;
  for (const OpValue* v : {&start, &end, &step}) floating |= std::holds_alternative<double>(*v);
  const DType dtype = DTypeOr(call, floating ? DType::kFloat32 : DType::kInt64);
  if (dtype == DType::kBool) return ArgError(call, "dtype", "must not be bool");
  ASSIGN_OR_RETURN(const int64_t size, ArangeSize(call, start, end, step, dtype));
  return OutputMeta{{size}, dtype};
}

absl::StatusOr<OutputMeta> FactoryMeta(const CallContext& call) {
  const std::string& name = NameOf(call);
  switch (KindOf(call)) {
    case Kind::kArange:
      return ArangeMeta(call);
    case Kind::kFill: {
      ASSIGN_OR_RETURN(Shape shape, SizeArg(call));
      const DType fallback =
          name == "full" ? NumberDType(call.args.Get("fill_value")) : DType::kFloat32;
      return OutputMeta{std::move(shape), DTypeOr(call, fallback)};
    }
    case Kind::kScalar:
      return OutputMeta{{}, DTypeOr(call, DType::kFloat32)};
    case Kind::kEye: {
      const int64_t n = call.args.Int("n");
      const int64_t m = call.op.schema.ArgIndex("m") >= 0 ? call.args.Int("m") : n;
      if (n < 0) return ArgError(call, "n", absl::StrCat("must be at least 0, not ", n));
      if (m < 0) return ArgError(call, "m", absl::StrCat("must be at least 0, not ", m));
      return OutputMeta{{n, m}, DTypeOr(call, DType::kFloat32)};
    }
    case Kind::kRandom: {
      ASSIGN_OR_RETURN(Shape shape, SizeArg(call));
      const DType dtype = DTypeOr(call, DType::kFloat32);
      if (name == "randint") {
        RETURN_IF_ERROR(CheckRandintBounds(call, dtype));
      } else {
        RETURN_IF_ERROR(NeedsFloating(call, dtype));
      }
      return OutputMeta{std::move(shape), dtype};
    }
    case Kind::kNewFill: {
      ASSIGN_OR_RETURN(const TensorMeta self, InputTensor(call, "self"));
      ASSIGN_OR_RETURN(Shape shape, SizeArg(call));
      return OutputMeta{std::move(shape), DTypeOr(call, self.dtype)};
    }
    case Kind::kLike: {
      ASSIGN_OR_RETURN(const TensorMeta self, InputTensor(call, "self"));
      const DType dtype = DTypeOr(call, self.dtype);
      if (name == "rand_like" || name == "randn_like") RETURN_IF_ERROR(NeedsFloating(call, dtype));
      if (name == "randint_like") RETURN_IF_ERROR(CheckRandintBounds(call, dtype));
      return OutputMeta{self.shape, dtype};
    }
    case Kind::kDropout: {
      const bool dropout = name == "dropout" || name == "native_dropout";
      const char* input = dropout ? "input" : "self";
      ASSIGN_OR_RETURN(const TensorMeta x, InputTensor(call, input));
      const double p = call.args.Float("p");
      if (!(p >= 0 && p <= 1)) {
        return ArgError(call, "p", absl::StrCat("is a probability, in [0, 1], not ", p));
      }
      if (dropout && !IsFloating(x.dtype)) {
        return ArgError(call, input,
                        absl::StrCat("must have a floating dtype, not ", DTypeName(x.dtype)));
      }
      return OutputMeta{x.shape, x.dtype};
    }
  }
  return absl::InternalError("unknown factory kind");
}

// native_dropout's mask: True where the element is kept, of the input's shape.
absl::StatusOr<std::vector<OutputMeta>> DropoutMask(const CallContext& call,
                                                    const OutputMeta& first) {
  (void)call;
  return std::vector<OutputMeta>{{first.shape, DType::kBool}};
}

// native_dropout_backward(grad_output, mask, scale): grad_output * mask * scale.
absl::StatusOr<OutputMeta> DropoutBackwardMeta(const CallContext& call) {
  ASSIGN_OR_RETURN(const TensorMeta grad, InputTensor(call, "grad_output"));
  ASSIGN_OR_RETURN(const TensorMeta mask, InputTensor(call, "mask"));
  if (!IsFloating(grad.dtype)) {
    return ArgError(call, "grad_output",
                    absl::StrCat("must have a floating dtype, not ", DTypeName(grad.dtype)));
  }
  if (mask.dtype != DType::kBool || mask.shape != grad.shape) {
    return ArgError(
        call, "mask",
        absl::StrCat("is ", DTypeName(mask.dtype), ShapeToString(mask.shape),
                     "; it must be bool of grad_output's shape ", ShapeToString(grad.shape)));
  }
  return OutputMeta{grad.shape, grad.dtype};
}

absl::StatusOr<OpGraph> DropoutBackwardGraph(const CallContext& call) {
  using B = GraphBuilder;
  B b(static_cast<int>(call.inputs.size()));
  const int kept =
      b.Add("mul.Tensor", {B::V(call.args.Tensor("grad_output")), B::V(call.args.Tensor("mask"))});
  b.Add("mul.Tensor", {B::V(kept), B::P(call.args.Float("scale"))});
  return std::move(b).Finish();
}

// Every placement a tensor of `rank` dims may have on one mesh dim.
std::vector<Placement> AnyPlacement(int rank) {
  std::vector<Placement> out = {Placement::Replicate()};
  for (int d = 0; d < rank; ++d) out.push_back(Placement::Shard(d));
  for (ReduceOp op : kAllReduceOps) out.push_back(Placement::Partial(op));
  return out;
}

// A factory reads its input's shape (and dtype) only, so the input stays as it is: new_* ops
// give Replicate, *_like ops their input's shards (Replicate for a Partial). dropout and
// bernoulli read the values: a sharded input keeps its shards, a Partial is reduced first.
absl::StatusOr<StrategyCandidates> FactoryStrategies(const CallContext& call,
                                                     std::span<const DTensorSpec> specs,
                                                     const OutputMeta& out) {
  (void)specs;
  (void)out;
  StrategyCandidates c;
  const int n = static_cast<int>(call.inputs.size());
  if (n == 0) {
    c.per_dim.push_back({{}, Placement::Replicate()});
    return c;
  }
  const int rank = static_cast<int>(call.inputs[0].shape.size());
  const Kind kind = KindOf(call);
  if (kind == Kind::kDropout) {
    for (int d = 0; d < rank; ++d)
      c.per_dim.push_back({{Placement::Shard(d)}, Placement::Shard(d)});
    c.per_dim.push_back({{Placement::Replicate()}, Placement::Replicate()});
    return c;
  }
  for (const Placement& p : AnyPlacement(rank)) {
    const bool keeps = kind == Kind::kLike && p.is_shard();
    c.per_dim.push_back({{p}, keeps ? p : Placement::Replicate()});
  }
  return c;
}

const char* StrategyText(Kind kind) {
  switch (kind) {
    case Kind::kNewFill:
      return "the input as it is; the output in the requested layout, else R";
    case Kind::kLike:
      return "the input as it is; the output in the requested layout, else the input's shards "
             "(R for a Partial)";
    case Kind::kDropout:
      return "S(d) and R kept; a Partial input is made R first";
    default:
      return "the output in the requested layout (mesh and placements; no Partial)";
  }
}

}  // namespace

void RegisterFactoryOps(OpRegistry& registry) {
  for (size_t i = 0; i < Entries().size(); ++i) {
    const FactoryEntry& e = Entries()[i];
    OpDef& op = DefineOp(registry, e.schema, OpFamily::kFactory);
    op.entry = static_cast<int>(i);
    op.meta = FactoryMeta;
    op.strategies = FactoryStrategies;
    op.implementation = e.implementation;
    op.random = e.random;
    op.strategy_text = StrategyText(e.kind);
    if (e.kind == Kind::kDropout) {
      op.derivative = op.schema.name == "dropout" ? "grad * (result != 0) / (1 - p)" : "";
    }
    if (op.schema.name == "native_dropout") {
      op.more_outputs = DropoutMask;
      op.derivative = "native_dropout_backward(grad, mask, 1 / (1 - p))";
    }
  }
  OpDef& backward = DefineOp(registry,
                             "native_dropout_backward(Tensor grad_output, Tensor mask, float "
                             "scale) -> Tensor",
                             OpFamily::kPointwise);
  backward.meta = DropoutBackwardMeta;
  backward.decompose = DropoutBackwardGraph;
  backward.implementation = "decomposition: mul.Tensor(mul.Tensor(grad_output, mask), scale)";
  backward.derivative = "native_dropout_backward(grad, mask, scale)";
  backward.strategy_text = "each node's own (pointwise)";
}

}  // namespace tessera::ops
