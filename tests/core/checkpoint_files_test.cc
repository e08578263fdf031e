#include "core/files/checkpoint_files.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/files/sharded_files.h"
#include "core/sharding/simulated_mesh.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

DTensorSpec SpecOn(const Shape& mesh_shape, std::vector<Placement> placements, const Shape& shape,
                   DType dtype, int64_t first_rank) {
  std::vector<int64_t> ranks(NumElements(mesh_shape));
  for (size_t i = 0; i < ranks.size(); ++i) ranks[i] = first_rank + static_cast<int64_t>(i);
  return MakeDTensorSpec(DeviceMesh::Create("cpu", mesh_shape, {}, ranks).value(),
                         std::move(placements), shape, dtype)
      .value();
}

HostTensor Pattern(DType dtype, const Shape& shape, int salt) {
  HostTensor t = HostTensor::Uninitialized(dtype, shape).value();
  for (size_t i = 0; i < t.nbytes(); ++i) {
    t.data()[i] = static_cast<std::byte>((i * 13 + static_cast<size_t>(salt)) % 253);
  }
  return t;
}

bool SameBytes(const HostTensor& a, const HostTensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

class CheckpointFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::path(::testing::TempDir()) /
            absl::StrCat("ckpt-", ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // What the workers of a save do: each writing rank its block, into `data_dir`; then, if
  // `commit`, the index.
  void Save(const HostTensor& full, const DTensorSpec& spec, const std::string& data_dir,
            bool commit, int64_t blocks_to_write = -1) {
    const std::vector<HostTensor> shards = SimulatedMesh(spec.mesh).Distribute(full, spec).value();
    int64_t written = 0;
    for (int64_t pos = 0; pos < spec.mesh.size(); ++pos) {
      if (!WritesBlock(spec, spec.mesh.CoordinateOfIndex(pos))) continue;
      if (blocks_to_write >= 0 && written == blocks_to_write) break;
      ASSERT_TRUE(
          WriteCheckpointBlock(dir_, data_dir, "", "t", spec, spec.mesh.ranks()[pos], shards[pos])
              .ok());
      ++written;
    }
    if (!commit) return;
    CheckpointIndex index{data_dir, {PlanCheckpointTensor(spec, data_dir, "", "t").value()}};
    ASSERT_TRUE(CommitCheckpointIndex(dir_, index).ok());
  }

  // Loads every rank of `spec` from the checkpoint and compares with slices of `full`.
  void ExpectLoads(const HostTensor& full, const DTensorSpec& spec) {
    absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(dir_);
    ASSERT_TRUE(index.ok()) << index.status();
    ASSERT_EQ(index->tensors.size(), 1u);
    const std::vector<HostTensor> want = SimulatedMesh(spec.mesh).Distribute(full, spec).value();
    for (int64_t pos = 0; pos < spec.mesh.size(); ++pos) {
      const LocalShard local = LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(pos));
      absl::StatusOr<HostTensor> got = LoadCheckpointShard(dir_, index->tensors[0], local);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_TRUE(SameBytes(*got, want[pos])) << "position " << pos << " of " << spec.ToString();
    }
  }

  std::string dir_;
};

using RoundTrip = std::tuple<std::vector<Placement>, std::vector<Placement>, DType>;
class CheckpointRoundTripTest : public CheckpointFilesTest,
                                public ::testing::WithParamInterface<RoundTrip> {};

// Saved from a 2x2 mesh, loaded onto a mesh of 3 (any world size), bit for bit.
TEST_P(CheckpointRoundTripTest, LoadsOntoAnotherMeshBitExact) {
  const auto& [saved, loaded, dtype] = GetParam();
  const Shape shape = {7, 5};
  const HostTensor full = Pattern(dtype, shape, 1);
  Save(full, SpecOn({2, 2}, saved, shape, dtype, 0), "data-1", true);
  ExpectLoads(full, SpecOn({3}, loaded, shape, dtype, 4));
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CheckpointRoundTripTest,
    ::testing::Combine(
        ::testing::Values(std::vector<Placement>{Placement::Shard(0), Placement::Shard(1)},
                          std::vector<Placement>{Placement::Replicate(), Placement::Shard(1)},
                          std::vector<Placement>{Placement::Replicate(), Placement::Replicate()}),
        ::testing::Values(std::vector<Placement>{Placement::Shard(1)},
                          std::vector<Placement>{Placement::Replicate()},
                          std::vector<Placement>{Placement::Shard(0)}),
        ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kInt64)));

// A save stopped after some blocks and before its index leaves the previous checkpoint whole; the
// next complete save replaces it and removes the stale data.
TEST_F(CheckpointFilesTest, SaveKilledBeforeItsIndexLeavesThePreviousCheckpoint) {
  const DTensorSpec spec =
      SpecOn({2, 2}, {Placement::Shard(0), Placement::Shard(1)}, {6, 4}, DType::kFloat32, 0);
  const HostTensor v1 = Pattern(DType::kFloat32, {6, 4}, 1);
  const HostTensor v2 = Pattern(DType::kFloat32, {6, 4}, 2);
  Save(v1, spec, "data-1", true);
  Save(v2, spec, "data-2", false, 2);                                  // killed after two blocks
  std::ofstream(fs::path(dir_) / "index.json.tmp") << "{\"format\":";  // and mid-index
  const DTensorSpec two = SpecOn({2}, {Placement::Shard(1)}, {6, 4}, DType::kFloat32, 0);
  ExpectLoads(v1, two);
  Save(v2, spec, "data-3", true);
  ExpectLoads(v2, two);
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "data-1"));
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "data-2"));
  EXPECT_TRUE(fs::exists(fs::path(dir_) / "data-3"));
}

// Of two saves into one directory at once, the one whose data the other's commit removed fails to
// commit (ABORTED) and the checkpoint stays the other's, whole.
TEST_F(CheckpointFilesTest, ConcurrentSaveWhoseDataWasRemovedIsAborted) {
  const DTensorSpec spec = SpecOn({2}, {Placement::Shard(0)}, {6, 4}, DType::kFloat32, 0);
  const HostTensor a = Pattern(DType::kFloat32, {6, 4}, 1);
  const HostTensor b = Pattern(DType::kFloat32, {6, 4}, 2);
  Save(b, spec, "data-b", false);  // b writes its blocks first...
  Save(a, spec, "data-a", true);   // ...a commits meanwhile, removing data-b
  CheckpointIndex index{"data-b", {PlanCheckpointTensor(spec, "data-b", "", "t").value()}};
  const absl::Status late = CommitCheckpointIndex(dir_, index);
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted) << late;
  ExpectLoads(a, SpecOn({3}, {Placement::Shard(1)}, {6, 4}, DType::kFloat32, 0));
}

// A directory `tessera shard` wrote (every rank a file, replicas included) loads as a checkpoint.
TEST_F(CheckpointFilesTest, ReadsShardedFilesDirectories) {
  const DTensorSpec spec =
      SpecOn({2, 2}, {Placement::Shard(0), Placement::Replicate()}, {5, 3}, DType::kBFloat16, 3);
  const HostTensor full = Pattern(DType::kBFloat16, {5, 3}, 5);
  ShardedTensor sharded{spec, SimulatedMesh(spec.mesh).Distribute(full, spec).value()};
  ASSERT_TRUE(WriteShardedTensor(dir_, "w", sharded).ok());
  absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(dir_);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->tensors[0].blocks.size(), 2u);  // one per replica group
  // Its index goes over the wire as JSON (ReadCheckpoint's reply) and must parse back.
  absl::StatusOr<CheckpointIndex> parsed =
      ParseCheckpointIndex(CheckpointIndexToJson(*index).value());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->tensors[0].blocks, index->tensors[0].blocks);
  ExpectLoads(full, SpecOn({3}, {Placement::Shard(1)}, {5, 3}, DType::kBFloat16, 0));
}

TEST_F(CheckpointFilesTest, BadDirectoriesAreInvalidArguments) {
  EXPECT_EQ(CheckCheckpointDirectory("relative/ckpt").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckCheckpointDirectory("").code(), absl::StatusCode::kInvalidArgument);
  const absl::Status missing = CheckCheckpointDirectory(dir_ + "/no/such/parent");
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.message(), HasSubstr("not an existing directory"));
  fs::create_directories(dir_);
  std::ofstream(fs::path(dir_) / "file") << "x";
  EXPECT_EQ(CheckCheckpointDirectory(dir_ + "/file").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckCheckpointDirectory(dir_ + "/new").ok());
  EXPECT_TRUE(CheckCheckpointDirectory(dir_).ok());
  EXPECT_EQ(ReadCheckpointIndex(dir_ + "/new").status().code(), absl::StatusCode::kNotFound);
}

// A block file that holds something other than what the index says is refused, naming it.
TEST_F(CheckpointFilesTest, MismatchedBlockFileIsInvalidArgument) {
  const DTensorSpec spec = SpecOn({2}, {Placement::Shard(0)}, {4, 2}, DType::kFloat32, 0);
  const HostTensor full = Pattern(DType::kFloat32, {4, 2}, 3);
  Save(full, spec, "data-1", true);
  const DTensorSpec other = SpecOn({2}, {Placement::Shard(0)}, {4, 2}, DType::kInt32, 0);
  ASSERT_TRUE(
      WriteCheckpointBlock(dir_, "data-1", "", "t", other, 1, Pattern(DType::kInt32, {2, 2}, 0))
          .ok());
  const CheckpointIndex index = ReadCheckpointIndex(dir_).value();
  absl::StatusOr<HostTensor> got =
      LoadCheckpointShard(dir_, index.tensors[0], LocalShard{{4, 2}, {0, 0}});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("rank-1.safetensors"));
}

}  // namespace
}  // namespace tessera
