// KernelBackend's indexing calls (gather, scatter, index_select, the wrap of negative indices):
// their argument checks and the range check of every index before a kernel runs.
#include <algorithm>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/backend.h"
#include "kernels/view_checks.h"

namespace tessera::kernels {
namespace {

// A tensor's shape as the indexing calls see it: a 0-dim tensor as [1].
Shape AtLeast1D(const Shape& shape) { return shape.empty() ? Shape{1} : shape; }

absl::StatusOr<int> NormalizeDim(absl::string_view op, int64_t dim, int rank) {
  const int n = std::max(rank, 1);
  if (dim < -n || dim >= n) {
    return absl::InvalidArgumentError(absl::StrCat(op, " dim ", dim, " is out of range for a ",
                                                   rank, "-dim tensor (expected [", -n, ", ", n - 1,
                                                   "])"));
  }
  return static_cast<int>(dim < 0 ? dim + n : dim);
}

absl::Status CheckIndexOperand(absl::string_view op, const ConstTensorView& index) {
  RETURN_IF_ERROR(CheckView(op, "index", index));
  if (index.dtype == DType::kInt64) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, " index must be int64; got ", DTypeName(index.dtype)));
}

// The coordinate of linear position `position` in a row-major `shape`.
std::vector<int64_t> CoordinateOf(const Shape& shape, int64_t position) {
  std::vector<int64_t> coordinate(shape.size(), 0);
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    coordinate[d] = position % shape[d];
    position /= shape[d];
  }
  return coordinate;
}

// OK iff index (of `index_shape`, as AtLeast1D) has `self`'s rank and fits it: no larger on any
// dim but `dim` (when `except_dim`) or on any dim.
absl::Status CheckIndexFits(absl::string_view op, const Shape& index_shape,
                            absl::string_view self_name, const Shape& self, int dim,
                            bool except_dim) {
  if (index_shape.size() != self.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " index of shape ", ShapeToString(index_shape), " must have ", self_name,
                     "'s rank (", self_name, " ", ShapeToString(self), ")"));
  }
  for (int d = 0; d < static_cast<int>(self.size()); ++d) {
    if ((d != dim || !except_dim) && index_shape[d] > self[d]) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, " index of shape ", ShapeToString(index_shape), " is larger than ",
                       self_name, " ", ShapeToString(self), " on dim ", d,
                       except_dim ? absl::StrCat(" (only dim ", dim, " may be)") : ""));
    }
  }
  return absl::OkStatus();
}

}  // namespace

KernelBackend::IndexWalk KernelBackend::WalkOfIndex(const Shape& index, int dim,
                                                    const Shape& indexed, const Shape& other) {
  const std::vector<int64_t> indexed_strides = ContiguousStrides(indexed);
  const std::vector<int64_t> other_strides = ContiguousStrides(other);
  IndexWalk walk;
  bool last_is_dim = false;
  for (int d = 0; d < static_cast<int>(index.size()); ++d) {
    if (d != dim && index[d] == 1) continue;  // its coordinate is always 0
    const bool mergeable = d != dim && !walk.shape.empty() && !last_is_dim &&
                           walk.indexed_strides.back() == index[d] * indexed_strides[d] &&
                           walk.other_strides.back() == index[d] * other_strides[d];
    if (mergeable) {
      walk.shape.back() *= index[d];
      walk.indexed_strides.back() = indexed_strides[d];
      walk.other_strides.back() = other_strides[d];
      continue;
    }
    if (d == dim) walk.dim = static_cast<int>(walk.shape.size());
    last_is_dim = d == dim;
    walk.shape.push_back(index[d]);
    walk.indexed_strides.push_back(indexed_strides[d]);
    walk.other_strides.push_back(other_strides[d]);
  }
  return walk;
}

absl::Status KernelBackend::CheckIndicesWithin(absl::string_view op, const ConstTensorView& index,
                                               int64_t lo, int64_t hi, int64_t size) {
  ASSIGN_OR_RETURN(const int64_t position,
                   DoFindIndexOutside(index.data, index.num_elements(), lo, hi));
  if (position < 0) return absl::OkStatus();
  int64_t value = 0;
  RETURN_IF_ERROR(
      CopyToHost(ConstTensorView{index.data + position * static_cast<int64_t>(sizeof(int64_t)),
                                 DType::kInt64, Shape{}},
                 std::as_writable_bytes(std::span(&value, 1))));
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": index ", value, " at ", ShapeToString(CoordinateOf(index.shape, position)),
      " of the index (shape ", ShapeToString(index.shape), ") is out of range for a dim of size ",
      size, " (expected [", lo, ", ", hi, "))"));
}

absl::Status KernelBackend::Gather(const ConstTensorView& x, int64_t dim,
                                   const ConstTensorView& index, const TensorView& out) {
  constexpr absl::string_view kOp = "gather";
  RETURN_IF_ERROR(CheckView(kOp, "x", x));
  RETURN_IF_ERROR(CheckIndexOperand(kOp, index));
  ASSIGN_OR_RETURN(const int d, NormalizeDim(kOp, dim, x.rank()));
  const Shape xs = AtLeast1D(x.shape), is = AtLeast1D(index.shape);
  RETURN_IF_ERROR(CheckIndexFits(kOp, is, "x", xs, d, /*except_dim=*/true));
  RETURN_IF_ERROR(CheckOperand(kOp, "out", out, x.dtype, index.shape));
  if (index.num_elements() == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckIndicesWithin(kOp, index, 0, xs[d], xs[d]));
  return DoGather(GatherArgs{x.dtype, WalkOfIndex(is, d, xs, is), x.data, index.data, out.data});
}

absl::Status KernelBackend::ScatterInto(const TensorView& dst, int64_t dim,
                                        const ConstTensorView& index, const ConstTensorView& src,
                                        ScatterReduce reduce) {
  const absl::string_view op = reduce == ScatterReduce::kSum ? "scatter_add" : "scatter";
  RETURN_IF_ERROR(CheckView(op, "dst", dst));
  RETURN_IF_ERROR(CheckIndexOperand(op, index));
  RETURN_IF_ERROR(CheckView(op, "src", src));
  if (src.dtype != dst.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, " src must have dst's dtype ", DTypeName(dst.dtype), "; got ", DTypeName(src.dtype)));
  }
  ASSIGN_OR_RETURN(const int d, NormalizeDim(op, dim, dst.rank()));
  const Shape ds = AtLeast1D(dst.shape), is = AtLeast1D(index.shape), ss = AtLeast1D(src.shape);
  RETURN_IF_ERROR(CheckIndexFits(op, is, "dst", ds, d, /*except_dim=*/true));
  RETURN_IF_ERROR(CheckIndexFits(op, is, "src", ss, d, /*except_dim=*/false));
  if (index.num_elements() == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckIndicesWithin(op, index, 0, ds[d], ds[d]));
  return DoScatter(
      ScatterArgs{dst.dtype, reduce, WalkOfIndex(is, d, ds, ss), dst.data, index.data, src.data});
}

absl::Status KernelBackend::IndexSelect(const ConstTensorView& x, int64_t dim,
                                        const ConstTensorView& index, const TensorView& out) {
  constexpr absl::string_view kOp = "index_select";
  RETURN_IF_ERROR(CheckView(kOp, "x", x));
  RETURN_IF_ERROR(CheckIndexOperand(kOp, index));
  if (index.rank() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, " index must be 0-D or 1-D; got shape ", ShapeToString(index.shape)));
  }
  ASSIGN_OR_RETURN(const int d, NormalizeDim(kOp, dim, x.rank()));
  const int64_t count = index.num_elements();
  if (x.rank() == 0 && count != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, " of a 0-dim x takes one index; got ", count));
  }
  Shape out_shape = x.shape;
  if (x.rank() > 0) out_shape[d] = count;
  RETURN_IF_ERROR(CheckOperand(kOp, "out", out, x.dtype, out_shape));
  const Shape xs = AtLeast1D(x.shape);
  if (count == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckIndicesWithin(kOp, index, 0, xs[d], xs[d]));
  if (out.num_elements() == 0) return absl::OkStatus();
  IndexSelectArgs args{x.dtype, 1, xs[d], 1, count, x.data, index.data, out.data};
  for (int k = 0; k < d; ++k) args.outer *= xs[k];
  for (int k = d + 1; k < static_cast<int>(xs.size()); ++k) args.inner *= xs[k];
  return DoIndexSelect(args);
}

absl::Status KernelBackend::WrapIndices(const TensorView& index, int64_t size) {
  constexpr absl::string_view kOp = "wrap indices";
  RETURN_IF_ERROR(CheckIndexOperand(kOp, index));
  if (size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, " of a dim of size ", size, ": the size must be >= 0"));
  }
  if (index.num_elements() == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckIndicesWithin(kOp, index, -size, size, size));
  return DoWrapIndices(index.data, index.num_elements(), size);
}

}  // namespace tessera::kernels
