#include "server/tables/dtensor_table.h"

#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "server/cluster/state_store.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Two registered cpu workers with `budget` bytes each (no process behind them: the table posts
// commands only in Release and PostWrite, which these tests reach only once the workers count as
// dead, so that nothing is sent), and a 1-D mesh over them whose local tensors share the ledger.
struct Fixture {
  explicit Fixture(int64_t budget, const std::string& device = "cpu",
                   absl::Duration dead_after = absl::Seconds(60))
      : registry(absl::Seconds(1), dead_after),
        dispatcher(&registry, "secret"),
        meshes(&registry),
        table(&meshes, &dispatcher, &ledger) {
    std::vector<int64_t> ids;
    std::vector<int64_t> incarnations;
    std::vector<int64_t> budgets;
    for (int i = 0; i < 2; ++i) {
      v1::RegisterRequest r;
      r.set_address(absl::StrCat("127.0.0.1:", 2000 + i));
      r.set_device(device == "cuda" ? absl::StrCat("cuda:", i) : "cpu");
      r.set_memory_budget_bytes(budget);
      v1::RegisterReply reply = registry.Register(r);
      ids.push_back(reply.worker_id());
      incarnations.push_back(reply.incarnation());
      budgets.push_back(budget);
    }
    mesh = std::make_shared<Mesh>("m", *DeviceMesh::Create(device, {2}, {}, ids), incarnations,
                                  absl::Seconds(1), budgets, &ledger);
    EXPECT_TRUE(meshes.Add(mesh).ok());
  }
  // A float32 tensor of `n` elements sharded over the mesh.
  DTensorSpec Sharded(int64_t n) const {
    return *MakeDTensorSpec(mesh->mesh, {Placement::Shard(0)}, {n}, DType::kFloat32);
  }
  WorkerRegistry registry;
  Dispatcher dispatcher;
  MeshTable meshes;
  WorkerBytes ledger;
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

TEST(DTensorTableTest, DTensorsAndLocalTensorsShareTheBudget) {
  Fixture f(40);
  const int64_t first = f.mesh->mesh.ranks()[0];
  const LocalLayout raw{DType::kFloat32, {8}};  // 32 bytes on rank 0
  ASSERT_TRUE(f.mesh->locals.ReserveUpload("raw", 0, raw).ok());
  f.mesh->locals.RecordUpload("raw", 0, raw);
  // 8 bytes a rank fit next to it; 12 do not, on rank 0's worker.
  ASSERT_TRUE(f.table.Add("small", f.mesh, f.Sharded(4), "").ok());
  absl::Status over = f.table.Add("over", f.mesh, f.Sharded(6), "").status();
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr(absl::StrCat("needs 12 bytes on worker ", first,
                                                     ", which holds 40 of its 40-byte budget")));
  // And a local tensor does not fit next to the DTensor.
  const LocalLayout more{DType::kFloat32, {9}};  // 36 bytes
  EXPECT_EQ(f.mesh->locals.ReserveUpload("more", 1, more).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(f.mesh->locals.ReserveUpload("more", 1, LocalLayout{DType::kFloat32, {8}}).ok());
  EXPECT_EQ(f.ledger.Held(first), 40);
}

TEST(DTensorTableTest, ATensorReleasedBeforeItsWriteIsNotWritten) {
  Fixture f(0, "cpu", absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(20));  // the workers count as dead: nothing is sent
  std::shared_ptr<DTensorEntry> t = *f.table.Add("a", f.mesh, f.Sharded(4), "");
  f.table.Release(*t);
  f.table.Release(*t);  // again: nothing
  v1::Command spread;
  spread.mutable_spread_tensor()->set_tensor("dt/a");
  absl::Status s = f.table.PostWrite(*t, spread);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("'a' was freed before it was written"));
  ASSERT_TRUE(t->write->done.HasBeenNotified());
  EXPECT_EQ(t->write->status.code(), absl::StatusCode::kNotFound);
  std::shared_ptr<DTensorEntry> u = *f.table.Add("u", f.mesh, f.Sharded(4), "");
  f.table.Release(*u);
  EXPECT_EQ(f.table.FinishWrite(*u).code(), absl::StatusCode::kNotFound);
  // Releasing a tensor the table no longer holds leaves a new one of its name alone.
  std::shared_ptr<DTensorEntry> old = *f.table.Add("b", f.mesh, f.Sharded(4), "");
  f.table.ForgetMesh(*f.mesh);
  ASSERT_TRUE(f.table.Add("b", f.mesh, f.Sharded(4), "").ok());
  f.table.Release(*old);
  EXPECT_TRUE(f.table.Find("b").ok());
}

TEST(DTensorTableTest, CudaMeshesHoldDTensorsWithinTheWorkersBudgets) {
  // The same table serves meshes of GPU workers: their shards count against the same ledger.
  Fixture f(40, "cuda");
  ASSERT_TRUE(f.table.Add("big", f.mesh, f.Sharded(16), "").ok());
  absl::Status over = f.table.Add("over", f.mesh, f.Sharded(6), "").status();
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr("needs 12 bytes on worker"));
  EXPECT_THAT(f.table.ForgetMesh(*f.mesh), ElementsAre("dt/big"));
}

TEST(DTensorTableTest, DescribeAndUsableFollowTheWrite) {
  Fixture f(0);
  std::shared_ptr<DTensorEntry> t = *f.table.Add("a", f.mesh, f.Sharded(4), "c1");
  EXPECT_EQ(f.table.Describe(*t).state(), v1::PENDING);
  EXPECT_TRUE(f.table.Usable("a").ok());  // a pending tensor may be read by later commands
  t->write->status = absl::ResourceExhaustedError("worker 2 has no room for 'dt/a'");
  t->write->done.Notify();
  v1::TensorInfo info = f.table.Describe(*t);
  EXPECT_EQ(info.state(), v1::FAILED);
  EXPECT_EQ(info.owner(), "c1");
  EXPECT_EQ(info.mesh(), "m");
  absl::Status s = f.table.Usable("a").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  // Without the workers' internal name of the tensor.
  EXPECT_THAT(s.message(), HasSubstr("tensor 'a' failed: worker 2 has no room for 'a'"));
  EXPECT_EQ(f.table.Find("b").status().code(), absl::StatusCode::kNotFound);
}

TEST(DTensorTableTest, RelayoutKeepsTheNameAndMovesTheBytesInTheLedger) {
  // 40 bytes per worker: [16] float32 sharded takes 32 on each; replicated it would take 64.
  Fixture f(40);
  absl::StatusOr<std::shared_ptr<DTensorEntry>> t = f.table.Add("w", f.mesh, f.Sharded(16), "o");
  ASSERT_TRUE(t.ok());
  DTensorSpec replicated = f.Sharded(16);
  replicated.placements = {Placement::Replicate()};
  absl::Status over = f.table.Relayout(**t, replicated).status();
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*f.table.Find("w"), *t);  // nothing changed
  EXPECT_EQ(f.ledger.Held(f.mesh->mesh.ranks()[0]), 32);

  DTensorSpec smaller = *MakeDTensorSpec(f.mesh->mesh, {Placement::Shard(0)}, {16},
                                         DType::kFloat16);  // 16 bytes per worker
  absl::StatusOr<std::shared_ptr<DTensorEntry>> relaid = f.table.Relayout(**t, smaller);
  ASSERT_TRUE(relaid.ok()) << relaid.status();
  EXPECT_EQ((*relaid)->name, "w");
  EXPECT_EQ((*relaid)->owner, "o");
  EXPECT_EQ(*f.table.Find("w"), *relaid);
  EXPECT_EQ(f.ledger.Held(f.mesh->mesh.ranks()[0]), 16);
  // The old entry is spent: nothing is posted for it, and relaying it again finds nothing.
  EXPECT_EQ(f.table.PostWrite(**t, v1::Command()).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.table.Relayout(**t, smaller).status().code(), absl::StatusCode::kNotFound);
  // Undone with the original's write, the entry shares it.
  absl::StatusOr<std::shared_ptr<DTensorEntry>> back =
      f.table.Relayout(**relaid, (*t)->spec, (*t)->write);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->write, (*t)->write);
  EXPECT_EQ(f.ledger.Held(f.mesh->mesh.ranks()[0]), 32);
}

// A relayout in place with a store: the new spec is recorded as an intent before anything moves,
// and erased once the new layout is recorded, when the relayout is undone, or when the workers'
// budgets refuse it.
TEST(DTensorTableTest, RelayoutRecordsItsIntentUntilTheNewLayoutIsRecorded) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/relayout_intent_", ::getpid());
  std::filesystem::remove_all(dir);
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  auto intents = [&] { return (*store)->Load("relayout").value(); };
  auto recorded = [&](const std::string& name) {
    v1::TensorInfo info;
    EXPECT_TRUE(info.ParseFromString((*store)->Load("tensor").value().at(name)));
    return *FromProto(info.meta());
  };
  Fixture f(40);
  f.table.RecordIn(store->get());
  absl::StatusOr<std::shared_ptr<DTensorEntry>> t = f.table.Add("w", f.mesh, f.Sharded(8), "o");
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(f.table.FinishWrite(**t).ok());
  EXPECT_TRUE(intents().empty());
  DTensorSpec replicated = f.Sharded(8);
  replicated.placements = {Placement::Replicate()};

  // Recorded before anything is posted; the tensor's record keeps the old layout meanwhile.
  absl::StatusOr<std::shared_ptr<DTensorEntry>> relaid = f.table.Relayout(**t, replicated);
  ASSERT_TRUE(relaid.ok()) << relaid.status();
  ASSERT_EQ(intents().size(), 1u);
  v1::TensorInfo intent;
  ASSERT_TRUE(intent.ParseFromString(intents().at("w")));
  EXPECT_EQ(FromProto(intent.meta())->placements, replicated.placements);
  EXPECT_EQ(recorded("w").placements, (*t)->spec.placements);
  // Undone: the old layout is what the workers hold; no intent stays.
  absl::StatusOr<std::shared_ptr<DTensorEntry>> back =
      f.table.Relayout(**relaid, (*t)->spec, (*t)->write);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(intents().empty());

  // Written: the record takes the new layout and the intent goes.
  relaid = f.table.Relayout(**back, replicated);
  ASSERT_TRUE(relaid.ok()) << relaid.status();
  EXPECT_EQ(intents().size(), 1u);
  ASSERT_TRUE(f.table.FinishWrite(**relaid).ok());
  EXPECT_TRUE(intents().empty());
  EXPECT_EQ(recorded("w").placements, replicated.placements);

  // Refused by the budgets ([16] replicated is 64 bytes of 40): nothing recorded.
  absl::StatusOr<std::shared_ptr<DTensorEntry>> big = f.table.Add("big", f.mesh, f.Sharded(2), "");
  ASSERT_TRUE(big.ok());
  DTensorSpec too_big = *MakeDTensorSpec(f.mesh->mesh, {Placement::Replicate()}, {2},
                                         DType::kFloat64);  // 16 bytes each, 32 + 16 > 40
  EXPECT_EQ(f.table.Relayout(**big, too_big).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(intents().empty());
  std::filesystem::remove_all(dir);
}

TEST(DTensorTableTest, AwaitWritesNamesTheFailedOrPendingTensor) {
  Fixture f(0);
  auto a = *f.table.Add("a", f.mesh, f.Sharded(4), "");
  auto b = *f.table.Add("b", f.mesh, f.Sharded(4), "");
  ASSERT_TRUE(f.table.FinishWrite(*a).ok());
  absl::Status pending = DTensorTable::AwaitWrites({a, b}, absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(pending.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(pending.message(), HasSubstr("'b'"));
  b->write->status = absl::UnavailableError("worker gone");
  b->write->done.Notify();
  absl::Status failed = DTensorTable::AwaitWrites({a, b}, absl::Now() + absl::Seconds(1));
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(failed.message(), HasSubstr("tensor 'b' failed: worker gone"));
  EXPECT_TRUE(DTensorTable::AwaitWrites({a}, absl::Now()).ok());
}

}  // namespace
}  // namespace tessera
