#include "core/host_tensor.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <new>
#include <string>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "core/host_memory.h"
#include "core/status_macros.h"

namespace tessera {

StridedCopyLayout MergeCopyLayout(const ConstStridedView& src, const StridedView& dst) {
  StridedCopyLayout m;
  for (size_t i = 0; i < src.shape.size(); ++i) {
    if (src.shape[i] == 1) continue;
    if (!m.shape.empty() && m.src_strides.back() == src.strides[i] * src.shape[i] &&
        m.dst_strides.back() == dst.strides[i] * src.shape[i]) {
      m.shape.back() *= src.shape[i];
      m.src_strides.back() = src.strides[i];
      m.dst_strides.back() = dst.strides[i];
      continue;
    }
    m.shape.push_back(src.shape[i]);
    m.src_strides.push_back(src.strides[i]);
    m.dst_strides.push_back(dst.strides[i]);
  }
  return m;
}

namespace {

absl::Status CheckBlock(const Shape& shape, std::span<const int64_t> offsets,
                        std::span<const int64_t> sizes) {
  if (offsets.size() != shape.size() || sizes.size() != shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat("block of ", offsets.size(), " offsets and ",
                                                   sizes.size(), " sizes for a tensor of shape ",
                                                   ShapeToString(shape)));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (offsets[i] < 0 || sizes[i] < 0 || offsets[i] + sizes[i] > shape[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "block at offsets ", ShapeToString(offsets), " of size ", ShapeToString(sizes),
          " does not fit in shape ", ShapeToString(shape), " (dim ", i, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void CopyStrided(const ConstStridedView& src, const StridedView& dst) {
  if (NumElements(src.shape) == 0) return;
  const size_t elem = DTypeSize(src.dtype);
  StridedCopyLayout m = MergeCopyLayout(src, dst);
  if (m.shape.empty()) {  // a single element
    std::memcpy(dst.data, src.data, elem);
    return;
  }
  const int rank = static_cast<int>(m.shape.size());
  // The innermost loop is a memcpy when both sides are contiguous there.
  const bool inner_contiguous = m.src_strides.back() == 1 && m.dst_strides.back() == 1;
  const int outer_rank = inner_contiguous ? rank - 1 : rank;
  const size_t run = inner_contiguous ? static_cast<size_t>(m.shape.back()) * elem : elem;
  std::vector<int64_t> index(outer_rank, 0);
  const std::byte* s = src.data;
  std::byte* d = dst.data;
  while (true) {
    std::memcpy(d, s, run);
    int i = outer_rank - 1;
    for (; i >= 0; --i) {
      s += m.src_strides[i] * static_cast<int64_t>(elem);
      d += m.dst_strides[i] * static_cast<int64_t>(elem);
      if (++index[i] < m.shape[i]) break;
      s -= m.src_strides[i] * m.shape[i] * static_cast<int64_t>(elem);
      d -= m.dst_strides[i] * m.shape[i] * static_cast<int64_t>(elem);
      index[i] = 0;
    }
    if (i < 0) return;
  }
}

HostTensor::HostTensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  const size_t n = std::max<size_t>(nbytes(), 1);
  data_.reset(static_cast<std::byte*>(::operator new[](n, std::align_val_t{64})));
  AdviseHugePages(data_.get(), n);
}

absl::StatusOr<HostTensor> HostTensor::Uninitialized(DType dtype, Shape shape) {
  RETURN_IF_ERROR(ValidateTensorShape(dtype, shape));
  return HostTensor(dtype, std::move(shape));
}

absl::StatusOr<HostTensor> HostTensor::Zeros(DType dtype, Shape shape) {
  absl::StatusOr<HostTensor> t = Uninitialized(dtype, std::move(shape));
  if (t.ok()) std::memset(t->data(), 0, t->nbytes());
  return t;
}

HostTensor HostTensor::ZerosOfValidShape(DType dtype, Shape shape) {
  if (absl::Status s = ValidateTensorShape(dtype, shape); !s.ok()) {
    std::fprintf(stderr, "HostTensor::ZerosOfValidShape: %s\n", std::string(s.message()).c_str());
    std::abort();
  }
  HostTensor t(dtype, std::move(shape));
  std::memset(t.data(), 0, t.nbytes());
  return t;
}

absl::StatusOr<HostTensor> HostTensor::FromBytes(DType dtype, Shape shape,
                                                 std::span<const std::byte> bytes) {
  RETURN_IF_ERROR(ValidateTensorShape(dtype, shape));
  const size_t want = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  if (bytes.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeToString(shape), " of ",
                                                   DTypeName(dtype), " needs ", want,
                                                   " bytes, got ", bytes.size()));
  }
  HostTensor t(dtype, std::move(shape));
  if (want > 0) std::memcpy(t.data(), bytes.data(), want);  // an empty span may hold nullptr
  return t;
}

absl::Status HostTensor::Reshape(Shape shape) {
  if (NumElements(shape) != num_elements() ||
      absl::c_any_of(shape, [](int64_t d) { return d < 0; })) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reshape ", ShapeToString(shape_), " to ", ShapeToString(shape)));
  }
  shape_ = std::move(shape);
  return absl::OkStatus();
}

HostTensor HostTensor::Clone() const {
  HostTensor t(dtype_, shape_);
  if (nbytes() > 0) std::memcpy(t.data(), data(), nbytes());
  return t;
}

StridedView HostTensor::View() { return {data(), dtype_, shape_, ContiguousStrides(shape_)}; }

ConstStridedView HostTensor::View() const {
  return {data(), dtype_, shape_, ContiguousStrides(shape_)};
}

absl::StatusOr<StridedView> HostTensor::Block(std::span<const int64_t> offsets,
                                              std::span<const int64_t> sizes) {
  ASSIGN_OR_RETURN(ConstStridedView v, std::as_const(*this).Block(offsets, sizes));
  return StridedView{const_cast<std::byte*>(v.data), v.dtype, v.shape, v.strides};
}

absl::StatusOr<ConstStridedView> HostTensor::Block(std::span<const int64_t> offsets,
                                                   std::span<const int64_t> sizes) const {
  return BlockOf(data(), dtype_, shape_, offsets, sizes);
}

absl::StatusOr<ConstStridedView> BlockOf(const std::byte* data, DType dtype, const Shape& shape,
                                         std::span<const int64_t> offsets,
                                         std::span<const int64_t> sizes) {
  RETURN_IF_ERROR(CheckBlock(shape, offsets, sizes));
  ConstStridedView v{data, dtype, Shape(sizes.begin(), sizes.end()), ContiguousStrides(shape)};
  int64_t start = 0;
  for (size_t i = 0; i < shape.size(); ++i) start += offsets[i] * v.strides[i];
  if (NumElements(sizes) > 0) v.data += start * static_cast<int64_t>(DTypeSize(dtype));
  return v;
}

absl::StatusOr<StridedView> BlockOf(std::byte* data, DType dtype, const Shape& shape,
                                    std::span<const int64_t> offsets,
                                    std::span<const int64_t> sizes) {
  ASSIGN_OR_RETURN(ConstStridedView v,
                   BlockOf(static_cast<const std::byte*>(data), dtype, shape, offsets, sizes));
  return StridedView{const_cast<std::byte*>(v.data), v.dtype, v.shape, v.strides};
}

absl::StatusOr<ConstStridedView> HostTensor::Narrow(int64_t dim, int64_t start,
                                                    int64_t length) const {
  ASSIGN_OR_RETURN(int d, NormalizeDim(dim, rank()));
  std::vector<int64_t> offsets(shape_.size(), 0);
  Shape sizes = shape_;
  offsets[d] = start;
  sizes[d] = length;
  return Block(offsets, sizes);
}

bool HostTensor::BitEqual(const HostTensor& other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ &&
         (nbytes() == 0 || std::memcmp(data(), other.data(), nbytes()) == 0);
}

absl::StatusOr<HostTensor> PackBlock(const HostTensor& src, std::span<const int64_t> offsets,
                                     std::span<const int64_t> sizes) {
  ASSIGN_OR_RETURN(ConstStridedView block, src.Block(offsets, sizes));
  ASSIGN_OR_RETURN(HostTensor out,
                   HostTensor::Uninitialized(src.dtype(), Shape(sizes.begin(), sizes.end())));
  CopyStrided(block, out.View());
  return out;
}

absl::Status UnpackBlock(const HostTensor& block, std::span<const int64_t> offsets,
                         HostTensor& dst) {
  if (block.dtype() != dst.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write a ", DTypeName(block.dtype()),
                                                   " block into a ", DTypeName(dst.dtype()),
                                                   " tensor"));
  }
  ASSIGN_OR_RETURN(StridedView target, dst.Block(offsets, block.shape()));
  CopyStrided(block.View(), target);
  return absl::OkStatus();
}

Shape WithDimSize(Shape shape, int dim, int64_t size) {
  shape[dim] = size;
  return shape;
}

absl::StatusOr<HostTensor> SliceAlong(const HostTensor& t, int dim, int64_t start, int64_t length) {
  if (dim < 0 || dim >= t.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim ", dim, " is not a dim of shape ", ShapeToString(t.shape())));
  }
  std::vector<int64_t> offsets(t.shape().size(), 0);
  offsets[dim] = start;
  return PackBlock(t, offsets, WithDimSize(t.shape(), dim, length));
}

absl::Status PlaceAlong(const HostTensor& block, int dim, int64_t offset, HostTensor& dst) {
  if (dim < 0 || dim >= dst.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim ", dim, " is not a dim of shape ", ShapeToString(dst.shape())));
  }
  std::vector<int64_t> offsets(dst.shape().size(), 0);
  offsets[dim] = offset;
  return UnpackBlock(block, offsets, dst);
}

}  // namespace tessera
