// A worker killed with SIGKILL in the middle of a collective: the call fails with UNAVAILABLE
// within the mesh's collective timeout, the coordinator and the meshes on the other workers carry
// on, the broken mesh says which worker it lost, and the worker restarted keeps its id and serves
// again. The all_reduce is issued as a unary call and as the first of two on a collective stream.

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/small_integer_tensor.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc_status.h"
#include "tessera/v1/collective.grpc.pb.h"
#include "tests/cluster/cluster_fixture.h"

namespace tessera {
namespace {

using ::tessera::client::CollectiveRequest;
using ::tessera::client::CollectiveResult;
using ::tessera::client::CollectiveStream;
using ::tessera::client::MeshOptions;
using ::tessera::client::Session;
using ::tessera::client::WorkerInfo;
using ::tessera::testing::StatusIs;
using ::tessera::testing::TensorsMatch;
using ::tessera::testing::TestCluster;
using ::tessera::testing::TestClusterOptions;

constexpr int kWorkers = 4;
constexpr int kVictim = kWorkers - 1;  // LocalCluster's index of the worker killed
constexpr absl::Duration kCollectiveTimeout = absl::Seconds(5);

// The worker with process id `pid`, if registered.
std::optional<WorkerInfo> WorkerWithPid(Session& client, int64_t pid) {
  absl::StatusOr<std::vector<WorkerInfo>> workers = client.ListWorkers();
  if (!workers.ok()) return std::nullopt;
  for (const WorkerInfo& w : *workers) {
    if (w.pid == pid) return w;
  }
  return std::nullopt;
}

std::optional<WorkerInfo> WorkerWithId(Session& client, int64_t id) {
  absl::StatusOr<std::vector<WorkerInfo>> workers = client.ListWorkers();
  if (!workers.ok()) return std::nullopt;
  for (const WorkerInfo& w : *workers) {
    if (w.worker_id == id) return w;
  }
  return std::nullopt;
}

CollectiveRequest AllReduceSum(const std::string& mesh, const std::string& input,
                               const std::string& output) {
  return client::AllReduce({mesh, ""}, input, output, ReduceOp::kSum);
}

// A mesh `name` of `shape` on workers `ids` (none: the first live ones), with kCollectiveTimeout.
absl::Status CreateMesh(Session& client, const std::string& name, const Shape& shape,
                        const std::vector<int64_t>& ids) {
  MeshOptions options;
  options.worker_ids = ids;
  options.collective_timeout = kCollectiveTimeout;
  return client::InitDeviceMesh(client, "cpu", shape, {}, name, options).status();
}

// Puts a small tensor on every rank of `mesh`, all-reduces it and checks every rank's result.
::testing::AssertionResult AllReduceWorks(Session& client, const std::string& mesh, int64_t ranks,
                                          uint32_t seed) {
  std::vector<HostTensor> inputs;
  for (int64_t r = 0; r < ranks; ++r) {
    inputs.push_back(SmallIntegerTensor(DType::kFloat32, {7, 3}, seed + static_cast<uint32_t>(r)));
    if (absl::Status s = client.PutLocal(mesh, r, "small", inputs.back()); !s.ok()) {
      return ::testing::AssertionFailure() << "upload to rank " << r << ": " << s;
    }
  }
  absl::StatusOr<CollectiveResult> reply =
      client.RunCollective(AllReduceSum(mesh, "small", "small_sum"));
  if (!reply.ok()) return ::testing::AssertionFailure() << "all_reduce: " << reply.status();
  HostTensor want = inputs[0].Clone();
  for (int64_t r = 1; r < ranks; ++r) {
    ReduceInto(ReduceOp::kSum, want.dtype(), want.data(), inputs[r].data(), want.num_elements());
  }
  for (int64_t r = 0; r < ranks; ++r) {
    absl::StatusOr<HostTensor> got = client.GetLocal(mesh, r, "small_sum");
    if (!got.ok())
      return ::testing::AssertionFailure() << "download of rank " << r << ": " << got.status();
    if (::testing::AssertionResult m = TensorsMatch(*got, want); !m) {
      return ::testing::AssertionFailure() << "rank " << r << ": " << m.message();
    }
  }
  return ::testing::AssertionSuccess();
}

class ClusterFaultsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new TestCluster;
    startup_ = cluster_->Start(TestClusterOptions(kWorkers));
  }
  static void TearDownTestSuite() {
    cluster_->Stop();
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(startup_.ok()) << "the cluster did not start: " << startup_ << cluster_->LogHint();
  }

  static inline TestCluster* cluster_ = nullptr;
  static inline absl::Status startup_;
};

// How the all_reduce that loses a worker is issued: a unary call, or the first of two
// collectives on one CollectiveStream (the second, queued behind it, must fail too).
enum class Issue { kUnary, kStream };

class ClusterFaultsIssueTest : public ClusterFaultsTest,
                               public ::testing::WithParamInterface<Issue> {};

TEST_P(ClusterFaultsIssueTest, WorkerKilledDuringAllReduce) {
  LocalCluster& cluster = *cluster_->cluster;
  Session& client = *cluster_->client;
  // Worker ids follow registration; LocalCluster indexes by start order. Pids tie them together.
  std::vector<int64_t> ids;
  for (int i = 0; i < kWorkers; ++i) {
    std::optional<WorkerInfo> w = WorkerWithPid(client, cluster.worker_pid(i));
    ASSERT_TRUE(w.has_value()) << "worker " << i << " (pid " << cluster.worker_pid(i)
                               << ") is not registered";
    ids.push_back(w->worker_id);
  }
  const int64_t victim = ids[kVictim];
  const std::string victim_name = absl::StrCat("worker ", victim);
  const std::optional<WorkerInfo> before = WorkerWithId(client, victim);
  ASSERT_TRUE(before.has_value());

  // A mesh on the other workers, set up before the fault, and the mesh that will lose a worker.
  const std::vector<int64_t> others(ids.begin(), ids.begin() + kVictim);
  ASSERT_TRUE(CreateMesh(client, "others", {kVictim}, others).ok());
  ASSERT_TRUE(CreateMesh(client, "big", {kWorkers}, ids).ok());
  const HostTensor big = HostTensor::Zeros(DType::kFloat32, {32, 1024, 1024}).value();  // 128 MiB
  for (int r = 0; r < kWorkers; ++r) ASSERT_TRUE(client.PutLocal("big", r, "x", big).ok());

  // The all_reduce runs on its own channel with its own deadline, so that nothing can hang here.
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(cluster.address(), grpc::InsecureChannelCredentials());
  std::unique_ptr<v1::CollectiveService::Stub> stub = v1::CollectiveService::NewStub(channel);
  const CollectiveRequest request = AllReduceSum("big", "x", "y");
  std::promise<absl::Status> done;
  std::future<absl::Status> result = done.get_future();
  absl::Status queued_behind;  // the stream's second collective
  std::thread caller([&] {
    if (GetParam() == Issue::kUnary) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      v1::CollectiveRequest wire;
      wire.set_mesh("big");
      wire.set_op(v1::ALL_REDUCE_OP);
      wire.set_reduce_op(v1::SUM);
      wire.set_input("x");
      wire.set_output("y");
      v1::CollectiveReply reply;
      done.set_value(FromGrpcStatus(stub->RunCollective(&context, wire, &reply)));
      return;
    }
    client::SessionOptions options;
    options.keep_alive = false;
    options.timeout = absl::Seconds(10);
    absl::StatusOr<std::shared_ptr<Session>> own = Session::Connect(cluster.address(), options);
    absl::StatusOr<std::unique_ptr<CollectiveStream>> stream =
        own.ok() ? (*own)->OpenCollectiveStream(absl::Seconds(60)) : own.status();
    if (!stream.ok()) {
      done.set_value(stream.status());
      return;
    }
    CollectiveRequest second = request;
    second.output = "y2";
    if (absl::Status s = (*stream)->Submit(request); !s.ok()) {
      done.set_value(s);
      return;
    }
    queued_behind = (*stream)->Submit(second);
    done.set_value((*stream)->Next().status());
    if (queued_behind.ok()) queued_behind = (*stream)->Next().status();
  });
  // By now the workers are in Gloo's ring, which takes over 0.5 s for 128 MiB on 4 ranks here.
  absl::SleepFor(absl::Milliseconds(150));
  const bool running = result.wait_for(std::chrono::seconds(0)) == std::future_status::timeout;
  const absl::Status killed = cluster.KillWorker(kVictim);
  const absl::Time kill_time = absl::Now();
  const bool returned = result.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  const absl::Duration waited = absl::Now() - kill_time;
  caller.join();  // before any ASSERT can leave this scope
  ASSERT_TRUE(killed.ok()) << killed;
  ASSERT_TRUE(returned) << "the all_reduce did not return within 60 s of the kill";
  ASSERT_TRUE(running) << "the all_reduce finished before the kill: " << result.get()
                       << "; make the tensor larger";
  const absl::Status failed = result.get();
  EXPECT_TRUE(StatusIs(failed, absl::StatusCode::kUnavailable));
  if (GetParam() == Issue::kStream) {
    EXPECT_TRUE(StatusIs(queued_behind, absl::StatusCode::kUnavailable, {victim_name}));
  }
  EXPECT_LE(waited, kCollectiveTimeout + absl::Seconds(2))
      << "the failure took " << waited << " to reach the client: " << failed;

  // The coordinator is up and soon reports the worker dead, still under its id.
  ASSERT_TRUE(client.ListWorkers().ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  std::optional<WorkerInfo> dead;
  while (absl::Now() < deadline) {
    dead = WorkerWithId(client, victim);
    if (dead.has_value() && !dead->alive) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(dead.has_value());
  EXPECT_FALSE(dead->alive) << victim_name << " still counts as alive after 15 s";
  for (int i = 0; i < kVictim; ++i) {
    std::optional<WorkerInfo> w = WorkerWithId(client, ids[i]);
    ASSERT_TRUE(w.has_value());
    EXPECT_TRUE(w->alive) << "worker " << ids[i];
  }

  // The broken mesh refuses work, naming the worker it lost.
  EXPECT_TRUE(StatusIs(client.RunCollective(AllReduceSum("big", "x", "z")).status(),
                       absl::StatusCode::kUnavailable, {victim_name}));
  EXPECT_TRUE(StatusIs(client.GetLocal("big", 0, "x").status(), absl::StatusCode::kUnavailable,
                       {victim_name}));
  EXPECT_TRUE(
      StatusIs(client.PutLocal("big", 0, "w", big), absl::StatusCode::kUnavailable, {victim_name}));
  absl::StatusOr<client::MeshInfo> broken = client::GetMesh(client, "big");
  ASSERT_TRUE(broken.ok()) << broken.status();
  EXPECT_FALSE(broken->ready);
  EXPECT_NE(broken->broken_reason.find(victim_name), std::string::npos) << broken->broken_reason;

  // The mesh on the other workers works, and so does a new one made of live workers.
  EXPECT_TRUE(AllReduceWorks(client, "others", kVictim, 10));
  ASSERT_TRUE(CreateMesh(client, "live", {kVictim}, {}).ok());
  EXPECT_TRUE(AllReduceWorks(client, "live", kVictim, 20));

  // Restarted, the worker registers again under its id, with a new incarnation.
  ASSERT_TRUE(cluster.RestartWorker(kVictim).ok());
  ASSERT_TRUE(cluster.WaitForAliveWorkers(kWorkers, absl::Seconds(30)).ok());
  std::optional<WorkerInfo> back = WorkerWithId(client, victim);
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(back->alive);
  EXPECT_EQ(back->pid, cluster.worker_pid(kVictim));
  EXPECT_GT(back->incarnation, before->incarnation);
  // The old mesh stays broken (its communicators died with the old process) and says why.
  EXPECT_TRUE(StatusIs(client.RunCollective(AllReduceSum("big", "x", "z")).status(),
                       absl::StatusCode::kUnavailable, {victim_name, "restarted"}));
  ASSERT_TRUE(client.DeleteMesh("big").ok());
  const absl::Status again = CreateMesh(client, "again", {kWorkers}, ids);
  ASSERT_TRUE(again.ok()) << again;
  EXPECT_TRUE(AllReduceWorks(client, "again", kWorkers, 30));
  EXPECT_TRUE(AllReduceWorks(client, "others", kVictim, 40));
  for (const char* mesh : {"others", "live", "again"}) {
    EXPECT_TRUE(client.DeleteMesh(mesh).ok()) << mesh;
  }
}

// A worker killed while a DTensor is sharded over it, with the next calls at once (while the
// coordinator still counts the worker alive), a little later, or after it declared the worker
// dead, and the first of them a read or a redistribute (an all_gather, which its peers' Gloo sees
// fail): a read of the tensor is DATA_LOSS naming the tensor and the worker; the redistribute, or
// a read of its result, fails with UNAVAILABLE or DATA_LOSS naming the worker; no message shows
// the workers' internal names.
enum class FirstCall { kRead, kRedistribute };
using LossCase = std::tuple<absl::Duration, FirstCall>;
class ClusterWorkerLossTest : public ClusterFaultsTest,
                              public ::testing::WithParamInterface<LossCase> {};

TEST_P(ClusterWorkerLossTest, CallsAfterAWorkerDiesNameItAndTheLostTensor) {
  const auto& [delay, first] = GetParam();
  LocalCluster& cluster = *cluster_->cluster;
  ASSERT_TRUE(cluster.WaitForAliveWorkers(kWorkers, absl::Seconds(30)).ok());
  absl::StatusOr<std::shared_ptr<Session>> own = Session::Connect(cluster.address());
  ASSERT_TRUE(own.ok()) << own.status();
  Session& session = **own;
  const std::optional<WorkerInfo> victim = WorkerWithPid(session, cluster.worker_pid(kVictim));
  ASSERT_TRUE(victim.has_value());
  const std::string mesh_name =
      absl::StrCat("loss", absl::ToInt64Milliseconds(delay), "_", static_cast<int>(first));
  MeshOptions options;
  options.collective_timeout = kCollectiveTimeout;  // a survivor's all_gather waits this long
  absl::StatusOr<client::MeshInfo> mesh =
      client::InitDeviceMesh(session, "cpu", {kWorkers}, {}, mesh_name, options);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  // Large enough that the all_gather is still running on the survivors when the victim is gone.
  const HostTensor full = SmallIntegerTensor(DType::kFloat32, {512, 1024}, 3);
  client::DistributeOptions named;
  named.name = absl::StrCat("bigR", mesh_name);
  absl::StatusOr<client::DTensor> sharded =
      client::DistributeTensor(session, full, *mesh, {Placement::Shard(0)}, named);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  absl::StatusOr<HostTensor> before = sharded->FullTensor();
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_TRUE(TensorsMatch(*before, full));

  ASSERT_TRUE(cluster.KillWorker(kVictim).ok());
  absl::SleepFor(delay);
  const std::string worker = absl::StrCat("worker ", victim->worker_id, " at ", victim->address);
  // Whatever the call, the answer names the worker and none of the workers' own names.
  auto names_the_worker = [&](const absl::Status& s) {
    return s.message().find(worker) != std::string::npos &&
           s.message().find("dt/") == std::string::npos &&
           s.message().find(".read/") == std::string::npos;
  };
  auto redistribute = [&] {
    absl::StatusOr<client::DTensor> gathered = sharded->Redistribute({Placement::Replicate()});
    const absl::Status s = gathered.ok() ? gathered->FullTensor().status() : gathered.status();
    EXPECT_TRUE(s.code() == absl::StatusCode::kDataLoss ||
                s.code() == absl::StatusCode::kUnavailable)
        << s;
    EXPECT_TRUE(names_the_worker(s)) << s;
  };
  if (first == FirstCall::kRedistribute) redistribute();
  const absl::Status read = sharded->FullTensor().status();
  EXPECT_EQ(read.code(), absl::StatusCode::kDataLoss) << read;
  EXPECT_TRUE(names_the_worker(read)) << read;
  EXPECT_NE(read.message().find(absl::StrCat("tensor '", named.name, "'")), std::string::npos)
      << read;
  const absl::Status block = sharded->ToLocal(kVictim).status();
  EXPECT_EQ(block.code(), absl::StatusCode::kDataLoss) << block;
  EXPECT_TRUE(names_the_worker(block)) << block;
  if (first == FirstCall::kRead) redistribute();

  ASSERT_TRUE(cluster.RestartWorker(kVictim).ok());
  ASSERT_TRUE(cluster.WaitForAliveWorkers(kWorkers, absl::Seconds(30)).ok());
  EXPECT_TRUE(session.DeleteMesh(mesh_name).ok());
}

INSTANTIATE_TEST_SUITE_P(
    Delays, ClusterWorkerLossTest,
    ::testing::Combine(::testing::Values(absl::ZeroDuration(), absl::Milliseconds(300),
                                         absl::Seconds(3)),
                       ::testing::Values(FirstCall::kRead, FirstCall::kRedistribute)),
    [](const ::testing::TestParamInfo<LossCase>& info) {
      return absl::StrCat(std::get<1>(info.param) == FirstCall::kRead ? "read" : "redistribute",
                          "_first_after_", absl::ToInt64Milliseconds(std::get<0>(info.param)),
                          "ms");
    });

INSTANTIATE_TEST_SUITE_P(Issues, ClusterFaultsIssueTest,
                         ::testing::Values(Issue::kUnary, Issue::kStream),
                         [](const ::testing::TestParamInfo<Issue>& info) {
                           return std::string(info.param == Issue::kUnary ? "unary" : "stream");
                         });

}  // namespace
}  // namespace tessera
