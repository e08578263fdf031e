#ifndef TESSERA_KERNELS_TESTING_LAYOUT_CONFORMANCE_H_
#define TESSERA_KERNELS_TESTING_LAYOUT_CONFORMANCE_H_

// Conformance of the memory space's layout moves (kernels/layout.h: strided copies, blocks, slices,
// padding to torch.chunk blocks and back, zeros, clones, staged transfers) against core's host
// versions of the same moves, bit for bit, over every dtype and a product of shapes, dims and
// piece counts. Include once per test binary (see conformance_fixture.h).

#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/sharding/chunk.h"
#include "core/sharding/padding.h"
#include "gtest/gtest.h"
#include "kernels/layout.h"
#include "kernels/testing/conformance_fixture.h"

namespace tessera::kernels::testing {

// dtype x shape x dim x k: a tensor of `shape` split along `dim` into k torch.chunk pieces.
using LayoutParam = std::tuple<DType, Shape, int, int64_t>;

inline std::vector<LayoutParam> LayoutParams() {
  const std::vector<Shape> shapes = {{7}, {8, 12}, {5, 7}, {1, 3}, {0, 6}, {3, 4, 5}, {2, 1, 9, 3}};
  std::vector<LayoutParam> params;
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt8,
                      DType::kInt64, DType::kBool}) {
    for (const Shape& shape : shapes) {
      for (int dim = 0; dim < static_cast<int>(shape.size()); ++dim) {
        for (int64_t k : {1, 2, 3, 4}) params.emplace_back(dtype, shape, dim, k);
      }
    }
  }
  return params;
}

inline std::string LayoutParamName(const ::testing::TestParamInfo<LayoutParam>& info) {
  const auto& [dtype, shape, dim, k] = info.param;
  return absl::StrCat(DTypeName(dtype), "_", ShapeName(shape), "_dim", dim, "_k", k);
}

class LayoutTest : public KernelParamTest<LayoutParam> {
 protected:
  // Expects `got` (in the backend's memory) to equal `want` bit for bit.
  void ExpectBitEqual(const DeviceTensor& got, const HostTensor& want, const std::string& what) {
    const HostTensor host = Down(got);
    EXPECT_TRUE(host.BitEqual(want))
        << what << ": got " << DTypeName(host.dtype()) << ShapeToString(host.shape()) << ", want "
        << DTypeName(want.dtype()) << ShapeToString(want.shape());
  }
};

TEST_P(LayoutTest, PadAndUnpadMatchCore) {
  const auto& [dtype, shape, dim, k] = GetParam();
  const HostTensor t = RandomTensor(dtype, shape, 81);
  const DeviceTensor dt = Up(t);
  const Shape block = WithDimSize(shape, dim, ChunkSize(shape[dim], k));
  // The blocks of the collectives: exactly chunk-sized, and (as gathers along another dim make
  // them) with room to spare.
  for (const Shape& block_shape : {block, WithDimSize(block, dim, block[dim] + 1)}) {
    const std::string what = absl::StrCat("blocks of ", ShapeToString(block_shape));
    const HostTensor want = PadToChunks(t, dim, k, block_shape).value();
    absl::StatusOr<DeviceTensor> padded = PadToChunks(backend(), dt.View(), dim, k, block_shape);
    ASSERT_TRUE(padded.ok()) << what << ": " << padded.status();
    ExpectBitEqual(*padded, want, what);

    DeviceTensor scratch;
    absl::StatusOr<const std::byte*> send =
        ChunkBlocksData(backend(), dt.View(), dim, k, block_shape, scratch);
    ASSERT_TRUE(send.ok()) << send.status();
    // The tensor's own bytes exactly when core would send them as they are.
    if (t.num_elements() > 0) {
      EXPECT_EQ(*send == dt.data(), IsChunkBlocks(shape, dim, k, block_shape)) << what;
    }
    HostTensor sent = HostTensor::Uninitialized(dtype, want.shape()).value();
    TESSERA_ASSERT_OK(backend().CopyToHost({*send, dtype, want.shape()}, sent.bytes()));
    EXPECT_TRUE(sent.BitEqual(want)) << what;

    absl::StatusOr<DeviceTensor> back = UnpadFromChunks(backend(), padded->View(), dim, shape);
    ASSERT_TRUE(back.ok()) << what << ": " << back.status();
    ExpectBitEqual(*back, t, what);
  }
}

TEST_P(LayoutTest, BlocksAndSlicesMatchCore) {
  const auto& [dtype, shape, dim, k] = GetParam();
  const HostTensor t = RandomTensor(dtype, shape, 82);
  const DeviceTensor dt = Up(t);
  for (int64_t q = 0; q < k; ++q) {
    const ChunkRange r = ChunkOf(shape[dim], k, q);
    const std::string what = absl::StrCat("piece ", q, " of ", k);
    const HostTensor want = SliceAlong(t, dim, r.offset, r.size).value();
    absl::StatusOr<DeviceTensor> piece = SliceAlong(backend(), dt.View(), dim, r.offset, r.size);
    ASSERT_TRUE(piece.ok()) << what << ": " << piece.status();
    ExpectBitEqual(*piece, want, what);

    // Placed back into zeros: the tensor with everything outside the piece zeroed.
    HostTensor placed = HostTensor::Zeros(dtype, shape).value();
    ASSERT_TRUE(PlaceAlong(want, dim, r.offset, placed).ok());
    absl::StatusOr<DeviceTensor> dplaced = backend().Zeros(dtype, shape);
    ASSERT_TRUE(dplaced.ok()) << dplaced.status();
    TESSERA_ASSERT_OK(PlaceAlong(backend(), piece->View(), dim, r.offset, dplaced->View()));
    ExpectBitEqual(*dplaced, placed, what);
  }
  // A block off the origin in every dim, and its transpose.
  std::vector<int64_t> offsets, sizes;
  for (int64_t n : shape) {
    offsets.push_back(n / 3);
    sizes.push_back(n - n / 3 - n / 4);
  }
  ExpectBitEqual(PackBlock(backend(), dt.View(), offsets, sizes).value(),
                 PackBlock(t, offsets, sizes).value(), "a block");
  const int other = (dim + 1) % static_cast<int>(shape.size());
  ConstStridedView swapped = t.View();
  std::swap(swapped.shape[dim], swapped.shape[other]);
  std::swap(swapped.strides[dim], swapped.strides[other]);
  HostTensor transposed = HostTensor::Uninitialized(dtype, swapped.shape).value();
  CopyStrided(swapped, transposed.View());
  ExpectBitEqual(Transposed(backend(), dt.View(), dim, other).value(), transposed, "transpose");
}

TEST_P(LayoutTest, BadBlocksAreRefusedLeavingTheTargetUntouched) {
  const auto& [dtype, shape, dim, k] = GetParam();
  const HostTensor t = RandomTensor(dtype, shape, 83);
  DeviceTensor dt = Up(t);
  const DeviceTensor piece = Up(RandomTensor(dtype, WithDimSize(shape, dim, shape[dim] + 1), 84));
  const absl::Status s = PlaceAlong(backend(), piece.View(), dim, 0, dt.View());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(SliceAlong(backend(), dt.View(), dim, 1, shape[dim]).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SliceAlong(backend(), dt.View(), static_cast<int>(shape.size()), 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  const Shape too_small = WithDimSize(shape, dim, ChunkSize(shape[dim], k) - 1);
  if (shape[dim] > 0) {
    EXPECT_EQ(PadToChunks(backend(), dt.View(), dim, k, too_small).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  ExpectBitEqual(dt, t, "the target of refused moves");
}

INSTANTIATE_TEST_SUITE_P(Kernels, LayoutTest, ::testing::ValuesIn(LayoutParams()), LayoutParamName);

// Zeros, clones and the staged transfers over every dtype and piece size.
class TransferTest : public KernelParamTest<std::tuple<DType, size_t>> {};

TEST_P(TransferTest, StagedWritesAndReadsKeepEveryByte) {
  const auto& [dtype, piece_bytes] = GetParam();
  const HostTensor host = RandomTensor(dtype, {37, 29}, 85);
  DeviceTensor t = Empty(dtype, host.shape());
  absl::StatusOr<std::unique_ptr<HostToSpaceWriter>> writer = backend().WriteFromHost(t.View());
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (size_t offset = 0; offset < host.nbytes(); offset += piece_bytes) {
    // Each piece from a buffer reused at once, as a stream's message is.
    std::vector<std::byte> piece(
        host.bytes().begin() + offset,
        host.bytes().begin() + std::min(offset + piece_bytes, host.nbytes()));
    TESSERA_ASSERT_OK((*writer)->Write(piece));
    std::fill(piece.begin(), piece.end(), std::byte{0x5a});
  }
  TESSERA_ASSERT_OK((*writer)->Finish());
  EXPECT_TRUE(Down(t).BitEqual(host));

  std::vector<std::byte> read;
  int pieces = 0;
  TESSERA_ASSERT_OK(backend().ReadToHost(t.View(), piece_bytes, [&](std::span<const std::byte> p) {
    EXPECT_LE(p.size(), piece_bytes);
    read.insert(read.end(), p.begin(), p.end());
    ++pieces;
    return true;
  }));
  ASSERT_EQ(read.size(), host.nbytes());
  EXPECT_EQ(0, std::memcmp(read.data(), host.data(), host.nbytes()));
  EXPECT_EQ(pieces, static_cast<int>((host.nbytes() + piece_bytes - 1) / piece_bytes));

  // A reader that stops early gets no more pieces.
  int taken = 0;
  TESSERA_ASSERT_OK(backend().ReadToHost(t.View(), piece_bytes,
                                         [&](std::span<const std::byte>) { return ++taken < 2; }));
  EXPECT_EQ(taken, std::min(pieces, 2));

  // Zeros and clones.
  DeviceTensor zeros = backend().Zeros(dtype, host.shape()).value();
  EXPECT_TRUE(Down(zeros).BitEqual(HostTensor::Zeros(dtype, host.shape()).value()));
  DeviceTensor copy = backend().Clone(t.View()).value();
  EXPECT_NE(copy.data(), t.data());
  EXPECT_TRUE(Down(copy).BitEqual(host));
}

INSTANTIATE_TEST_SUITE_P(Kernels, TransferTest,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kFloat16,
                                                              DType::kInt64, DType::kBool),
                                            ::testing::Values(size_t{1}, size_t{100}, size_t{4096},
                                                              size_t{1} << 20)),
                         [](const ::testing::TestParamInfo<std::tuple<DType, size_t>>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_pieces",
                                               std::get<1>(info.param));
                         });

TEST_F(KernelTest, StagedTransfersRefuseWrongByteCounts) {
  DeviceTensor t = Empty(DType::kFloat32, {4});
  std::unique_ptr<HostToSpaceWriter> writer = backend().WriteFromHost(t.View()).value();
  std::vector<std::byte> twelve(12), eight(8);
  TESSERA_ASSERT_OK(writer->Write(twelve));
  EXPECT_EQ(writer->Write(eight).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer->Finish().code(), absl::StatusCode::kInvalidArgument);  // 12 of 16 bytes
  DeviceTensor empty = Empty(DType::kFloat32, {0, 3});
  int calls = 0;
  TESSERA_ASSERT_OK(backend().ReadToHost(empty.View(), 64, [&](std::span<const std::byte> p) {
    EXPECT_TRUE(p.empty());
    ++calls;
    return true;
  }));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(
      backend().ReadToHost(t.View(), 0, [](std::span<const std::byte>) { return true; }).code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(KernelTest, AllocationLimitRefusesBeforeAllocatingAndCountsFrees) {
  const int64_t before = backend().usage().allocated_bytes;
  backend().set_allocation_limit(before + 1000);
  {
    absl::StatusOr<DeviceTensor> fits = backend().Allocate(DType::kFloat64, {100});
    ASSERT_TRUE(fits.ok()) << fits.status();
    EXPECT_EQ(backend().usage().allocated_bytes, before + 800);
    const absl::Status s = backend().Allocate(DType::kFloat32, {51}).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_NE(s.message().find(backend().device()), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("204 bytes"), absl::string_view::npos) << s;
    EXPECT_EQ(backend().usage().allocated_bytes, before + 800);
    EXPECT_TRUE(backend().Allocate(DType::kFloat32, {50}).ok());  // 1000 bytes exactly
  }
  EXPECT_EQ(backend().usage().allocated_bytes, before);
  backend().set_allocation_limit(-1);
}

}  // namespace tessera::kernels::testing

#endif  // TESSERA_KERNELS_TESTING_LAYOUT_CONFORMANCE_H_
