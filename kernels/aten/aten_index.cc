// The indexing ops on local shards: the indexed dims are whole on every rank (the strategy saw to
// it), so each rank gathers, scatters and indexes its block as a single process would. Advanced
// indexing combines its index tensors into one index over the indexed dims taken as one (moved
// first where they are not adjacent), so that index.Tensor is one index_select and index_put one
// scatter.
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/advanced_index.h"
#include "core/status_macros.h"
#include "kernels/aten/aten_context.h"
#include "kernels/layout.h"

namespace tessera::kernels::aten {
namespace {

absl::StatusOr<DeviceTensor> GatherKernel(Context& ctx) {
  const ConstTensorView x = ctx.Input("self");
  ASSIGN_OR_RETURN(const int dim, ctx.Dim("dim", x.rank()));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  if (out.num_elements() == 0) return out;  // as torch, an empty index is not checked
  RETURN_IF_ERROR(ctx.Named(ctx.backend.Gather(x, dim, ctx.Input("index"), out.View())));
  return out;
}

// scatter.src, scatter.value and scatter_add: self copied, then the src (or a src filled with the
// value) written or added at the indices.
absl::StatusOr<DeviceTensor> ScatterKernel(Context& ctx) {
  const ConstTensorView self = ctx.Input("self");
  const ConstTensorView index = ctx.Input("index");
  ASSIGN_OR_RETURN(const int dim, ctx.Dim("dim", self.rank()));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Copy(self, out.View()));
  if (index.num_elements() == 0) return out;
  ConstTensorView src;
  if (ctx.call().op->schema.overload == "value") {
    ASSIGN_OR_RETURN(const TensorView filled, ctx.Temporary(self.dtype, index.shape));
    RETURN_IF_ERROR(ctx.backend.Fill(filled, ctx.args().Float("value")));
    src = filled;
  } else {
    src = ctx.Input("src");
  }
  const ScatterReduce reduce =
      ctx.call().op->schema.name == "scatter_add" ? ScatterReduce::kSum : ScatterReduce::kNone;
  RETURN_IF_ERROR(ctx.Named(ctx.backend.ScatterInto(out.View(), dim, index, src, reduce)));
  return out;
}

// The rank's index tensors of an index.Tensor or index_put call (one per indexed dim, in order)
// and what they index in its block of self.
struct LocalIndex {
  ops::AdvancedIndex a;
  std::vector<ConstTensorView> tensors;
};

absl::StatusOr<LocalIndex> LocalIndexOf(const Context& ctx, const ConstTensorView& self) {
  LocalIndex l;
  std::vector<std::optional<Shape>> shapes;
  for (int i : ctx.args().Tensors("indices")) {
    if (i < 0) {
      shapes.push_back(std::nullopt);
      continue;
    }
    shapes.push_back(ctx.inputs[i].shape);
    l.tensors.push_back(ctx.inputs[i]);
  }
  ASSIGN_OR_RETURN(l.a, ops::DescribeAdvancedIndex(self.shape, shapes));
  return l;
}

// One index into self's indexed dims taken as one (row-major over their sizes) per element of the
// index shape: each index tensor as int64, broadcast, its negative indices wrapped (one out of
// range is INVALID_ARGUMENT naming it), then idx_0 * size_1 * ... + idx_1 * size_2 * ... + ...
absl::StatusOr<ConstTensorView> CombinedIndex(Context& ctx, const ConstTensorView& self,
                                              const LocalIndex& l) {
  TensorView combined;
  for (size_t j = 0; j < l.a.dims.size(); ++j) {
    const int64_t size = self.shape[l.a.dims[j]];
    ASSIGN_OR_RETURN(const ConstTensorView as_int64, ctx.As(l.tensors[j], DType::kInt64));
    ASSIGN_OR_RETURN(const ConstTensorView broadcast, ctx.Broadcast(as_int64, l.a.index_shape));
    ASSIGN_OR_RETURN(const TensorView index, ctx.Temporary(DType::kInt64, l.a.index_shape));
    RETURN_IF_ERROR(ctx.backend.Copy(broadcast, index));
    if (absl::Status s = ctx.backend.WrapIndices(index, size); !s.ok()) {
      if (s.code() != absl::StatusCode::kInvalidArgument) return s;
      return absl::InvalidArgumentError(
          absl::StrCat(ctx.name(), ": argument 'indices' entry ", l.a.dims[j], ": ", s.message()));
    }
    if (j == 0) {
      combined = index;
      continue;
    }
    ASSIGN_OR_RETURN(const ConstTensorView scale,
                     ctx.Number(static_cast<double>(size), DType::kInt64));
    RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kMul, combined, scale, combined));
    RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kAdd, combined, index, combined));
  }
  return ConstTensorView(combined);
}

// Self with its indexed dims as one: [outer, size, inner], a view of self where they are
// adjacent, else of a copy with them moved first (outer 1), in the dims' `order`.
struct Folded {
  int64_t outer = 1, size = 1, inner = 1;
  std::vector<int> order;  // self's dims in the order of the (copied) view; empty if a view
};

Folded FoldOf(const Shape& self, const ops::AdvancedIndex& a) {
  Folded f;
  const int rank = static_cast<int>(self.size());
  for (int d : a.dims) f.size *= self[d];
  if (a.adjacent) {
    for (int d = 0; d < a.dims.front(); ++d) f.outer *= self[d];
    for (int d = a.dims.back() + 1; d < rank; ++d) f.inner *= self[d];
    return f;
  }
  f.order = a.dims;
  for (int d = 0; d < rank; ++d) {
    if (a.result_dim[d] >= 0) {
      f.order.push_back(d);
      f.inner *= self[d];
    }
  }
  return f;
}

// The strided view of `view` with its dims in `order`.
template <typename View>
auto PermutedStrides(const View& view, const std::vector<int>& order) {
  const auto full = StridedOf(view);
  auto permuted = full;
  permuted.shape.clear();
  permuted.strides.clear();
  for (int d : order) {
    permuted.shape.push_back(full.shape[d]);
    permuted.strides.push_back(full.strides[d]);
  }
  return permuted;
}

// A copy of self with its dims in `order`, contiguous.
absl::StatusOr<TensorView> PermutedCopy(Context& ctx, const ConstTensorView& self,
                                        const std::vector<int>& order) {
  const ConstStridedView src = PermutedStrides(self, order);
  ASSIGN_OR_RETURN(const TensorView copy, ctx.Temporary(self.dtype, src.shape));
  RETURN_IF_ERROR(ctx.backend.CopyStrided(src, StridedOf(copy)));
  return copy;
}

absl::StatusOr<DeviceTensor> IndexKernel(Context& ctx) {
  const ConstTensorView self = ctx.Input("self");
  ASSIGN_OR_RETURN(const LocalIndex l, LocalIndexOf(ctx, self));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  if (l.a.dims.empty()) {
    RETURN_IF_ERROR(ctx.backend.Copy(self, out.View()));
    return out;
  }
  ASSIGN_OR_RETURN(const ConstTensorView combined, CombinedIndex(ctx, self, l));
  const Folded f = FoldOf(self.shape, l.a);
  ConstTensorView folded = self;
  if (!f.order.empty()) {
    ASSIGN_OR_RETURN(folded, PermutedCopy(ctx, self, f.order));
  }
  const int64_t count = combined.num_elements();
  RETURN_IF_ERROR(ctx.Named(ctx.backend.IndexSelect(
      Reshaped(folded, {f.outer, f.size, f.inner}), 1, Reshaped(combined, {count}),
      Reshaped(out.View(), {f.outer, count, f.inner}))));
  return out;
}

// index_put: self copied (with its indexed dims moved first where they are not adjacent), the
// values scattered (written or added) along the indexed dims taken as one, and moved back.
absl::StatusOr<DeviceTensor> IndexPutKernel(Context& ctx) {
  const ConstTensorView self = ctx.Input("self");
  ASSIGN_OR_RETURN(const LocalIndex l, LocalIndexOf(ctx, self));
  ASSIGN_OR_RETURN(const ConstTensorView values, ctx.Broadcast(ctx.Input("values"), l.a.result));
  const bool accumulate = ctx.args().Bool("accumulate");
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  if (l.a.dims.empty()) {  // self[...] = values, or += values
    if (accumulate) {
      RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kAdd, self, values, out.View()));
    } else {
      RETURN_IF_ERROR(ctx.backend.Copy(values, out.View()));
    }
    return out;
  }
  ASSIGN_OR_RETURN(const ConstTensorView combined, CombinedIndex(ctx, self, l));
  const Folded f = FoldOf(self.shape, l.a);
  TensorView target = out.View();
  if (f.order.empty()) {
    RETURN_IF_ERROR(ctx.backend.Copy(self, out.View()));
  } else {
    ASSIGN_OR_RETURN(target, PermutedCopy(ctx, self, f.order));
  }
  const int64_t count = combined.num_elements();
  const Shape walked = {f.outer, count, f.inner};
  ASSIGN_OR_RETURN(const ConstTensorView index,
                   ctx.Broadcast(Reshaped(combined, {1, count, 1}), walked));
  RETURN_IF_ERROR(ctx.Named(ctx.backend.ScatterInto(
      Reshaped(target, {f.outer, f.size, f.inner}), 1, index, Reshaped(values, walked),
      accumulate ? ScatterReduce::kSum : ScatterReduce::kNone)));
  if (!f.order.empty()) {
    RETURN_IF_ERROR(ctx.backend.CopyStrided(StridedOf(ConstTensorView(target)),
                                            PermutedStrides(out.View(), f.order)));
  }
  return out;
}

}  // namespace

void AddIndexKernels(LocalTable& t) {
  t["aten::gather"] = GatherKernel;
  t["aten::scatter.src"] = t["aten::scatter.value"] = t["aten::scatter_add"] = ScatterKernel;
  t["aten::index.Tensor"] = IndexKernel;
  t["aten::index_put"] = IndexPutKernel;
}

}  // namespace tessera::kernels::aten
