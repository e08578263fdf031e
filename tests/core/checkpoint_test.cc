#include "core/files/checkpoint.h"

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/sharding/simulated_mesh.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

// A layout on a mesh of its own: mesh shape and one placement per mesh dim.
struct Layout {
  Shape mesh;
  std::vector<Placement> placements;
};

std::string LayoutName(const Layout& l) {
  std::string s = absl::StrCat("m", absl::StrJoin(l.mesh, "x"));
  for (const Placement& p : l.placements) {
    s += p.is_shard() ? absl::StrCat("S", p.dim) : p.is_partial() ? "P" : "R";
  }
  return s;
}

DTensorSpec SpecOf(const Layout& l, const Shape& shape, DType dtype, int64_t first_rank) {
  std::vector<int64_t> ranks(NumElements(l.mesh));
  for (size_t i = 0; i < ranks.size(); ++i) ranks[i] = first_rank + static_cast<int64_t>(i);
  const DeviceMesh mesh = DeviceMesh::Create("cpu", l.mesh, {}, ranks).value();
  return MakeDTensorSpec(mesh, l.placements, shape, dtype).value();
}

// A tensor whose bytes are all distinct within any 251-byte window: a misplaced byte shows.
HostTensor DistinctBytes(DType dtype, const Shape& shape) {
  HostTensor t = HostTensor::Uninitialized(dtype, shape).value();
  for (size_t i = 0; i < t.nbytes(); ++i) t.data()[i] = static_cast<std::byte>((i * 7 + 3) % 251);
  return t;
}

using Case = std::tuple<Layout, Layout, Shape, DType>;

class PlanShardReadsTest : public ::testing::TestWithParam<Case> {};

// Saving under one layout and loading under another through the planned byte copies gives every
// new rank exactly its slice of the original tensor, bit for bit, reading each needed byte once.
TEST_P(PlanShardReadsTest, LoadedShardsEqualSlicesOfTheOriginal) {
  const auto& [saved_layout, loaded_layout, shape, dtype] = GetParam();
  const DTensorSpec saved = SpecOf(saved_layout, shape, dtype, 10);
  const DTensorSpec loaded = SpecOf(loaded_layout, shape, dtype, 0);
  const HostTensor full = DistinctBytes(dtype, shape);

  absl::StatusOr<CheckpointTensor> plan = PlanCheckpointTensor(saved, "data-1", "", "t");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(CheckBlocksTile(shape, plan->blocks).ok());
  // The written blocks' bytes: the saving ranks' shards, in mesh order.
  const std::vector<HostTensor> saved_shards =
      SimulatedMesh(saved.mesh).Distribute(full, saved).value();
  std::vector<const HostTensor*> block_data;
  for (int64_t pos = 0; pos < saved.mesh.size(); ++pos) {
    if (WritesBlock(saved, saved.mesh.CoordinateOfIndex(pos)))
      block_data.push_back(&saved_shards[pos]);
  }
  ASSERT_EQ(block_data.size(), plan->blocks.size());

  const std::vector<HostTensor> expected =
      SimulatedMesh(loaded.mesh).Distribute(full, loaded).value();
  for (int64_t pos = 0; pos < loaded.mesh.size(); ++pos) {
    const LocalShard target = LocalShapeAndOffsetAt(loaded, loaded.mesh.CoordinateOfIndex(pos));
    HostTensor out = HostTensor::Uninitialized(dtype, target.shape).value();
    std::memset(out.data(), 0xEE, out.nbytes());
    std::vector<int> written(out.nbytes(), 0);
    int64_t read = 0;
    for (const ByteCopy& c : PlanShardReads(plan->blocks, dtype, target)) {
      ASSERT_GE(c.block, 0);
      ASSERT_LT(c.block, static_cast<int64_t>(block_data.size()));
      const HostTensor& src = *block_data[c.block];
      ASSERT_LE(c.source + c.bytes, static_cast<int64_t>(src.nbytes()));
      ASSERT_LE(c.target + c.bytes, static_cast<int64_t>(out.nbytes()));
      std::memcpy(out.data() + c.target, src.data() + c.source, c.bytes);
      for (int64_t b = 0; b < c.bytes; ++b) ++written[c.target + b];
      read += c.bytes;
    }
    EXPECT_EQ(read, static_cast<int64_t>(out.nbytes())) << "rank position " << pos;
    for (size_t b = 0; b < written.size(); ++b) ASSERT_EQ(written[b], 1) << "byte " << b;
    ASSERT_EQ(out.nbytes(), expected[pos].nbytes());
    EXPECT_EQ(std::memcmp(out.data(), expected[pos].data(), out.nbytes()), 0)
        << "rank position " << pos << " of " << loaded.ToString();
  }
}

const std::vector<Layout> kSavedLayouts = {
    {{4}, {Placement::Shard(0)}},
    {{2, 2}, {Placement::Shard(0), Placement::Shard(1)}},
    {{2, 2}, {Placement::Shard(1), Placement::Replicate()}},
    {{2, 2}, {Placement::Replicate(), Placement::Replicate()}},
    {{2, 2}, {Placement::Shard(0), Placement::Shard(0)}},
    {{3}, {Placement::Shard(1)}},
};
const std::vector<Layout> kLoadedLayouts = {
    {{2}, {Placement::Shard(1)}},    {{3}, {Placement::Replicate()}},
    {{1}, {Placement::Replicate()}}, {{2, 2}, {Placement::Shard(1), Placement::Shard(0)}},
    {{4}, {Placement::Shard(0)}},    {{2, 3}, {Placement::Shard(0), Placement::Shard(0)}},
};

INSTANTIATE_TEST_SUITE_P(
    Layouts, PlanShardReadsTest,
    ::testing::Combine(::testing::ValuesIn(kSavedLayouts), ::testing::ValuesIn(kLoadedLayouts),
                       ::testing::Values(Shape{7, 5}, Shape{2, 9}, Shape{5, 3, 4}),
                       ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kInt64,
                                         DType::kUInt8)),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(
          LayoutName(std::get<0>(info.param)), "_to_", LayoutName(std::get<1>(info.param)), "_",
          absl::StrJoin(std::get<2>(info.param), "x"), "_", DTypeName(std::get<3>(info.param)));
    });

TEST(CheckpointTest, ReplicasWriteOnceAndPartialIsRefused) {
  const DTensorSpec spec =
      SpecOf({{2, 2}, {Placement::Replicate(), Placement::Shard(0)}}, {4, 2}, DType::kFloat32, 0);
  const CheckpointTensor t = PlanCheckpointTensor(spec, "d", "", "x").value();
  ASSERT_EQ(t.blocks.size(), 2u);
  EXPECT_EQ(t.blocks[0], (CheckpointBlock{"d/rank-0.safetensors", "x", {0, 0}, {2, 2}}));
  EXPECT_EQ(t.blocks[1], (CheckpointBlock{"d/rank-1.safetensors", "x", {2, 0}, {2, 2}}));

  const DTensorSpec partial =
      SpecOf({{2}, {Placement::Partial(ReduceOp::kSum)}}, {4, 2}, DType::kFloat32, 0);
  EXPECT_EQ(PlanCheckpointTensor(partial, "d", "", "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SavedPlacements({Placement::Partial(ReduceOp::kMax), Placement::Shard(1)}),
            (std::vector<Placement>{Placement::Replicate(), Placement::Shard(1)}));
  EXPECT_EQ(CheckpointFileName("layer.weight", 3), "layer.weight/rank-3.safetensors");
}

TEST(CheckpointTest, IndexRoundTrips) {
  const DTensorSpec spec =
      SpecOf({{2, 2}, {Placement::Shard(0), Placement::Shard(1)}}, {5, 3}, DType::kBFloat16, 4);
  CheckpointIndex index{"data-7", {PlanCheckpointTensor(spec, "data-7", "w", "w").value()}};
  const std::string text = CheckpointIndexToJson(index).value();
  absl::StatusOr<CheckpointIndex> back = ParseCheckpointIndex(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data_dir, "data-7");
  ASSERT_EQ(back->tensors.size(), 1u);
  EXPECT_EQ(back->tensors[0].name, "w");
  EXPECT_EQ(back->tensors[0].dtype, DType::kBFloat16);
  EXPECT_EQ(back->tensors[0].shape, (Shape{5, 3}));
  EXPECT_EQ(back->tensors[0].blocks, index.tensors[0].blocks);
  EXPECT_EQ(back->tensors[0].blocks[3].file, "data-7/w/rank-7.safetensors");
}

struct BadIndex {
  std::string name;
  std::string text;
  std::string message;
};

class BadIndexTest : public ::testing::TestWithParam<BadIndex> {};

TEST_P(BadIndexTest, IsInvalidArgumentNamingTheProblem) {
  absl::StatusOr<CheckpointIndex> index = ParseCheckpointIndex(GetParam().text);
  ASSERT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument) << index.status();
  EXPECT_THAT(index.status().message(), HasSubstr(GetParam().message));
}

std::string Index(const std::string& blocks, const std::string& data_dir = "d") {
  return absl::StrCat(R"({"format":"tessera-checkpoint","version":1,"data_dir":")", data_dir,
                      R"(","tensors":[{"name":"t","dtype":"float32","shape":[4],"blocks":[)",
                      blocks, "]}]}");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadIndexTest,
    ::testing::Values(
        BadIndex{"NotJson", "{", "line"},
        BadIndex{"WrongFormat", R"({"format":"x","version":1})", "format 'x'"},
        BadIndex{"WrongVersion", R"({"format":"tessera-checkpoint","version":2})", "version 2"},
        BadIndex{"Gap", Index(R"({"file":"d/a","key":"t","offset":[0],"shape":[3]})"),
                 "cover 3 of the 4"},
        BadIndex{"Overlap",
                 Index(R"({"file":"d/a","key":"t","offset":[0],"shape":[3]},)"
                       R"({"file":"d/b","key":"t","offset":[2],"shape":[2]})"),
                 "overlap"},
        BadIndex{"Outside", Index(R"({"file":"d/a","key":"t","offset":[2],"shape":[3]})"),
                 "lies outside"},
        BadIndex{"EscapingFile", Index(R"({"file":"../a","key":"t","offset":[0],"shape":[4]})"),
                 "not inside"},
        BadIndex{"AbsoluteFile", Index(R"({"file":"/etc/a","key":"t","offset":[0],"shape":[4]})"),
                 "not inside"},
        BadIndex{"EscapingDataDir",
                 Index(R"({"file":"d/a","key":"t","offset":[0],"shape":[4]})", ".."), "not inside"},
        BadIndex{"NegativeOffset", Index(R"({"file":"d/a","key":"t","offset":[-1],"shape":[4]})"),
                 "negative"}),
    [](const ::testing::TestParamInfo<BadIndex>& info) { return info.param.name; });

}  // namespace
}  // namespace tessera
