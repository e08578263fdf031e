// The collective requests of the public client API, built offline: each torch.distributed-named
// builder against the request written out field by field, and a mesh's process groups.

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tessera/tessera.h"

namespace tessera::client {
namespace {

struct BuilderCase {
  std::string name;
  CollectiveRequest built;
  CollectiveRequest want;
};

const ProcessGroup kTp{"grid", "tp"};

std::vector<BuilderCase> Cases() {
  using Op = CollectiveOp;
  return {
      {"all_reduce", AllReduce(kTp, "x"), {Op::kAllReduce, kTp, "x", "", ReduceOp::kSum, 0, 0}},
      {"all_reduce_max_into_y",
       AllReduce(kTp, "x", "y", ReduceOp::kMax),
       {Op::kAllReduce, kTp, "x", "y", ReduceOp::kMax, 0, 0}},
      {"broadcast", Broadcast(kTp, "x", 1), {Op::kBroadcast, kTp, "x", "", ReduceOp::kSum, 1, 0}},
      {"reduce_avg",
       Reduce(kTp, "x", 1, "y", ReduceOp::kAvg),
       {Op::kReduce, kTp, "x", "y", ReduceOp::kAvg, 1, 0}},
      {"all_gather",
       AllGather(kTp, "x", "y"),
       {Op::kAllGather, kTp, "x", "y", ReduceOp::kSum, 0, 0}},
      {"gather", Gather(kTp, "x", 1, "y"), {Op::kGather, kTp, "x", "y", ReduceOp::kSum, 1, 0}},
      {"scatter", Scatter(kTp, "x", 1, "y"), {Op::kScatter, kTp, "x", "y", ReduceOp::kSum, 1, 0}},
      {"reduce_scatter_min",
       ReduceScatter(kTp, "x", "y", ReduceOp::kMin),
       {Op::kReduceScatter, kTp, "x", "y", ReduceOp::kMin, 0, 0}},
      {"all_to_all", AllToAll(kTp, "x", "y"), {Op::kAllToAll, kTp, "x", "y", ReduceOp::kSum, 0, 0}},
      {"send_recv",
       SendRecv(kTp, "x", 1, 0, "y"),
       {Op::kSendRecv, kTp, "x", "y", ReduceOp::kSum, 1, 0}},
      {"barrier", Barrier(kTp), {Op::kBarrier, kTp, "", "", ReduceOp::kSum, 0, 0}},
      // Designated initializers may leave out any member.
      {"designated",
       {.op = Op::kGather, .group = kTp, .input = "x", .root = 1},
       {Op::kGather, kTp, "x", "", ReduceOp::kSum, 1, 0}},
  };
}

class BuilderTest : public ::testing::TestWithParam<BuilderCase> {};

TEST_P(BuilderTest, FillsEveryFieldAsTorchNamesThem) {
  const CollectiveRequest& got = GetParam().built;
  const CollectiveRequest& want = GetParam().want;
  EXPECT_EQ(got.op, want.op);
  EXPECT_EQ(got.group.mesh, want.group.mesh);
  EXPECT_EQ(got.group.dim, want.group.dim);
  EXPECT_EQ(got.input, want.input);
  EXPECT_EQ(got.output, want.output);
  EXPECT_EQ(got.reduce_op, want.reduce_op);
  EXPECT_EQ(got.root, want.root);
  EXPECT_EQ(got.peer, want.peer);
}

INSTANTIATE_TEST_SUITE_P(Builders, BuilderTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

TEST(CollectiveOpName, NamesEveryOpOnceAsTorchDoes) {
  std::set<std::string> names;
  for (int op = 1; op <= 10; ++op) {
    names.insert(std::string(CollectiveOpName(static_cast<CollectiveOp>(op))));
  }
  EXPECT_EQ(names,
            (std::set<std::string>{"all_gather", "all_reduce", "all_to_all", "barrier", "broadcast",
                                   "gather", "reduce", "reduce_scatter", "scatter", "send_recv"}));
  EXPECT_EQ(CollectiveOpName(static_cast<CollectiveOp>(42)), "unknown");
}

TEST(Mesh, NamesItsProcessGroups) {
  const Mesh mesh{"grid", DeviceMesh::Create("cpu", {2, 2}, {"dp", "tp"}).value()};
  for (const std::string dim : {"dp", "tp", "0", "1"}) {
    const ProcessGroup group = mesh[dim];
    EXPECT_EQ(group.mesh, "grid");
    EXPECT_EQ(group.dim, dim);
  }
  EXPECT_EQ(mesh.group().mesh, "grid");
  EXPECT_EQ(mesh.group().dim, "");
}

TEST(Placements, AreDTensorsOwn) {
  EXPECT_EQ(Shard(1), Placement::Shard(1));
  EXPECT_EQ(Replicate(), Placement::Replicate());
  EXPECT_EQ(Partial(), Placement::Partial(ReduceOp::kSum));
  EXPECT_EQ(Partial(ReduceOp::kMax), Placement::Partial(ReduceOp::kMax));
  EXPECT_EQ(PlacementsToString(std::vector<Placement>{Shard(0), Replicate(), Partial()}),
            "(S(0), R, P(sum))");
}

}  // namespace
}  // namespace tessera::client
