// The pointwise ops: elementwise math, comparisons and logic with numpy broadcasting and torch's
// type promotion; Partial inputs only where the op is linear in them, as DTensor decides.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/op_meta.h"
#include "core/ops/op_registry.h"
#include "core/status_macros.h"

namespace tessera::ops {
namespace {

// Which dtypes an op takes (of its result type).
enum class DTypes { kAll, kNotBool, kIntegerOrBool };

struct PointwiseEntry {
  std::string schema;
  const char* operands;
  PromotionKind promotion;
  PartialRule partial;
  DTypes dtypes;
  std::string kernel;
  const char* derivative;
  std::vector<int> partial_operands = {};
};

using P = PromotionKind;
using R = PartialRule;

// Unary math. Derivatives as torch's derivatives.yaml writes them, in registered ops.
const std::vector<PointwiseEntry>& UnaryEntries() {
  static const auto* const entries = new std::vector<PointwiseEntry>{
      {"neg(Tensor self) -> Tensor", "self", P::kDefault, R::kLinear, DTypes::kNotBool, "unary.neg",
       "neg(grad)"},
      {"abs(Tensor self) -> Tensor", "self", P::kDefault, R::kNone, DTypes::kNotBool, "unary.abs",
       "mul(grad, sign(self))"},
      {"sign(Tensor self) -> Tensor", "self", P::kDefault, R::kNone, DTypes::kAll, "unary.sign",
       "zeros_like(grad)"},
      {"exp(Tensor self) -> Tensor", "self", P::kIntToFloat, R::kNone, DTypes::kAll, "unary.exp",
       "mul(grad, result)"},
      {"expm1(Tensor self) -> Tensor", "self", P::kIntToFloat, R::kNone, DTypes::kAll,
       "unary.expm1", "mul(grad, add(result, 1))"},
      {"log(Tensor self) -> Tensor", "self", P::kIntToFloat, R::kNone, DTypes::kAll, "unary.log",
       "div(grad, self)"},
      {"log1p(Tensor self) -> Tensor", "self", P::kIntToFloat, R::kNone, DTypes::kAll,
       "unary.log1p", "div(grad, add(self, 1))"},
      {"log2(Tensor self) -> Tensor", "self", P::kIntToFloat, R::kNone, DTypes::kAll, "unary.log2",
       "div(grad, mul(self, 0.6931471805599453))"},
      {"sqrt(Tensor self) -> Tensor", "self", P::kIntToFloat, R::kNone, DTypes::kAll, "unary.sqrt",
       "div(grad, mul(result, 2))"},
      {"rsqrt(Tensor self) -> Tensor", "self", P::kIntToFloat, R::kNone, DTypes::kAll,
       "unary.rsqrt", "mul(grad, mul(pow.Tensor_Scalar(result, 3), -0.5))"},
      {"reciprocal(Tensor self) -> Tensor", "self", P::kIntToFloat, R::kNone, DTypes::kAll,
       "unary.reciprocal", "mul(grad, neg(mul(result, result)))"},
      {"sin(Tensor self) -> Tensor", "self", P::kIntToFloat, R::kNone, DTypes::kAll, "unary.sin",
       "mul(grad, cos(self))"},
      {"cos(Tensor self) -> Tensor", "self", P::kIntToFloat, R::kNone, DTypes::kAll, "unary.cos",
       "mul(grad, neg(sin(self)))"},
      {"tanh(Tensor self) -> Tensor", "self", P::kIntToFloat, R::kNone, DTypes::kAll, "unary.tanh",
       "tanh_backward(grad, result)"},
      {"sigmoid(Tensor self) -> Tensor", "self", P::kIntToFloat, R::kNone, DTypes::kAll,
       "unary.sigmoid", "sigmoid_backward(grad, result)"},
      {"silu(Tensor self) -> Tensor", "self", P::kIntToFloat, R::kNone, DTypes::kAll, "unary.silu",
       "silu_backward(grad, self)"},
      {"relu(Tensor self) -> Tensor", "self", P::kDefault, R::kNone, DTypes::kNotBool, "unary.relu",
       "threshold_backward(grad, result, 0)"},
      {"gelu(Tensor self, *, str approximate='none') -> Tensor", "self", P::kIntToFloat, R::kNone,
       DTypes::kAll, "unary.gelu", "gelu_backward(grad, self, approximate)"},
      {"erf(Tensor self) -> Tensor", "self", P::kIntToFloat, R::kNone, DTypes::kAll, "unary.erf",
       "mul(grad, mul(exp(neg(mul(self, self))), 1.1283791670955126))"},
      {"floor(Tensor self) -> Tensor", "self", P::kDefault, R::kNone, DTypes::kAll, "unary.floor",
       "zeros_like(grad)"},
      {"ceil(Tensor self) -> Tensor", "self", P::kDefault, R::kNone, DTypes::kAll, "unary.ceil",
       "zeros_like(grad)"},
      {"round(Tensor self) -> Tensor", "self", P::kDefault, R::kNone, DTypes::kAll, "unary.round",
       "zeros_like(grad)"},
      {"trunc(Tensor self) -> Tensor", "self", P::kDefault, R::kNone, DTypes::kAll, "unary.trunc",
       "zeros_like(grad)"},
      {"logical_not(Tensor self) -> Tensor", "self", P::kAlwaysBool, R::kNone, DTypes::kAll,
       "unary.logical_not", ""},
      {"isnan(Tensor self) -> Tensor", "self", P::kAlwaysBool, R::kNone, DTypes::kAll,
       "unary.isnan", ""},
      {"isinf(Tensor self) -> Tensor", "self", P::kAlwaysBool, R::kNone, DTypes::kAll,
       "unary.isinf", ""},
      {"isfinite(Tensor self) -> Tensor", "self", P::kAlwaysBool, R::kNone, DTypes::kAll,
       "unary.isfinite", ""},
      {"bitwise_not(Tensor self) -> Tensor", "self", P::kDefault, R::kNone, DTypes::kIntegerOrBool,
       "unary.bitwise_not", ""},
      {"clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor", "self", P::kNoOpmath,
       R::kCopy, DTypes::kAll, "copy", "grad"},
      {"contiguous(Tensor(a) self, *, MemoryFormat memory_format=contiguous_format) -> Tensor(a)",
       "self", P::kNoOpmath, R::kCopy, DTypes::kAll, "copy", "grad"},
      {"alias(Tensor(a) self) -> Tensor(a)", "self", P::kNoOpmath, R::kCopy, DTypes::kAll, "copy",
       "grad"},
      {"detach(Tensor(a) self) -> Tensor(a)", "self", P::kNoOpmath, R::kCopy, DTypes::kAll, "copy",
       ""},
  };
  return *entries;
}

// Binary and ternary ops, and the backward ops of the activations.
const std::vector<PointwiseEntry>& BinaryEntries() {
  static const auto* const entries = new std::vector<PointwiseEntry>{
      {"add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", "self,other",
       P::kDefault, R::kLinear, DTypes::kAll, "binary.add", "grad; mul(grad, alpha)"},
      {"add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor", "self,other", P::kDefault,
       R::kNone, DTypes::kAll, "binary.add", "grad"},
      {"sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", "self,other",
       P::kDefault, R::kLinear, DTypes::kNotBool, "binary.sub", "grad; mul(grad, neg(alpha))"},
      {"sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor", "self,other", P::kDefault,
       R::kNone, DTypes::kNotBool, "binary.sub", "grad"},
      {"rsub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", "self,other",
       P::kDefault, R::kLinear, DTypes::kNotBool, "binary.rsub", "mul(grad, neg(alpha)); grad"},
      {"rsub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor", "self,other",
       P::kDefault, R::kNone, DTypes::kNotBool, "binary.rsub", "mul(grad, neg(alpha))"},
      {"mul.Tensor(Tensor self, Tensor other) -> Tensor",
       "self,other",
       P::kDefault,
       R::kScaled,
       DTypes::kAll,
       "binary.mul",
       "mul(grad, other); mul(grad, self)",
       {0, 1}},
      {"mul.Scalar(Tensor self, Scalar other) -> Tensor",
       "self,other",
       P::kDefault,
       R::kScaled,
       DTypes::kAll,
       "binary.mul",
       "mul(grad, other)",
       {0}},
      {"div.Tensor(Tensor self, Tensor other) -> Tensor",
       "self,other",
       P::kIntToFloat,
       R::kScaled,
       DTypes::kAll,
       "binary.div",
       "div(grad, other); neg(div(mul(grad, self), mul(other, other)))",
       {0}},
      {"div.Scalar(Tensor self, Scalar other) -> Tensor",
       "self,other",
       P::kIntToFloat,
       R::kScaled,
       DTypes::kAll,
       "binary.div",
       "div(grad, other)",
       {0}},
      {"div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor", "self,other",
       P::kIntToFloat, R::kNone, DTypes::kAll, "binary.div", ""},
      {"pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor", "self,exponent", P::kDefault,
       R::kNone, DTypes::kAll, "binary.pow",
       "mul(grad, mul(exponent, pow.Tensor_Scalar(self, sub(exponent, 1))))"},
      {"pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor", "self,exponent", P::kDefault,
       R::kNone, DTypes::kAll, "binary.pow",
       "mul(grad, mul(exponent, pow.Tensor_Tensor(self, sub(exponent, 1)))); "
       "mul(grad, mul(result, log(self)))"},
      {"pow.Scalar(Scalar self, Tensor exponent) -> Tensor", "self,exponent", P::kDefault, R::kNone,
       DTypes::kAll, "binary.pow", "mul(grad, mul(result, log(self)))"},
      {"maximum(Tensor self, Tensor other) -> Tensor", "self,other", P::kDefault, R::kNone,
       DTypes::kAll, "binary.maximum", "where.self(ge(self, other), grad, 0); where(...)"},
      {"minimum(Tensor self, Tensor other) -> Tensor", "self,other", P::kDefault, R::kNone,
       DTypes::kAll, "binary.minimum", "where.self(le(self, other), grad, 0); where(...)"},
      {"remainder.Tensor(Tensor self, Tensor other) -> Tensor", "self,other", P::kDefault, R::kNone,
       DTypes::kNotBool, "binary.remainder", "grad"},
      {"remainder.Scalar(Tensor self, Scalar other) -> Tensor", "self,other", P::kDefault, R::kNone,
       DTypes::kNotBool, "binary.remainder", "grad"},
      {"floor_divide(Tensor self, Tensor other) -> Tensor", "self,other", P::kDefault, R::kNone,
       DTypes::kNotBool, "binary.floor_divide", ""},
      {"logical_and(Tensor self, Tensor other) -> Tensor", "self,other", P::kAlwaysBool, R::kNone,
       DTypes::kAll, "binary.logical_and", ""},
      {"logical_or(Tensor self, Tensor other) -> Tensor", "self,other", P::kAlwaysBool, R::kNone,
       DTypes::kAll, "binary.logical_or", ""},
      {"logical_xor(Tensor self, Tensor other) -> Tensor", "self,other", P::kAlwaysBool, R::kNone,
       DTypes::kAll, "binary.logical_xor", ""},
      {"bitwise_and.Tensor(Tensor self, Tensor other) -> Tensor", "self,other", P::kDefault,
       R::kNone, DTypes::kIntegerOrBool, "binary.bitwise_and", ""},
      {"bitwise_or.Tensor(Tensor self, Tensor other) -> Tensor", "self,other", P::kDefault,
       R::kNone, DTypes::kIntegerOrBool, "binary.bitwise_or", ""},
      // The Python operators & and | on tensors, as torch.export's graphs record them.
      {"__and__.Tensor(Tensor self, Tensor other) -> Tensor", "self,other", P::kDefault, R::kNone,
       DTypes::kIntegerOrBool, "binary.bitwise_and", ""},
      {"__or__.Tensor(Tensor self, Tensor other) -> Tensor", "self,other", P::kDefault, R::kNone,
       DTypes::kIntegerOrBool, "binary.bitwise_or", ""},
      {"bitwise_xor.Tensor(Tensor self, Tensor other) -> Tensor", "self,other", P::kDefault,
       R::kNone, DTypes::kIntegerOrBool, "binary.bitwise_xor", ""},
      {"bitwise_and.Scalar(Tensor self, Scalar other) -> Tensor", "self,other", P::kDefault,
       R::kNone, DTypes::kIntegerOrBool, "binary.bitwise_and", ""},
      {"bitwise_or.Scalar(Tensor self, Scalar other) -> Tensor", "self,other", P::kDefault,
       R::kNone, DTypes::kIntegerOrBool, "binary.bitwise_or", ""},
      {"bitwise_xor.Scalar(Tensor self, Scalar other) -> Tensor", "self,other", P::kDefault,
       R::kNone, DTypes::kIntegerOrBool, "binary.bitwise_xor", ""},
      {"clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor", "self,min,max",
       P::kDefault, R::kNone, DTypes::kNotBool, "binary.maximum+minimum",
       "where.self(logical_and(ge(self, min), le(self, max)), grad, 0)"},
      {"clamp_min(Tensor self, Scalar min) -> Tensor", "self,min", P::kDefault, R::kNone,
       DTypes::kNotBool, "binary.maximum", "where.self(ge(self, min), grad, 0)"},
      {"clamp_max(Tensor self, Scalar max) -> Tensor", "self,max", P::kDefault, R::kNone,
       DTypes::kNotBool, "binary.minimum", "where.self(le(self, max), grad, 0)"},
      {"tanh_backward(Tensor grad_output, Tensor output) -> Tensor",
       "grad_output,output",
       P::kDefault,
       R::kScaled,
       DTypes::kAll,
       "decomposition: mul(grad_output, rsub(mul(output, "
       "output), 1))",
       "",
       {0}},
      {"sigmoid_backward(Tensor grad_output, Tensor output) -> Tensor",
       "grad_output,output",
       P::kDefault,
       R::kScaled,
       DTypes::kAll,
       "decomposition: mul(grad_output, mul(output, rsub(output, 1)))",
       "",
       {0}},
      {"silu_backward(Tensor grad_output, Tensor self) -> Tensor",
       "grad_output,self",
       P::kDefault,
       R::kScaled,
       DTypes::kAll,
       "decomposition: mul(grad_output, mul(sigmoid(self), add(1, mul(self, rsub(sigmoid(self), "
       "1)))))",
       "",
       {0}},
      {"gelu_backward(Tensor grad_output, Tensor self, *, str approximate='none') -> Tensor",
       "grad_output,self",
       P::kDefault,
       R::kScaled,
       DTypes::kAll,
       "kernel activation.gelu'",
       "",
       {0}},
      {"threshold_backward(Tensor grad_output, Tensor self, Scalar threshold) -> Tensor",
       "grad_output,self",
       P::kDefault,
       R::kScaled,
       DTypes::kAll,
       "decomposition: where.self(gt(self, threshold), grad_output, 0)",
       "",
       {0}},
  };
  return *entries;
}

// The comparisons, each in a Tensor and a Scalar overload.
std::vector<PointwiseEntry> ComparisonEntries() {
  std::vector<PointwiseEntry> out;
  for (const char* name : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    for (const char* overload : {"Tensor", "Scalar"}) {
      out.push_back(
          {absl::StrCat(name, ".", overload, "(Tensor self, ", overload, " other) -> Tensor"),
           "self,other", P::kAlwaysBool, R::kNone, DTypes::kAll, absl::StrCat("binary.", name),
           ""});
    }
  }
  return out;
}

absl::Status CheckDTypes(const CallContext& call, DType dtype) {
  if (call.op.pointwise.rejects_bool && dtype == DType::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat(call.op.name(), " does not take bool tensors (as torch)"));
  }
  if (call.op.pointwise.rejects_floating && IsFloating(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(call.op.name(), " takes integer or bool ", "tensors, not ", DTypeName(dtype)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OutputMeta> PointwiseMeta(const CallContext& call) {
  const std::vector<Operand> operands = Operands(call, call.op.pointwise.operands);
  std::vector<Shape> shapes;
  std::vector<PromotionOperand> promotion;
  for (const Operand& o : operands) {
    shapes.push_back(o.shape);
    promotion.push_back(o.promotion);
  }
  if (promotion.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(call.op.name(), ": no tensor operand"));
  }
  ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(call.op.name(), shapes));
  const Promotion p = PromoteOperands(call.op.pointwise.promotion, promotion);
  RETURN_IF_ERROR(CheckDTypes(call, p.compute));
  if (call.op.schema.name == "div" && call.op.schema.overload == "Tensor_mode" &&
      !call.args.IsNone("rounding_mode")) {
    const std::string& mode = call.args.String("rounding_mode");
    if (mode != "trunc" && mode != "floor") {
      return ArgError(call, "rounding_mode",
                      absl::StrCat("must be 'trunc', 'floor' or None, not '", mode, "'"));
    }
    return OutputMeta{shape, PromoteOperands(PromotionKind::kDefault, promotion).output};
  }
  if (call.op.schema.name == "gelu" || call.op.schema.name == "gelu_backward") {
    const std::string& a = call.args.String("approximate");
    if (a != "none" && a != "tanh") {
      return ArgError(call, "approximate", absl::StrCat("must be 'none' or 'tanh', not '", a, "'"));
    }
  }
  return OutputMeta{shape, p.output};
}

namespace {

// Whether every number operand of the call is finite, and nonzero where it divides.
bool NumbersScaleFinitely(const CallContext& call) {
  const bool divides = call.op.schema.name == "div";
  for (size_t i = 0; i < call.op.pointwise.operands.size(); ++i) {
    const OpValue& v = call.args.Get(call.op.pointwise.operands[i]);
    if (!IsScalar(v)) continue;
    const double c = ScalarAsDouble(v);
    if (!std::isfinite(c) || (divides && i == 1 && c == 0)) return false;
  }
  return true;
}

// The Partial choices of `rule` on one mesh dim.
void AddPartialChoices(const CallContext& call, const std::vector<Operand>& operands,
                       std::vector<DimChoice>& choices) {
  const int n = static_cast<int>(call.inputs.size());
  const PointwiseTraits& traits = call.op.pointwise;
  const std::vector<Placement> replicate(n, Placement::Replicate());
  bool numbers = false;
  for (const Operand& o : operands) numbers |= o.input < 0;
  switch (traits.partial) {
    case PartialRule::kNone:
      return;
    case PartialRule::kLinear:
      if (numbers) return;
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        DimChoice c{replicate, Placement::Partial(op)};
        for (const Operand& o : operands) c.inputs[o.input] = Placement::Partial(op);
        choices.push_back(std::move(c));
      }
      return;
    case PartialRule::kScaled:
      // x * c and x / c of a partial x are partial only for a finite c (and c != 0 for div):
      // the ranks' zero parts would give NaN (0 * inf, 0 / 0) where the whole gives inf.
      if (!NumbersScaleFinitely(call)) return;
      for (int k : traits.partial_operands) {
        if (k >= static_cast<int>(operands.size()) || operands[k].input < 0) continue;
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
          DimChoice c{replicate, Placement::Partial(op)};
          c.inputs[operands[k].input] = Placement::Partial(op);
          choices.push_back(std::move(c));
        }
      }
      return;
    case PartialRule::kCopy:
    case PartialRule::kMonotonic:
      if (operands.empty() || operands[0].input < 0) return;
      for (ReduceOp op : kAllReduceOps) {
        if (traits.partial == PartialRule::kMonotonic && op != ReduceOp::kMax &&
            op != ReduceOp::kMin) {
          continue;
        }
        DimChoice c{replicate, Placement::Partial(op)};
        c.inputs[operands[0].input] = Placement::Partial(op);
        choices.push_back(std::move(c));
      }
      return;
  }
}

}  // namespace

absl::StatusOr<StrategyCandidates> PointwiseStrategies(const CallContext& call,
                                                       std::span<const DTensorSpec> specs,
                                                       const OutputMeta& out) {
  (void)specs;
  const std::vector<Operand> operands = Operands(call, call.op.pointwise.operands);
  StrategyCandidates c;
  c.per_dim = ShardAlignedChoices(operands, out.shape, static_cast<int>(call.inputs.size()));
  AddPartialChoices(call, operands, c.per_dim);
  return c;
}

namespace {

std::string PartialText(PartialRule rule) {
  switch (rule) {
    case PartialRule::kNone:
      return "";
    case PartialRule::kLinear:
      return "; P(sum|avg) on every tensor operand stays P";
    case PartialRule::kScaled:
      return "; P(sum|avg) times Replicate stays P";
    case PartialRule::kCopy:
      return "; every Partial kept";
    case PartialRule::kMonotonic:
      return "; P(max|min) kept";
  }
  return "";
}

void Define(OpRegistry& registry, const PointwiseEntry& e) {
  OpDef& op = DefineOp(registry, e.schema, OpFamily::kPointwise);
  op.meta = PointwiseMeta;
  op.strategies = PointwiseStrategies;
  op.pointwise.operands = SplitNames(e.operands);
  op.pointwise.promotion = e.promotion;
  op.pointwise.partial = e.partial;
  op.pointwise.partial_operands = e.partial_operands;
  const std::string& kernel = e.kernel;
  op.implementation = kernel.rfind("decomposition", 0) == 0 || kernel.rfind("kernel", 0) == 0
                          ? kernel
                          : absl::StrCat("kernel ", kernel);
  op.derivative = e.derivative;
  op.strategy_text = absl::StrCat("S(d) on broadcast-aligned dims, R", PartialText(e.partial));
  op.pointwise.rejects_bool = e.dtypes == DTypes::kNotBool;
  op.pointwise.rejects_floating = e.dtypes == DTypes::kIntegerOrBool;
}

}  // namespace

void RegisterPointwiseOps(OpRegistry& registry) {
  for (const PointwiseEntry& e : UnaryEntries()) Define(registry, e);
  for (const PointwiseEntry& e : BinaryEntries()) Define(registry, e);
  for (const PointwiseEntry& e : ComparisonEntries()) Define(registry, e);
}

}  // namespace tessera::ops
