// The tensor ops on local shards: the dims they touch are whole on every rank (the strategy saw
// to it), so each rank slices, joins, selects and masks its block as a single process would.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/aten/aten_context.h"
#include "kernels/layout.h"

namespace tessera::kernels::aten {
namespace {

// Output `k` = the elements [start, start + length * step) step `step` of x along dim, as a new
// tensor.
absl::StatusOr<DeviceTensor> SlicedInto(Context& ctx, size_t k, const ConstTensorView& x, int dim,
                                        int64_t start, int64_t length, int64_t step) {
  ConstStridedView src = StridedOf(x);
  src.data += start * src.strides[dim] * static_cast<int64_t>(DTypeSize(x.dtype));
  src.shape[dim] = length;
  src.strides[dim] *= step;
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.OutputAt(k));
  StridedView dst = StridedOf(out.View());
  dst.shape = src.shape;
  dst.strides = ContiguousStrides(src.shape);
  RETURN_IF_ERROR(ctx.backend.CopyStrided(src, dst));
  return out;
}

absl::StatusOr<DeviceTensor> Sliced(Context& ctx, const ConstTensorView& x, int dim, int64_t start,
                                    int64_t length, int64_t step, Shape out_shape) {
  (void)out_shape;
  return SlicedInto(ctx, 0, x, dim, start, length, step);
}

// split, split_with_sizes, chunk and unbind: each piece (each index for unbind) copied in order;
// the dim is whole here, so the local pieces are the global ones.
absl::StatusOr<DeviceTensor> SplitKernel(Context& ctx) {
  const ConstTensorView x = ctx.Input("self");
  ASSIGN_OR_RETURN(const int dim, ctx.Dim("dim", x.rank()));
  const bool unbind = ctx.call().op->schema.name == "unbind";
  std::vector<DeviceTensor> pieces;
  int64_t start = 0;
  for (size_t k = 0; k < ctx.num_outputs(); ++k) {
    const Shape& shape = k == 0 ? ctx.out_shape : ctx.more_shapes[k - 1];
    const int64_t length = unbind ? 1 : shape[dim];
    ASSIGN_OR_RETURN(DeviceTensor piece, SlicedInto(ctx, k, x, dim, start, length, 1));
    pieces.push_back(std::move(piece));
    start += length;
  }
  for (size_t k = 1; k < pieces.size(); ++k) ctx.more.push_back(std::move(pieces[k]));
  return std::move(pieces[0]);
}

absl::StatusOr<DeviceTensor> SliceKernel(Context& ctx) {
  const ConstTensorView x = ctx.Input("self");
  ASSIGN_OR_RETURN(const int dim, ctx.Dim("dim", x.rank()));
  const int64_t size = x.shape[dim];
  const int64_t length = ctx.out_shape[dim];
  if (ctx.call().op->schema.name == "narrow") {
    int64_t start = ctx.args().Int("start");
    if (start < 0) start += size;
    return Sliced(ctx, x, dim, start, length, 1, ctx.out_shape);
  }
  int64_t start = ctx.args().IsNone("start") ? 0 : ctx.args().Int("start");
  if (start < 0) start += size;
  start = std::clamp<int64_t>(start, 0, size);
  return Sliced(ctx, x, dim, length == 0 ? 0 : start, length, ctx.args().Int("step"),
                ctx.out_shape);
}

// constant_pad_nd: the output filled with value, then the input's overlap with it copied in (a
// negative pad crops the input).
absl::StatusOr<DeviceTensor> PadKernel(Context& ctx) {
  const ConstTensorView x = ctx.Input("self");
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Fill(out.View(), ctx.args().Float("value")));
  const std::vector<int64_t>& pad = ctx.args().Ints("pad");
  ConstStridedView src = StridedOf(x);
  StridedView dst = StridedOf(out.View());
  const int64_t element = static_cast<int64_t>(DTypeSize(x.dtype));
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const int d = x.rank() - 1 - static_cast<int>(i);
    const int64_t before = pad[2 * i];
    const int64_t from = std::max<int64_t>(0, -before), to = std::max<int64_t>(0, before);
    const int64_t length = std::min(x.shape[d] - from, out.shape()[d] - to);
    if (length <= 0) return out;
    src.data += from * src.strides[d] * element;
    dst.data += to * dst.strides[d] * element;
    src.shape[d] = dst.shape[d] = length;
  }
  if (NumElements(src.shape) == 0) return out;
  RETURN_IF_ERROR(ctx.backend.CopyStrided(src, dst));
  return out;
}

absl::StatusOr<DeviceTensor> SelectKernel(Context& ctx) {
  const ConstTensorView x = ctx.Input("self");
  ASSIGN_OR_RETURN(const int dim, ctx.Dim("dim", x.rank()));
  int64_t index = ctx.args().Int("index");
  if (index < 0) index += x.shape[dim];
  return Sliced(ctx, x, dim, index, 1, 1, ctx.out_shape);
}

// cat and stack: each input (converted to the output's dtype) written at its offset along dim.
absl::StatusOr<DeviceTensor> JoinKernel(Context& ctx) {
  const bool stack = ctx.call().op->schema.name == "stack";
  const int out_rank = static_cast<int>(ctx.out_shape.size());
  ASSIGN_OR_RETURN(const int dim, ctx.Dim("dim", out_rank));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  std::vector<int64_t> offsets(out_rank, 0);
  for (int i : ctx.args().Tensors("tensors")) {
    ASSIGN_OR_RETURN(ConstTensorView part, ctx.As(ctx.inputs[i], ctx.out_dtype));
    if (stack) {
      Shape s = part.shape;
      s.insert(s.begin() + dim, 1);
      part = Reshaped(part, s);
    }
    RETURN_IF_ERROR(UnpackBlock(ctx.backend, part, offsets, out.View()));
    offsets[dim] += part.shape[dim];
  }
  return out;
}

absl::StatusOr<DeviceTensor> IndexSelectKernel(Context& ctx) {
  const ConstTensorView x = ctx.Input("self");
  ASSIGN_OR_RETURN(const int dim, ctx.Dim("dim", x.rank()));
  ASSIGN_OR_RETURN(const ConstTensorView index, ctx.As(ctx.Input("index"), DType::kInt64));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.Named(ctx.backend.IndexSelect(x, dim, index, out.View())));
  return out;
}

// tril/triu: x where the mask of the last two dims keeps it, 0 elsewhere.
absl::StatusOr<DeviceTensor> TriangleKernel(Context& ctx) {
  const ConstTensorView x = ctx.Input("self");
  const bool lower = ctx.call().op->schema.name == "tril";
  const int64_t diagonal = ctx.args().Int("diagonal");
  const int64_t rows = x.shape[x.rank() - 2], cols = x.shape.back();
  ASSIGN_OR_RETURN(HostTensor mask, HostTensor::Zeros(DType::kBool, {rows, cols}));
  auto* m = reinterpret_cast<bool*>(mask.data());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j)
      m[i * cols + j] = lower ? j - i <= diagonal : j - i >= diagonal;
  }
  ASSIGN_OR_RETURN(DeviceTensor device_mask, ctx.backend.Upload(mask));
  ASSIGN_OR_RETURN(const ConstTensorView zero, ctx.Number(0.0, x.dtype));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Where(std::as_const(device_mask).View(), x, zero, out.View()));
  return out;
}

absl::StatusOr<DeviceTensor> WhereKernel(Context& ctx) {
  ASSIGN_OR_RETURN(const ConstTensorView a, ctx.Operand("self", ctx.out_dtype));
  ASSIGN_OR_RETURN(const ConstTensorView b, ctx.Operand("other", ctx.out_dtype));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Where(ctx.Input("condition"), a, b, out.View()));
  return out;
}

absl::StatusOr<DeviceTensor> MaskedFillKernel(Context& ctx) {
  ASSIGN_OR_RETURN(const ConstTensorView value,
                   ctx.Number(ctx.args().Float("value"), ctx.out_dtype));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Where(ctx.Input("mask"), value, ctx.Input("self"), out.View()));
  return out;
}

absl::StatusOr<DeviceTensor> CastKernel(Context& ctx) {
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Cast(ctx.Input("self"), out.View()));
  return out;
}

absl::StatusOr<DeviceTensor> EmbeddingKernel(Context& ctx) {
  const DTensorSpec& wspec = ctx.InputSpec("weight");
  const int64_t row_offset = LocalShapeAndOffsetAt(wspec, ctx.local.coordinate).offset[0];
  ASSIGN_OR_RETURN(const ConstTensorView ids, ctx.As(ctx.Input("indices"), DType::kInt64));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(
      ctx.backend.Embedding(ids, ctx.Input("weight"), row_offset, wspec.shape[0], out.View()));
  return out;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> IndexValues(Context& ctx, const ConstTensorView& index) {
  ASSIGN_OR_RETURN(const ConstTensorView ids, ctx.As(index, DType::kInt64));
  std::vector<int64_t> values(ids.num_elements());
  RETURN_IF_ERROR(ctx.backend.CopyToHost(
      ids, std::span<std::byte>(reinterpret_cast<std::byte*>(values.data()), ids.nbytes())));
  return values;
}

void AddTensorKernels(LocalTable& t) {
  t["aten::cat"] = t["aten::stack"] = JoinKernel;
  t["aten::slice.Tensor"] = t["aten::narrow"] = SliceKernel;
  t["aten::split.Tensor"] = t["aten::split_with_sizes"] = t["aten::chunk"] = t["aten::unbind.int"] =
      SplitKernel;
  t["aten::select.int"] = SelectKernel;
  t["aten::index_select"] = IndexSelectKernel;
  t["aten::tril"] = t["aten::triu"] = TriangleKernel;
  t["aten::constant_pad_nd"] = PadKernel;
  t["aten::where.self"] = WhereKernel;
  t["aten::masked_fill.Scalar"] = MaskedFillKernel;
  t["aten::_to_copy"] = t["aten::to.dtype"] = t["aten::to.dtype_layout"] = CastKernel;
  t["aten::embedding"] = EmbeddingKernel;
}

}  // namespace tessera::kernels::aten
