// TensorLoss and WithoutInternalNames against answers worked out by hand: which layouts lose a
// block with which workers, and the messages a client sees.

#include "server/cluster/worker_loss.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/sharding/device_mesh.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct LossCase {
  std::string name;
  Shape mesh;
  std::vector<Placement> placements;
  std::set<int64_t> gone;  // mesh positions whose worker is gone
  absl::StatusCode want;
  std::string want_block;  // in the DATA_LOSS message
};

class TensorLossTest : public ::testing::TestWithParam<LossCase> {};

TEST_P(TensorLossTest, NamesTheTensorTheBlockAndTheWorker) {
  const LossCase& c = GetParam();
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create("cpu", c.mesh, {});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  absl::StatusOr<DTensorSpec> spec = MakeDTensorSpec(*mesh, c.placements, {8, 6}, DType::kFloat32);
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::vector<int64_t> ranks;
  for (int64_t p = 0; p < mesh->size(); ++p) ranks.push_back(10 + p);  // worker ids 10, 11, ...
  const absl::Status got = TensorLoss("bigR", *spec, ranks, [&](int64_t p) {
    return c.gone.contains(p) ? absl::UnavailableError(
                                    absl::StrCat("worker ", 10 + p, " at 127.0.0.1:9", p, " died"))
                              : absl::OkStatus();
  });
  EXPECT_EQ(got.code(), c.want) << got;
  if (c.gone.empty()) return;
  const int64_t first = *c.gone.begin();
  EXPECT_THAT(got.message(), HasSubstr(absl::StrCat("worker ", 10 + first, " at 127.0.0.1:9")));
  if (c.want == absl::StatusCode::kDataLoss) {
    EXPECT_THAT(got.message(), HasSubstr("tensor 'bigR' lost its"));
    EXPECT_THAT(got.message(), HasSubstr(c.want_block));
  }
}

// Blocks of an [8, 6] tensor worked out by hand with torch.chunk's rule.
INSTANTIATE_TEST_SUITE_P(
    Layouts, TensorLossTest,
    ::testing::Values(
        LossCase{"nothing_gone", {4}, {Placement::Shard(0)}, {}, absl::StatusCode::kOk, ""},
        LossCase{"shard_rows_lose_last",
                 {4},
                 {Placement::Shard(0)},
                 {3},
                 absl::StatusCode::kDataLoss,
                 "block of shape [2, 6] at offset [6, 0]"},
        LossCase{"replicated_survives",
                 {4},
                 {Placement::Replicate()},
                 {1, 2, 3},
                 absl::StatusCode::kUnavailable,
                 ""},
        LossCase{"replicated_all_gone",
                 {2},
                 {Placement::Replicate()},
                 {0, 1},
                 absl::StatusCode::kDataLoss,
                 "block of shape [8, 6] at offset [0, 0]"},
        LossCase{"partial_loses_any",
                 {2},
                 {Placement::Partial()},
                 {1},
                 absl::StatusCode::kDataLoss,
                 "partial block of shape [8, 6]"},
        // (S(1), R) on 2x2: positions 0 and 1 hold columns [0, 3), 2 and 3 hold [3, 6).
        LossCase{"2d_replica_survives",
                 {2, 2},
                 {Placement::Shard(1), Placement::Replicate()},
                 {1},
                 absl::StatusCode::kUnavailable,
                 ""},
        LossCase{"2d_both_replicas_gone",
                 {2, 2},
                 {Placement::Shard(1), Placement::Replicate()},
                 {2, 3},
                 absl::StatusCode::kDataLoss,
                 "block of shape [8, 3] at offset [0, 3]"}),
    [](const ::testing::TestParamInfo<LossCase>& info) { return info.param.name; });

TEST(WithoutInternalNames, HidesTheWorkersNames) {
  EXPECT_EQ(WithoutInternalNames("no local tensor 'dt/bigR'"), "no local tensor 'bigR'");
  EXPECT_EQ(WithoutInternalNames("no local tensor 'dt/.read/4' on worker 2"),
            "no local tensor 'a temporary copy' on worker 2");
  EXPECT_EQ(WithoutInternalNames("worker 1 at 127.0.0.1:5: fine"), "worker 1 at 127.0.0.1:5: fine");
  EXPECT_THAT(WithoutInternalNames("inputs 'dt/a' and 'dt/.read/12'"), Not(HasSubstr("dt/")));
}

}  // namespace
}  // namespace tessera
