#include "server/tables/mesh_table.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

v1::RegisterRequest Worker(const std::string& address) {
  v1::RegisterRequest r;
  r.set_address(address);
  r.set_device("cpu");
  return r;
}

// A registry of `n` live cpu workers and a mesh of shape `shape` over them.
struct Fixture {
  explicit Fixture(int n, absl::Duration dead_after = absl::Seconds(30))
      : registry(absl::Milliseconds(10), dead_after), table(&registry) {
    for (int i = 0; i < n; ++i) {
      v1::RegisterReply r = registry.Register(Worker(absl::StrCat("127.0.0.1:", 1000 + i)));
      ids.push_back(r.worker_id());
      incarnations.push_back(r.incarnation());
    }
  }
  std::shared_ptr<Mesh> MakeMesh(const std::string& name, const Shape& shape) {
    absl::StatusOr<DeviceMesh> dm = DeviceMesh::Create("cpu", shape, {}, ids);
    EXPECT_TRUE(dm.ok()) << dm.status();
    return std::make_shared<Mesh>(name, *dm, incarnations, absl::Seconds(1));
  }
  WorkerRegistry registry;
  MeshTable table;
  std::vector<int64_t> ids;
  std::vector<int64_t> incarnations;
};

TEST(MeshTableTest, AddGivesFreshIdsAndRefusesATakenName) {
  Fixture f(2);
  auto a = f.MakeMesh("a", {2});
  auto b = f.MakeMesh("b", {2});
  ASSERT_TRUE(f.table.Add(a).ok());
  ASSERT_TRUE(f.table.Add(b).ok());
  EXPECT_NE(a->id, b->id);
  absl::Status again = f.table.Add(f.MakeMesh("a", {2}));
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(again.message(), HasSubstr("'a'"));
  ASSERT_EQ(f.table.List().size(), 2u);
  EXPECT_EQ(f.table.List()[0]->name, "a");
  EXPECT_EQ(*f.table.Find("b"), b);
}

TEST(MeshTableTest, UnknownNamesAreNotFound) {
  Fixture f(1);
  EXPECT_EQ(f.table.Find("x").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.table.Ready("x").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.table.Remove("x").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(f.table.Add(f.MakeMesh("x", {1})).ok());
  EXPECT_TRUE(f.table.Remove("x").ok());
  EXPECT_EQ(f.table.Find("x").status().code(), absl::StatusCode::kNotFound);
}

TEST(MeshTableTest, WorkersAreInRankOrderWhileHealthy) {
  Fixture f(4);
  auto m = f.MakeMesh("m", {2, 2});
  ASSERT_TRUE(f.table.Add(m).ok());
  absl::StatusOr<std::vector<WorkerHandle>> workers = f.table.Workers(*m);
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(workers->size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ((*workers)[i].id, f.ids[i]);
  EXPECT_TRUE(f.table.Ready("m").ok());
  EXPECT_EQ(f.table.LiveWorkerIds(*m), f.ids);
}

TEST(MeshTableTest, ARestartedWorkerBreaksItsMeshNamingIt) {
  Fixture f(2);
  auto m = f.MakeMesh("m", {2});
  ASSERT_TRUE(f.table.Add(m).ok());
  f.registry.Register(Worker("127.0.0.1:1001"));  // worker 2 again: a new incarnation
  absl::Status health = f.table.Health(*m);
  EXPECT_EQ(health.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(health.message(), HasSubstr("127.0.0.1:1001"));
  EXPECT_THAT(health.message(), HasSubstr("restarted"));
  EXPECT_EQ(f.table.Ready("m").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(f.table.LiveWorkerIds(*m), std::vector<int64_t>{f.ids[0]});
}

TEST(MeshTableTest, ADeadWorkerBreaksItsMesh) {
  Fixture f(2, absl::Milliseconds(50));
  auto m = f.MakeMesh("m", {2});
  ASSERT_TRUE(f.table.Add(m).ok());
  absl::SleepFor(absl::Milliseconds(120));  // no heartbeats: both are dead
  EXPECT_EQ(f.table.Health(*m).code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(f.table.Health(*m).message(), HasSubstr("mesh 'm' is broken"));
  EXPECT_TRUE(f.table.LiveWorkerIds(*m).empty());
}

}  // namespace
}  // namespace tessera
