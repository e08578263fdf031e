// The tensor ops: joining, slicing, selecting, masking and copies. Each keeps the shards
// of the dims it does not touch and needs whole (Replicate) the dims it does, as DTensor's
// tensor-op strategies.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/op_meta.h"
#include "core/ops/op_registry.h"
#include "core/status_macros.h"

namespace tessera::ops {
namespace {

enum class Kind {
  kCat,
  kStack,
  kSlice,
  kSelect,
  kNarrow,
  kIndexSelect,
  kTril,
  kConstantPad,
  kWhere,
  kMaskedFill,
  kCopyTo,
  kEmbedding,
  kSplit,   // split.Tensor, split_with_sizes, chunk: pieces along dim
  kUnbind,  // unbind.int: each index of dim, the dim removed
  kDiff,    // a decomposition: the differences of neighbours along dim, n times
};

struct TensorEntry {
  const char* schema;
  Kind kind;
  const char* implementation;
  const char* derivative;
};

const std::vector<TensorEntry>& Entries() {
  static const auto* const entries = new std::vector<TensorEntry>{
      {"cat(Tensor[] tensors, int dim=0) -> Tensor", Kind::kCat, "kernel copy (strided)",
       "slice.Tensor(grad, dim, offset, offset + size) for each"},
      {"stack(Tensor[] tensors, int dim=0) -> Tensor", Kind::kStack, "kernel copy (strided)",
       "select.int(grad, dim, i) for each"},
      {"slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt "
       "step=1) -> Tensor(a)",
       Kind::kSlice, "kernel copy (strided)",
       "slice_backward(grad, self.shape, dim, start, end, step)"},
      {"select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)", Kind::kSelect,
       "kernel copy (strided)", "select_backward(grad, self.shape, dim, index)"},
      {"narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)", Kind::kNarrow,
       "decomposition: slice.Tensor(self, dim, start, start + length)",
       "slice_backward(grad, self.shape, dim, start, start + length, 1)"},
      {"index_select(Tensor self, int dim, Tensor index) -> Tensor", Kind::kIndexSelect,
       "kernel copy (rows)", "index_add(zeros_like(self), dim, index, grad)"},
      {"tril(Tensor self, SymInt diagonal=0) -> Tensor", Kind::kTril, "kernel where (mask)",
       "tril(grad, diagonal)"},
      {"triu(Tensor self, SymInt diagonal=0) -> Tensor", Kind::kTril, "kernel where (mask)",
       "triu(grad, diagonal)"},
      {"constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor", Kind::kConstantPad,
       "kernel fill value, then copy (strided) of the input's overlap",
       "constant_pad_nd(grad, the pads negated)"},
      {"where.self(Tensor condition, Tensor self, Tensor other) -> Tensor", Kind::kWhere,
       "kernel where", "where.self(condition, grad, 0); where.self(condition, 0, grad)"},
      {"masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor", Kind::kMaskedFill,
       "decomposition: where.self(mask, value, self)", "where.self(mask, 0, grad)"},
      {"_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? "
       "device=None, bool? pin_memory=None, bool non_blocking=False, MemoryFormat? "
       "memory_format=None) -> Tensor",
       Kind::kCopyTo, "kernel cast", "_to_copy(grad, self.dtype)"},
      {"to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, "
       "MemoryFormat? memory_format=None) -> Tensor(a)",
       Kind::kCopyTo, "kernel cast", "_to_copy(grad, self.dtype)"},
      {"to.dtype_layout(Tensor(a) self, *, ScalarType? dtype=None, Layout? layout=None, Device? "
       "device=None, bool? pin_memory=None, bool non_blocking=False, bool copy=False, "
       "MemoryFormat? memory_format=None) -> Tensor(a)",
       Kind::kCopyTo, "kernel cast (layout and device are the mesh's: strided, on its workers)",
       "_to_copy(grad, self.dtype)"},
      {"diff(Tensor self, int n=1, int dim=-1, Tensor? prepend=None, Tensor? append=None) -> "
       "Tensor",
       Kind::kDiff,
       "decomposition: cat of prepend, self and append along dim, then n times slice.Tensor from "
       "1 minus slice.Tensor to -1 (logical_xor for bool)",
       "through its decomposition"},
      {"embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool "
       "scale_grad_by_freq=False, bool sparse=False) -> Tensor",
       Kind::kEmbedding, "kernel embedding (rows outside the shard give 0)",
       "embedding_dense_backward(grad, indices, num_weights, padding_idx, False)"},
      {"split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
       Kind::kSplit, "kernel copy (strided) of each piece", "cat(grads, dim)"},
      {"split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]",
       Kind::kSplit, "kernel copy (strided) of each piece", "cat(grads, dim)"},
      {"chunk(Tensor(a -> *) self, int chunks, int dim=0) -> Tensor(a)[]", Kind::kSplit,
       "kernel copy (strided) of each piece", "cat(grads, dim)"},
      {"unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]", Kind::kUnbind,
       "kernel copy (strided) of each index", "stack(grads, dim)"},
  };
  return *entries;
}

Kind KindOf(const CallContext& call) { return Entries()[call.op.entry].kind; }

// The bounds of a slice.Tensor / narrow call along its (normalized) dim.
struct SliceBounds {
  int dim = 0;
  int64_t start = 0, length = 0, step = 1;
};

absl::StatusOr<SliceBounds> SliceOf(const CallContext& call, const Shape& shape) {
  SliceBounds b;
  const int rank = static_cast<int>(shape.size());
  ASSIGN_OR_RETURN(b.dim, CallDim(call, "dim", call.args.Int("dim"), rank));
  if (rank == 0) return ArgError(call, "self", "must have at least one dim");
  const int64_t size = shape[b.dim];
  if (KindOf(call) == Kind::kNarrow) {
    int64_t start = call.args.Int("start");
    const int64_t length = call.args.Int("length");
    if (start < -size || start > size) {
      return ArgError(call, "start", absl::StrCat("is ", start, ", out of range for size ", size));
    }
    if (start < 0) start += size;
    if (length < 0 || start + length > size) {
      return ArgError(
          call, "length",
          absl::StrCat("is ", length, ": start (", start, ") + length exceeds size ", size));
    }
    b.start = start;
    b.length = length;
    return b;
  }
  b.step = call.args.Int("step");
  if (b.step <= 0) return ArgError(call, "step", absl::StrCat("must be positive, not ", b.step));
  auto clamp = [size](int64_t v) {
    if (v < 0) v += size;
    return std::clamp<int64_t>(v, 0, size);
  };
  const int64_t start = call.args.IsNone("start") ? 0 : clamp(call.args.Int("start"));
  const int64_t end = call.args.IsNone("end") ? size : clamp(call.args.Int("end"));
  b.start = start;
  b.length = end > start ? (end - start + b.step - 1) / b.step : 0;
  return b;
}

absl::StatusOr<std::vector<TensorMeta>> ListOf(const CallContext& call) {
  std::vector<TensorMeta> out;
  for (int i : call.args.Tensors("tensors")) out.push_back(call.inputs[i]);
  if (out.empty()) return ArgError(call, "tensors", "must not be empty");
  return out;
}

absl::StatusOr<OutputMeta> JoinMeta(const CallContext& call) {
  ASSIGN_OR_RETURN(const std::vector<TensorMeta> in, ListOf(call));
  const bool stack = KindOf(call) == Kind::kStack;
  const int rank = static_cast<int>(in[0].shape.size());
  ASSIGN_OR_RETURN(const int dim, CallDim(call, "dim", call.args.Int("dim"), rank + stack));
  std::vector<PromotionOperand> promotion;
  Shape out = in[0].shape;
  if (stack) out.insert(out.begin() + dim, 0);
  for (size_t i = 0; i < in.size(); ++i) {
    promotion.push_back({in[i].dtype, OperandKind::kDimTensor});
    bool fits = static_cast<int>(in[i].shape.size()) == rank;
    for (int d = 0; fits && d < rank; ++d) {
      fits = d == dim && !stack ? true : in[i].shape[d] == in[0].shape[d];
    }
    if (!fits || (rank == 0 && !stack)) {
      return absl::InvalidArgumentError(absl::StrCat(
          call.op.name(), ": tensor ", i, " of shape ", ShapeToString(in[i].shape),
          " does not fit tensor 0 of shape ", ShapeToString(in[0].shape), " along dim ", dim));
    }
    out[dim] += stack ? 1 : (i == 0 ? 0 : in[i].shape[dim]);
  }
  return OutputMeta{out, ResultType(promotion)};
}

absl::Status CheckIndex(const CallContext& call, absl::string_view arg, const TensorMeta& t,
                        bool bool_mask) {
  const bool ok =
      bool_mask ? t.dtype == DType::kBool : t.dtype == DType::kInt64 || t.dtype == DType::kInt32;
  if (!ok) {
    return ArgError(call, arg,
                    absl::StrCat("must be ", bool_mask ? "bool" : "int64 or int32", ", not ",
                                 DTypeName(t.dtype)));
  }
  return absl::OkStatus();
}

absl::StatusOr<OutputMeta> SelectLikeMeta(const CallContext& call, const TensorMeta& x) {
  const int rank = static_cast<int>(x.shape.size());
  Shape out = x.shape;
  switch (KindOf(call)) {
    case Kind::kSlice:
    case Kind::kNarrow: {
      ASSIGN_OR_RETURN(const SliceBounds b, SliceOf(call, x.shape));
      out[b.dim] = b.length;
      return OutputMeta{out, x.dtype};
    }
    case Kind::kSelect: {
      if (rank == 0) return ArgError(call, "self", "must have at least one dim");
      ASSIGN_OR_RETURN(const int dim, CallDim(call, "dim", call.args.Int("dim"), rank));
      const int64_t index = call.args.Int("index");
      if (index < -x.shape[dim] || index >= x.shape[dim]) {
        return ArgError(
            call, "index",
            absl::StrCat("is ", index, ", out of range for dim ", dim, " of size ", x.shape[dim]));
      }
      out.erase(out.begin() + dim);
      return OutputMeta{out, x.dtype};
    }
    case Kind::kIndexSelect: {
      ASSIGN_OR_RETURN(const int dim, CallDim(call, "dim", call.args.Int("dim"), rank));
      ASSIGN_OR_RETURN(const TensorMeta index, InputTensor(call, "index"));
      RETURN_IF_ERROR(CheckIndex(call, "index", index, false));
      if (index.shape.size() > 1) return ArgError(call, "index", "must be 0-D or 1-D");
      if (rank == 0 && NumElements(index.shape) != 1) {
        return ArgError(
            call, "index",
            absl::StrCat("must hold one index into a 0-dim self, not ", NumElements(index.shape)));
      }
      if (rank > 0) out[dim] = NumElements(index.shape);
      return OutputMeta{out, x.dtype};
    }
    default:
      if (rank < 2) return ArgError(call, "self", "must have at least 2 dims");
      return OutputMeta{out, x.dtype};
  }
}

absl::StatusOr<DType> TargetDType(const CallContext& call, const TensorMeta& x) {
  if (call.op.schema.ArgIndex("dtype") < 0 || call.args.IsNone("dtype")) return x.dtype;
  return call.args.Dtype("dtype");
}

absl::StatusOr<OutputMeta> MaskMeta(const CallContext& call) {
  if (KindOf(call) == Kind::kMaskedFill) {
    ASSIGN_OR_RETURN(const TensorMeta x, InputTensor(call, "self"));
    ASSIGN_OR_RETURN(const TensorMeta mask, InputTensor(call, "mask"));
    RETURN_IF_ERROR(CheckIndex(call, "mask", mask, true));
    std::vector<Shape> shapes = {x.shape, mask.shape};
    ASSIGN_OR_RETURN(const Shape b, BroadcastShapes(call.op.name(), shapes));
    if (b != x.shape) {
      return ArgError(call, "mask",
                      absl::StrCat("of shape ", ShapeToString(mask.shape),
                                   " does not broadcast to self's ", ShapeToString(x.shape)));
    }
    return OutputMeta{x.shape, x.dtype};
  }
  ASSIGN_OR_RETURN(const TensorMeta cond, InputTensor(call, "condition"));
  RETURN_IF_ERROR(CheckIndex(call, "condition", cond, true));
  const std::vector<Operand> values = Operands(call, SplitNames("self,other"));
  std::vector<Shape> shapes = {cond.shape};
  std::vector<PromotionOperand> promotion;
  for (const Operand& o : values) {
    shapes.push_back(o.shape);
    promotion.push_back(o.promotion);
  }
  ASSIGN_OR_RETURN(const Shape shape, BroadcastShapes(call.op.name(), shapes));
  return OutputMeta{shape, ResultType(promotion)};
}

// The sizes along dim of a split's pieces, as torch's split, split_with_sizes and chunk make
// them (a split of an empty dim is one empty piece; chunk may give fewer than `chunks`).
absl::StatusOr<std::vector<int64_t>> PieceSizes(const CallContext& call, const TensorMeta& x,
                                                int dim) {
  const int64_t size = x.shape[dim];
  const std::string& name = call.op.schema.name;
  if (name == "split_with_sizes") {
    const std::vector<int64_t>& sizes = call.args.Ints("split_sizes");
    int64_t sum = 0;
    for (int64_t s : sizes) {
      if (s < 0) {
        return ArgError(call, "split_sizes",
                        absl::StrCat("is ", ShapeToString(sizes), ", with a negative size"));
      }
      sum += s;
    }
    if (sizes.empty() || sum != size) {
      return ArgError(call, "split_sizes",
                      absl::StrCat("is ", ShapeToString(sizes), ", which sums to ", sum,
                                   ", not dim ", dim, "'s size ", size));
    }
    return sizes;
  }
  int64_t piece = 0;
  if (name == "chunk") {
    const int64_t chunks = call.args.Int("chunks");
    if (chunks <= 0)
      return ArgError(call, "chunks", absl::StrCat("is ", chunks, "; it must be > 0"));
    piece = (size + chunks - 1) / chunks;
    if (piece == 0) return std::vector<int64_t>(chunks, 0);  // an empty dim: `chunks` pieces
  } else {
    piece = call.args.Int("split_size");
    if (piece < 0 || (piece == 0 && size != 0)) {
      return ArgError(
          call, "split_size",
          absl::StrCat("is ", piece, ", for dim ", dim, " of size ", size,
                       piece < 0 ? " (it must be >= 0)" : " (0 only for a dim of size 0)"));
    }
  }
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < size; start += piece)
    sizes.push_back(std::min(piece, size - start));
  if (sizes.empty()) sizes.push_back(0);
  return sizes;
}

// Each piece of a split or unbind, in order.
absl::StatusOr<std::vector<OutputMeta>> PiecesOf(const CallContext& call) {
  ASSIGN_OR_RETURN(const TensorMeta x, InputTensor(call, "self"));
  const int rank = static_cast<int>(x.shape.size());
  if (rank == 0) return ArgError(call, "self", "must have at least one dim");
  ASSIGN_OR_RETURN(const int dim, CallDim(call, "dim", call.args.Int("dim"), rank));
  std::vector<OutputMeta> out;
  if (KindOf(call) == Kind::kUnbind) {
    if (x.shape[dim] == 0) {
      return ArgError(call, "dim",
                      absl::StrCat("is ", dim, ", of size 0 in ", ShapeToString(x.shape),
                                   ": unbind gives no tensor"));
    }
    Shape piece = x.shape;
    piece.erase(piece.begin() + dim);
    out.assign(x.shape[dim], OutputMeta{piece, x.dtype});
    return out;
  }
  ASSIGN_OR_RETURN(const std::vector<int64_t> sizes, PieceSizes(call, x, dim));
  for (int64_t s : sizes) {
    Shape piece = x.shape;
    piece[dim] = s;
    out.push_back({piece, x.dtype});
  }
  return out;
}

absl::StatusOr<std::vector<OutputMeta>> MorePieces(const CallContext& call,
                                                   const OutputMeta& first) {
  (void)first;
  ASSIGN_OR_RETURN(std::vector<OutputMeta> pieces, PiecesOf(call));
  pieces.erase(pieces.begin());
  return pieces;
}

// constant_pad_nd: pad holds (before, after) pairs from the last dim back; a negative pad crops.
absl::StatusOr<OutputMeta> PadMeta(const CallContext& call) {
  ASSIGN_OR_RETURN(const TensorMeta x, InputTensor(call, "self"));
  const std::vector<int64_t>& pad = call.args.Ints("pad");
  const int rank = static_cast<int>(x.shape.size());
  if (pad.size() % 2 != 0 || static_cast<int>(pad.size()) > 2 * rank) {
    return ArgError(call, "pad",
                    absl::StrCat("is ", ShapeToString(pad),
                                 "; it must hold (before, after) pairs "
                                 "for at most the input's ",
                                 rank, " dims"));
  }
  Shape out = x.shape;
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const int d = rank - 1 - static_cast<int>(i);
    out[d] = x.shape[d] + pad[2 * i] + pad[2 * i + 1];
    if (out[d] < 0) {
      return ArgError(call, "pad",
                      absl::StrCat("is ", ShapeToString(pad), ": dim ", d, " of size ", x.shape[d],
                                   " would have size ", out[d]));
    }
  }
  return OutputMeta{out, x.dtype};
}

// diff: self of 1 or more dims; prepend and append of self's dtype and rank, its sizes but
// along dim; the result's dim shorter by n (not below 0), as torch.
absl::StatusOr<OutputMeta> DiffMeta(const CallContext& call) {
  ASSIGN_OR_RETURN(const TensorMeta x, InputTensor(call, "self"));
  if (x.shape.empty()) return ArgError(call, "self", "must have 1 or more dims (diff of a number)");
  const int64_t n = call.args.Int("n");
  if (n < 0) return ArgError(call, "n", absl::StrCat("is ", n, "; it must be 0 or more"));
  ASSIGN_OR_RETURN(const int dim,
                   CallDim(call, "dim", call.args.Int("dim"), static_cast<int>(x.shape.size())));
  Shape out = x.shape;
  for (const char* arg : {"prepend", "append"}) {
    if (call.args.IsNone(arg)) continue;
    ASSIGN_OR_RETURN(const TensorMeta t, InputTensor(call, arg));
    Shape along = t.shape;
    bool fits = t.dtype == x.dtype && along.size() == x.shape.size();
    if (fits) {
      along[dim] = x.shape[dim];
      fits = along == x.shape;
    }
    if (!fits) {
      return ArgError(call, arg,
                      absl::StrCat("is ", DTypeName(t.dtype), ShapeToString(t.shape),
                                   "; it must be ", DTypeName(x.dtype), " with self's shape ",
                                   ShapeToString(x.shape), " but along dim ", dim));
    }
    out[dim] += t.shape[dim];
  }
  out[dim] = std::max<int64_t>(0, out[dim] - n);
  return OutputMeta{out, x.dtype};
}

absl::StatusOr<OpGraph> DiffGraph(const CallContext& call) {
  const int self = call.args.Tensor("self");
  const TensorMeta& x = call.inputs[self];
  // The meta function accepted the call: dim is in range.
  const int dim =
      CallDim(call, "dim", call.args.Int("dim"), static_cast<int>(x.shape.size())).value();
  GraphBuilder b(static_cast<int>(call.inputs.size()));
  int v = self;
  int64_t size = x.shape[dim];
  std::vector<int> parts;
  for (const char* arg : {"prepend", "", "append"}) {
    if (*arg == '\0') {
      parts.push_back(self);
    } else if (!call.args.IsNone(arg)) {
      parts.push_back(call.args.Tensor(arg));
      size += call.inputs[parts.back()].shape[dim];
    }
  }
  if (parts.size() > 1) {
    TensorList list;
    for (int p : parts) list.indices.push_back(p);
    v = b.Add("cat", {GraphBuilder::P(list), GraphBuilder::P(int64_t{dim})});
  }
  const int64_t n = call.args.Int("n");
  for (int64_t k = 0; k < n && size > 0; ++k, --size) {
    const int hi = b.Add("slice.Tensor", {GraphBuilder::V(v), GraphBuilder::P(int64_t{dim}),
                                          GraphBuilder::P(int64_t{1}), GraphBuilder::P(size)});
    const int lo = b.Add("slice.Tensor", {GraphBuilder::V(v), GraphBuilder::P(int64_t{dim}),
                                          GraphBuilder::P(int64_t{0}), GraphBuilder::P(size - 1)});
    v = b.Add(x.dtype == DType::kBool ? "logical_xor" : "sub.Tensor",
              {GraphBuilder::V(hi), GraphBuilder::V(lo)});
  }
  // n 0 without prepend or append (or a dim already empty): the input itself, as a node.
  if (v == self) b.Add("alias", {GraphBuilder::V(v)});
  return std::move(b).Finish();
}

absl::StatusOr<OutputMeta> TensorMetaFn(const CallContext& call) {
  switch (KindOf(call)) {
    case Kind::kConstantPad:
      return PadMeta(call);
    case Kind::kCat:
    case Kind::kStack:
      return JoinMeta(call);
    case Kind::kWhere:
    case Kind::kMaskedFill:
      return MaskMeta(call);
    case Kind::kSplit:
    case Kind::kUnbind: {
      ASSIGN_OR_RETURN(const std::vector<OutputMeta> pieces, PiecesOf(call));
      return pieces[0];
    }
    case Kind::kDiff:
      return DiffMeta(call);
    case Kind::kEmbedding: {
      ASSIGN_OR_RETURN(const TensorMeta w, InputTensor(call, "weight"));
      ASSIGN_OR_RETURN(const TensorMeta ids, InputTensor(call, "indices"));
      RETURN_IF_ERROR(CheckIndex(call, "indices", ids, false));
      if (w.shape.size() != 2) return ArgError(call, "weight", "must be 2-D");
      Shape out = ids.shape;
      out.push_back(w.shape[1]);
      return OutputMeta{out, w.dtype};
    }
    default:
      break;
  }
  ASSIGN_OR_RETURN(const TensorMeta x, InputTensor(call, "self"));
  if (KindOf(call) == Kind::kCopyTo) {
    ASSIGN_OR_RETURN(const DType dtype, TargetDType(call, x));
    return OutputMeta{x.shape, dtype};
  }
  return SelectLikeMeta(call, x);
}

// The per-dim choices of an op on one input (plus Replicate extra inputs) that keeps every dim but
// `touched`, moving dim d to `moved(d)`; with `partials`, every Partial passes.
template <typename Moved>
std::vector<DimChoice> KeepUntouched(int rank, int num_inputs, std::vector<int> touched,
                                     Moved moved, bool partials) {
  std::vector<DimChoice> out;
  for (int d = 0; d < rank; ++d) {
    if (std::find(touched.begin(), touched.end(), d) != touched.end()) continue;
    std::vector<Placement> in(num_inputs, Placement::Replicate());
    in[0] = Placement::Shard(d);
    out.push_back({in, Placement::Shard(moved(d))});
  }
  out.push_back(
      {std::vector<Placement>(num_inputs, Placement::Replicate()), Placement::Replicate()});
  if (partials) {
    for (ReduceOp op : kAllReduceOps) {
      std::vector<Placement> in(num_inputs, Placement::Replicate());
      in[0] = Placement::Partial(op);
      out.push_back({in, Placement::Partial(op)});
    }
  }
  return out;
}

absl::StatusOr<StrategyCandidates> JoinStrategies(const CallContext& call) {
  const int n = static_cast<int>(call.inputs.size());
  const int rank = static_cast<int>(call.inputs[0].shape.size());
  const bool stack = KindOf(call) == Kind::kStack;
  ASSIGN_OR_RETURN(const int dim, CallDim(call, "dim", call.args.Int("dim"), rank + stack));
  StrategyCandidates c;
  for (int d = 0; d < rank; ++d) {
    if (d == dim && !stack) continue;
    c.per_dim.push_back({std::vector<Placement>(n, Placement::Shard(d)),
                         Placement::Shard(stack && d >= dim ? d + 1 : d)});
  }
  c.per_dim.push_back({std::vector<Placement>(n, Placement::Replicate()), Placement::Replicate()});
  for (ReduceOp op : kAllReduceOps) {
    c.per_dim.push_back(
        {std::vector<Placement>(n, Placement::Partial(op)), Placement::Partial(op)});
  }
  return c;
}

absl::StatusOr<StrategyCandidates> EmbeddingStrategies(const CallContext& call) {
  const int w = call.args.Tensor("weight");
  const int ids = call.args.Tensor("indices");
  const int id_rank = static_cast<int>(call.inputs[ids].shape.size());
  StrategyCandidates c;
  auto choice = [&](Placement pw, Placement pi, Placement out) {
    std::vector<Placement> in(call.inputs.size(), Placement::Replicate());
    in[w] = pw;
    in[ids] = pi;
    c.per_dim.push_back({in, out});
  };
  choice(Placement::Shard(0), Placement::Replicate(), Placement::Partial(ReduceOp::kSum));
  choice(Placement::Shard(1), Placement::Replicate(), Placement::Shard(id_rank));
  for (int d = 0; d < id_rank; ++d)
    choice(Placement::Replicate(), Placement::Shard(d), Placement::Shard(d));
  choice(Placement::Replicate(), Placement::Replicate(), Placement::Replicate());
  return c;
}

absl::StatusOr<StrategyCandidates> TensorStrategies(const CallContext& call,
                                                    std::span<const DTensorSpec> specs,
                                                    const OutputMeta& out) {
  const Kind kind = KindOf(call);
  const int n = static_cast<int>(call.inputs.size());
  const int rank = call.inputs.empty() ? 0 : static_cast<int>(call.inputs[0].shape.size());
  auto same = [](int d) { return d; };
  StrategyCandidates c;
  switch (kind) {
    case Kind::kCat:
    case Kind::kStack:
      return JoinStrategies(call);
    case Kind::kEmbedding:
      return EmbeddingStrategies(call);
    case Kind::kWhere:
    case Kind::kMaskedFill: {
      const char* names = kind == Kind::kWhere ? "condition,self,other" : "self,mask";
      c.per_dim = ShardAlignedChoices(Operands(call, SplitNames(names)), out.shape, n);
      return c;
    }
    case Kind::kCopyTo: {
      ASSIGN_OR_RETURN(StrategyCandidates p, PointwiseStrategies(call, specs, out));
      if (out.dtype == DType::kBool) {
        std::erase_if(p.per_dim, [](const DimChoice& d) { return d.output.is_partial(); });
      }
      return p;
    }
    case Kind::kTril:
      c.per_dim = KeepUntouched(rank, n, {rank - 2, rank - 1}, same, true);
      return c;
    case Kind::kConstantPad: {
      // The padded dims whole; a Partial sum or mean passes a 0 pad (each part padded with 0).
      const std::vector<int64_t>& pad = call.args.Ints("pad");
      std::vector<int> padded;
      for (size_t i = 0; i < pad.size() / 2; ++i) {
        if (pad[2 * i] != 0 || pad[2 * i + 1] != 0)
          padded.push_back(rank - 1 - static_cast<int>(i));
      }
      c.per_dim = KeepUntouched(rank, n, padded, same, false);
      if (call.args.Float("value") == 0.0) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
          c.per_dim.push_back({{Placement::Partial(op)}, Placement::Partial(op)});
        }
      }
      return c;
    }
    case Kind::kSelect:
    case Kind::kUnbind: {
      ASSIGN_OR_RETURN(const int dim, CallDim(call, "dim", call.args.Int("dim"), rank));
      c.per_dim = KeepUntouched(
          rank, n, {dim}, [dim](int d) { return d > dim ? d - 1 : d; }, true);
      return c;
    }
    case Kind::kIndexSelect: {
      ASSIGN_OR_RETURN(const int dim, CallDim(call, "dim", call.args.Int("dim"), rank));
      c.per_dim = KeepUntouched(rank, n, {dim}, same, true);
      // A sharded 1-D index selects its rows of the output's dim (self whole), as DTensor's.
      const int index = call.args.Tensor("index");
      if (rank > 0 && call.inputs[index].shape.size() == 1) {
        std::vector<Placement> in(n, Placement::Replicate());
        in[index] = Placement::Shard(0);
        c.per_dim.push_back({in, Placement::Shard(dim)});
      }
      return c;
    }
    default: {
      ASSIGN_OR_RETURN(const int dim, CallDim(call, "dim", call.args.Int("dim"), rank));
      c.per_dim = KeepUntouched(rank, n, {dim}, same, true);
      return c;
    }
  }
}

}  // namespace

void RegisterTensorOps(OpRegistry& registry) {
  for (size_t i = 0; i < Entries().size(); ++i) {
    const TensorEntry& e = Entries()[i];
    OpDef& op = DefineOp(registry, e.schema, OpFamily::kTensor);
    op.entry = static_cast<int>(i);
    op.meta = TensorMetaFn;
    if (e.kind == Kind::kDiff) {
      op.decompose = DiffGraph;
    } else {
      op.strategies = TensorStrategies;
    }
    op.implementation = e.implementation;
    op.derivative = e.derivative;
    op.strategy_text = "S(d) kept on the dims it does not touch; the dims it touches whole (R)";
    if (e.kind == Kind::kDiff) op.strategy_text = "each node's own (cat, slice, sub)";
    if (e.kind == Kind::kSplit || e.kind == Kind::kUnbind) {
      op.more_outputs = MorePieces;
      op.strategy_text =
          "S(d) kept on the dims but `dim` (every piece alike), which is whole (R); every "
          "Partial kept";
    }
    if (e.kind == Kind::kCopyTo) {
      op.pointwise.operands = {"self"};
      op.pointwise.partial = PartialRule::kMonotonic;
      op.strategy_text = "S(d) and R kept; P(max|min) kept unless the target is bool";
    }
  }
}

}  // namespace tessera::ops
