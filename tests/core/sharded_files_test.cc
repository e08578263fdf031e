#include "core/files/sharded_files.h"

#include <filesystem>

#include "core/files/safetensors.h"
#include "core/sharding/simulated_mesh.h"
#include "core/small_integer_tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

class ShardedFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

TEST_F(ShardedFilesTest, RoundTripKeepsSpecAndEveryShard) {
  const DeviceMesh mesh =
      DeviceMesh::Create("cpu", {2, 3}, {"dp", "tp"}, {5, 4, 3, 2, 1, 0}).value();
  const DTensorSpec spec =
      MakeDTensorSpec(mesh, {Placement::Shard(1), Placement::Partial(ReduceOp::kSum)}, {7, 5},
                      DType::kBFloat16)
          .value();
  const HostTensor full = SmallIntegerTensor(spec.dtype, spec.shape, 3);
  std::vector<HostTensor> shards = SimulatedMesh(mesh).Distribute(full, spec).value();
  ShardedTensor tensor{spec, {}};
  for (const HostTensor& s : shards) tensor.shards.push_back(s.Clone());
  ASSERT_TRUE(WriteShardedTensor(dir_.string(), "w", tensor).ok());

  absl::StatusOr<ShardedTensor> back = ReadShardedTensor(dir_.string(), "w");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->spec.ToString(), spec.ToString());
  ASSERT_EQ(back->shards.size(), shards.size());
  for (size_t i = 0; i < shards.size(); ++i) EXPECT_TRUE(back->shards[i].BitEqual(shards[i]));
}

TEST_F(ShardedFilesTest, MissingRankFileIsNotFound) {
  const DeviceMesh mesh = DeviceMesh::Create("cpu", {2}).value();
  const DTensorSpec spec =
      MakeDTensorSpec(mesh, {Placement::Shard(0)}, {4}, DType::kFloat32).value();
  ShardedTensor tensor{
      spec,
      SimulatedMesh(mesh).Distribute(SmallIntegerTensor(DType::kFloat32, {4}, 1), spec).value()};
  ASSERT_TRUE(WriteShardedTensor(dir_.string(), "t", tensor).ok());
  std::filesystem::remove(ShardFilePath(dir_.string(), 1));
  absl::StatusOr<ShardedTensor> back = ReadShardedTensor(dir_.string(), "t");
  EXPECT_EQ(back.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(back.status().message(), HasSubstr("rank-1.safetensors"));
}

TEST_F(ShardedFilesTest, ShardOfTheWrongShapeIsRefused) {
  const DeviceMesh mesh = DeviceMesh::Create("cpu", {2}).value();
  const DTensorSpec spec =
      MakeDTensorSpec(mesh, {Placement::Shard(0)}, {4}, DType::kFloat32).value();
  ShardedTensor tensor{spec, {}};
  tensor.shards.push_back(HostTensor::Zeros(DType::kFloat32, {2}).value());
  tensor.shards.push_back(HostTensor::Zeros(DType::kFloat32, {3}).value());
  absl::Status s = WriteShardedTensor(dir_.string(), "t", tensor);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("float32[3]"));
}

TEST_F(ShardedFilesTest, FilesThatDisagreeAreRefused) {
  const DeviceMesh mesh = DeviceMesh::Create("cpu", {2}).value();
  const DTensorSpec spec =
      MakeDTensorSpec(mesh, {Placement::Replicate()}, {4}, DType::kFloat32).value();
  ShardedTensor tensor{
      spec,
      SimulatedMesh(mesh).Distribute(SmallIntegerTensor(DType::kFloat32, {4}, 1), spec).value()};
  ASSERT_TRUE(WriteShardedTensor(dir_.string(), "t", tensor).ok());
  SafetensorsFile f = ReadSafetensorsFile(ShardFilePath(dir_.string(), 1)).value();
  f.metadata["tessera.placements"] = "(S(0))";
  ASSERT_TRUE(WriteSafetensorsFile(ShardFilePath(dir_.string(), 1), f).ok());
  absl::StatusOr<ShardedTensor> back = ReadShardedTensor(dir_.string(), "t");
  EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
