// The pointwise ops on local shards: operands promoted to the op's compute dtype (numbers as
// 0-dim tensors), then one elementwise kernel (kernels/ops.h) or a few.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/op_meta.h"
#include "core/status_macros.h"
#include "kernels/aten/aten_context.h"

namespace tessera::kernels::aten {
namespace {

// The dtype the call computes in: its operands' promotion.
DType ComputeDType(const Context& ctx) {
  const ops::OpDef& op = *ctx.call().op;
  const ops::CallContext call{op, ctx.args(), ctx.call().inputs};
  std::vector<ops::PromotionOperand> promotion;
  for (const ops::Operand& o : ops::Operands(call, op.pointwise.operands)) {
    promotion.push_back(o.promotion);
  }
  return ops::PromoteOperands(op.pointwise.promotion, promotion).compute;
}

const std::string& OperandName(const Context& ctx, size_t i) {
  return ctx.call().op->pointwise.operands[i];
}

template <UnaryOp kOp>
absl::StatusOr<DeviceTensor> UnaryKernel(Context& ctx) {
  ASSIGN_OR_RETURN(const ConstTensorView x, ctx.Operand("self", ComputeDType(ctx)));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  if (kOp == UnaryOp::kSign && x.dtype == DType::kBool) {
    RETURN_IF_ERROR(ctx.backend.Copy(x, out.View()));
    return out;
  }
  RETURN_IF_ERROR(ctx.backend.Unary(kOp, x, out.View()));
  return out;
}

absl::StatusOr<DeviceTensor> GeluKernel(Context& ctx) {
  ASSIGN_OR_RETURN(const ConstTensorView x, ctx.Operand("self", ComputeDType(ctx)));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  const bool tanh = ctx.args().String("approximate") == "tanh";
  RETURN_IF_ERROR(ctx.backend.Unary(tanh ? UnaryOp::kGeluTanh : UnaryOp::kGelu, x, out.View()));
  return out;
}

absl::StatusOr<DeviceTensor> CopyKernel(Context& ctx) {
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Copy(ctx.Input("self"), out.View()));
  return out;
}

// b scaled by the call's `alpha` where it has one other than 1.
absl::StatusOr<ConstTensorView> Scaled(Context& ctx, const ConstTensorView& b) {
  if (ctx.call().op->schema.ArgIndex("alpha") < 0) return b;
  const double alpha = ctx.args().Float("alpha");
  if (alpha == 1.0) return b;
  ASSIGN_OR_RETURN(const ConstTensorView a, ctx.Number(alpha, b.dtype));
  ASSIGN_OR_RETURN(TensorView out, ctx.Temporary(b.dtype, b.shape));
  RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kMul, b, a, out));
  return ConstTensorView(out);
}

template <BinaryOp kOp, bool kReversed = false>
absl::StatusOr<DeviceTensor> BinaryKernel(Context& ctx) {
  const DType compute = ComputeDType(ctx);
  ASSIGN_OR_RETURN(ConstTensorView a, ctx.Operand(OperandName(ctx, 0), compute));
  ASSIGN_OR_RETURN(ConstTensorView b, ctx.Operand(OperandName(ctx, 1), compute));
  if (kReversed) {
    ASSIGN_OR_RETURN(a, Scaled(ctx, a));
    std::swap(a, b);
  } else {
    ASSIGN_OR_RETURN(b, Scaled(ctx, b));
  }
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Binary(kOp, a, b, out.View()));
  return out;
}

// out = op(x, number) into a new tensor of x's shape and `dtype`.
absl::StatusOr<ConstTensorView> WithNumber(Context& ctx, BinaryOp op, const ConstTensorView& x,
                                           double number, DType dtype, bool number_first = false) {
  ASSIGN_OR_RETURN(const ConstTensorView n, ctx.Number(number, x.dtype));
  ASSIGN_OR_RETURN(TensorView out, ctx.Temporary(dtype, x.shape));
  RETURN_IF_ERROR(number_first ? ctx.backend.Binary(op, n, x, out)
                               : ctx.backend.Binary(op, x, n, out));
  return ConstTensorView(out);
}

absl::StatusOr<ConstTensorView> Product(Context& ctx, const ConstTensorView& a,
                                        const ConstTensorView& b) {
  ASSIGN_OR_RETURN(const Shape shape,
                   ops::BroadcastShapes(ctx.name(), std::vector<Shape>{a.shape, b.shape}));
  ASSIGN_OR_RETURN(TensorView out, ctx.Temporary(a.dtype, shape));
  RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kMul, a, b, out));
  return ConstTensorView(out);
}

absl::StatusOr<DeviceTensor> ClampKernel(Context& ctx) {
  const DType compute = ComputeDType(ctx);
  ASSIGN_OR_RETURN(ConstTensorView x, ctx.Operand("self", compute));
  const ops::OpSchema& s = ctx.call().op->schema;
  for (const char* bound : {"min", "max"}) {
    if (s.ArgIndex(bound) < 0 || ctx.args().IsNone(bound)) continue;
    const BinaryOp op = std::string(bound) == "min" ? BinaryOp::kMaximum : BinaryOp::kMinimum;
    ASSIGN_OR_RETURN(x, WithNumber(ctx, op, x, ctx.args().Float(bound), compute));
  }
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Copy(x, out.View()));
  return out;
}

absl::StatusOr<DeviceTensor> DivModeKernel(Context& ctx) {
  if (ctx.args().IsNone("rounding_mode")) return BinaryKernel<BinaryOp::kDiv>(ctx);
  const bool floor = ctx.args().String("rounding_mode") == "floor";
  if (floor) {
    ASSIGN_OR_RETURN(const ConstTensorView a, ctx.Operand("self", ctx.out_dtype));
    ASSIGN_OR_RETURN(const ConstTensorView b, ctx.Operand("other", ctx.out_dtype));
    ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
    RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kFloorDivide, a, b, out.View()));
    return out;
  }
  // trunc: the true quotient truncated, in float64 for integers.
  const DType compute = ops::IsFloating(ctx.out_dtype) ? ctx.out_dtype : DType::kFloat64;
  ASSIGN_OR_RETURN(const ConstTensorView a, ctx.Operand("self", compute));
  ASSIGN_OR_RETURN(const ConstTensorView b, ctx.Operand("other", compute));
  ASSIGN_OR_RETURN(TensorView q, ctx.Temporary(compute, ctx.out_shape));
  RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kDiv, a, b, q));
  RETURN_IF_ERROR(ctx.backend.Unary(UnaryOp::kTrunc, q, q));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Cast(q, out.View()));
  return out;
}

// grad * f where f is computed from the second operand by `factor`.
template <typename Factor>
absl::StatusOr<DeviceTensor> ScaledGrad(Context& ctx, Factor factor) {
  const DType compute = ComputeDType(ctx);
  ASSIGN_OR_RETURN(const ConstTensorView grad, ctx.Operand(OperandName(ctx, 0), compute));
  ASSIGN_OR_RETURN(const ConstTensorView y, ctx.Operand(OperandName(ctx, 1), compute));
  ASSIGN_OR_RETURN(const ConstTensorView f, factor(ctx, y));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kMul, grad, f, out.View()));
  return out;
}

absl::StatusOr<DeviceTensor> TanhBackward(Context& ctx) {
  return ScaledGrad(ctx,
                    [](Context& c, const ConstTensorView& y) -> absl::StatusOr<ConstTensorView> {
                      ASSIGN_OR_RETURN(const ConstTensorView y2, Product(c, y, y));
                      return WithNumber(c, BinaryOp::kSub, y2, 1.0, y.dtype, /*number_first=*/true);
                    });
}

absl::StatusOr<DeviceTensor> SigmoidBackward(Context& ctx) {
  return ScaledGrad(
      ctx, [](Context& c, const ConstTensorView& y) -> absl::StatusOr<ConstTensorView> {
        ASSIGN_OR_RETURN(const ConstTensorView one_minus,
                         WithNumber(c, BinaryOp::kSub, y, 1.0, y.dtype, /*number_first=*/true));
        return Product(c, y, one_minus);
      });
}

absl::StatusOr<DeviceTensor> SiluBackward(Context& ctx) {
  return ScaledGrad(
      ctx, [](Context& c, const ConstTensorView& x) -> absl::StatusOr<ConstTensorView> {
        ASSIGN_OR_RETURN(TensorView s, c.Temporary(x.dtype, x.shape));
        RETURN_IF_ERROR(c.backend.Unary(UnaryOp::kSigmoid, x, s));
        ASSIGN_OR_RETURN(const ConstTensorView one_minus,
                         WithNumber(c, BinaryOp::kSub, s, 1.0, x.dtype, /*number_first=*/true));
        ASSIGN_OR_RETURN(const ConstTensorView t, Product(c, x, one_minus));
        ASSIGN_OR_RETURN(const ConstTensorView u, WithNumber(c, BinaryOp::kAdd, t, 1.0, x.dtype));
        return Product(c, s, u);
      });
}

absl::StatusOr<DeviceTensor> GeluBackward(Context& ctx) {
  // The module kernels' gelu derivative, in float32 or float64.
  const DType compute = ctx.out_dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  ASSIGN_OR_RETURN(const ConstTensorView dy, ctx.Operand("grad_output", compute));
  ASSIGN_OR_RETURN(const ConstTensorView x, ctx.Operand("self", compute));
  ASSIGN_OR_RETURN(const ConstTensorView dy_full, ctx.Broadcast(dy, ctx.out_shape));
  ASSIGN_OR_RETURN(const ConstTensorView x_full, ctx.Broadcast(x, ctx.out_shape));
  const Shape& shape = ctx.out_shape;
  const bool tanh = ctx.args().String("approximate") == "tanh";
  ASSIGN_OR_RETURN(TensorView dx, ctx.Temporary(compute, shape));
  RETURN_IF_ERROR(ctx.backend.ActivateBackward(tanh ? Activation::kGeluTanh : Activation::kGelu,
                                               x_full, dy_full, dx));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Cast(dx, out.View()));
  return out;
}

absl::StatusOr<DeviceTensor> ThresholdBackward(Context& ctx) {
  const DType compute = ComputeDType(ctx);
  ASSIGN_OR_RETURN(const ConstTensorView grad, ctx.Operand("grad_output", compute));
  ASSIGN_OR_RETURN(const ConstTensorView x, ctx.Operand("self", compute));
  ASSIGN_OR_RETURN(const ConstTensorView mask,
                   WithNumber(ctx, BinaryOp::kGt, x, ctx.args().Float("threshold"), DType::kBool));
  ASSIGN_OR_RETURN(const ConstTensorView zero, ctx.Number(0.0, compute));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Where(mask, grad, zero, out.View()));
  return out;
}

}  // namespace

void AddPointwiseKernels(LocalTable& t) {
  t["aten::neg"] = UnaryKernel<UnaryOp::kNeg>;
  t["aten::abs"] = UnaryKernel<UnaryOp::kAbs>;
  t["aten::sign"] = UnaryKernel<UnaryOp::kSign>;
  t["aten::exp"] = UnaryKernel<UnaryOp::kExp>;
  t["aten::expm1"] = UnaryKernel<UnaryOp::kExpm1>;
  t["aten::log"] = UnaryKernel<UnaryOp::kLog>;
  t["aten::log1p"] = UnaryKernel<UnaryOp::kLog1p>;
  t["aten::log2"] = UnaryKernel<UnaryOp::kLog2>;
  t["aten::sqrt"] = UnaryKernel<UnaryOp::kSqrt>;
  t["aten::rsqrt"] = UnaryKernel<UnaryOp::kRsqrt>;
  t["aten::reciprocal"] = UnaryKernel<UnaryOp::kReciprocal>;
  t["aten::sin"] = UnaryKernel<UnaryOp::kSin>;
  t["aten::cos"] = UnaryKernel<UnaryOp::kCos>;
  t["aten::tanh"] = UnaryKernel<UnaryOp::kTanh>;
  t["aten::sigmoid"] = UnaryKernel<UnaryOp::kSigmoid>;
  t["aten::silu"] = UnaryKernel<UnaryOp::kSilu>;
  t["aten::relu"] = UnaryKernel<UnaryOp::kRelu>;
  t["aten::gelu"] = GeluKernel;
  t["aten::erf"] = UnaryKernel<UnaryOp::kErf>;
  t["aten::floor"] = UnaryKernel<UnaryOp::kFloor>;
  t["aten::ceil"] = UnaryKernel<UnaryOp::kCeil>;
  t["aten::round"] = UnaryKernel<UnaryOp::kRound>;
  t["aten::trunc"] = UnaryKernel<UnaryOp::kTrunc>;
  t["aten::logical_not"] = UnaryKernel<UnaryOp::kLogicalNot>;
  t["aten::isnan"] = UnaryKernel<UnaryOp::kIsNan>;
  t["aten::isinf"] = UnaryKernel<UnaryOp::kIsInf>;
  t["aten::isfinite"] = UnaryKernel<UnaryOp::kIsFinite>;
  t["aten::bitwise_not"] = UnaryKernel<UnaryOp::kBitwiseNot>;
  t["aten::clone"] = CopyKernel;
  t["aten::alias"] = CopyKernel;
  t["aten::contiguous"] = CopyKernel;
  t["aten::detach"] = CopyKernel;
  t["aten::add.Tensor"] = t["aten::add.Scalar"] = BinaryKernel<BinaryOp::kAdd>;
  t["aten::sub.Tensor"] = t["aten::sub.Scalar"] = BinaryKernel<BinaryOp::kSub>;
  t["aten::rsub.Tensor"] = t["aten::rsub.Scalar"] = BinaryKernel<BinaryOp::kSub, true>;
  t["aten::mul.Tensor"] = t["aten::mul.Scalar"] = BinaryKernel<BinaryOp::kMul>;
  t["aten::div.Tensor"] = t["aten::div.Scalar"] = BinaryKernel<BinaryOp::kDiv>;
  t["aten::div.Tensor_mode"] = DivModeKernel;
  t["aten::pow.Tensor_Scalar"] = t["aten::pow.Tensor_Tensor"] = t["aten::pow.Scalar"] =
      BinaryKernel<BinaryOp::kPow>;
  t["aten::maximum"] = BinaryKernel<BinaryOp::kMaximum>;
  t["aten::minimum"] = BinaryKernel<BinaryOp::kMinimum>;
  t["aten::remainder.Tensor"] = t["aten::remainder.Scalar"] = BinaryKernel<BinaryOp::kRemainder>;
  t["aten::floor_divide"] = BinaryKernel<BinaryOp::kFloorDivide>;
  t["aten::logical_and"] = BinaryKernel<BinaryOp::kLogicalAnd>;
  t["aten::logical_or"] = BinaryKernel<BinaryOp::kLogicalOr>;
  t["aten::logical_xor"] = BinaryKernel<BinaryOp::kLogicalXor>;
  t["aten::bitwise_and.Tensor"] = t["aten::bitwise_and.Scalar"] = t["aten::__and__.Tensor"] =
      BinaryKernel<BinaryOp::kBitwiseAnd>;
  t["aten::bitwise_or.Tensor"] = t["aten::bitwise_or.Scalar"] = t["aten::__or__.Tensor"] =
      BinaryKernel<BinaryOp::kBitwiseOr>;
  t["aten::bitwise_xor.Tensor"] = t["aten::bitwise_xor.Scalar"] =
      BinaryKernel<BinaryOp::kBitwiseXor>;
  for (const char* overload : {"Tensor", "Scalar"}) {
    t[absl::StrCat("aten::eq.", overload)] = BinaryKernel<BinaryOp::kEq>;
    t[absl::StrCat("aten::ne.", overload)] = BinaryKernel<BinaryOp::kNe>;
    t[absl::StrCat("aten::lt.", overload)] = BinaryKernel<BinaryOp::kLt>;
    t[absl::StrCat("aten::le.", overload)] = BinaryKernel<BinaryOp::kLe>;
    t[absl::StrCat("aten::gt.", overload)] = BinaryKernel<BinaryOp::kGt>;
    t[absl::StrCat("aten::ge.", overload)] = BinaryKernel<BinaryOp::kGe>;
  }
  t["aten::clamp"] = t["aten::clamp_min"] = t["aten::clamp_max"] = ClampKernel;
  t["aten::tanh_backward"] = TanhBackward;
  t["aten::sigmoid_backward"] = SigmoidBackward;
  t["aten::silu_backward"] = SiluBackward;
  t["aten::gelu_backward"] = GeluBackward;
  t["aten::threshold_backward"] = ThresholdBackward;
}

}  // namespace tessera::kernels::aten
