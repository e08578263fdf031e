#include "core/sharding/op_call.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

constexpr OpKind kAllOpKinds[] = {OpKind::kMm,   OpKind::kMatmul,    OpKind::kAddmm, OpKind::kAdd,
                                  OpKind::kSub,  OpKind::kMul,       OpKind::kDiv,   OpKind::kRelu,
                                  OpKind::kGelu, OpKind::kTanh,      OpKind::kSum,   OpKind::kMean,
                                  OpKind::kMax,  OpKind::kTranspose, OpKind::kCast};

bool IsBinary(OpKind kind) {
  return kind == OpKind::kAdd || kind == OpKind::kSub || kind == OpKind::kMul ||
         kind == OpKind::kDiv;
}

absl::Status NeedFloating(OpKind kind, DType dtype) {
  if (IsFloatingPoint(dtype)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(OpKindName(kind), " needs a floating dtype; got ", DTypeName(dtype)));
}

// "[4, 6] and [5, 3]": the input shapes, for error messages.
std::string ShapesToString(absl::Span<const Shape> shapes) {
  return absl::StrJoin(shapes, " and ", [](std::string* out, const Shape& s) {
    absl::StrAppend(out, ShapeToString(s));
  });
}

// a[..., K] @ b[K, N] with b 2-D; `min_a_rank` is 2 for mm and addmm, 1 for matmul.
absl::StatusOr<Shape> MatmulShape(OpKind kind, const Shape& a, const Shape& b, int min_a_rank,
                                  int max_a_rank) {
  const int rank = static_cast<int>(a.size());
  if (rank < min_a_rank || rank > max_a_rank || b.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpKindName(kind), " of ", ShapeToString(a), " and ", ShapeToString(b), ": needs ",
        max_a_rank == 2 && min_a_rank == 2 ? "a 2-D first input" : "a first input of >= 1 dims",
        " and a 2-D second input"));
  }
  if (a.back() != b[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat(OpKindName(kind), " of ", ShapeToString(a), " and ", ShapeToString(b),
                     ": the inner sizes differ (", a.back(), " vs ", b[0], ")"));
  }
  Shape out(a.begin(), a.end() - 1);
  out.push_back(b[1]);
  return out;
}

// numpy broadcasting: align at the last dims; each pair of sizes equal or one of them 1.
absl::StatusOr<Shape> Broadcast(OpKind kind, const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t sa = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t sb = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (sa != sb && sa != 1 && sb != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(OpKindName(kind), " of ", ShapeToString(a), " and ", ShapeToString(b),
                       ": shapes do not broadcast (sizes ", sa, " and ", sb, " at dim ",
                       -1 - static_cast<int>(i), ")"));
    }
    out[rank - 1 - i] = sa == 1 ? sb : sa;
  }
  return out;
}

absl::StatusOr<OpOutput> ReductionOutput(const OpCall& op, const Shape& shape, DType dtype) {
  absl::StatusOr<std::vector<int>> dims = ReducedDims(op, static_cast<int>(shape.size()));
  if (!dims.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpKindName(op.kind), " of ", ShapeToString(shape), ": ", dims.status().message()));
  }
  if (op.kind == OpKind::kMean) {
    RETURN_IF_ERROR(NeedFloating(op.kind, dtype));
  }
  OpOutput out;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    const bool reduced = std::find(dims->begin(), dims->end(), d) != dims->end();
    if (!reduced) {
      out.shape.push_back(shape[d]);
    } else if (op.keepdim) {
      out.shape.push_back(1);
    }
  }
  // As torch.sum: bool and integer sums accumulate and return int64.
  out.dtype = op.kind == OpKind::kSum && !IsFloatingPoint(dtype) ? DType::kInt64 : dtype;
  return out;
}

// The number of inputs `op` takes, each shape valid, and one dtype for all.
absl::Status ValidateInputs(const OpCall& op, absl::Span<const Shape> shapes,
                            absl::Span<const DType> dtypes) {
  const absl::string_view name = OpKindName(op.kind);
  if (static_cast<int>(shapes.size()) != op.num_inputs() || dtypes.size() != shapes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " takes ", op.num_inputs(),
                                                   " inputs; got ", shapes.size(), " shapes and ",
                                                   dtypes.size(), " dtypes"));
  }
  for (const Shape& shape : shapes) {
    RETURN_IF_ERROR(ValidateShape(shape));
  }
  for (size_t i = 1; i < dtypes.size(); ++i) {
    if (dtypes[i] != dtypes[0]) {
      std::vector<absl::string_view> names;
      for (DType d : dtypes) names.push_back(DTypeName(d));
      return absl::InvalidArgumentError(
          absl::StrCat(name, " of ", ShapesToString(shapes), ": inputs have different dtypes (",
                       absl::StrJoin(names, ", "), "); cast them to one dtype first"));
    }
  }
  return absl::OkStatus();
}

// The product's shape of addmm(bias, a, b), which `bias` must broadcast to.
absl::StatusOr<Shape> AddmmShape(const Shape& bias, const Shape& a, const Shape& b) {
  ASSIGN_OR_RETURN(Shape shape, MatmulShape(OpKind::kAddmm, a, b, 2, 2));
  absl::StatusOr<Shape> with_bias = Broadcast(OpKind::kAddmm, bias, shape);
  if (bias.size() > 2 || !with_bias.ok() || *with_bias != shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "addmm: bias ", ShapeToString(bias), " does not broadcast to the product's shape ",
        ShapeToString(shape), " (of ", ShapeToString(a), " and ", ShapeToString(b), ")"));
  }
  return shape;
}

// `x` with dims op.dim0 and op.dim1 swapped.
absl::StatusOr<Shape> TransposeShape(const OpCall& op, const Shape& x) {
  const int rank = static_cast<int>(x.size());
  absl::StatusOr<int> d0 = NormalizeDim(op.dim0, rank);
  absl::StatusOr<int> d1 = NormalizeDim(op.dim1, rank);
  if (!d0.ok() || !d1.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("transpose of ", ShapeToString(x), ": dims ",
                                                   op.dim0, " and ", op.dim1, " must be in [",
                                                   -rank, ", ", rank - 1, "]"));
  }
  Shape shape = x;
  std::swap(shape[*d0], shape[*d1]);
  return shape;
}

}  // namespace

absl::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kMm:
      return "mm";
    case OpKind::kMatmul:
      return "matmul";
    case OpKind::kAddmm:
      return "addmm";
    case OpKind::kAdd:
      return "add";
    case OpKind::kSub:
      return "sub";
    case OpKind::kMul:
      return "mul";
    case OpKind::kDiv:
      return "div";
    case OpKind::kRelu:
      return "relu";
    case OpKind::kGelu:
      return "gelu";
    case OpKind::kTanh:
      return "tanh";
    case OpKind::kSum:
      return "sum";
    case OpKind::kMean:
      return "mean";
    case OpKind::kMax:
      return "max";
    case OpKind::kTranspose:
      return "transpose";
    case OpKind::kCast:
      return "cast";
  }
  return "unknown";
}

absl::StatusOr<OpKind> ParseOpKind(absl::string_view name) {
  std::vector<absl::string_view> names;
  for (OpKind kind : kAllOpKinds) {
    if (OpKindName(kind) == name) return kind;
    names.push_back(OpKindName(kind));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown op '", name, "'; expected one of ", absl::StrJoin(names, ", ")));
}

int OpCall::num_inputs() const {
  if (kind == OpKind::kAddmm) return 3;
  if (kind == OpKind::kMm || kind == OpKind::kMatmul || IsBinary(kind)) return 2;
  return 1;
}

absl::StatusOr<std::vector<int>> ReducedDims(const OpCall& op, int rank) {
  std::vector<int> out;
  if (op.dims.empty()) {
    for (int d = 0; d < rank; ++d) out.push_back(d);
    return out;
  }
  for (int dim : op.dims) {
    ASSIGN_OR_RETURN(int d, NormalizeDim(dim, rank));
    if (std::find(out.begin(), out.end(), d) != out.end()) {
      return absl::InvalidArgumentError(absl::StrCat("dim ", d, " appears more than once in dims [",
                                                     absl::StrJoin(op.dims, ", "), "]"));
    }
    out.push_back(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<OpOutput> InferOpOutput(const OpCall& op, absl::Span<const Shape> shapes,
                                       absl::Span<const DType> dtypes) {
  RETURN_IF_ERROR(ValidateInputs(op, shapes, dtypes));
  const DType dtype = dtypes[0];
  const Shape& x = shapes[0];
  OpOutput out{{}, dtype};
  switch (op.kind) {
    case OpKind::kMm:
    case OpKind::kMatmul: {
      RETURN_IF_ERROR(NeedFloating(op.kind, dtype));
      const bool mm = op.kind == OpKind::kMm;
      ASSIGN_OR_RETURN(out.shape, MatmulShape(op.kind, x, shapes[1], mm ? 2 : 1,
                                              mm ? 2 : std::max<int>(1, x.size())));
      return out;
    }
    case OpKind::kAddmm: {
      RETURN_IF_ERROR(NeedFloating(op.kind, dtype));
      ASSIGN_OR_RETURN(out.shape, AddmmShape(x, shapes[1], shapes[2]));
      return out;
    }
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kDiv: {
      if (op.kind == OpKind::kDiv) {
        RETURN_IF_ERROR(NeedFloating(op.kind, dtype));
      }
      if (op.kind == OpKind::kSub && dtype == DType::kBool) {
        return absl::InvalidArgumentError("sub is not defined on bool tensors");
      }
      ASSIGN_OR_RETURN(out.shape, Broadcast(op.kind, x, shapes[1]));
      return out;
    }
    case OpKind::kRelu:
      if (dtype == DType::kBool) {
        return absl::InvalidArgumentError("relu is not defined on bool tensors");
      }
      out.shape = x;
      return out;
    case OpKind::kGelu:
    case OpKind::kTanh:
      RETURN_IF_ERROR(NeedFloating(op.kind, dtype));
      out.shape = x;
      return out;
    case OpKind::kSum:
    case OpKind::kMean:
    case OpKind::kMax:
      return ReductionOutput(op, x, dtype);
    case OpKind::kTranspose: {
      ASSIGN_OR_RETURN(out.shape, TransposeShape(op, x));
      return out;
    }
    case OpKind::kCast:
      out.shape = x;
      out.dtype = op.dtype;
      return out;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown op kind ", static_cast<int>(op.kind)));
}

}  // namespace tessera
