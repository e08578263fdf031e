#include "kernels/backend.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/convert_value.h"
#include "kernels/host_element.h"
#include "kernels/view_checks.h"

namespace tessera::kernels {
namespace {

absl::Status CheckSameDType(absl::string_view op, DType a, DType b) {
  if (a == b) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, " needs operands of one dtype; got ", DTypeName(a), " and ", DTypeName(b)));
}

absl::Status CheckSameShape(absl::string_view op, const Shape& a, const Shape& b) {
  if (a == b) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, " needs tensors of one shape; got ",
                                                 ShapeToString(a), " and ", ShapeToString(b)));
}

absl::Status CheckFloating(absl::string_view op, DType dtype) {
  if (IsFloatingPoint(dtype)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, " needs a floating dtype (float32, float64, float16, bfloat16); got ", DTypeName(dtype)));
}

// CheckOperand for an optional operand: OK when absent.
template <typename View>
absl::Status CheckOptionalOperand(absl::string_view op, absl::string_view operand, const View* view,
                                  DType dtype, const Shape& shape) {
  if (view == nullptr) return absl::OkStatus();
  return CheckOperand(op, operand, *view, dtype, shape);
}

// The neural-network kernels take float32 and float64.
absl::Status NeedsFloat32Or64(absl::string_view op, DType dtype) {
  if (dtype == DType::kFloat32 || dtype == DType::kFloat64) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, " needs float32 or float64 tensors; got ", DTypeName(dtype)));
}

// OK iff `value` is finite and >= 0; errors name the operation and the parameter.
absl::Status CheckNonNegative(absl::string_view op, absl::string_view parameter, double value) {
  if (std::isfinite(value) && value >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, " ", parameter, " must be finite and >= 0; got ", value));
}

// The rows x cols split of a normalization's input, which must be floating with a nonempty
// last dim.
absl::Status CheckNormInput(absl::string_view op, const ConstTensorView& x, int64_t* rows,
                            int64_t* cols) {
  RETURN_IF_ERROR(CheckView(op, "x", x));
  RETURN_IF_ERROR(NeedsFloat32Or64(op, x.dtype));
  if (x.rank() < 1 || x.shape.back() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " normalizes over the last dim, which x of shape ", ShapeToString(x.shape),
                     x.rank() < 1 ? " does not have" : " has empty"));
  }
  *cols = x.shape.back();
  *rows = x.num_elements() / *cols;
  return absl::OkStatus();
}

// The [batch, seq, heads, head_dim] split of attention's q, which must be floating
// [B, S, H*D] with H dividing the last dim, every size fitting a BLAS int.
absl::Status CheckAttentionQuery(absl::string_view op, const ConstTensorView& q, int64_t heads,
                                 int64_t* head_dim) {
  RETURN_IF_ERROR(CheckView(op, "q", q));
  RETURN_IF_ERROR(NeedsFloat32Or64(op, q.dtype));
  if (q.rank() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(op, " needs q of shape [batch, seq, heads * ",
                                                   "head_dim]; got ", ShapeToString(q.shape)));
  }
  if (heads < 1 || q.shape[2] % heads != 0 || q.shape[2] / heads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " with ", heads, " heads needs q's last dim to be a positive multiple of ",
                     "them; q has shape ", ShapeToString(q.shape)));
  }
  for (int64_t size : {q.shape[1], q.shape[2]}) {
    if (size > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(op, " size ", size, " exceeds the BLAS limit ",
                                                     INT_MAX, " (q ", ShapeToString(q.shape), ")"));
    }
  }
  *head_dim = q.shape[2] / heads;
  return absl::OkStatus();
}

// The error of an op that bool tensors do not take.
absl::Status NotOnBool(absl::string_view op) {
  return absl::InvalidArgumentError(
      absl::StrCat(op, " is not defined on bool tensors (as in PyTorch)"));
}

// The bitwise ops take integers and bool.
absl::Status CheckIntegerOrBool(absl::string_view op, DType dtype) {
  if (!IsFloatingPoint(dtype)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, " needs an integer or bool dtype; got ", DTypeName(dtype)));
}

absl::Status CheckBinarySupported(BinaryOp op, DType dtype) {
  const absl::string_view name = BinaryOpName(op);
  switch (op) {
    case BinaryOp::kDiv:
      return CheckFloating("div (true division, as torch.div)", dtype);
    case BinaryOp::kSub:
    case BinaryOp::kPow:
    case BinaryOp::kRemainder:
    case BinaryOp::kFloorDivide:
      return dtype == DType::kBool ? NotOnBool(name) : absl::OkStatus();
    case BinaryOp::kBitwiseAnd:
    case BinaryOp::kBitwiseOr:
    case BinaryOp::kBitwiseXor:
      return CheckIntegerOrBool(name, dtype);
    default:
      return absl::OkStatus();
  }
}

absl::Status CheckUnarySupported(UnaryOp op, DType dtype) {
  const absl::string_view name = UnaryOpName(op);
  if (NeedsFloating(op)) return CheckFloating(name, dtype);
  switch (op) {
    case UnaryOp::kNeg:
    case UnaryOp::kSign:
    case UnaryOp::kRelu:
    case UnaryOp::kSquare:
    case UnaryOp::kFloor:
    case UnaryOp::kCeil:
    case UnaryOp::kRound:
    case UnaryOp::kTrunc:
      return dtype == DType::kBool ? NotOnBool(name) : absl::OkStatus();
    case UnaryOp::kBitwiseNot:
      return CheckIntegerOrBool(name, dtype);
    default:
      return absl::OkStatus();
  }
}

// x's shape split at dim d: the sizes before it, of it, and after it.
struct DimSplit {
  int64_t outer = 1, size = 0, inner = 1;
};
DimSplit SplitAtDim(const Shape& shape, int d) {
  DimSplit split;
  split.size = shape[d];
  for (int i = 0; i < d; ++i) split.outer *= shape[i];
  for (int i = d + 1; i < static_cast<int>(shape.size()); ++i) split.inner *= shape[i];
  return split;
}

// OK iff `out` is x's shape with dim d removed or kept as size 1.
absl::Status CheckReducedShape(absl::string_view op, const Shape& x, int d, const Shape& out) {
  Shape removed = x;
  removed.erase(removed.begin() + d);
  Shape kept = x;
  kept[d] = 1;
  if (out == removed || out == kept) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, " along dim ", d, " of shape ", ShapeToString(x), " gives ", ShapeToString(removed),
      " (or ", ShapeToString(kept), " keeping the dim), but out has shape ", ShapeToString(out)));
}

absl::string_view SoftmaxKindName(SoftmaxKind kind) {
  switch (kind) {
    case SoftmaxKind::kSoftmax:
      return "softmax";
    case SoftmaxKind::kLogSoftmax:
      return "log_softmax";
    case SoftmaxKind::kSafeSoftmax:
      return "_safe_softmax";
  }
  return "invalid";
}

}  // namespace

absl::string_view BinaryOpName(BinaryOp op) {
  static constexpr absl::string_view kNames[] = {
      "add",         "sub",        "mul",          "div",         "pow",        "maximum",
      "minimum",     "remainder",  "floor_divide", "eq",          "ne",         "lt",
      "le",          "gt",         "ge",           "logical_and", "logical_or", "logical_xor",
      "bitwise_and", "bitwise_or", "bitwise_xor"};
  static_assert(std::size(kNames) == kNumBinaryOps);
  const int i = static_cast<int>(op);
  return i >= 0 && i < kNumBinaryOps ? kNames[i] : "invalid";
}

absl::string_view UnaryOpName(UnaryOp op) {
  static constexpr absl::string_view kNames[] = {
      "neg",    "abs",         "sign",       "exp",   "expm1",    "log",        "log1p",   "log2",
      "sqrt",   "rsqrt",       "reciprocal", "sin",   "cos",      "tanh",       "sigmoid", "silu",
      "relu",   "gelu",        "gelu_tanh",  "erf",   "floor",    "ceil",       "round",   "trunc",
      "square", "logical_not", "isnan",      "isinf", "isfinite", "bitwise_not"};
  static_assert(std::size(kNames) == kNumUnaryOps);
  const int i = static_cast<int>(op);
  return i >= 0 && i < kNumUnaryOps ? kNames[i] : "invalid";
}

absl::string_view ActivationName(Activation f) { return UnaryOpName(UnaryOpOf(f)); }

absl::string_view DistributionName(Distribution d) {
  switch (d) {
    case Distribution::kUniform:
      return "uniform";
    case Distribution::kNormal:
      return "normal";
  }
  return "invalid";
}

absl::Status KernelBackend::Gemm(bool transpose_a, bool transpose_b, double alpha,
                                 const ConstTensorView& a, const ConstTensorView& b, double beta,
                                 const TensorView& c) {
  ASSIGN_OR_RETURN(const std::optional<GemmArgs> args,
                   CheckGemm(transpose_a, transpose_b, alpha, a, b, beta, c));
  if (!args.has_value()) return absl::OkStatus();
  return DoGemm(*args);
}

absl::Status KernelBackend::LinearProduct(const ConstTensorView& x, const ConstTensorView& w,
                                          const PreparedWeight* prepared, const TensorView& y) {
  ASSIGN_OR_RETURN(const std::optional<GemmArgs> args, CheckGemm(false, true, 1.0, x, w, 0.0, y));
  if (!args.has_value()) return absl::OkStatus();
  return DoLinearProduct(*args, prepared);
}

absl::StatusOr<std::shared_ptr<const PreparedWeight>> KernelBackend::PrepareLinearWeight(
    const ConstTensorView& w, int64_t rows) {
  RETURN_IF_ERROR(CheckView("prepare linear weight", "w", w));
  if (w.rank() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("a Linear weight is 2-D; got ", ShapeToString(w.shape)));
  }
  RETURN_IF_ERROR(CheckFloating("prepare linear weight", w.dtype));
  if (rows < 1 || rows > INT_MAX || w.shape[0] > INT_MAX || w.shape[1] > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("prepare linear weight for ", rows,
                                                   " rows of a weight ", ShapeToString(w.shape),
                                                   ": rows must be in [1, ", INT_MAX, "]"));
  }
  if (w.shape[0] == 0 || w.shape[1] == 0) return nullptr;
  return DoPrepareLinearWeight(w, rows);
}

absl::StatusOr<std::optional<KernelBackend::GemmArgs>> KernelBackend::CheckGemm(
    bool transpose_a, bool transpose_b, double alpha, const ConstTensorView& a,
    const ConstTensorView& b, double beta, const TensorView& c) {
  RETURN_IF_ERROR(CheckView("gemm", "a", a));
  RETURN_IF_ERROR(CheckView("gemm", "b", b));
  RETURN_IF_ERROR(CheckView("gemm", "c", c));
  if (a.rank() != 2 || b.rank() != 2 || c.rank() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm needs 2-D tensors; got a ", ShapeToString(a.shape), ", b ",
                     ShapeToString(b.shape), ", c ", ShapeToString(c.shape)));
  }
  if (a.dtype != b.dtype || a.dtype != c.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("gemm needs operands of one dtype; got a ",
                                                   DTypeName(a.dtype), ", b ", DTypeName(b.dtype),
                                                   ", c ", DTypeName(c.dtype)));
  }
  RETURN_IF_ERROR(CheckFloating("gemm", a.dtype));
  const int64_t m = transpose_a ? a.shape[1] : a.shape[0];
  const int64_t k = transpose_a ? a.shape[0] : a.shape[1];
  const int64_t kb = transpose_b ? b.shape[1] : b.shape[0];
  const int64_t n = transpose_b ? b.shape[0] : b.shape[1];
  if (k != kb || c.shape[0] != m || c.shape[1] != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm shapes do not match: op(a) is [", m, ", ", k, "] (a ",
                     ShapeToString(a.shape), transpose_a ? " transposed" : "", "), op(b) is [", kb,
                     ", ", n, "] (b ", ShapeToString(b.shape), transpose_b ? " transposed" : "",
                     "), c is ", ShapeToString(c.shape), "; expected c [", m, ", ", n, "]"));
  }
  for (int64_t size : {m, n, k, a.shape[1], b.shape[1]}) {
    if (size > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("gemm size ", size, " exceeds the BLAS limit ",
                                                     INT_MAX, " (a ", ShapeToString(a.shape),
                                                     ", b ", ShapeToString(b.shape), ")"));
    }
  }
  if (m == 0 || n == 0) return std::nullopt;
  GemmArgs args;
  args.transpose_a = transpose_a;
  args.transpose_b = transpose_b;
  args.m = static_cast<int>(m);
  args.n = static_cast<int>(n);
  args.k = static_cast<int>(k);
  args.lda = static_cast<int>(std::max<int64_t>(1, a.shape[1]));
  args.ldb = static_cast<int>(std::max<int64_t>(1, b.shape[1]));
  args.ldc = static_cast<int>(n);
  args.alpha = alpha;
  args.beta = beta;
  args.a = a.data;
  args.b = b.data;
  args.c = c.data;
  args.dtype = a.dtype;
  return args;
}

absl::Status KernelBackend::BiasAdd(const TensorView& x, const ConstTensorView& bias) {
  if (x.rank() < 1 || bias.rank() != 1 || bias.shape[0] != x.shape.back()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bias add needs a 1-D bias of the input's last size; got input ",
                     ShapeToString(x.shape), " and bias ", ShapeToString(bias.shape)));
  }
  return Binary(BinaryOp::kAdd, x, bias, x);
}

absl::Status KernelBackend::Binary(BinaryOp op, const ConstTensorView& a, const ConstTensorView& b,
                                   const TensorView& out) {
  const absl::string_view name = BinaryOpName(op);
  RETURN_IF_ERROR(CheckView(name, "a", a));
  RETURN_IF_ERROR(CheckView(name, "b", b));
  RETURN_IF_ERROR(CheckView(name, "out", out));
  const DType out_dtype = GivesBool(op) ? DType::kBool : a.dtype;
  if (a.dtype != b.dtype || out.dtype != out_dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " needs a and b of one dtype and out of ",
                     GivesBool(op) ? "bool" : "that dtype", "; got a ", DTypeName(a.dtype), ", b ",
                     DTypeName(b.dtype), ", out ", DTypeName(out.dtype)));
  }
  RETURN_IF_ERROR(CheckBinarySupported(op, a.dtype));
  ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(a.shape, b.shape));
  if (shape != out.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " of ", ShapeToString(a.shape), " and ", ShapeToString(b.shape), " gives ",
        ShapeToString(shape), ", but out has shape ", ShapeToString(out.shape)));
  }
  if (out.num_elements() == 0) return absl::OkStatus();
  return DoBinary(op, a.dtype, a.data, b.data, out.data,
                  MakeBroadcastLayout(a.shape, b.shape, out.shape));
}

absl::Status KernelBackend::Unary(UnaryOp op, const ConstTensorView& x, const TensorView& out) {
  const absl::string_view name = UnaryOpName(op);
  RETURN_IF_ERROR(CheckView(name, "input", x));
  RETURN_IF_ERROR(CheckUnarySupported(op, x.dtype));
  RETURN_IF_ERROR(
      CheckOperand(name, "output", out, GivesBool(op) ? DType::kBool : x.dtype, x.shape));
  if (x.num_elements() == 0) return absl::OkStatus();
  return DoUnary(op, x.dtype, x.data, out.data, x.num_elements());
}

absl::Status KernelBackend::Activate(Activation f, const ConstTensorView& x,
                                     const TensorView& out) {
  return Unary(UnaryOpOf(f), x, out);
}

absl::Status KernelBackend::Where(const ConstTensorView& cond, const ConstTensorView& a,
                                  const ConstTensorView& b, const TensorView& out) {
  constexpr absl::string_view kOp = "where";
  RETURN_IF_ERROR(CheckView(kOp, "condition", cond));
  RETURN_IF_ERROR(CheckView(kOp, "a", a));
  RETURN_IF_ERROR(CheckView(kOp, "b", b));
  RETURN_IF_ERROR(CheckView(kOp, "out", out));
  if (cond.dtype != DType::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat("where needs a bool condition; got ", DTypeName(cond.dtype)));
  }
  if (a.dtype != b.dtype || a.dtype != out.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("where needs a, b and out of one dtype; got a ",
                                                   DTypeName(a.dtype), ", b ", DTypeName(b.dtype),
                                                   ", out ", DTypeName(out.dtype)));
  }
  ASSIGN_OR_RETURN(const Shape values, BroadcastShapes(a.shape, b.shape));
  ASSIGN_OR_RETURN(const Shape shape, BroadcastShapes(cond.shape, values));
  if (shape != out.shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("where of condition ", ShapeToString(cond.shape), ", a ",
                     ShapeToString(a.shape), " and b ", ShapeToString(b.shape), " gives ",
                     ShapeToString(shape), ", but out has shape ", ShapeToString(out.shape)));
  }
  if (out.num_elements() == 0) return absl::OkStatus();
  return DoWhere(a.dtype, cond.data, a.data, b.data, out.data,
                 MakeBroadcastLayout3(cond.shape, a.shape, b.shape, out.shape));
}

absl::Status KernelBackend::ReduceAlongDim(ReduceOp op, const ConstTensorView& x, int64_t dim,
                                           const TensorView& out) {
  const absl::string_view name = ReduceOpName(op);
  RETURN_IF_ERROR(CheckView(name, "input", x));
  RETURN_IF_ERROR(CheckView(name, "output", out));
  RETURN_IF_ERROR(CheckSameDType(name, x.dtype, out.dtype));
  if (op == ReduceOp::kAvg) {
    RETURN_IF_ERROR(CheckFloating("mean", x.dtype));
  }
  ASSIGN_OR_RETURN(int d, NormalizeDim(dim, x.rank()));
  RETURN_IF_ERROR(CheckReducedShape(name, x.shape, d, out.shape));
  const DimSplit split = SplitAtDim(x.shape, d);
  if (out.num_elements() == 0) return absl::OkStatus();
  if (split.size == 0) {
    switch (op) {
      case ReduceOp::kSum:
        return Fill(out, 0.0);
      case ReduceOp::kProduct:
        return Fill(out, 1.0);
      case ReduceOp::kAvg:
        return Fill(out, std::numeric_limits<double>::quiet_NaN());
      case ReduceOp::kMax:
      case ReduceOp::kMin:
        return absl::InvalidArgumentError(absl::StrCat(ReduceOpName(op), " along dim ", d,
                                                       " of shape ", ShapeToString(x.shape),
                                                       ": the dim is empty and has no identity"));
    }
  }
  return DoReduceAlongDim(
      ReduceDimArgs{op, x.dtype, split.outer, split.size, split.inner, x.data, out.data});
}

absl::Status KernelBackend::ArgReduceAlongDim(bool is_max, const ConstTensorView& x, int64_t dim,
                                              const TensorView& out) {
  const absl::string_view name = is_max ? "argmax" : "argmin";
  RETURN_IF_ERROR(CheckView(name, "input", x));
  RETURN_IF_ERROR(CheckView(name, "output", out));
  if (out.dtype != DType::kInt64) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " output must be int64; got ", DTypeName(out.dtype)));
  }
  ASSIGN_OR_RETURN(int d, NormalizeDim(dim, x.rank()));
  RETURN_IF_ERROR(CheckReducedShape(name, x.shape, d, out.shape));
  const DimSplit split = SplitAtDim(x.shape, d);
  if (split.size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, " along dim ", d, " of shape ",
                                                   ShapeToString(x.shape), ": the dim is empty"));
  }
  if (out.num_elements() == 0) return absl::OkStatus();
  return DoArgReduceAlongDim(ReduceDimArgs{is_max ? ReduceOp::kMax : ReduceOp::kMin, x.dtype,
                                           split.outer, split.size, split.inner, x.data, out.data});
}

absl::Status KernelBackend::SortAlongDim(const ConstTensorView& x, int64_t dim, bool descending,
                                         const TensorView& values, const TensorView& indices) {
  constexpr absl::string_view kOp = "sort";
  RETURN_IF_ERROR(CheckView(kOp, "input", x));
  RETURN_IF_ERROR(CheckOperand(kOp, "values", values, x.dtype, x.shape));
  RETURN_IF_ERROR(CheckOperand(kOp, "indices", indices, DType::kInt64, x.shape));
  const Shape shape = x.rank() == 0 ? Shape{1} : x.shape;
  ASSIGN_OR_RETURN(int d, NormalizeDim(dim, static_cast<int>(shape.size())));
  const DimSplit split = SplitAtDim(shape, d);
  if (x.num_elements() == 0) return absl::OkStatus();
  return DoSortAlongDim(SortDimArgs{x.dtype, descending, split.outer, split.size, split.inner,
                                    x.data, values.data, indices.data});
}

absl::Status KernelBackend::ScanAlongDim(ReduceOp op, const ConstTensorView& x, int64_t dim,
                                         const TensorView& out) {
  if (op != ReduceOp::kSum && op != ReduceOp::kProduct) {
    return absl::InvalidArgumentError(
        absl::StrCat("a scan along a dim is a cumulative sum or product; got ", ReduceOpName(op)));
  }
  const absl::string_view name = op == ReduceOp::kSum ? "cumsum" : "cumprod";
  RETURN_IF_ERROR(CheckView(name, "input", x));
  if (x.dtype == DType::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " of a bool tensor: cast it to int64 first (torch promotes bool)"));
  }
  RETURN_IF_ERROR(CheckOperand(name, "output", out, x.dtype, x.shape));
  ASSIGN_OR_RETURN(int d, NormalizeDim(dim, x.rank()));
  const DimSplit split = SplitAtDim(x.shape, d);
  if (x.num_elements() == 0) return absl::OkStatus();
  return DoScanAlongDim(
      ReduceDimArgs{op, x.dtype, split.outer, split.size, split.inner, x.data, out.data});
}

absl::Status KernelBackend::SoftmaxAlongDim(SoftmaxKind kind, const ConstTensorView& x, int64_t dim,
                                            const TensorView& out) {
  const absl::string_view name = SoftmaxKindName(kind);
  RETURN_IF_ERROR(CheckView(name, "input", x));
  RETURN_IF_ERROR(CheckFloating(name, x.dtype));
  RETURN_IF_ERROR(CheckOperand(name, "output", out, x.dtype, x.shape));
  ASSIGN_OR_RETURN(int d, NormalizeDim(dim, x.rank()));
  const DimSplit split = SplitAtDim(x.shape, d);
  if (x.num_elements() == 0) return absl::OkStatus();
  return DoSoftmaxAlongDim(SoftmaxDimArgs{kind, x.dtype, split.outer, split.size, split.inner,
                                          x.data, nullptr, out.data});
}

absl::Status KernelBackend::SoftmaxBackward(SoftmaxKind kind, const ConstTensorView& y,
                                            const ConstTensorView& dy, int64_t dim,
                                            const TensorView& dx) {
  const std::string name = absl::StrCat(SoftmaxKindName(kind), " backward");
  RETURN_IF_ERROR(CheckView(name, "y", y));
  RETURN_IF_ERROR(CheckFloating(name, y.dtype));
  RETURN_IF_ERROR(CheckOperand(name, "dy", dy, y.dtype, y.shape));
  RETURN_IF_ERROR(CheckOperand(name, "dx", dx, y.dtype, y.shape));
  ASSIGN_OR_RETURN(int d, NormalizeDim(dim, y.rank()));
  const DimSplit split = SplitAtDim(y.shape, d);
  if (y.num_elements() == 0) return absl::OkStatus();
  return DoSoftmaxBackward(SoftmaxDimArgs{kind, y.dtype, split.outer, split.size, split.inner,
                                          y.data, dy.data, dx.data});
}

absl::Status KernelBackend::ReduceInto(ReduceOp op, const TensorView& acc,
                                       const ConstTensorView& in) {
  RETURN_IF_ERROR(CheckView("reduce", "accumulator", acc));
  RETURN_IF_ERROR(CheckView("reduce", "input", in));
  RETURN_IF_ERROR(CheckSameDType("reduce", acc.dtype, in.dtype));
  RETURN_IF_ERROR(CheckSameShape("reduce", acc.shape, in.shape));
  if (acc.num_elements() == 0) return absl::OkStatus();
  return DoReduceInto(op, acc.dtype, acc.data, in.data, acc.num_elements());
}

absl::Status KernelBackend::DivideInPlace(const TensorView& data, int64_t divisor) {
  RETURN_IF_ERROR(CheckView("divide", "data", data));
  if (divisor < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "divide of a ", DTypeName(data.dtype), " tensor of shape ", ShapeToString(data.shape),
        " by ", divisor, ": the divisor (a group size) must be positive"));
  }
  if (data.num_elements() == 0) return absl::OkStatus();
  return DoDivideInPlace(data.dtype, data.data, data.num_elements(), divisor);
}

absl::Status KernelBackend::Cast(const ConstTensorView& src, const TensorView& dst) {
  RETURN_IF_ERROR(CheckView("cast", "source", src));
  RETURN_IF_ERROR(CheckView("cast", "destination", dst));
  RETURN_IF_ERROR(CheckSameShape("cast", src.shape, dst.shape));
  if (src.num_elements() == 0) return absl::OkStatus();
  if (src.dtype == dst.dtype) return Copy(src, dst);
  return DoCast(src.dtype, src.data, dst.dtype, dst.data, src.num_elements());
}

absl::Status KernelBackend::Fill(const TensorView& out, double value) {
  RETURN_IF_ERROR(CheckView("fill", "output", out));
  if (out.num_elements() == 0) return absl::OkStatus();
  alignas(8) std::byte pattern[8];
  VisitDType(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = Store<T>(ConvertValue<ComputeType<T>>(value));
    std::memcpy(pattern, &v, sizeof(T));
  });
  return DoFill(out.data, out.num_elements(), pattern, DTypeSize(out.dtype));
}

absl::Status KernelBackend::RandomFill(Distribution dist, uint64_t seed,
                                       std::span<const int64_t> global_shape,
                                       std::span<const int64_t> offset, const TensorView& out) {
  return RandomFill(dist, seed, 0, global_shape, offset, out);
}

absl::Status KernelBackend::RandomFill(Distribution dist, uint64_t seed, uint64_t counter,
                                       std::span<const int64_t> global_shape,
                                       std::span<const int64_t> offset, const TensorView& out) {
  RETURN_IF_ERROR(CheckView("random fill", "output", out));
  RETURN_IF_ERROR(CheckFloating(absl::StrCat(DistributionName(dist), " random fill"), out.dtype));
  RETURN_IF_ERROR(ValidateShape(global_shape));
  if (global_shape.size() != out.shape.size() || offset.size() != out.shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "random fill of a shard of shape ", ShapeToString(out.shape), " at offset ",
        ShapeToString(offset), " of global shape ", ShapeToString(global_shape), ": ranks differ"));
  }
  for (size_t i = 0; i < global_shape.size(); ++i) {
    if (offset[i] < 0 || offset[i] + out.shape[i] > global_shape[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("random fill: shard of shape ", ShapeToString(out.shape), " at offset ",
                       ShapeToString(offset), " does not fit in global shape ",
                       ShapeToString(global_shape), " (dim ", i, ")"));
    }
  }
  if (out.num_elements() == 0) return absl::OkStatus();
  return DoRandomFill(RandomFillArgs{dist, seed, ContiguousStrides(global_shape),
                                     std::vector<int64_t>(offset.begin(), offset.end()), out,
                                     counter});
}

absl::Status KernelBackend::ActivateBackward(Activation f, const ConstTensorView& x,
                                             const ConstTensorView& dy, const TensorView& dx) {
  const std::string name = absl::StrCat(ActivationName(f), " backward");
  RETURN_IF_ERROR(CheckView(name, "x", x));
  RETURN_IF_ERROR(NeedsFloat32Or64(name, x.dtype));
  RETURN_IF_ERROR(CheckOperand(name, "dy", dy, x.dtype, x.shape));
  RETURN_IF_ERROR(CheckOperand(name, "dx", dx, x.dtype, x.shape));
  if (x.num_elements() == 0) return absl::OkStatus();
  return DoActivateBackward(f, x.dtype, x.data, dy.data, dx.data, x.num_elements());
}

absl::Status KernelBackend::LayerNorm(const ConstTensorView& x, const ConstTensorView* weight,
                                      const ConstTensorView* bias, double eps, const TensorView& y,
                                      const TensorView& mean, const TensorView& rstd) {
  constexpr absl::string_view kOp = "layer_norm";
  int64_t rows = 0, cols = 0;
  RETURN_IF_ERROR(CheckNormInput(kOp, x, &rows, &cols));
  RETURN_IF_ERROR(CheckOptionalOperand(kOp, "weight", weight, x.dtype, {cols}));
  RETURN_IF_ERROR(CheckOptionalOperand(kOp, "bias", bias, x.dtype, {cols}));
  RETURN_IF_ERROR(CheckNonNegative(kOp, "eps", eps));
  RETURN_IF_ERROR(CheckOperand(kOp, "y", y, x.dtype, x.shape));
  RETURN_IF_ERROR(CheckOperand(kOp, "mean", mean, DType::kFloat32, {rows}));
  RETURN_IF_ERROR(CheckOperand(kOp, "rstd", rstd, DType::kFloat32, {rows}));
  if (rows == 0) return absl::OkStatus();
  return DoLayerNorm(
      NormArgs{x.dtype, rows, cols, eps, x.data, weight != nullptr ? weight->data : nullptr,
               bias != nullptr ? bias->data : nullptr, y.data, mean.data, rstd.data});
}

absl::Status KernelBackend::LayerNormBackward(const ConstTensorView& dy, const ConstTensorView& x,
                                              const ConstTensorView* weight,
                                              const ConstTensorView& mean,
                                              const ConstTensorView& rstd, const TensorView& dx,
                                              const TensorView* dweight, const TensorView* dbias) {
  constexpr absl::string_view kOp = "layer_norm backward";
  int64_t rows = 0, cols = 0;
  RETURN_IF_ERROR(CheckNormInput(kOp, x, &rows, &cols));
  RETURN_IF_ERROR(CheckOperand(kOp, "dy", dy, x.dtype, x.shape));
  RETURN_IF_ERROR(CheckOptionalOperand(kOp, "weight", weight, x.dtype, {cols}));
  RETURN_IF_ERROR(CheckOperand(kOp, "mean", mean, DType::kFloat32, {rows}));
  RETURN_IF_ERROR(CheckOperand(kOp, "rstd", rstd, DType::kFloat32, {rows}));
  RETURN_IF_ERROR(CheckOperand(kOp, "dx", dx, x.dtype, x.shape));
  RETURN_IF_ERROR(CheckOptionalOperand(kOp, "dweight", dweight, x.dtype, {cols}));
  RETURN_IF_ERROR(CheckOptionalOperand(kOp, "dbias", dbias, x.dtype, {cols}));
  if (rows == 0) return absl::OkStatus();
  return DoLayerNormBackward(NormBackwardArgs{
      x.dtype, rows, cols, dy.data, x.data, weight != nullptr ? weight->data : nullptr, mean.data,
      rstd.data, dx.data, dweight != nullptr ? dweight->data : nullptr,
      dbias != nullptr ? dbias->data : nullptr});
}

absl::Status KernelBackend::RmsNorm(const ConstTensorView& x, const ConstTensorView* weight,
                                    double eps, const TensorView& y, const TensorView& rstd) {
  constexpr absl::string_view kOp = "rms_norm";
  int64_t rows = 0, cols = 0;
  RETURN_IF_ERROR(CheckNormInput(kOp, x, &rows, &cols));
  RETURN_IF_ERROR(CheckOptionalOperand(kOp, "weight", weight, x.dtype, {cols}));
  RETURN_IF_ERROR(CheckNonNegative(kOp, "eps", eps));
  RETURN_IF_ERROR(CheckOperand(kOp, "y", y, x.dtype, x.shape));
  RETURN_IF_ERROR(CheckOperand(kOp, "rstd", rstd, DType::kFloat32, {rows}));
  if (rows == 0) return absl::OkStatus();
  return DoRmsNorm(NormArgs{x.dtype, rows, cols, eps, x.data,
                            weight != nullptr ? weight->data : nullptr, nullptr, y.data, nullptr,
                            rstd.data});
}

absl::Status KernelBackend::RmsNormBackward(const ConstTensorView& dy, const ConstTensorView& x,
                                            const ConstTensorView* weight,
                                            const ConstTensorView& rstd, const TensorView& dx,
                                            const TensorView* dweight) {
  constexpr absl::string_view kOp = "rms_norm backward";
  int64_t rows = 0, cols = 0;
  RETURN_IF_ERROR(CheckNormInput(kOp, x, &rows, &cols));
  RETURN_IF_ERROR(CheckOperand(kOp, "dy", dy, x.dtype, x.shape));
  RETURN_IF_ERROR(CheckOptionalOperand(kOp, "weight", weight, x.dtype, {cols}));
  RETURN_IF_ERROR(CheckOperand(kOp, "rstd", rstd, DType::kFloat32, {rows}));
  RETURN_IF_ERROR(CheckOperand(kOp, "dx", dx, x.dtype, x.shape));
  RETURN_IF_ERROR(CheckOptionalOperand(kOp, "dweight", dweight, x.dtype, {cols}));
  if (rows == 0) return absl::OkStatus();
  return DoRmsNormBackward(NormBackwardArgs{
      x.dtype, rows, cols, dy.data, x.data, weight != nullptr ? weight->data : nullptr, nullptr,
      rstd.data, dx.data, dweight != nullptr ? dweight->data : nullptr, nullptr});
}

absl::Status KernelBackend::Embedding(const ConstTensorView& ids, const ConstTensorView& weight,
                                      int64_t row_offset, int64_t num_embeddings,
                                      const TensorView& out) {
  constexpr absl::string_view kOp = "embedding";
  RETURN_IF_ERROR(CheckOperand(kOp, "ids", ids, DType::kInt64, ids.shape));
  RETURN_IF_ERROR(CheckView(kOp, "weight", weight));
  RETURN_IF_ERROR(NeedsFloat32Or64(kOp, weight.dtype));
  if (weight.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, " needs a 2-D weight [rows, dim]; got weight ", ShapeToString(weight.shape)));
  }
  if (row_offset < 0 || num_embeddings < row_offset + weight.shape[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, " weight of ", weight.shape[0], " rows at row_offset ", row_offset,
                     " does not fit in num_embeddings ", num_embeddings));
  }
  Shape out_shape = ids.shape;
  out_shape.push_back(weight.shape[1]);
  RETURN_IF_ERROR(CheckOperand(kOp, "out", out, weight.dtype, out_shape));
  if (ids.num_elements() == 0) return absl::OkStatus();
  return DoEmbedding(EmbeddingArgs{weight.dtype, ids.num_elements(), weight.shape[0],
                                   weight.shape[1], row_offset, num_embeddings, ids.data,
                                   weight.data, out.data});
}

absl::Status KernelBackend::EmbeddingBackward(const ConstTensorView& ids, const ConstTensorView& dy,
                                              int64_t row_offset, const TensorView& dweight) {
  constexpr absl::string_view kOp = "embedding backward";
  RETURN_IF_ERROR(CheckOperand(kOp, "ids", ids, DType::kInt64, ids.shape));
  RETURN_IF_ERROR(CheckView(kOp, "dweight", dweight));
  RETURN_IF_ERROR(NeedsFloat32Or64(kOp, dweight.dtype));
  if (dweight.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, " needs a 2-D dweight [rows, dim]; got dweight ", ShapeToString(dweight.shape)));
  }
  if (row_offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, " row_offset must be >= 0; got ", row_offset));
  }
  Shape dy_shape = ids.shape;
  dy_shape.push_back(dweight.shape[1]);
  RETURN_IF_ERROR(CheckOperand(kOp, "dy", dy, dweight.dtype, dy_shape));
  if (dy.num_elements() == 0) return absl::OkStatus();
  return DoEmbeddingBackward(EmbeddingBackwardArgs{dweight.dtype, ids.num_elements(),
                                                   dweight.shape[0], dweight.shape[1], row_offset,
                                                   ids.data, dy.data, dweight.data});
}

absl::Status KernelBackend::Attention(const ConstTensorView& q, const ConstTensorView& k,
                                      const ConstTensorView& v, int64_t heads, bool causal,
                                      const TensorView& out, const TensorView& probs) {
  constexpr absl::string_view kOp = "attention";
  int64_t head_dim = 0;
  RETURN_IF_ERROR(CheckAttentionQuery(kOp, q, heads, &head_dim));
  RETURN_IF_ERROR(CheckOperand(kOp, "k", k, q.dtype, q.shape));
  RETURN_IF_ERROR(CheckOperand(kOp, "v", v, q.dtype, q.shape));
  RETURN_IF_ERROR(CheckOperand(kOp, "out", out, q.dtype, q.shape));
  const int64_t batch = q.shape[0], seq = q.shape[1];
  RETURN_IF_ERROR(CheckOperand(kOp, "probs", probs, DType::kFloat32, {batch, heads, seq, seq}));
  if (batch == 0 || seq == 0) return absl::OkStatus();
  return DoAttention(AttentionArgs{q.dtype, batch, seq, heads, head_dim, causal, q.data, k.data,
                                   v.data, out.data, probs.data});
}

absl::Status KernelBackend::AttentionBackward(const ConstTensorView& q, const ConstTensorView& k,
                                              const ConstTensorView& v,
                                              const ConstTensorView& probs,
                                              const ConstTensorView& dout, int64_t heads,
                                              const TensorView& dq, const TensorView& dk,
                                              const TensorView& dv) {
  constexpr absl::string_view kOp = "attention backward";
  int64_t head_dim = 0;
  RETURN_IF_ERROR(CheckAttentionQuery(kOp, q, heads, &head_dim));
  RETURN_IF_ERROR(CheckOperand(kOp, "k", k, q.dtype, q.shape));
  RETURN_IF_ERROR(CheckOperand(kOp, "v", v, q.dtype, q.shape));
  const int64_t batch = q.shape[0], seq = q.shape[1];
  RETURN_IF_ERROR(CheckOperand(kOp, "probs", probs, DType::kFloat32, {batch, heads, seq, seq}));
  RETURN_IF_ERROR(CheckOperand(kOp, "dout", dout, q.dtype, q.shape));
  RETURN_IF_ERROR(CheckOperand(kOp, "dq", dq, q.dtype, q.shape));
  RETURN_IF_ERROR(CheckOperand(kOp, "dk", dk, q.dtype, q.shape));
  RETURN_IF_ERROR(CheckOperand(kOp, "dv", dv, q.dtype, q.shape));
  if (batch == 0 || seq == 0) return absl::OkStatus();
  return DoAttentionBackward(AttentionBackwardArgs{q.dtype, batch, seq, heads, head_dim, q.data,
                                                   k.data, v.data, probs.data, dout.data, dq.data,
                                                   dk.data, dv.data});
}

absl::Status KernelBackend::SgdStep(const TensorView& param, const ConstTensorView& grad,
                                    const TensorView* momentum_buf, double lr, double momentum,
                                    double weight_decay, bool first_step) {
  constexpr absl::string_view kOp = "sgd step";
  RETURN_IF_ERROR(CheckView(kOp, "param", param));
  RETURN_IF_ERROR(NeedsFloat32Or64(kOp, param.dtype));
  RETURN_IF_ERROR(CheckOperand(kOp, "grad", grad, param.dtype, param.shape));
  RETURN_IF_ERROR(CheckNonNegative(kOp, "lr", lr));
  RETURN_IF_ERROR(CheckNonNegative(kOp, "momentum", momentum));
  RETURN_IF_ERROR(CheckNonNegative(kOp, "weight_decay", weight_decay));
  if (momentum != 0) {
    if (momentum_buf == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, " with momentum ", momentum, " needs a momentum buffer"));
    }
    RETURN_IF_ERROR(CheckOperand(kOp, "momentum buffer", *momentum_buf, param.dtype, param.shape));
  }
  if (param.num_elements() == 0) return absl::OkStatus();
  return DoSgdStep(SgdArgs{param.dtype, param.num_elements(), param.data, grad.data,
                           momentum != 0 ? momentum_buf->data : nullptr, lr, momentum, weight_decay,
                           first_step});
}

}  // namespace tessera::kernels
