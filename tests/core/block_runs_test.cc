// BlockRuns and BlockCursor against PackBlock / UnpackBlock: splitting a whole tensor's flat byte
// stream, window by window, gives each block's bytes; joining the blocks' streams gives the tensor.

#include "core/sharding/block_runs.h"

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/host_tensor.h"
#include "core/sharding/chunk.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

struct Block {
  std::vector<int64_t> offset;
  Shape sizes;
};

// Every block of a grid that cuts each dim of `shape` into `parts` torch.chunk pieces.
std::vector<Block> Grid(const Shape& shape, const std::vector<int64_t>& parts) {
  std::vector<Block> blocks{{{}, {}}};
  for (size_t d = 0; d < shape.size(); ++d) {
    std::vector<Block> next;
    for (const Block& b : blocks) {
      for (int64_t r = 0; r < parts[d]; ++r) {
        const ChunkRange c = ChunkOf(shape[d], parts[d], r);
        Block n = b;
        n.offset.push_back(c.offset);
        n.sizes.push_back(c.size);
        next.push_back(n);
      }
    }
    blocks = next;
  }
  return blocks;
}

HostTensor Iota(const Shape& shape) {
  HostTensor t = HostTensor::Uninitialized(DType::kInt32, shape).value();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const int32_t v = static_cast<int32_t>(i);
    std::memcpy(t.data() + i * 4, &v, 4);
  }
  return t;
}

using Case = std::tuple<Shape, std::vector<int64_t>, int64_t>;  // shape, parts per dim, window
class BlockRunsTest : public ::testing::TestWithParam<Case> {};

TEST_P(BlockRunsTest, SplitsAndJoinsLikePackBlock) {
  const auto& [shape, parts, window] = GetParam();
  const HostTensor full = Iota(shape);
  const int64_t n = full.num_elements();
  const std::vector<Block> blocks = Grid(shape, parts);
  std::vector<BlockRuns> runs;
  for (const Block& b : blocks) runs.emplace_back(shape, b.offset, b.sizes);

  // Split: the whole tensor streamed window by window into each block.
  std::vector<BlockCursor> cursors;
  for (const BlockRuns& r : runs) cursors.emplace_back(r, 4);
  std::vector<std::string> got(blocks.size());
  for (int64_t a = 0; a < n; a += window) {
    const int64_t e = std::min(n, a + window);
    const char* bytes = reinterpret_cast<const char*>(full.data()) + a * 4;
    for (size_t i = 0; i < blocks.size(); ++i) {
      // A window wholly inside one block is passed on whole (Skip), as the coordinator does.
      if (cursors[i].BytesIn(a, e) == (e - a) * 4) {
        cursors[i].Skip(a, e);
        got[i].append(bytes, static_cast<size_t>((e - a) * 4));
      } else {
        cursors[i].Take(a, e, bytes, got[i]);
      }
    }
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    const HostTensor want = PackBlock(full, blocks[i].offset, blocks[i].sizes).value();
    ASSERT_EQ(got[i].size(), want.nbytes()) << "block " << i;
    EXPECT_EQ(std::memcmp(got[i].data(), want.data(), want.nbytes()), 0) << "block " << i;
    EXPECT_TRUE(cursors[i].done());
  }

  // Join: each block's bytes, consumed as the windows need them, rebuild the tensor.
  std::vector<BlockCursor> joins;
  for (const BlockRuns& r : runs) joins.emplace_back(r, 4);
  std::vector<int64_t> used(blocks.size(), 0);
  HostTensor rebuilt = HostTensor::Zeros(DType::kInt32, shape).value();
  for (int64_t a = 0; a < n; a += window) {
    const int64_t e = std::min(n, a + window);
    for (size_t i = 0; i < blocks.size(); ++i) {
      const int64_t need = joins[i].BytesIn(a, e);
      ASSERT_LE(used[i] + need, static_cast<int64_t>(got[i].size()));
      char* out = reinterpret_cast<char*>(rebuilt.data()) + a * 4;
      if (need == (e - a) * 4 && i % 2 == 0) {  // the whole window from one block, moved whole
        std::memcpy(out, got[i].data() + used[i], static_cast<size_t>(need));
        joins[i].Skip(a, e);
      } else {
        EXPECT_EQ(joins[i].Give(a, e, got[i].data() + used[i], out), need);
      }
      used[i] += need;
    }
  }
  EXPECT_EQ(std::memcmp(rebuilt.data(), full.data(), full.nbytes()), 0);
}

INSTANTIATE_TEST_SUITE_P(Grids, BlockRunsTest,
                         ::testing::Combine(::testing::Values(Shape{10}, Shape{5, 7}, Shape{4, 6},
                                                              Shape{3, 4, 5}, Shape{2, 1, 9},
                                                              Shape{0, 4}),
                                            ::testing::Values(std::vector<int64_t>{1, 1, 1},
                                                              std::vector<int64_t>{4, 1, 1},
                                                              std::vector<int64_t>{1, 4, 1},
                                                              std::vector<int64_t>{2, 2, 3},
                                                              std::vector<int64_t>{3, 1, 4}),
                                            ::testing::Values(1, 3, 16, 1000)));

}  // namespace
}  // namespace tessera
