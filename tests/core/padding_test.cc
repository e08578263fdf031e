// PadToChunks / UnpadFromChunks against blocks built from slices (SliceAlong + UnpackBlock), over
// shapes × dims × block counts × extra padding × dtypes, and against numbers worked out by hand.

#include "core/sharding/padding.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/sharding/chunk.h"
#include "core/small_integer_tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Block q of a [k, block...] tensor, as a tensor of the block's shape.
HostTensor BlockOf(const HostTensor& blocks, int64_t q) {
  HostTensor b = SliceAlong(blocks, 0, q, 1).value();
  const Shape shape(blocks.shape().begin() + 1, blocks.shape().end());
  EXPECT_TRUE(b.Reshape(shape).ok());
  return b;
}

struct Case {
  Shape shape;
  int dim;
  int64_t k;
  int64_t extra;  // padding past the chunk size along every dim of the block
  DType dtype;
};

class PaddingTest : public ::testing::TestWithParam<Case> {
 protected:
  Shape BlockShape() const {
    const Case& c = GetParam();
    Shape block = WithDimSize(c.shape, c.dim, ChunkSize(c.shape[c.dim], c.k));
    for (int64_t& s : block) s += c.extra;
    return block;
  }
};

TEST_P(PaddingTest, EachBlockIsItsChunkPaddedWithZeros) {
  const Case& c = GetParam();
  const HostTensor t = SmallIntegerTensor(c.dtype, c.shape, 3);
  const Shape block_shape = BlockShape();
  absl::StatusOr<HostTensor> blocks = PadToChunks(t, c.dim, c.k, block_shape);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  Shape want_shape = {c.k};
  want_shape.insert(want_shape.end(), block_shape.begin(), block_shape.end());
  ASSERT_EQ(blocks->shape(), want_shape);
  for (int64_t q = 0; q < c.k; ++q) {
    const ChunkRange r = ChunkOf(c.shape[c.dim], c.k, q);
    HostTensor want = HostTensor::Zeros(c.dtype, block_shape).value();
    const std::vector<int64_t> origin(block_shape.size(), 0);
    ASSERT_TRUE(UnpackBlock(SliceAlong(t, c.dim, r.offset, r.size).value(), origin, want).ok());
    EXPECT_TRUE(BlockOf(*blocks, q).BitEqual(want)) << "block " << q;
  }
}

TEST_P(PaddingTest, UnpadUndoesPad) {
  const Case& c = GetParam();
  const HostTensor t = SmallIntegerTensor(c.dtype, c.shape, 4);
  const HostTensor blocks = PadToChunks(t, c.dim, c.k, BlockShape()).value();
  absl::StatusOr<HostTensor> back = UnpadFromChunks(blocks, c.dim, t.shape());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->BitEqual(t));
}

// IsChunkBlocks holds exactly when padding changes no byte: checked on distinct non-zero values.
TEST_P(PaddingTest, ChunkBlocksAreExactlyTheTensorsWhoseBytesStay) {
  const Case& c = GetParam();
  if (NumElements(c.shape) == 0) GTEST_SKIP() << "no bytes to compare";
  std::vector<int32_t> values(NumElements(c.shape));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int32_t>(i) + 1;
  const HostTensor t = HostTensor::FromValues(DType::kInt32, c.shape, values);
  const Shape block_shape = BlockShape();
  const HostTensor blocks = PadToChunks(t, c.dim, c.k, block_shape).value();
  const bool same_bytes = blocks.nbytes() == t.nbytes() &&
                          std::equal(t.bytes().begin(), t.bytes().end(), blocks.bytes().begin());
  EXPECT_EQ(IsChunkBlocks(t.shape(), c.dim, c.k, block_shape), same_bytes);
}

TEST_P(PaddingTest, ChunkBlocksDataCopiesOnlyWhenItMust) {
  const Case& c = GetParam();
  const HostTensor t = SmallIntegerTensor(c.dtype, c.shape, 7);
  const Shape block_shape = BlockShape();
  const HostTensor want = PadToChunks(t, c.dim, c.k, block_shape).value();
  HostTensor padded;
  absl::StatusOr<const std::byte*> data = ChunkBlocksData(t, c.dim, c.k, block_shape, padded);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(want.shape(), BlocksShape(c.k, block_shape));
  if (IsChunkBlocks(t.shape(), c.dim, c.k, block_shape)) {
    EXPECT_EQ(*data, t.data());
  } else {
    EXPECT_EQ(*data, padded.data());
    EXPECT_TRUE(padded.BitEqual(want));
  }
}

TEST_P(PaddingTest, DefaultBlockIsTheChunkSize) {
  const Case& c = GetParam();
  const HostTensor t = SmallIntegerTensor(c.dtype, c.shape, 6);
  absl::StatusOr<HostTensor> blocks = PadToChunks(t, c.dim, c.k);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  const Shape chunk = WithDimSize(c.shape, c.dim, ChunkSize(c.shape[c.dim], c.k));
  EXPECT_TRUE(blocks->BitEqual(PadToChunks(t, c.dim, c.k, chunk).value()));
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  const std::vector<Shape> shapes = {{8}, {5}, {3}, {0}, {8, 6}, {5, 3}, {1, 3}, {0, 4}, {3, 4, 5}};
  for (const Shape& shape : shapes) {
    for (int dim = 0; dim < static_cast<int>(shape.size()); ++dim) {
      for (int64_t k : {1, 2, 3, 4}) {
        for (int64_t extra : {0, 1}) {
          for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64, DType::kBool}) {
            cases.push_back({shape, dim, k, extra, dtype});
          }
        }
      }
    }
  }
  return cases;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat("shape", absl::StrJoin(c.shape, "x"), "_dim", c.dim, "_k", c.k, "_extra",
                      c.extra, "_", DTypeName(c.dtype));
}

INSTANTIATE_TEST_SUITE_P(Product, PaddingTest, ::testing::ValuesIn(Cases()), CaseName);

std::vector<int32_t> Values(const HostTensor& t) {
  return std::vector<int32_t>(t.data_as<int32_t>(), t.data_as<int32_t>() + t.num_elements());
}

TEST(PadToChunksTest, FiveOverFourIsTwoTwoOneZeroPaddedToTwo) {
  const HostTensor t = HostTensor::FromValues<int32_t>(DType::kInt32, {5}, {1, 2, 3, 4, 5});
  const HostTensor blocks = PadToChunks(t, 0, 4).value();
  EXPECT_EQ(blocks.shape(), (Shape{4, 2}));
  EXPECT_THAT(Values(blocks), ElementsAre(1, 2, 3, 4, 5, 0, 0, 0));
  EXPECT_THAT(Values(UnpadFromChunks(blocks, 0, {5}).value()), ElementsAre(1, 2, 3, 4, 5));
}

TEST(PadToChunksTest, InnerDimPiecesAreGatheredIntoBlocks) {
  // [[1 2 3] [4 5 6]] split in two along dim 1: pieces [[1 2] [4 5]] and [[3] [6]].
  const HostTensor t = HostTensor::FromValues<int32_t>(DType::kInt32, {2, 3}, {1, 2, 3, 4, 5, 6});
  const HostTensor blocks = PadToChunks(t, 1, 2).value();
  EXPECT_EQ(blocks.shape(), (Shape{2, 2, 2}));
  EXPECT_THAT(Values(blocks), ElementsAre(1, 2, 4, 5, 3, 0, 6, 0));
}

TEST(UnpadFromChunksTest, BlocksLongerThanTheChunkKeepTheirLeadingRows) {
  // Two blocks of 3 rows, of which the output keeps the first 2 each (all_to_all of 4 rows).
  const HostTensor blocks =
      HostTensor::FromValues<int32_t>(DType::kInt32, {2, 3, 1}, {1, 2, 9, 3, 4, 9});
  EXPECT_THAT(Values(UnpadFromChunks(blocks, 0, {4, 1}).value()), ElementsAre(1, 2, 3, 4));
}

TEST(PadToChunksTest, BlockTooSmallIsInvalidArgument) {
  const HostTensor t = HostTensor::Zeros(DType::kFloat32, {5, 3}).value();
  absl::StatusOr<HostTensor> blocks = PadToChunks(t, 0, 2, {2, 3});
  ASSERT_EQ(blocks.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(blocks.status().message(), HasSubstr("[2, 3]"));
  EXPECT_EQ(PadToChunks(t, 2, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PadToChunks(t, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(UnpadFromChunksTest, MismatchedBlocksAreInvalidArgumentAndLeaveTheOutput) {
  const HostTensor blocks = HostTensor::Zeros(DType::kFloat32, {2, 2, 3}).value();
  HostTensor out =
      HostTensor::FromValues<float>(DType::kFloat32, {5, 3}, std::vector<float>(15, 7));
  const HostTensor before = out.Clone();
  EXPECT_EQ(UnpadFromChunks(blocks, 0, out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(out.BitEqual(before));
  EXPECT_EQ(UnpadFromChunks(blocks, 0, Shape{4}).status().code(),
            absl::StatusCode::kInvalidArgument);
  HostTensor wrong_dtype = HostTensor::Zeros(DType::kInt32, {4, 3}).value();
  EXPECT_EQ(UnpadFromChunks(blocks, 0, wrong_dtype).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
