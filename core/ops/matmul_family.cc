// The matmul family (mm, bmm, matmul, addmm, linear), sharded by einsum-style rules as DTensor's
// gen_einsum_strategies: a dim kept in the output may be sharded on every operand that has it, a
// contracted dim sharded on both gives P(sum), and a Partial operand times Replicate ones stays
// Partial; an added bias follows the output.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/op_meta.h"
#include "core/ops/op_registry.h"
#include "core/status_macros.h"

namespace tessera::ops {
namespace {

// The labels of one operand's dims, with its input index and shape.
struct Labeled {
  int input;
  std::string labels;
  Shape shape;
};

// Every per-dim choice of the einsum `operands` -> `out`.
std::vector<DimChoice> EinsumChoices(const std::vector<Labeled>& operands, const std::string& out,
                                     int num_inputs) {
  std::vector<DimChoice> choices;
  const std::vector<Placement> replicate(num_inputs, Placement::Replicate());
  std::string contracted;
  for (const Labeled& o : operands) {
    for (char l : o.labels) {
      if (out.find(l) == std::string::npos && contracted.find(l) == std::string::npos) {
        contracted.push_back(l);
      }
    }
  }
  auto shard_on = [&](char l, DimChoice& c) {
    // A size-1 dim broadcasts where another operand's is larger.
    int64_t largest = 0;
    for (const Labeled& o : operands) {
      const size_t d = o.labels.find(l);
      if (d != std::string::npos) largest = std::max(largest, o.shape[d]);
    }
    bool any = false;
    for (const Labeled& o : operands) {
      const size_t d = o.labels.find(l);
      if (d == std::string::npos || (o.shape[d] == 1 && largest > 1)) continue;
      c.inputs[o.input] = Placement::Shard(static_cast<int>(d));
      any = true;
    }
    return any;
  };
  for (size_t d = 0; d < out.size(); ++d) {
    DimChoice c{replicate, Placement::Shard(static_cast<int>(d))};
    if (shard_on(out[d], c)) choices.push_back(std::move(c));
  }
  for (char l : contracted) {
    DimChoice c{replicate, Placement::Partial(ReduceOp::kSum)};
    if (shard_on(l, c)) choices.push_back(std::move(c));
  }
  choices.push_back({replicate, Placement::Replicate()});
  for (const Labeled& o : operands) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      DimChoice c{replicate, Placement::Partial(op)};
      c.inputs[o.input] = Placement::Partial(op);
      choices.push_back(std::move(c));
    }
  }
  return choices;
}

// The bias of addmm or linear follows the output on each mesh dim: its aligned dim where the
// output is sharded (Replicate where the bias broadcasts there), the output's Partial.
void AddBias(std::vector<DimChoice>& choices, int bias, const Shape& bias_shape,
             const Shape& out_shape) {
  const int offset = static_cast<int>(out_shape.size() - bias_shape.size());
  for (DimChoice& c : choices) {
    Placement p = Placement::Replicate();
    if (c.output.is_partial()) {
      p = c.output;
    } else if (c.output.is_shard()) {
      const int d = c.output.dim - offset;
      if (d >= 0 && (bias_shape[d] != 1 || out_shape[c.output.dim] == 1)) p = Placement::Shard(d);
    }
    c.inputs[bias] = p;
  }
}

std::string Letters(int n, char first) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(first + i));
  return s;
}

absl::Status CheckFloating(const CallContext& call, const TensorMeta& a, const TensorMeta& b) {
  if (a.dtype != b.dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(call.op.name(), ": expected operands of one dtype, got ", DTypeName(a.dtype),
                     " and ", DTypeName(b.dtype)));
  }
  if (!IsFloating(a.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        call.op.name(), " takes floating tensors (the GEMM), not ", DTypeName(a.dtype)));
  }
  return absl::OkStatus();
}

absl::Status ShapeError(const CallContext& call, const TensorMeta& a, const TensorMeta& b,
                        absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(call.op.name(), ": shapes ",
                                                 ShapeToString(a.shape), " and ",
                                                 ShapeToString(b.shape), " ", why));
}

// The einsum of torch.matmul on these shapes: operands' labels and the output's (batch dims
// broadcast from the right, a 1-D operand without its M or N).
struct MatmulEinsum {
  std::string a, b, out;
  Shape out_shape;
};

absl::StatusOr<MatmulEinsum> MatmulLabels(const CallContext& call, const TensorMeta& a,
                                          const TensorMeta& b) {
  const int ra = static_cast<int>(a.shape.size());
  const int rb = static_cast<int>(b.shape.size());
  if (ra == 0 || rb == 0) return ShapeError(call, a, b, "include a 0-dim tensor");
  const int64_t ka = a.shape.back();
  const int64_t kb = rb == 1 ? b.shape[0] : b.shape[rb - 2];
  if (ka != kb)
    return ShapeError(call, a, b, absl::StrCat("cannot be multiplied (", ka, " != ", kb, ")"));
  const int batch_a = std::max(ra - 2, 0);
  const int batch_b = std::max(rb - 2, 0);
  const int batch = std::max(batch_a, batch_b);
  Shape batch_shape(batch, 1);
  const std::string labels = Letters(batch, 'a');
  MatmulEinsum e;
  for (int i = 0; i < batch_a; ++i) e.a.push_back(labels[batch - batch_a + i]);
  for (int i = 0; i < batch_b; ++i) e.b.push_back(labels[batch - batch_b + i]);
  std::vector<Shape> batches = {Shape(a.shape.begin(), a.shape.begin() + batch_a),
                                Shape(b.shape.begin(), b.shape.begin() + batch_b)};
  ASSIGN_OR_RETURN(batch_shape, BroadcastShapes(call.op.name(), batches));
  e.out = labels;
  e.out_shape = batch_shape;
  if (ra >= 2) {
    e.a.push_back('M');
    e.out.push_back('M');
    e.out_shape.push_back(a.shape[ra - 2]);
  }
  e.a.push_back('K');
  e.b.push_back('K');
  if (rb >= 2) {
    e.b.push_back('N');
    e.out.push_back('N');
    e.out_shape.push_back(b.shape.back());
  }
  return e;
}

// mm, bmm, matmul, addmm, linear: which of them.
enum class Kind { kMm, kBmm, kMatmul, kAddmm, kLinear };

struct MatmulEntry {
  const char* schema;
  Kind kind;
  const char* a;  // the argument names of the product's operands and the bias
  const char* b;
  const char* bias;
  const char* implementation;
  const char* derivative;
};

const std::vector<MatmulEntry>& Entries() {
  static const auto* const entries = new std::vector<MatmulEntry>{
      {"mm(Tensor self, Tensor mat2) -> Tensor", Kind::kMm, "self", "mat2", "", "kernel gemm",
       "mm(grad, t(mat2)); mm(t(self), grad)"},
      {"bmm(Tensor self, Tensor mat2) -> Tensor", Kind::kBmm, "self", "mat2", "",
       "kernel gemm per batch",
       "bmm(grad, transpose(mat2, 1, 2)); bmm(transpose(self, 1, 2), grad)"},
      {"matmul(Tensor self, Tensor other) -> Tensor", Kind::kMatmul, "self", "other", "",
       "kernel gemm per batch (broadcast)", "matmul(grad, other^T); matmul(self^T, grad)"},
      {"addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
       Kind::kAddmm, "mat1", "mat2", "self", "kernel gemm with C = beta * self",
       "mul(grad, beta); mul(mm(grad, t(mat2)), alpha); mul(mm(t(mat1), grad), alpha)"},
      {"linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor", Kind::kLinear, "input",
       "weight", "bias", "decomposition: add(matmul(input, t(weight)), bias)",
       "matmul(grad, weight); mm(t(flatten(grad)), flatten(input)); sum(grad, batch dims)"},
  };
  return *entries;
}

// The einsum of a call, the bias's input (or -1) and shape.
struct CallEinsum {
  std::vector<Labeled> operands;
  std::string out;
  Shape out_shape;
  DType dtype;
  int bias = -1;
  Shape bias_shape;
};

absl::StatusOr<CallEinsum> EinsumOf(const CallContext& call) {
  const MatmulEntry& e = Entries()[call.op.entry];
  ASSIGN_OR_RETURN(const TensorMeta a, InputTensor(call, e.a));
  ASSIGN_OR_RETURN(TensorMeta b, InputTensor(call, e.b));
  RETURN_IF_ERROR(CheckFloating(call, a, b));
  const int ra = static_cast<int>(a.shape.size());
  const int rb = static_cast<int>(b.shape.size());
  if ((e.kind == Kind::kMm || e.kind == Kind::kAddmm) && (ra != 2 || rb != 2)) {
    return ShapeError(call, a, b, "must both be 2-D");
  }
  if (e.kind == Kind::kBmm && (ra != 3 || rb != 3 || a.shape[0] != b.shape[0])) {
    return ShapeError(call, a, b, "must both be 3-D with one batch size");
  }
  if (e.kind == Kind::kLinear && (rb != 2 || ra == 0)) {
    return ShapeError(call, a, b, "do not fit linear (weight [out, in], input [..., in])");
  }
  CallEinsum c;
  c.dtype = a.dtype;
  const int ia = call.args.Tensor(e.a);
  const int ib = call.args.Tensor(e.b);
  if (e.kind == Kind::kLinear) {
    if (a.shape.back() != b.shape[1]) {
      return ShapeError(
          call, a, b,
          absl::StrCat("cannot be multiplied (", a.shape.back(), " != ", b.shape[1], ")"));
    }
    const std::string batch = Letters(ra - 1, 'a');
    c.operands = {{ia, batch + "K", a.shape}, {ib, "NK", b.shape}};
    c.out = batch + "N";
    c.out_shape = Shape(a.shape.begin(), a.shape.end() - 1);
    c.out_shape.push_back(b.shape[0]);
  } else {
    ASSIGN_OR_RETURN(MatmulEinsum m, MatmulLabels(call, a, b));
    c.operands = {{ia, m.a, a.shape}, {ib, m.b, b.shape}};
    c.out = m.out;
    c.out_shape = m.out_shape;
  }
  if (*e.bias != '\0' && !call.args.IsNone(e.bias)) {
    ASSIGN_OR_RETURN(const TensorMeta bias, InputTensor(call, e.bias));
    std::vector<Shape> shapes = {bias.shape, c.out_shape};
    ASSIGN_OR_RETURN(const Shape broadcast, BroadcastShapes(call.op.name(), shapes));
    if (broadcast != c.out_shape || bias.dtype != c.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          call.op.name(), ": ", e.bias, " ", DTypeName(bias.dtype), ShapeToString(bias.shape),
          " does not broadcast to the product's ", DTypeName(c.dtype), ShapeToString(c.out_shape)));
    }
    c.bias = call.args.Tensor(e.bias);
    c.bias_shape = bias.shape;
  }
  return c;
}

absl::StatusOr<OutputMeta> MatmulMeta(const CallContext& call) {
  ASSIGN_OR_RETURN(const CallEinsum c, EinsumOf(call));
  return OutputMeta{c.out_shape, c.dtype};
}

absl::StatusOr<StrategyCandidates> MatmulStrategies(const CallContext& call,
                                                    std::span<const DTensorSpec> specs,
                                                    const OutputMeta& out) {
  (void)specs;
  ASSIGN_OR_RETURN(const CallEinsum c, EinsumOf(call));
  StrategyCandidates s;
  s.per_dim = EinsumChoices(c.operands, c.out, static_cast<int>(call.inputs.size()));
  if (c.bias >= 0) AddBias(s.per_dim, c.bias, c.bias_shape, out.shape);
  return s;
}

}  // namespace

void RegisterMatmulOps(OpRegistry& registry) {
  for (size_t i = 0; i < Entries().size(); ++i) {
    const MatmulEntry& e = Entries()[i];
    OpDef& op = DefineOp(registry, e.schema, OpFamily::kMatmul);
    op.entry = static_cast<int>(i);
    op.meta = MatmulMeta;
    op.strategies = MatmulStrategies;
    op.implementation = e.implementation;
    op.derivative = e.derivative;
    op.strategy_text =
        "einsum: a kept dim sharded on every operand having it; a contracted dim sharded on both "
        "gives P(sum); P(sum|avg) x R stays P; the bias follows the output";
  }
}

}  // namespace tessera::ops
