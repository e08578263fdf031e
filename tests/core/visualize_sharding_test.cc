#include "core/sharding/visualize_sharding.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

DTensorSpec Spec(Shape mesh, std::vector<Placement> placements, Shape shape) {
  return MakeDTensorSpec(DeviceMesh::Create("cpu", std::move(mesh)).value(), std::move(placements),
                         std::move(shape), DType::kFloat32)
      .value();
}

TEST(VisualizeSharding, RowShardsOnTwoRanks) {
  const std::string text = VisualizeSharding(Spec({2}, {Placement::Shard(0)}, {4, 3}));
  EXPECT_THAT(text, HasSubstr("0:2       | rank 0"));
  EXPECT_THAT(text, HasSubstr("2:4       | rank 1"));
  EXPECT_THAT(text, HasSubstr("rank 1   coord [1]       local [2, 3]       offset [2, 0]"));
}

TEST(VisualizeSharding, ReferenceExampleOnTwoByTwo) {
  // [2,5] on (2,2) with (S(1), S(1)): columns 0:2, 2:3, 3:4, 4:5 on ranks 0..3.
  const std::string text =
      VisualizeSharding(Spec({2, 2}, {Placement::Shard(1), Placement::Shard(1)}, {2, 5}));
  EXPECT_THAT(text, HasSubstr("| 0:2    | 2:3    | 3:4    | 4:5"));
  EXPECT_THAT(text, HasSubstr("| rank 0 | rank 1 | rank 2 | rank 3"));
}

TEST(VisualizeSharding, ReplicatedBlocksListEveryHolder) {
  const std::string text =
      VisualizeSharding(Spec({2, 2}, {Placement::Shard(0), Placement::Replicate()}, {4, 4}));
  EXPECT_THAT(text, HasSubstr("rank 0,1"));
  EXPECT_THAT(text, HasSubstr("rank 2,3"));
}

TEST(VisualizeSharding, PartialIsMarkedAndEmptyShardsListed) {
  const std::string text = VisualizeSharding(Spec({4}, {Placement::Partial(ReduceOp::kSum)}, {3}));
  EXPECT_THAT(text, HasSubstr("partial value"));
  const std::string uneven = VisualizeSharding(Spec({4}, {Placement::Shard(0)}, {3}));
  EXPECT_THAT(uneven,
              HasSubstr("rank 3   coord [3]       local [0]          offset [3]          0 B"));
}

}  // namespace
}  // namespace tessera
