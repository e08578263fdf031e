#include "core/host_tensor.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::byte> RandomBytes(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::byte> out(n);
  for (std::byte& b : out) b = static_cast<std::byte>(byte(rng));
  return out;
}

HostTensor RandomTensor(DType dtype, const Shape& shape, std::mt19937& rng) {
  const size_t n = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  return HostTensor::FromBytes(dtype, shape, RandomBytes(n, rng)).value();
}

std::vector<int64_t> Unravel(std::span<const int64_t> shape, int64_t index) {
  std::vector<int64_t> c(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    c[d] = index % shape[d];
    index /= shape[d];
  }
  return c;
}

// Row-major element index of `coordinate` in `shape`.
int64_t Ravel(std::span<const int64_t> shape, std::span<const int64_t> coordinate) {
  int64_t index = 0;
  for (size_t d = 0; d < shape.size(); ++d) index = index * shape[d] + coordinate[d];
  return index;
}

// Naive PackBlock: element by element, through coordinates.
std::vector<std::byte> NaivePack(const HostTensor& src, const std::vector<int64_t>& offsets,
                                 const Shape& sizes) {
  const size_t elem = DTypeSize(src.dtype());
  std::vector<std::byte> out(static_cast<size_t>(NumElements(sizes)) * elem);
  for (int64_t i = 0; i < NumElements(sizes); ++i) {
    std::vector<int64_t> c = Unravel(sizes, i);
    for (size_t d = 0; d < c.size(); ++d) c[d] += offsets[d];
    std::memcpy(out.data() + i * elem, src.data() + Ravel(src.shape(), c) * elem, elem);
  }
  return out;
}

// Naive UnpackBlock on a copy of `dst`'s bytes.
std::vector<std::byte> NaiveUnpack(const HostTensor& block, const std::vector<int64_t>& offsets,
                                   const HostTensor& dst) {
  const size_t elem = DTypeSize(dst.dtype());
  std::vector<std::byte> out(dst.bytes().begin(), dst.bytes().end());
  for (int64_t i = 0; i < block.num_elements(); ++i) {
    std::vector<int64_t> c = Unravel(block.shape(), i);
    for (size_t d = 0; d < c.size(); ++d) c[d] += offsets[d];
    std::memcpy(out.data() + Ravel(dst.shape(), c) * elem, block.data() + i * elem, elem);
  }
  return out;
}

std::vector<std::byte> Bytes(const HostTensor& t) { return {t.bytes().begin(), t.bytes().end()}; }

// --- construction --------------------------------------------------------------------------

class HostTensorDTypeTest : public ::testing::TestWithParam<DType> {};

TEST_P(HostTensorDTypeTest, ZerosIsZeroFilledAndAligned) {
  for (const Shape& shape : {Shape{}, Shape{7}, Shape{3, 5}, Shape{2, 0, 4}, Shape{2, 3, 4, 5}}) {
    absl::StatusOr<HostTensor> t = HostTensor::Zeros(GetParam(), shape);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->dtype(), GetParam());
    EXPECT_EQ(t->shape(), shape);
    EXPECT_EQ(t->rank(), static_cast<int>(shape.size()));
    EXPECT_EQ(t->num_elements(), NumElements(shape));
    EXPECT_EQ(t->nbytes(), static_cast<size_t>(NumElements(shape)) * DTypeSize(GetParam()));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data()) % 64, 0u);
    for (std::byte b : t->bytes()) ASSERT_EQ(b, std::byte{0});
  }
}

TEST_P(HostTensorDTypeTest, FromBytesCopiesAndCloneIsDeep) {
  std::mt19937 rng(1);
  const Shape shape{3, 4};
  std::vector<std::byte> bytes = RandomBytes(12 * DTypeSize(GetParam()), rng);
  absl::StatusOr<HostTensor> t = HostTensor::FromBytes(GetParam(), shape, bytes);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Bytes(*t), bytes);
  bytes[0] ^= std::byte{0xff};  // the tensor owns a copy
  EXPECT_NE(Bytes(*t), bytes);

  HostTensor c = t->Clone();
  EXPECT_TRUE(c.BitEqual(*t));
  EXPECT_NE(c.data(), t->data());
  c.data()[c.nbytes() - 1] ^= std::byte{1};
  EXPECT_FALSE(c.BitEqual(*t));
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, HostTensorDTypeTest, ::testing::ValuesIn(kAllDTypes),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(HostTensorTest, NegativeShapeIsInvalidArgument) {
  EXPECT_EQ(HostTensor::Zeros(DType::kFloat32, {2, -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HostTensor::Uninitialized(DType::kInt8, {-3}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HostTensor::FromBytes(DType::kInt8, {-1}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HostTensorTest, ReshapeKeepsTheBytesAndRefusesAnotherCount) {
  HostTensor t = HostTensor::FromValues<float>(DType::kFloat32, {2, 3}, {0, 1, 2, 3, 4, 5});
  const std::byte* data = t.data();
  ASSERT_TRUE(t.Reshape({3, 2}).ok());
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.data(), data);
  const absl::Status s = t.Reshape({4, 2});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("[3, 2]"));
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("[4, 2]"));
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
}

TEST(HostTensorTest, FromBytesSizeMismatchNamesBothSizes) {
  std::vector<std::byte> bytes(20);
  absl::StatusOr<HostTensor> t = HostTensor::FromBytes(DType::kFloat32, {2, 3}, bytes);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("24 bytes"));
  EXPECT_THAT(t.status().message(), HasSubstr("got 20"));
  EXPECT_THAT(t.status().message(), HasSubstr("[2, 3]"));
  EXPECT_THAT(t.status().message(), HasSubstr("float32"));
  EXPECT_FALSE(HostTensor::FromBytes(DType::kFloat64, {2}, std::vector<std::byte>(17)).ok());
  EXPECT_TRUE(HostTensor::FromBytes(DType::kFloat64, {0, 5}, {}).ok());
}

TEST(HostTensorTest, FromValuesAndTypedAccess) {
  HostTensor t = HostTensor::FromValues<int32_t>(DType::kInt32, {2, 2}, {1, -2, 3, -4});
  EXPECT_EQ(t.data_as<int32_t>()[1], -2);
  t.data_as<int32_t>()[3] = 9;
  EXPECT_EQ(std::as_const(t).data_as<int32_t>()[3], 9);
}

TEST(HostTensorTest, BitEqualComparesDTypeShapeAndBytes) {
  HostTensor a = HostTensor::FromValues<int32_t>(DType::kInt32, {2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor same = HostTensor::FromValues<int32_t>(DType::kInt32, {2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor other_dtype =
      HostTensor::FromValues<int32_t>(DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor other_shape =
      HostTensor::FromValues<int32_t>(DType::kInt32, {3, 2}, {1, 2, 3, 4, 5, 6});
  HostTensor other_value =
      HostTensor::FromValues<int32_t>(DType::kInt32, {2, 3}, {1, 2, 3, 4, 5, 7});
  EXPECT_TRUE(a.BitEqual(same));
  EXPECT_FALSE(a.BitEqual(other_dtype));
  EXPECT_FALSE(a.BitEqual(other_shape));
  EXPECT_FALSE(a.BitEqual(other_value));
  // Bitwise: +0.0 and -0.0 differ, a NaN equals itself.
  HostTensor pz = HostTensor::FromValues<float>(DType::kFloat32, {1}, {0.0f});
  HostTensor nz = HostTensor::FromValues<float>(DType::kFloat32, {1}, {-0.0f});
  EXPECT_FALSE(pz.BitEqual(nz));
  HostTensor nan = HostTensor::FromValues<float>(DType::kFloat32, {1}, {std::nanf("")});
  EXPECT_TRUE(nan.BitEqual(nan.Clone()));
  // Empty tensors compare by dtype and shape only.
  EXPECT_TRUE(
      HostTensor::Zeros(DType::kInt8, {0, 3})->BitEqual(*HostTensor::Zeros(DType::kInt8, {0, 3})));
  EXPECT_FALSE(
      HostTensor::Zeros(DType::kInt8, {0, 3})->BitEqual(*HostTensor::Zeros(DType::kInt8, {3, 0})));
}

// --- views ---------------------------------------------------------------------------------

TEST(HostTensorViewTest, BlockIsAViewIntoTheTensor) {
  HostTensor t = HostTensor::FromValues<int32_t>(DType::kInt32, {3, 4},
                                                 {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  const std::vector<int64_t> offsets{1, 2}, sizes{2, 2};
  absl::StatusOr<StridedView> v = t.Block(offsets, sizes);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(v->shape, ElementsAre(2, 2));
  EXPECT_THAT(v->strides, ElementsAre(4, 1));
  EXPECT_EQ(v->dtype, DType::kInt32);
  EXPECT_EQ(reinterpret_cast<int32_t*>(v->data)[0], 6);
  reinterpret_cast<int32_t*>(v->data)[5] = -1;  // element (1, 1) of the block is (2, 3)
  EXPECT_EQ(t.data_as<int32_t>()[11], -1);

  absl::StatusOr<ConstStridedView> n = std::as_const(t).Narrow(-1, 1, 2);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_THAT(n->shape, ElementsAre(3, 2));
  EXPECT_THAT(n->strides, ElementsAre(4, 1));
  EXPECT_EQ(reinterpret_cast<const int32_t*>(n->data)[0], 1);
  n = std::as_const(t).Narrow(0, 2, 1);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_THAT(n->shape, ElementsAre(1, 4));
  EXPECT_EQ(reinterpret_cast<const int32_t*>(n->data)[0], 8);
}

TEST(HostTensorViewTest, WholeTensorView) {
  HostTensor t = *HostTensor::Zeros(DType::kFloat64, {2, 3, 4});
  StridedView v = t.View();
  EXPECT_EQ(v.data, t.data());
  EXPECT_THAT(v.shape, ElementsAre(2, 3, 4));
  EXPECT_THAT(v.strides, ElementsAre(12, 4, 1));
  ConstStridedView cv = v;  // mutable views convert to const ones
  EXPECT_EQ(cv.data, t.data());
}

struct BadBlock {
  std::vector<int64_t> offsets, sizes;
  const char* message;
};

class BlockBoundsTest : public ::testing::TestWithParam<BadBlock> {};

TEST_P(BlockBoundsTest, IsInvalidArgument) {
  const HostTensor t = *HostTensor::Zeros(DType::kFloat32, {3, 4});
  absl::StatusOr<ConstStridedView> v = t.Block(GetParam().offsets, GetParam().sizes);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(v.status().message(), HasSubstr(GetParam().message));
  absl::StatusOr<HostTensor> packed = PackBlock(t, GetParam().offsets, GetParam().sizes);
  EXPECT_EQ(packed.status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BlockBoundsTest,
    ::testing::Values(BadBlock{{0, 0}, {4, 1}, "(dim 0)"}, BadBlock{{1, 3}, {1, 2}, "(dim 1)"},
                      BadBlock{{-1, 0}, {1, 1}, "(dim 0)"}, BadBlock{{0, 0}, {1, -1}, "(dim 1)"},
                      BadBlock{{3, 0}, {1, 4}, "[3, 4]"}, BadBlock{{0}, {3}, "1 offsets"},
                      BadBlock{{0, 0}, {3, 4, 1}, "3 sizes"},
                      BadBlock{{0, 0, 0}, {1, 1, 1}, "3 offsets"}));

TEST(BlockBoundsTest, EmptyBlocksAtTheEndAreInside) {
  const HostTensor t = *HostTensor::Zeros(DType::kFloat32, {3, 4});
  EXPECT_TRUE(t.Block(std::vector<int64_t>{3, 0}, std::vector<int64_t>{0, 4}).ok());
  EXPECT_TRUE(t.Block(std::vector<int64_t>{0, 4}, std::vector<int64_t>{3, 0}).ok());
  EXPECT_FALSE(t.Block(std::vector<int64_t>{4, 0}, std::vector<int64_t>{0, 4}).ok());
}

TEST(NarrowTest, BoundsErrors) {
  const HostTensor t = *HostTensor::Zeros(DType::kFloat32, {3, 4});
  EXPECT_EQ(t.Narrow(2, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Narrow(-3, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Narrow(1, 3, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Narrow(0, -1, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Narrow(0, 1, -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(t.Narrow(1, 4, 0).ok());
  EXPECT_EQ(HostTensor::Zeros(DType::kFloat32, {})->Narrow(0, 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- PackBlock / UnpackBlock against naive element loops --------------------------------------

// A random block of `shape`: sometimes the whole tensor, sometimes empty in one dim.
void RandomBlock(const Shape& shape, std::mt19937& rng, int kind, std::vector<int64_t>& offsets,
                 Shape& sizes) {
  offsets.assign(shape.size(), 0);
  sizes = shape;
  if (kind == 0) return;  // the full tensor
  for (size_t d = 0; d < shape.size(); ++d) {
    offsets[d] = std::uniform_int_distribution<int64_t>(0, shape[d])(rng);
    sizes[d] = std::uniform_int_distribution<int64_t>(0, shape[d] - offsets[d])(rng);
  }
  if (kind == 1 && !shape.empty()) {  // empty along one dim
    const size_t d = std::uniform_int_distribution<size_t>(0, shape.size() - 1)(rng);
    offsets[d] = std::uniform_int_distribution<int64_t>(0, shape[d])(rng);
    sizes[d] = 0;
  }
}

class PackBlockTest : public ::testing::TestWithParam<std::tuple<DType, int, int>> {};

TEST_P(PackBlockTest, MatchesNaiveElementLoops) {
  const auto [dtype, rank, seed] = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(seed * 131 + rank * 7 + static_cast<int>(dtype)));
  for (int trial = 0; trial < 40; ++trial) {
    Shape shape(rank);
    for (int64_t& s : shape) s = std::uniform_int_distribution<int64_t>(1, 6)(rng);
    if (trial % 10 == 9) shape[trial % rank] = 0;  // an empty tensor now and then
    const HostTensor src = RandomTensor(dtype, shape, rng);
    std::vector<int64_t> offsets;
    Shape sizes;
    RandomBlock(shape, rng, trial % 4, offsets, sizes);
    SCOPED_TRACE(absl::StrCat("shape ", ShapeToString(shape), " offsets ", ShapeToString(offsets),
                              " sizes ", ShapeToString(sizes)));

    absl::StatusOr<HostTensor> packed = PackBlock(src, offsets, sizes);
    ASSERT_TRUE(packed.ok()) << packed.status();
    EXPECT_EQ(packed->dtype(), dtype);
    EXPECT_EQ(packed->shape(), sizes);
    ASSERT_EQ(Bytes(*packed), NaivePack(src, offsets, sizes));

    HostTensor dst = RandomTensor(dtype, shape, rng);
    const std::vector<std::byte> want = NaiveUnpack(*packed, offsets, dst);
    ASSERT_TRUE(UnpackBlock(*packed, offsets, dst).ok());
    ASSERT_EQ(Bytes(dst), want);

    // Unpacking a packed block into a copy of its source gives the source back.
    HostTensor copy = src.Clone();
    ASSERT_TRUE(UnpackBlock(*packed, offsets, copy).ok());
    ASSERT_TRUE(copy.BitEqual(src));
  }
}

INSTANTIATE_TEST_SUITE_P(ElementSizesRanksSeeds, PackBlockTest,
                         ::testing::Combine(::testing::Values(DType::kInt8, DType::kFloat16,
                                                              DType::kFloat32, DType::kFloat64),
                                            ::testing::Range(1, 5), ::testing::Range(0, 3)),
                         [](const auto& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_rank",
                                               std::get<1>(info.param), "_seed",
                                               std::get<2>(info.param));
                         });

TEST(PackBlockTest, HandWorked) {
  HostTensor t = HostTensor::FromValues<int16_t>(DType::kFloat16, {3, 4},
                                                 {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  absl::StatusOr<HostTensor> b =
      PackBlock(t, std::vector<int64_t>{1, 1}, std::vector<int64_t>{2, 3});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_THAT(std::vector<int16_t>(b->data_as<int16_t>(), b->data_as<int16_t>() + 6),
              ElementsAre(5, 6, 7, 9, 10, 11));
  HostTensor scalar = HostTensor::FromValues<int64_t>(DType::kInt64, {}, {42});
  absl::StatusOr<HostTensor> s = PackBlock(scalar, {}, {});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->BitEqual(scalar));
}

TEST(UnpackBlockTest, LeavesDestinationUntouchedOnError) {
  std::mt19937 rng(9);
  HostTensor dst = RandomTensor(DType::kFloat32, {4, 5}, rng);
  const HostTensor before = dst.Clone();

  HostTensor wrong_dtype = RandomTensor(DType::kInt32, {2, 2}, rng);
  absl::Status s = UnpackBlock(wrong_dtype, std::vector<int64_t>{0, 0}, dst);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("int32"));
  EXPECT_THAT(s.message(), HasSubstr("float32"));

  HostTensor block = RandomTensor(DType::kFloat32, {2, 3}, rng);
  EXPECT_EQ(UnpackBlock(block, std::vector<int64_t>{3, 0}, dst).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UnpackBlock(block, std::vector<int64_t>{0, 3}, dst).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UnpackBlock(block, std::vector<int64_t>{-1, 0}, dst).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UnpackBlock(block, std::vector<int64_t>{0}, dst).code(),
            absl::StatusCode::kInvalidArgument);
  HostTensor rank3 = RandomTensor(DType::kFloat32, {1, 2, 3}, rng);
  EXPECT_EQ(UnpackBlock(rank3, std::vector<int64_t>{0, 0, 0}, dst).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(dst.BitEqual(before));
}

// --- CopyStrided with non-contiguous views on both sides -------------------------------------

// A view of `shape` inside a larger buffer: dims permuted in memory and padded, starting at an
// offset, so that neither its strides nor its data are contiguous.
struct PaddedView {
  HostTensor base;
  StridedView view;
};

PaddedView MakePaddedView(DType dtype, const Shape& shape, std::mt19937& rng) {
  const size_t rank = shape.size();
  std::vector<int> pos(rank);
  std::iota(pos.begin(), pos.end(), 0);
  std::shuffle(pos.begin(), pos.end(), rng);  // view dim i lives at base dim pos[i]
  Shape base_shape(rank);
  std::vector<int64_t> start(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t pad = std::uniform_int_distribution<int64_t>(0, 2)(rng);
    base_shape[pos[i]] = shape[i] + pad;
    start[i] = std::uniform_int_distribution<int64_t>(0, pad)(rng);
  }
  PaddedView p{RandomTensor(dtype, base_shape, rng), {}};
  const std::vector<int64_t> base_strides = ContiguousStrides(base_shape);
  p.view.dtype = dtype;
  p.view.shape = shape;
  p.view.strides.resize(rank);
  int64_t first = 0;
  for (size_t i = 0; i < rank; ++i) {
    p.view.strides[i] = base_strides[pos[i]];
    first += start[i] * p.view.strides[i];
  }
  p.view.data = p.base.data() + first * static_cast<int64_t>(DTypeSize(dtype));
  return p;
}

// Byte offset of element `index` (row-major over the view's shape) from the view's data.
int64_t ViewByteOffset(const StridedView& v, int64_t index) {
  const std::vector<int64_t> c = Unravel(v.shape, index);
  int64_t off = 0;
  for (size_t d = 0; d < c.size(); ++d) off += c[d] * v.strides[d];
  return off * static_cast<int64_t>(DTypeSize(v.dtype));
}

class CopyStridedTest : public ::testing::TestWithParam<std::tuple<DType, int, int>> {};

TEST_P(CopyStridedTest, MatchesNaiveCopyAndTouchesNothingElse) {
  const auto [dtype, rank, seed] = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(seed * 977 + rank * 13 + static_cast<int>(dtype)));
  const size_t elem = DTypeSize(dtype);
  for (int trial = 0; trial < 30; ++trial) {
    Shape shape(rank);
    for (int64_t& s : shape) s = std::uniform_int_distribution<int64_t>(1, 5)(rng);
    PaddedView src = MakePaddedView(dtype, shape, rng);
    PaddedView dst = MakePaddedView(dtype, shape, rng);
    if (trial % 3 == 0) {  // a contiguous destination
      dst.base = RandomTensor(dtype, shape, rng);
      dst.view = dst.base.View();
    }
    std::vector<std::byte> want = Bytes(dst.base);
    const int64_t dst_start = dst.view.data - dst.base.data();
    for (int64_t i = 0; i < NumElements(shape); ++i) {
      std::memcpy(want.data() + dst_start + ViewByteOffset(dst.view, i),
                  src.view.data + ViewByteOffset(src.view, i), elem);
    }
    CopyStrided(src.view, dst.view);
    ASSERT_EQ(Bytes(dst.base), want)
        << "shape " << ShapeToString(shape) << " src strides " << ShapeToString(src.view.strides)
        << " dst strides " << ShapeToString(dst.view.strides);
  }
}

INSTANTIATE_TEST_SUITE_P(ElementSizesRanksSeeds, CopyStridedTest,
                         ::testing::Combine(::testing::Values(DType::kBool, DType::kBFloat16,
                                                              DType::kInt32, DType::kInt64),
                                            ::testing::Range(1, 5), ::testing::Range(0, 3)),
                         [](const auto& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_rank",
                                               std::get<1>(info.param), "_seed",
                                               std::get<2>(info.param));
                         });

TEST(CopyStridedTest, TransposeHandWorked) {
  // src is the transpose of a [2, 3] tensor: shape [3, 2], strides [1, 3].
  HostTensor a = HostTensor::FromValues<int32_t>(DType::kInt32, {2, 3}, {0, 1, 2, 3, 4, 5});
  ConstStridedView src{a.data(), DType::kInt32, {3, 2}, {1, 3}};
  HostTensor out = *HostTensor::Zeros(DType::kInt32, {3, 2});
  CopyStrided(src, out.View());
  EXPECT_THAT(std::vector<int32_t>(out.data_as<int32_t>(), out.data_as<int32_t>() + 6),
              ElementsAre(0, 3, 1, 4, 2, 5));
}

TEST(CopyStridedTest, SingleElementAndEmptyViews) {
  HostTensor a = HostTensor::FromValues<int32_t>(DType::kInt32, {1, 1}, {7});
  HostTensor b = *HostTensor::Zeros(DType::kInt32, {1, 1});
  CopyStrided(a.View(), b.View());
  EXPECT_EQ(b.data_as<int32_t>()[0], 7);

  HostTensor c = HostTensor::FromValues<int32_t>(DType::kInt32, {2}, {1, 2});
  ConstStridedView empty{a.data(), DType::kInt32, {0, 3}, {3, 1}};
  StridedView target{c.data(), DType::kInt32, {0, 3}, {3, 1}};
  CopyStrided(empty, target);
  EXPECT_EQ(c.data_as<int32_t>()[0], 1);
  EXPECT_EQ(c.data_as<int32_t>()[1], 2);
}

}  // namespace
}  // namespace tessera
