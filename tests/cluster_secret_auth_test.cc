// The attacks seen on a plaintext cluster with a shared secret, replayed against real daemons: a
// Register with a live worker's address or a spoofed heartbeat from a caller without the secret,
// wrong secrets by the thousand against a worker, and the rendezvous store abused. Each is refused,
// failures are logged and limited per host, and the cluster still runs a workload afterwards.

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "proto/grpc_status.h"
#include "tessera/v1/registry.grpc.pb.h"
#include "tessera/v1/worker.grpc.pb.h"
#include "tests/cluster_fixture.h"

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

// 2,000 wrong secrets against a worker: a burst is checked, the rest refused unchecked, each
// failure logged with peer and method; the cluster then runs a workload.
TEST(SecretAuth, WrongSecretsAreLimitedAndTheClusterGoesOn) {
  const std::vector<client::WorkerInfo> workers = Workers();
  ASSERT_FALSE(workers.empty());
  std::unique_ptr<v1::Worker::Stub> worker = v1::Worker::NewStub(
      grpc::CreateChannel(workers[0].address, grpc::InsecureChannelCredentials()));
  int denied = 0, limited = 0;
  for (int i = 0; i < 2000; ++i) {
    grpc::ClientContext context;
    context.AddMetadata(kSecretMetadataKey, absl::StrCat("guess-", i));
    v1::Command command;
    v1::CommandReply reply;
    const grpc::Status s = worker->Execute(&context, command, &reply);
    if (s.error_code() == grpc::StatusCode::PERMISSION_DENIED) ++denied;
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++limited;
  }
  EXPECT_EQ(denied + limited, 2000);
  EXPECT_LE(denied, 40);  // a burst of 20, and one per 500 ms of the attack
  const std::string log = ReadFile(cluster->cluster->log_dir() + "/worker-0.log");
  EXPECT_THAT(log, HasSubstr("authentication failed: peer ipv4:127.0.0.1:"));
  EXPECT_THAT(log, HasSubstr("tessera.v1.Worker/Execute"));
  EXPECT_THAT(log, Not(HasSubstr("guess-1")));

  absl::SleepFor(absl::Seconds(1));  // a failure refills: the coordinator's host may call again
  client::Session& s = *cluster->client;
  ASSERT_TRUE(client::InitDeviceMesh(s, TestDevice(), {2}, {"x"}, "after").ok());
  absl::StatusOr<client::Mesh> mesh = client::GetMesh(s, "after");
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  const HostTensor full = kernels::testing::RandomTensor(DType::kFloat32, {6, 3}, 11);
  absl::StatusOr<client::DTensor> t =
      client::DistributeTensor(s, full, *mesh, {Placement::Shard(0)});
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<HostTensor> got = t->FullTensor();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(TensorsMatch(*got, full));
}

}  // namespace
}  // namespace tessera::testing
