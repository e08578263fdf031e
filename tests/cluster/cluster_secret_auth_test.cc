// The attacks seen on a plaintext cluster with a shared secret, replayed against real daemons: a
// Register with a live worker's address or a spoofed heartbeat from a caller without the secret,
// wrong secrets by the thousand against a worker, and the rendezvous store abused. Each is refused,
// failures are logged and limited per host, and the cluster still runs a workload afterwards.

#include <atomic>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "metrics/http_client.h"
#include "proto/grpc_status.h"
#include "tessera/v1/registry.grpc.pb.h"
#include "tessera/v1/worker.grpc.pb.h"
#include "tests/cluster/cluster_fixture.h"

namespace tessera::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSecret[] = "the-cluster-secret-0123456789";

TestCluster* cluster = nullptr;

class SecretEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    cluster = new TestCluster;
    LocalClusterOptions options = TestClusterOptions(2);
    options.secret = kSecret;
    options.metrics = true;
    const absl::Status started = cluster->Start(options);
    ASSERT_TRUE(started.ok()) << started << cluster->LogHint();
  }
  void TearDown() override {
    cluster->Stop();
    delete cluster;
  }
};

const ::testing::Environment* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new SecretEnvironment);

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<client::WorkerInfo> Workers() {
  absl::StatusOr<std::vector<client::WorkerInfo>> workers = cluster->client->ListWorkers();
  EXPECT_TRUE(workers.ok()) << workers.status();
  return workers.ok() ? *workers : std::vector<client::WorkerInfo>{};
}

std::unique_ptr<v1::Registry::Stub> Registry() {
  return v1::Registry::NewStub(
      grpc::CreateChannel(cluster->cluster->address(), grpc::InsecureChannelCredentials()));
}

// A Register or Heartbeat without the secret, or with a wrong one: UNAUTHENTICATED, and the live
// worker it names keeps its incarnation (its shards are not wiped).
TEST(SecretAuth, RegistryRefusesCallersWithoutTheSecret) {
  const std::vector<client::WorkerInfo> before = Workers();
  ASSERT_EQ(before.size(), 2u);
  for (const std::string& secret : {std::string(), std::string("wrong-secret-0123456789")}) {
    {
      grpc::ClientContext context;
      if (!secret.empty()) context.AddMetadata(kSecretMetadataKey, secret);
      v1::RegisterRequest request;
      request.set_address(before[0].address);
      request.set_device("cpu");
      v1::RegisterReply reply;
      const grpc::Status s = Registry()->Register(&context, request, &reply);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
      EXPECT_THAT(s.error_message(), HasSubstr("cluster secret is missing or wrong"));
    }
    {
      grpc::ClientContext context;
      if (!secret.empty()) context.AddMetadata(kSecretMetadataKey, secret);
      v1::HeartbeatRequest request;
      request.set_worker_id(before[1].worker_id);
      request.set_incarnation(before[1].incarnation);
      v1::HeartbeatReply reply;
      const grpc::Status s = Registry()->Heartbeat(&context, request, &reply);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
    }
  }
  const std::vector<client::WorkerInfo> after = Workers();
  ASSERT_EQ(after.size(), 2u);
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].incarnation, before[i].incarnation) << "worker " << i;
  }
  const std::string log = ReadFile(cluster->cluster->log_dir() + "/coordinator.log");
  EXPECT_THAT(log, HasSubstr("calling tessera.v1.Registry/Register"));
  EXPECT_THAT(log, Not(HasSubstr("wrong-secret-0123456789")));
}

// The rendezvous store with the secret but as no registered worker, or past its bounds.
TEST(SecretAuth, StoreRefusesOutsidersAndOversizedValues) {
  struct Case {
    std::string caller, key;
    int64_t bytes;
    grpc::StatusCode code;
  };
  const std::vector<client::WorkerInfo> workers = Workers();
  ASSERT_FALSE(workers.empty());
  const std::string real = absl::StrCat(workers[0].worker_id, "/", workers[0].incarnation);
  for (const Case& c : {Case{"", "mesh/0/x", 1, grpc::StatusCode::PERMISSION_DENIED},
                        Case{"0/12345", "mesh/0/x", 1, grpc::StatusCode::PERMISSION_DENIED},
                        Case{real, "mesh/999/x", 1, grpc::StatusCode::PERMISSION_DENIED},
                        Case{real, "mesh/0/x", 50 << 20, grpc::StatusCode::RESOURCE_EXHAUSTED}}) {
    grpc::ClientContext context;
    context.AddMetadata(kSecretMetadataKey, kSecret);
    if (!c.caller.empty()) context.AddMetadata("x-tessera-worker", c.caller);
    v1::StoreSetRequest request;
    request.set_key(c.key);
    request.set_value(std::string(c.bytes, 'v'));
    v1::StoreSetReply reply;
    const grpc::Status s = Registry()->StoreSet(&context, request, &reply);
    EXPECT_EQ(s.error_code(), c.code) << c.caller << " " << c.key << ": " << s.error_message();
  }
}

// Wrong secrets by the thousand from the workers' own host, at a worker's port and at the
// coordinator's Registry, interleaved with the cluster's own traffic for longer than a worker may
// miss heartbeats: every failure is refused (a burst with its reason, the rest RESOURCE_EXHAUSTED),
// counted on /metrics and logged without the guess, while every heartbeat, command and client
// call of the cluster goes on: no worker restarts, every op succeeds and every tensor reads back.
// (The limiter used to refuse before looking at the credential, and never refilled for a host
// calling more often than its period: the workers went dead and every tensor answered DATA_LOSS.)
TEST(SecretAuth, WrongSecretsFromTheClustersHostNeverRefuseItsOwnCalls) {
  const std::vector<client::WorkerInfo> before = Workers();
  ASSERT_EQ(before.size(), 2u);
  client::Session& s = *cluster->client;
  ASSERT_TRUE(client::InitDeviceMesh(s, TestDevice(), {2}, {"x"}, "attacked").ok());
  absl::StatusOr<client::Mesh> mesh = client::GetMesh(s, "attacked");
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  const HostTensor kept = kernels::testing::RandomTensor(DType::kFloat32, {8, 3}, 5);
  absl::StatusOr<client::DTensor> replicated =
      client::DistributeTensor(s, kept, *mesh, {Placement::Replicate()});
  ASSERT_TRUE(replicated.ok()) << replicated.status();

  std::atomic<bool> stop{false};
  std::atomic<int> refused{0}, limited{0}, other{0};
  auto count = [&](const grpc::Status& st, grpc::StatusCode refusal) {
    if (st.error_code() == refusal) {
      ++refused;
    } else if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++limited;
    } else {
      ++other;
    }
  };
  std::thread at_worker([&] {
    std::unique_ptr<v1::Worker::Stub> worker = v1::Worker::NewStub(
        grpc::CreateChannel(before[0].address, grpc::InsecureChannelCredentials()));
    for (int i = 0; !stop; ++i) {
      grpc::ClientContext context;
      context.AddMetadata(kSecretMetadataKey, absl::StrCat("guess-", i));
      v1::Command command;
      v1::CommandReply reply;
      count(worker->Execute(&context, command, &reply), grpc::StatusCode::PERMISSION_DENIED);
    }
  });
  std::thread at_registry([&] {
    std::unique_ptr<v1::Registry::Stub> registry = Registry();
    for (int i = 0; !stop; ++i) {
      grpc::ClientContext context;
      context.AddMetadata(kSecretMetadataKey, absl::StrCat("guess-", i));
      v1::HeartbeatRequest request;
      request.set_worker_id(before[1].worker_id);
      request.set_incarnation(before[1].incarnation);
      v1::HeartbeatReply reply;
      count(registry->Heartbeat(&context, request, &reply), grpc::StatusCode::UNAUTHENTICATED);
    }
  });
  // Twice the time a worker may miss heartbeats (TestClusterOptions: 2 s) of ordinary work.
  const absl::Time end = absl::Now() + absl::Seconds(4);
  int ops = 0;
  for (int64_t i = 0; absl::Now() < end; ++i) {
    const HostTensor full = kernels::testing::RandomTensor(DType::kFloat32, {6, 3}, i);
    absl::StatusOr<client::DTensor> t =
        client::DistributeTensor(s, full, *mesh, {Placement::Shard(0)});
    ASSERT_TRUE(t.ok()) << "op " << i << ": " << t.status();
    absl::StatusOr<HostTensor> got = t->FullTensor();
    ASSERT_TRUE(got.ok()) << "op " << i << ": " << got.status();
    EXPECT_TRUE(TensorsMatch(*got, full));
    ASSERT_TRUE(t->Free().ok());
    ++ops;
  }
  stop = true;
  at_worker.join();
  at_registry.join();
  EXPECT_GT(ops, 10);
  EXPECT_EQ(other, 0);
  EXPECT_GT(limited, 0);
  EXPECT_GT(refused, 0);
  // A burst of 20 each, then one per 500 ms of the attack.
  EXPECT_LE(refused, 2 * (20 + 12));

  const std::vector<client::WorkerInfo> after = Workers();
  ASSERT_EQ(after.size(), 2u);
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].incarnation, before[i].incarnation) << "worker " << i;
    EXPECT_TRUE(after[i].alive) << "worker " << i;
  }
  absl::StatusOr<HostTensor> got = replicated->FullTensor();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(TensorsMatch(*got, kept));

  const std::string log = ReadFile(cluster->cluster->log_dir() + "/worker-0.log");
  EXPECT_THAT(log,
              HasSubstr("authentication failed: peer 127.0.0.1 calling tessera.v1.Worker/Execute"));
  EXPECT_THAT(log, Not(HasSubstr("guess-1")));
  const std::string coordinator_log = ReadFile(cluster->cluster->log_dir() + "/coordinator.log");
  EXPECT_THAT(coordinator_log, HasSubstr("tessera.v1.Registry/Heartbeat"));
  for (const auto& [url, service] :
       {std::pair(cluster->cluster->worker_metrics_url(0), "worker commands"),
        std::pair(cluster->cluster->coordinator_metrics_url(), "coordinator registry")}) {
    absl::StatusOr<metrics::HttpResponse> scraped = metrics::HttpGet(url);
    ASSERT_TRUE(scraped.ok()) << scraped.status();
    EXPECT_THAT(scraped->body, HasSubstr(absl::StrCat("tessera_auth_failures_total{service=\"",
                                                      service, "\",peer=\"127.0.0.1\"}")));
  }
}

}  // namespace
}  // namespace tessera::testing
