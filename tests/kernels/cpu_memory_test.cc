// Host memory of the CPU backend and of host tensors: allocations on each side of the huge page
// size keep their alignment promise and hold every byte written to them, in pieces that do not line
// up with pages.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/host_tensor.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace tessera::kernels {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// The byte a test writes at `i`: not periodic in any power of two.
std::byte Pattern(size_t i) { return static_cast<std::byte>((i * 7 + i / 251) % 253); }

class CpuMemoryTest : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuMemoryTest, AllocationIsAlignedAndHoldsEveryByte) {
  const size_t n = GetParam();
  CpuBackend cpu;
  std::vector<std::byte> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = Pattern(i);
  {
    DeviceTensor t = cpu.Allocate(DType::kUInt8, {static_cast<int64_t>(n)}).value();
    EXPECT_EQ(cpu.usage().allocated_bytes, static_cast<int64_t>(n));
    const auto address = reinterpret_cast<uintptr_t>(t.data());
    EXPECT_EQ(address % 64, 0u);
    if (n >= kHugePage) {
      EXPECT_EQ(address % kHugePage, 0u) << n << " bytes";
    }
    // Pieces of a prime size: they cross page and huge page boundaries at every offset.
    constexpr size_t kPiece = 1000003;
    std::unique_ptr<HostToSpaceWriter> writer = cpu.WriteFromHost(t.View()).value();
    for (size_t at = 0; at < n; at += kPiece) {
      ASSERT_TRUE(writer->Write(std::span(bytes).subspan(at, std::min(kPiece, n - at))).ok());
    }
    ASSERT_TRUE(writer->Finish().ok());
    std::vector<std::byte> read;
    ASSERT_TRUE(cpu.ReadToHost(std::as_const(t).View(), size_t{1} << 20,
                               [&](std::span<const std::byte> piece) {
                                 read.insert(read.end(), piece.begin(), piece.end());
                                 return true;
                               })
                    .ok());
    ASSERT_EQ(read.size(), n);
    EXPECT_EQ(0, std::memcmp(read.data(), bytes.data(), n)) << n << " bytes";
  }
  EXPECT_EQ(cpu.usage().allocated_bytes, 0);
}

// Host tensors of the same sizes (their large ones get huge pages where they can) hold every byte.
TEST_P(CpuMemoryTest, HostTensorHoldsEveryByte) {
  const size_t n = GetParam();
  HostTensor t = HostTensor::Uninitialized(DType::kUInt8, {static_cast<int64_t>(n)}).value();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  for (size_t i = 0; i < n; ++i) t.data()[i] = Pattern(i);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += t.data()[i] != Pattern(i);
  EXPECT_EQ(wrong, 0u) << n << " bytes";
}

INSTANTIATE_TEST_SUITE_P(Sizes, CpuMemoryTest,
                         ::testing::Values(size_t{1}, size_t{4096}, kHugePage - 1, kHugePage,
                                           kHugePage + 1, 5 * kHugePage + 3));

}  // namespace
}  // namespace tessera::kernels
