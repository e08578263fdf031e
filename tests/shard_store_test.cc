#include "worker/shard_store.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

HostTensor Floats(int64_t n) { return HostTensor::Zeros(DType::kFloat32, {n}).value(); }

TEST(ShardStore, AccountsBytesAndRefusesPastTheBudget) {
  ShardStore store(100);
  ASSERT_TRUE(store.Put("a", Floats(10)).ok());
  EXPECT_EQ(store.used_bytes(), 40);
  absl::Status s = store.Put("b", Floats(16));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("64 more bytes"));
  EXPECT_THAT(s.message(), HasSubstr("budget of 100"));
  EXPECT_EQ(store.used_bytes(), 40);  // nothing lost, nothing added
  EXPECT_TRUE(store.Get("a").ok());
}

TEST(ShardStore, ReplacingATensorCountsOnlyTheDifference) {
  ShardStore store(100);
  ASSERT_TRUE(store.Put("a", Floats(20)).ok());
  ASSERT_TRUE(store.Put("a", Floats(25)).ok());  // 100 bytes in all once the old one is freed
  EXPECT_EQ(store.used_bytes(), 100);
}

TEST(ShardStore, ReadersKeepATensorAliveAcrossReplacement) {
  ShardStore store(1000);
  ASSERT_TRUE(store.Put("a", Floats(4)).ok());
  std::shared_ptr<const HostTensor> held = store.Get("a").value();
  ASSERT_TRUE(store.Put("a", Floats(8)).ok());
  EXPECT_EQ(held->num_elements(), 4);
  store.Erase("a");
  EXPECT_EQ(store.Get("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.used_bytes(), 0);
}

TEST(ShardStore, TakeOrCopyMovesAnUnsharedTensorAndCopiesASharedOne) {
  ShardStore store(1000);
  ASSERT_TRUE(store.Put("a", Floats(4)).ok());
  const std::byte* buffer = store.Get("a").value()->data();
  absl::StatusOr<HostTensor> taken = store.TakeOrCopy("a");
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(taken->data(), buffer);  // the same buffer, not a copy
  EXPECT_EQ(store.Get("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.used_bytes(), 0);

  ASSERT_TRUE(store.Put("b", Floats(4)).ok());
  std::shared_ptr<const HostTensor> reader = store.Get("b").value();
  absl::StatusOr<HostTensor> copy = store.TakeOrCopy("b");
  ASSERT_TRUE(copy.ok());
  EXPECT_NE(copy->data(), reader->data());
  EXPECT_TRUE(store.Get("b").ok());
  EXPECT_EQ(store.used_bytes(), 16);
  EXPECT_EQ(store.TakeOrCopy("c").status().code(), absl::StatusCode::kNotFound);
}

TEST(ShardStore, TakeForReuseHandsOverOnlyAnUnsharedBufferOfTheSameSize) {
  ShardStore store(1000);
  ASSERT_TRUE(store.Put("a", Floats(4)).ok());
  EXPECT_FALSE(store.TakeForReuse("a", DType::kFloat32, 12).has_value());  // other size
  EXPECT_FALSE(store.TakeForReuse("a", DType::kInt32, 16).has_value());    // other dtype
  EXPECT_FALSE(store.TakeForReuse("b", DType::kFloat32, 16).has_value());  // absent
  {
    std::shared_ptr<const HostTensor> reader = store.Get("a").value();
    EXPECT_FALSE(store.TakeForReuse("a", DType::kFloat32, 16).has_value());  // shared
  }
  std::optional<HostTensor> taken = store.TakeForReuse("a", DType::kFloat32, 16);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->num_elements(), 4);
  EXPECT_EQ(store.used_bytes(), 0);
  EXPECT_EQ(store.Get("a").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera
