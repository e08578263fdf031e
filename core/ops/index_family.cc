// The indexing ops: gather, scatter (a src, a value, or added), advanced indexing (index.Tensor)
// and index_put. The indexed dims are whole (Replicate) on self; the other dims keep their shards
// where the index (and src or values) are sharded alike, as DTensor's strategies; index tensors
// are Replicate but where a rule says otherwise, and all-Replicate is always a choice.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/advanced_index.h"
#include "core/ops/op_meta.h"
#include "core/ops/op_registry.h"
#include "core/status_macros.h"

namespace tessera::ops {
namespace {

enum class Kind { kGather, kScatter, kScatterValue, kScatterAdd, kIndex, kIndexPut };

struct IndexEntry {
  const char* schema;
  Kind kind;
  const char* implementation;
  const char* derivative;
  const char* strategy_text;
};

const std::vector<IndexEntry>& Entries() {
  static const auto* const entries = new std::vector<IndexEntry>{
      {"gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor",
       Kind::kGather, "kernel gather", "scatter_add(zeros_like(self), dim, index, grad)",
       "R; index S(dim) -> S(dim); self and index S(d) alike (d != dim, equal sizes) -> S(d); "
       "P(any) on self passes"},
      {"scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor", Kind::kScatter,
       "kernel scatter (into a copy of self)",
       "scatter.value(grad, dim, index, 0); gather(grad, dim, index)",
       "R; self, index and src S(d) alike (d != dim, equal sizes) -> S(d)"},
      {"scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor",
       Kind::kScatterValue, "kernel scatter (of a filled src, into a copy of self)",
       "scatter.value(grad, dim, index, 0)",
       "R; self and index S(d) alike (d != dim, equal sizes) -> S(d)"},
      {"scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor", Kind::kScatterAdd,
       "kernel scatter (added, into a copy of self)", "grad; gather(grad, dim, index)",
       "R; self, index and src S(d) alike (d != dim, equal sizes) -> S(d); P(sum|avg) on self "
       "and src"},
      {"index.Tensor(Tensor self, Tensor?[] indices) -> Tensor", Kind::kIndex,
       "kernel index_select (of self's indexed dims, permuted first where they are not adjacent, "
       "by the indices wrapped and combined into one)",
       "index_put(zeros_like(self), indices, grad, True)",
       "R; self S(d) on a dim not indexed -> S(its result dim); the index tensors S alike "
       "(pointwise, broadcast) -> S(in the index shape); P(any) on self passes"},
      {"index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor",
       Kind::kIndexPut,
       "kernel scatter (into a copy of self, along its indexed dims combined into one)",
       "accumulate ? grad : index_put(grad, indices, zeros_like(values)); "
       "index.Tensor(grad, indices)",
       "R; self S(d) on a dim not indexed with values S on its dim (R where they broadcast) -> "
       "S(d); accumulate: P(sum|avg) on self and values"},
  };
  return *entries;
}

Kind KindOf(const CallContext& call) { return Entries()[call.op.entry].kind; }

bool HasSrc(Kind kind) { return kind == Kind::kScatter || kind == Kind::kScatterAdd; }

// A size as the indexing kernels see it: a 0-dim tensor as 1-dim.
int64_t SizeAt(const Shape& shape, int d) { return shape.empty() ? 1 : shape[d]; }
int RankOf(const Shape& shape) { return std::max(static_cast<int>(shape.size()), 1); }

// index fits `other` (named `name`): one rank, and no larger on any dim (but `dim` with
// `except_dim`), as torch's gather and scatter shape checks.
absl::Status CheckFits(const CallContext& call, const TensorMeta& index, absl::string_view name,
                       const TensorMeta& other, int dim, bool except_dim) {
  if (RankOf(index.shape) != RankOf(other.shape)) {
    return ArgError(
        call, "index",
        absl::StrCat("of shape ", ShapeToString(index.shape), " must have as many dims as ", name,
                     " (", ShapeToString(other.shape), ")"));
  }
  for (int d = 0; d < RankOf(index.shape); ++d) {
    if ((d != dim || !except_dim) && SizeAt(index.shape, d) > SizeAt(other.shape, d)) {
      return ArgError(call, "index",
                      absl::StrCat("of shape ", ShapeToString(index.shape), " is larger than ",
                                   name, " (", ShapeToString(other.shape), ") on dim ", d));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<OutputMeta> GatherScatterMeta(const CallContext& call) {
  const Kind kind = KindOf(call);
  ASSIGN_OR_RETURN(const TensorMeta self, InputTensor(call, "self"));
  ASSIGN_OR_RETURN(const TensorMeta index, InputTensor(call, "index"));
  ASSIGN_OR_RETURN(const int dim,
                   CallDim(call, "dim", call.args.Int("dim"), static_cast<int>(self.shape.size())));
  std::optional<TensorMeta> src;
  if (HasSrc(kind)) {
    ASSIGN_OR_RETURN(src, InputTensor(call, "src"));
    if (src->dtype != self.dtype) {
      return ArgError(call, "src",
                      absl::StrCat("must have self's dtype ", DTypeName(self.dtype), ", not ",
                                   DTypeName(src->dtype)));
    }
  }
  // As torch, an empty index is not checked further.
  if (NumElements(index.shape) > 0) {
    if (index.dtype != DType::kInt64) {
      return ArgError(call, "index", absl::StrCat("must be int64, not ", DTypeName(index.dtype)));
    }
    RETURN_IF_ERROR(CheckFits(call, index, "self", self, dim, /*except_dim=*/true));
    if (src.has_value()) RETURN_IF_ERROR(CheckFits(call, index, "src", *src, dim, false));
  }
  if (kind == Kind::kGather) return OutputMeta{index.shape, self.dtype};
  return OutputMeta{self.shape, self.dtype};
}

// The index tensors of a Tensor?[] `indices` argument: each entry's input (-1 for None).
const std::vector<int>& IndexInputs(const CallContext& call) {
  return call.args.Tensors("indices");
}

absl::StatusOr<AdvancedIndex> AdvancedIndexOf(const CallContext& call, const TensorMeta& self) {
  const std::vector<int>& inputs = IndexInputs(call);
  std::vector<std::optional<Shape>> shapes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] < 0) {
      shapes.push_back(std::nullopt);
      continue;
    }
    const TensorMeta& t = call.inputs[inputs[i]];
    if (t.dtype == DType::kBool || t.dtype == DType::kUInt8) {
      return ArgError(call, "indices",
                      absl::StrCat("entry ", i, " is a ", DTypeName(t.dtype),
                                   " mask: the result's shape would depend on its values, which "
                                   "Tessera does not take; use masked_fill.Scalar or where.self "
                                   "to write or keep by a mask"));
    }
    if (t.dtype != DType::kInt64 && t.dtype != DType::kInt32) {
      return ArgError(
          call, "indices",
          absl::StrCat("entry ", i, " must be int64 or int32, not ", DTypeName(t.dtype)));
    }
    shapes.push_back(t.shape);
  }
  absl::StatusOr<AdvancedIndex> a = DescribeAdvancedIndex(self.shape, shapes);
  if (!a.ok()) return ArgError(call, "indices", a.status().message());
  return a;
}

absl::StatusOr<OutputMeta> IndexMeta(const CallContext& call) {
  ASSIGN_OR_RETURN(const TensorMeta self, InputTensor(call, "self"));
  ASSIGN_OR_RETURN(const AdvancedIndex a, AdvancedIndexOf(call, self));
  if (KindOf(call) == Kind::kIndex) return OutputMeta{a.result, self.dtype};
  ASSIGN_OR_RETURN(const TensorMeta values, InputTensor(call, "values"));
  if (values.dtype != self.dtype) {
    return ArgError(call, "values",
                    absl::StrCat("must have self's dtype ", DTypeName(self.dtype), ", not ",
                                 DTypeName(values.dtype)));
  }
  const std::vector<Shape> shapes = {a.result, values.shape};
  absl::StatusOr<Shape> b = BroadcastShapes(call.op.name(), shapes);
  if (!b.ok() || *b != a.result) {
    return ArgError(
        call, "values",
        absl::StrCat("of shape ", ShapeToString(values.shape),
                     " does not broadcast to the indexed shape ", ShapeToString(a.result)));
  }
  return OutputMeta{self.shape, self.dtype};
}

absl::StatusOr<OutputMeta> IndexFamilyMeta(const CallContext& call) {
  const Kind kind = KindOf(call);
  if (kind == Kind::kIndex || kind == Kind::kIndexPut) return IndexMeta(call);
  return GatherScatterMeta(call);
}

// One per-dim choice: `placement` on the inputs in `placed` (by input index), Replicate elsewhere.
DimChoice Choice(int num_inputs, std::vector<std::pair<int, Placement>> placed, Placement out) {
  DimChoice c{std::vector<Placement>(num_inputs, Placement::Replicate()), out};
  for (const auto& [input, p] : placed) c.inputs[input] = p;
  return c;
}

DimChoice AllReplicate(int num_inputs) { return Choice(num_inputs, {}, Placement::Replicate()); }

// Whether dim d exists with one size on every one of `shapes`.
bool SameSizeAt(std::initializer_list<const Shape*> shapes, int d) {
  const Shape& first = **shapes.begin();
  for (const Shape* s : shapes) {
    if (static_cast<int>(s->size()) <= d || (*s)[d] != first[d]) return false;
  }
  return true;
}

absl::StatusOr<StrategyCandidates> GatherScatterStrategies(const CallContext& call) {
  const Kind kind = KindOf(call);
  const int n = static_cast<int>(call.inputs.size());
  const int self = call.args.Tensor("self"), index = call.args.Tensor("index");
  const Shape& self_shape = call.inputs[self].shape;
  const Shape& index_shape = call.inputs[index].shape;
  ASSIGN_OR_RETURN(const int dim,
                   CallDim(call, "dim", call.args.Int("dim"), static_cast<int>(self_shape.size())));
  const int src = HasSrc(kind) ? call.args.Tensor("src") : -1;
  StrategyCandidates c;
  c.per_dim.push_back(AllReplicate(n));
  // A dim other than `dim` may stay sharded where every operand has it with one size: each
  // rank's index and src then cover the same positions of it as its block of self.
  for (int d = 0; d < static_cast<int>(self_shape.size()); ++d) {
    if (d == dim) continue;
    const bool same = src < 0 ? SameSizeAt({&self_shape, &index_shape}, d)
                              : SameSizeAt({&self_shape, &index_shape, &call.inputs[src].shape}, d);
    if (!same) continue;
    std::vector<std::pair<int, Placement>> placed = {{self, Placement::Shard(d)},
                                                     {index, Placement::Shard(d)}};
    if (src >= 0) placed.push_back({src, Placement::Shard(d)});
    c.per_dim.push_back(Choice(n, placed, Placement::Shard(d)));
  }
  if (kind == Kind::kGather) {
    // A gather reads self at the index's values only along `dim`: the index may be split there.
    if (dim < static_cast<int>(index_shape.size())) {
      c.per_dim.push_back(Choice(n, {{index, Placement::Shard(dim)}}, Placement::Shard(dim)));
    }
    // A selection of values commutes with any reduction of them.
    for (ReduceOp op : kAllReduceOps) {
      c.per_dim.push_back(Choice(n, {{self, Placement::Partial(op)}}, Placement::Partial(op)));
    }
  }
  if (kind == Kind::kScatterAdd) {
    // self + the sum of src's elements at each index is linear in (self, src) together.
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      c.per_dim.push_back(Choice(n, {{self, Placement::Partial(op)}, {src, Placement::Partial(op)}},
                                 Placement::Partial(op)));
    }
  }
  return c;
}

absl::StatusOr<StrategyCandidates> IndexStrategies(const CallContext& call) {
  const Kind kind = KindOf(call);
  const int n = static_cast<int>(call.inputs.size());
  const int self = call.args.Tensor("self");
  const TensorMeta& self_meta = call.inputs[self];
  ASSIGN_OR_RETURN(const AdvancedIndex a, AdvancedIndexOf(call, self_meta));
  StrategyCandidates c;
  c.per_dim.push_back(AllReplicate(n));
  const int values = kind == Kind::kIndexPut ? call.args.Tensor("values") : -1;
  // A dim of self that is not indexed is copied whole into the result: it may stay sharded (with
  // the values of index_put sharded on their dim aligned with it, or Replicate where they
  // broadcast along it).
  for (int d = 0; d < static_cast<int>(self_meta.shape.size()); ++d) {
    const int r = a.result_dim[d];
    if (r < 0) continue;
    if (kind == Kind::kIndex) {
      c.per_dim.push_back(Choice(n, {{self, Placement::Shard(d)}}, Placement::Shard(r)));
      continue;
    }
    const Shape& v = call.inputs[values].shape;
    const int q = r - (static_cast<int>(a.result.size()) - static_cast<int>(v.size()));
    std::vector<std::pair<int, Placement>> placed = {{self, Placement::Shard(d)}};
    if (q >= 0 && v[q] != 1) placed.push_back({values, Placement::Shard(q)});
    c.per_dim.push_back(Choice(n, placed, Placement::Shard(d)));
  }
  if (kind == Kind::kIndex) {
    // The index tensors, sharded alike as pointwise operands of their broadcast, give the result's
    // index dims sharded (self whole).
    std::vector<Operand> operands;
    for (int i : IndexInputs(call)) {
      if (i >= 0) operands.push_back({i, call.inputs[i].shape, {}});
    }
    for (DimChoice& choice : ShardAlignedChoices(operands, a.index_shape, n)) {
      if (!choice.output.is_shard()) continue;
      choice.output = Placement::Shard(a.insert_at + choice.output.dim);
      c.per_dim.push_back(std::move(choice));
    }
    for (ReduceOp op : kAllReduceOps) {
      c.per_dim.push_back(Choice(n, {{self, Placement::Partial(op)}}, Placement::Partial(op)));
    }
  }
  if (kind == Kind::kIndexPut && call.args.Bool("accumulate")) {
    // self + the values added at the indices is linear in (self, values) together.
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      c.per_dim.push_back(Choice(n,
                                 {{self, Placement::Partial(op)}, {values, Placement::Partial(op)}},
                                 Placement::Partial(op)));
    }
  }
  return c;
}

absl::StatusOr<StrategyCandidates> IndexFamilyStrategies(const CallContext& call,
                                                         std::span<const DTensorSpec> specs,
                                                         const OutputMeta& out) {
  (void)specs;
  (void)out;
  const Kind kind = KindOf(call);
  if (kind == Kind::kIndex || kind == Kind::kIndexPut) return IndexStrategies(call);
  return GatherScatterStrategies(call);
}

}  // namespace

void RegisterIndexOps(OpRegistry& registry) {
  for (size_t i = 0; i < Entries().size(); ++i) {
    const IndexEntry& e = Entries()[i];
    OpDef& op = DefineOp(registry, e.schema, OpFamily::kTensor);
    op.entry = static_cast<int>(i);
    op.meta = IndexFamilyMeta;
    op.strategies = IndexFamilyStrategies;
    op.implementation = e.implementation;
    op.derivative = e.derivative;
    op.strategy_text = e.strategy_text;
  }
}

}  // namespace tessera::ops
