#include "server/dtensor_table.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Two registered cpu workers with `budget` bytes each (no process behind them: the table only
// posts commands in Release, which these tests do not reach), and a 1-D mesh over them.
struct Fixture {
  explicit Fixture(int64_t budget, const std::string& device = "cpu")
      : registry(absl::Seconds(1), absl::Seconds(60)),
        dispatcher(&registry, "secret"),
        meshes(&registry),
        table(&meshes, &dispatcher) {
    std::vector<int64_t> ids;
    std::vector<int64_t> incarnations;
    for (int i = 0; i < 2; ++i) {
      v1::RegisterRequest r;
      r.set_address(absl::StrCat("127.0.0.1:", 2000 + i));
      r.set_device(device == "cuda" ? absl::StrCat("cuda:", i) : "cpu");
      r.set_memory_budget_bytes(budget);
      v1::RegisterReply reply = registry.Register(r);
      ids.push_back(reply.worker_id());
      incarnations.push_back(reply.incarnation());
    }
    mesh = std::make_shared<Mesh>("m", *DeviceMesh::Create(device, {2}, {}, ids), incarnations,
                                  absl::Seconds(1));
    EXPECT_TRUE(meshes.Add(mesh).ok());
  }
  // A float32 tensor of `n` elements sharded over the mesh.
  DTensorSpec Sharded(int64_t n) const {
    return *MakeDTensorSpec(mesh->mesh, {Placement::Shard(0)}, {n}, DType::kFloat32);
  }
  WorkerRegistry registry;
  Dispatcher dispatcher;
  MeshTable meshes;
  DTensorTable table;
  std::shared_ptr<Mesh> mesh;
};

TEST(DTensorTableTest, NamesAreCheckedOrMadeFresh) {
  Fixture f(0);
  absl::StatusOr<std::shared_ptr<DTensorEntry>> a = f.table.Add("a", f.mesh, f.Sharded(4), "c1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->name, "a");
  EXPECT_EQ(f.table.Add("a", f.mesh, f.Sharded(4), "c1").status().code(),
            absl::StatusCode::kAlreadyExists);
  for (const std::string& bad : std::vector<std::string>{"x/y", ".hidden", std::string(201, 'n')}) {
    absl::Status s = f.table.Add(bad, f.mesh, f.Sharded(4), "c1").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  absl::StatusOr<std::shared_ptr<DTensorEntry>> fresh = f.table.Add("", f.mesh, f.Sharded(4), "");
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE((*fresh)->name, "a");
  EXPECT_EQ(f.table.OnMesh("").size(), 2u);
  EXPECT_EQ(f.table.OnMesh("other").size(), 0u);
  EXPECT_THAT(f.table.OwnedBy("c1"), ElementsAre(*a));
}

TEST(DTensorTableTest, BudgetsCountEveryShardAndNameTheWorker) {
  // 40 bytes per worker: a sharded [16] float32 takes 32 on each, [2] 4 more; [4] would be 8.
  Fixture f(40);
  ASSERT_TRUE(f.table.Add("big", f.mesh, f.Sharded(16), "").ok());
  ASSERT_TRUE(f.table.Add("small", f.mesh, f.Sharded(2), "").ok());
  absl::Status over = f.table.Add("over", f.mesh, f.Sharded(4), "").status();
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr("needs 8 bytes on worker"));
  EXPECT_THAT(over.message(), HasSubstr("holds 36 of its 40-byte budget"));
  // Forgetting the mesh gives the bytes back and names what the workers must free.
  EXPECT_THAT(f.table.ForgetMesh(*f.mesh), ElementsAre("dt/big", "dt/small"));
  EXPECT_TRUE(f.table.OnMesh("m").empty());
  EXPECT_TRUE(f.table.Add("over", f.mesh, f.Sharded(4), "").ok());
}

TEST(DTensorTableTest, CudaMeshesHoldNoDTensorsYet) {
  Fixture f(0, "cuda");
  EXPECT_EQ(f.table.Add("a", f.mesh, f.Sharded(4), "").status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(DTensorTableTest, DescribeAndUsableFollowTheWrite) {
  Fixture f(0);
  std::shared_ptr<DTensorEntry> t = *f.table.Add("a", f.mesh, f.Sharded(4), "c1");
  EXPECT_EQ(f.table.Describe(*t).state(), v1::PENDING);
  EXPECT_TRUE(f.table.Usable("a").ok());  // a pending tensor may be read by later commands
  t->write->status = absl::UnavailableError("worker 2 died");
  t->write->done.Notify();
  v1::TensorInfo info = f.table.Describe(*t);
  EXPECT_EQ(info.state(), v1::FAILED);
  EXPECT_EQ(info.owner(), "c1");
  EXPECT_EQ(info.mesh(), "m");
  absl::Status s = f.table.Usable("a").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'a' failed: worker 2 died"));
  EXPECT_EQ(f.table.Find("b").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera
