#include "worker/shard_store.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/support/strict_memory_backend.h"

namespace tessera {
namespace {

using kernels::DeviceTensor;
using ::testing::HasSubstr;

// The memory space of the stores here: host memory, as a cpu worker's.
kernels::CpuBackend& Memory() {
  static kernels::CpuBackend* const cpu = new kernels::CpuBackend();
  return *cpu;
}

DeviceTensor Floats(int64_t n) { return Memory().Zeros(DType::kFloat32, {n}).value(); }

TEST(ShardStore, AccountsBytesAndRefusesPastTheBudget) {
  ShardStore store(100, Memory());
  ASSERT_TRUE(store.Put("a", Floats(10)).ok());
  EXPECT_EQ(store.used_bytes(), 40);
  absl::Status s = store.Put("b", Floats(16));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("64 more bytes"));
  EXPECT_THAT(s.message(), HasSubstr("budget of 100"));
  EXPECT_EQ(store.used_bytes(), 40);  // nothing lost, nothing added
  EXPECT_TRUE(store.Get("a").ok());
}

TEST(ShardStore, ChargesOutsideTheTensorsShareTheBudgetUntilDropped) {
  ShardStore store(100, Memory());
  ASSERT_TRUE(store.Put("a", Floats(10)).ok());
  absl::StatusOr<std::unique_ptr<ShardStore::Charge>> charge =
      store.ChargeOutside(50, "a prepared copy");
  ASSERT_TRUE(charge.ok()) << charge.status();
  EXPECT_EQ((*charge)->bytes(), 50);
  EXPECT_EQ(store.used_bytes(), 90);
  EXPECT_EQ(store.outside_bytes(), 50);
  // Tensors and further charges see it.
  EXPECT_EQ(store.Put("b", Floats(4)).code(), absl::StatusCode::kResourceExhausted);
  absl::StatusOr<std::unique_ptr<ShardStore::Charge>> refused =
      store.ChargeOutside(11, "another copy");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("another copy of 11 bytes"));
  EXPECT_THAT(refused.status().message(), HasSubstr("(90 in use)"));
  EXPECT_EQ(store.used_bytes(), 90);
  EXPECT_TRUE(store.ChargeOutside(-1, "a copy").status().code() == absl::StatusCode::kInternal);
  charge->reset();
  EXPECT_EQ(store.used_bytes(), 40);
  EXPECT_EQ(store.outside_bytes(), 0);
  EXPECT_TRUE(store.Put("b", Floats(4)).ok());
}

TEST(ShardStore, AChargeMayOutliveItsStore) {
  std::unique_ptr<ShardStore::Charge> charge;
  {
    ShardStore store(100, Memory());
    charge = store.ChargeOutside(30, "a copy").value();
    EXPECT_EQ(store.used_bytes(), 30);
  }
  charge.reset();  // nothing to release into but its own count
}

TEST(ShardStore, ReplacingATensorCountsOnlyTheDifference) {
  ShardStore store(100, Memory());
  ASSERT_TRUE(store.Put("a", Floats(20)).ok());
  ASSERT_TRUE(store.Put("a", Floats(25)).ok());  // 100 bytes in all once the old one is freed
  EXPECT_EQ(store.used_bytes(), 100);
}

TEST(ShardStore, ReadersKeepATensorAliveAcrossReplacement) {
  ShardStore store(1000, Memory());
  ASSERT_TRUE(store.Put("a", Floats(4)).ok());
  std::shared_ptr<const DeviceTensor> held = store.Get("a").value();
  ASSERT_TRUE(store.Put("a", Floats(8)).ok());
  EXPECT_EQ(held->num_elements(), 4);
  store.Erase("a");
  EXPECT_EQ(store.Get("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.used_bytes(), 0);
}

TEST(ShardStore, TakeOrCopyMovesAnUnsharedTensorAndCopiesASharedOne) {
  ShardStore store(1000, Memory());
  ASSERT_TRUE(store.Put("a", Floats(4)).ok());
  const std::byte* buffer = store.Get("a").value()->data();
  absl::StatusOr<DeviceTensor> taken = store.TakeOrCopy("a");
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(taken->data(), buffer);  // the same buffer, not a copy
  EXPECT_EQ(store.Get("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.used_bytes(), 0);

  ASSERT_TRUE(store.Put("b", Floats(4)).ok());
  std::shared_ptr<const DeviceTensor> reader = store.Get("b").value();
  absl::StatusOr<DeviceTensor> copy = store.TakeOrCopy("b");
  ASSERT_TRUE(copy.ok());
  EXPECT_NE(copy->data(), reader->data());
  EXPECT_TRUE(store.Get("b").ok());
  EXPECT_EQ(store.used_bytes(), 16);
  EXPECT_EQ(store.TakeOrCopy("c").status().code(), absl::StatusCode::kNotFound);
}

TEST(ShardStore, TakeForReuseHandsOverOnlyAnUnsharedBufferOfTheSameSize) {
  ShardStore store(1000, Memory());
  ASSERT_TRUE(store.Put("a", Floats(4)).ok());
  EXPECT_FALSE(store.TakeForReuse("a", DType::kFloat32, 12).has_value());  // other size
  EXPECT_FALSE(store.TakeForReuse("a", DType::kInt32, 16).has_value());    // other dtype
  EXPECT_FALSE(store.TakeForReuse("b", DType::kFloat32, 16).has_value());  // absent
  {
    std::shared_ptr<const DeviceTensor> reader = store.Get("a").value();
    EXPECT_FALSE(store.TakeForReuse("a", DType::kFloat32, 16).has_value());  // shared
  }
  std::optional<DeviceTensor> taken = store.TakeForReuse("a", DType::kFloat32, 16);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->num_elements(), 4);
  EXPECT_EQ(store.used_bytes(), 0);
  EXPECT_EQ(store.Get("a").status().code(), absl::StatusCode::kNotFound);
}

TEST(ShardStore, HostTensorsGoInAndOutThroughItsMemorySpace) {
  ShardStore store(64, Memory());
  const HostTensor values =
      HostTensor::FromValues<float>(DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
  ASSERT_TRUE(store.PutHost("a", values).ok());
  EXPECT_EQ(store.used_bytes(), 24);
  absl::StatusOr<HostTensor> back = store.GetHost("a");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->BitEqual(values));
  // A copy TakeOrCopy makes for a reader's sake holds the same values.
  std::shared_ptr<const DeviceTensor> reader = store.Get("a").value();
  absl::StatusOr<DeviceTensor> copy = store.TakeOrCopy("a");
  ASSERT_TRUE(copy.ok());
  EXPECT_TRUE(Memory().Download(std::as_const(*copy).View())->BitEqual(values));
  // Past the budget nothing is copied in and nothing held changes.
  absl::Status s = store.PutHost("b", HostTensor::Zeros(DType::kFloat64, {6}).value());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store.used_bytes(), 24);
  EXPECT_EQ(store.GetHost("b").status().code(), absl::StatusCode::kNotFound);
}

// A memory space that is not host-addressable (as a GPU's) takes uploads and downloads in pieces
// through its copies; the bytes arrive whole and in order.
TEST(ShardStore, StagedTransfersOfAMemorySpaceTheHostCannotReadKeepEveryByte) {
  testing::StrictMemoryBackend device;
  const HostTensor values = HostTensor::FromValues<int32_t>(DType::kInt32, {5, 7}, [] {
    std::vector<int32_t> v(35);
    for (int i = 0; i < 35; ++i) v[i] = 3 * i - 40;
    return v;
  }());
  for (size_t piece : {size_t{1}, size_t{7}, size_t{64}, size_t{140}, size_t{1000}}) {
    DeviceTensor t = device.Allocate(DType::kInt32, {5, 7}).value();
    std::unique_ptr<kernels::HostToSpaceWriter> writer = device.WriteFromHost(t.View()).value();
    for (size_t at = 0; at < values.nbytes(); at += piece) {
      ASSERT_TRUE(
          writer->Write(values.bytes().subspan(at, std::min(piece, values.nbytes() - at))).ok());
    }
    ASSERT_TRUE(writer->Finish().ok());
    std::vector<std::byte> read;
    ASSERT_TRUE(device
                    .ReadToHost(std::as_const(t).View(), piece,
                                [&](std::span<const std::byte> p) {
                                  read.insert(read.end(), p.begin(), p.end());
                                  return true;
                                })
                    .ok());
    ASSERT_EQ(read.size(), values.nbytes()) << "pieces of " << piece;
    EXPECT_EQ(0, std::memcmp(read.data(), values.data(), read.size())) << "pieces of " << piece;
  }
  EXPECT_EQ(device.violations(), 0);
}

}  // namespace
}  // namespace tessera
