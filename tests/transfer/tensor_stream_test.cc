// The one chunk path of tensor streams (transfer/tensor_stream.h): the windows ForEachChunk and
// WriteChunks cut a byte span into, the chunks ChunkWriter makes of bytes that come in pieces, and
// the byte counts TensorByteCount and TensorAssembler accept.

#include "transfer/tensor_stream.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

using Windows = std::vector<std::pair<size_t, size_t>>;  // (offset, size)

static_assert(kChunkBytes == 1048576);

Windows WindowsOf(size_t total) {
  Windows windows;
  EXPECT_TRUE(ForEachChunk(total, [&](size_t offset, size_t size) {
    windows.emplace_back(offset, size);
    return true;
  }));
  return windows;
}

TEST(ForEachChunkTest, CutsIntoWindowsOfAtMostKChunkBytes) {
  EXPECT_EQ(WindowsOf(0), (Windows{{0, 0}}));
  EXPECT_EQ(WindowsOf(1), (Windows{{0, 1}}));
  EXPECT_EQ(WindowsOf(1048576), (Windows{{0, 1048576}}));
  EXPECT_EQ(WindowsOf(1048577), (Windows{{0, 1048576}, {1048576, 1}}));
  EXPECT_EQ(WindowsOf(3145727), (Windows{{0, 1048576}, {1048576, 1048576}, {2097152, 1048575}}));
}

TEST(ForEachChunkTest, TakesAnotherWindowSize) {
  Windows windows;
  EXPECT_TRUE(ForEachChunk(
      10,
      [&](size_t offset, size_t size) {
        windows.emplace_back(offset, size);
        return true;
      },
      4));
  EXPECT_EQ(windows, (Windows{{0, 4}, {4, 4}, {8, 2}}));
}

TEST(ForEachChunkTest, StopsAtTheFirstFalse) {
  int calls = 0;
  EXPECT_FALSE(ForEachChunk(3145727, [&](size_t, size_t) { return ++calls < 2; }));
  EXPECT_EQ(calls, 2);
}

// The sizes of the pieces WriteChunks gives of `total` bytes, checked to be those bytes in order.
std::vector<size_t> WrittenSizes(size_t total) {
  std::string bytes(total, '\0');
  for (size_t i = 0; i < total; ++i) bytes[i] = static_cast<char>(i % 251);
  std::vector<size_t> sizes;
  std::string joined;
  EXPECT_TRUE(WriteChunks(bytes, [&](absl::string_view piece) {
    sizes.push_back(piece.size());
    joined.append(piece.data(), piece.size());
    return true;
  }));
  EXPECT_EQ(joined, bytes);
  return sizes;
}

TEST(WriteChunksTest, WritesTheWindowsInOrder) {
  EXPECT_EQ(WrittenSizes(0), (std::vector<size_t>{0}));
  EXPECT_EQ(WrittenSizes(1), (std::vector<size_t>{1}));
  EXPECT_EQ(WrittenSizes(1048576), (std::vector<size_t>{1048576}));
  EXPECT_EQ(WrittenSizes(1048577), (std::vector<size_t>{1048576, 1}));
  EXPECT_EQ(WrittenSizes(3145727), (std::vector<size_t>{1048576, 1048576, 1048575}));
}

// The sizes of the chunks ChunkWriter sends of bytes given in pieces of `pieces` bytes, checked to
// be those bytes in order.
std::vector<size_t> ChunkSizes(const std::vector<size_t>& pieces) {
  std::string bytes;
  for (size_t n : pieces) {
    for (size_t i = 0; i < n; ++i) bytes.push_back(static_cast<char>(bytes.size() % 251));
  }
  std::vector<size_t> sizes;
  std::string joined;
  ChunkWriter writer([&](std::string chunk) {
    sizes.push_back(chunk.size());
    joined += chunk;
    return true;
  });
  size_t at = 0;
  for (size_t n : pieces) {
    EXPECT_TRUE(writer.Append(absl::string_view(bytes).substr(at, n)));
    at += n;
  }
  EXPECT_TRUE(writer.Finish());
  EXPECT_EQ(joined, bytes);
  return sizes;
}

TEST(ChunkWriterTest, SendsTheChunksOfWriteChunks) {
  EXPECT_EQ(ChunkSizes({}), (std::vector<size_t>{0}));
  EXPECT_EQ(ChunkSizes({0, 0}), (std::vector<size_t>{0}));
  EXPECT_EQ(ChunkSizes({1}), (std::vector<size_t>{1}));
  EXPECT_EQ(ChunkSizes({1048576}), (std::vector<size_t>{1048576}));
  EXPECT_EQ(ChunkSizes({1048577}), (std::vector<size_t>{1048576, 1}));
  EXPECT_EQ(ChunkSizes({3145727}), (std::vector<size_t>{1048576, 1048576, 1048575}));
}

TEST(ChunkWriterTest, JoinsPiecesAcrossChunks) {
  // 1 + 1048576 + 2097150 = 3145727 bytes in three pieces, none on a chunk's edge.
  EXPECT_EQ(ChunkSizes({1, 1048576, 2097150}), (std::vector<size_t>{1048576, 1048576, 1048575}));
  // 1048575 + 1 = 1048576: one full chunk, and no empty one after it.
  EXPECT_EQ(ChunkSizes({1048575, 1}), (std::vector<size_t>{1048576}));
  EXPECT_EQ(ChunkSizes({3, 0, 4}), (std::vector<size_t>{7}));
}

TEST(ChunkWriterTest, SendsNothingAfterAWriteFailed) {
  int calls = 0;
  ChunkWriter writer([&](std::string) {
    ++calls;
    return false;
  });
  EXPECT_FALSE(writer.Append(std::string(3145727, '\1')));
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(writer.Append("x"));
  EXPECT_FALSE(writer.Finish());
  EXPECT_EQ(calls, 1);
}

TEST(TensorByteCountTest, CountsNeitherMoreNorFewerBytesThanTheTensorHas) {
  TensorByteCount count("upload of 'w'", absl::StatusCode::kInvalidArgument, DType::kInt32,
                        Shape{2, 3});
  EXPECT_EQ(count.expected(), 24u);
  ASSERT_TRUE(count.Add(0).ok());
  ASSERT_TRUE(count.Add(20).ok());
  const absl::Status over = count.Add(5);
  EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(over.message(), "upload of 'w' sent more than the 24 bytes of int32[2, 3]");
  EXPECT_EQ(count.received(), 20u);
  const absl::Status missing = count.CheckComplete();
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.message(), "upload of 'w' ended after 20 of the 24 bytes of int32[2, 3]");
  ASSERT_TRUE(count.Add(4).ok());
  EXPECT_TRUE(count.CheckComplete().ok());
  EXPECT_FALSE(count.Add(1).ok());
}

TEST(TensorAssemblerTest, TakesExactlyTheTensorsBytes) {
  TensorAssembler tensor("upload of 'x'", absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(tensor.Start(DType::kFloat32, Shape{3}).ok());
  EXPECT_EQ(tensor.expected(), 12u);
  ASSERT_TRUE(tensor.Append(std::string(5, '\1')).ok());
  ASSERT_TRUE(tensor.Append("").ok());
  EXPECT_EQ(tensor.received(), 5u);
  const absl::Status over = tensor.Append(std::string(8, '\1'));
  EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(over.message(), "upload of 'x' sent more than the 12 bytes of float32[3]");
  EXPECT_EQ(tensor.received(), 5u);
  ASSERT_TRUE(tensor.Append(std::string(7, '\2')).ok());
  absl::StatusOr<HostTensor> t = std::move(tensor).Finish();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->nbytes(), 12u);
  EXPECT_EQ(static_cast<char>(t->data()[4]), '\1');
  EXPECT_EQ(static_cast<char>(t->data()[5]), '\2');
}

TEST(TensorAssemblerTest, SaysWhatIsMissing) {
  TensorAssembler short_one("download of 'y'", absl::StatusCode::kDataLoss);
  ASSERT_TRUE(short_one.Start(DType::kFloat32, Shape{2, 2}).ok());
  ASSERT_TRUE(short_one.Append(std::string(6, '\0')).ok());
  const absl::Status missing = std::move(short_one).Finish().status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(missing.message(), "download of 'y' ended after 6 of the 16 bytes of float32[2, 2]");

  TensorAssembler none("download of 'z'", absl::StatusCode::kDataLoss);
  const absl::Status nothing = std::move(none).Finish().status();
  EXPECT_EQ(nothing.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(nothing.message(), "download of 'z' sent no tensor");
}

}  // namespace
}  // namespace tessera
