// A cluster serving mutual TLS everywhere, with bearer tokens for clients and daemons that know
// each other by their certificates, met as a hostile user would meet it: certificates from another
// CA, a client certificate where a worker expects its coordinator, no or a wrong token, plaintext
// to a TLS port, the rendezvous store abused, many failed authentications; and the right
// credentials running a workload. The certificates are made at test time with openssl
// (MakeThrowawayCertificates).

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/local_cluster/throwaway_certs.h"
#include "gmock/gmock.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "proto/grpc_status.h"
#include "proto/tls_files.h"
#include "tessera/v1/dtensor.grpc.pb.h"
#include "tessera/v1/mesh.grpc.pb.h"
#include "tessera/v1/registry.grpc.pb.h"
#include "tessera/v1/worker.grpc.pb.h"
#include "tests/cluster/cluster_fixture.h"

namespace tessera::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kToken[] = "alice-token-0123456789abcdef";

struct Shared {
  std::string dir;  // certificates, tokens file, logs
  std::unique_ptr<LocalCluster> cluster;
  std::vector<std::string> worker_addresses;
};
Shared* shared = nullptr;

std::string Cert(const std::string& name) { return absl::StrCat(shared->dir, "/", name); }

// Session options presenting `cert` (client.pem, rogue.pem, ...; "" for none) with `token`,
// trusting `ca`.
client::SessionOptions Options(const std::string& ca, const std::string& cert,
                               const std::string& token) {
  client::SessionOptions o;
  o.keep_alive = false;
  o.timeout = absl::Seconds(5);
  if (!ca.empty()) o.tls_ca_file = Cert(ca);
  if (!cert.empty()) {
    o.tls_cert_file = Cert(cert + ".pem");
    o.tls_key_file = Cert(cert + ".key");
  }
  o.token = token;
  return o;
}

// A channel to `address` over mutual TLS with certificate `cert`, trusting `ca`.
std::shared_ptr<grpc::Channel> TlsChannel(const std::string& address, const std::string& ca,
                                          const std::string& cert) {
  const TlsFiles files{Cert(cert + ".pem"), Cert(cert + ".key"), Cert(ca)};
  return CreateChannelWithMetadata(address, ChannelCredentialsFor(files).value(),
                                   grpc::ChannelArguments(), {});
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class SecurityEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    shared = new Shared;
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera-tls-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    shared->dir = pattern;
    const absl::Status made = MakeThrowawayCertificates(shared->dir);
    ASSERT_TRUE(made.ok()) << made;
    std::ofstream(Cert("tokens")) << "# name token\nalice " << kToken
                                  << "\nbob bob-token-0123456789abcdef\n";
    LocalClusterOptions options = TestClusterOptions(2);
    options.log_dir = Cert("logs");
    // Workers and coordinator know each other by their certificates (the launcher's secret stays
    // unused by the workers).
    options.coordinator_flags = {"--tls_cert=" + Cert("coordinator.pem"),
                                 "--tls_key=" + Cert("coordinator.key"),
                                 "--tls_ca=" + Cert("ca.pem"), "--worker_identity=tessera-worker",
                                 "--tokens_file=" + Cert("tokens")};
    options.worker_flags = {"--tls_cert=" + Cert("worker.pem"), "--tls_key=" + Cert("worker.key"),
                            "--tls_ca=" + Cert("ca.pem"),
                            "--coordinator_identity=tessera-coordinator"};
    options.tls_ca_file = Cert("ca.pem");
    options.tls_cert_file = Cert("client.pem");
    options.tls_key_file = Cert("client.key");
    options.token = kToken;
    absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status() << " (logs in " << options.log_dir << ")";
    shared->cluster = *std::move(cluster);
    absl::StatusOr<std::shared_ptr<client::Session>> admin =
        client::Session::Connect(shared->cluster->address(), Options("ca.pem", "client", kToken));
    ASSERT_TRUE(admin.ok()) << admin.status();
    absl::StatusOr<std::vector<client::WorkerInfo>> workers = (*admin)->ListWorkers();
    ASSERT_TRUE(workers.ok()) << workers.status();
    for (const client::WorkerInfo& w : *workers) shared->worker_addresses.push_back(w.address);
  }
  void TearDown() override {
    shared->cluster.reset();
    if (::testing::UnitTest::GetInstance()->Passed()) {
      std::error_code ignored;
      std::filesystem::remove_all(shared->dir, ignored);
    }
    delete shared;
  }
};

// The right credentials: a workload runs end to end (mesh, distribute, an op, read back).
TEST(Security, RightCredentialsRunAWorkload) {
  absl::StatusOr<std::shared_ptr<client::Session>> s =
      client::Session::Connect(shared->cluster->address(), Options("ca.pem", "client", kToken));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(client::InitDeviceMesh(**s, TestDevice(), {2}, {"x"}, "secure").ok());
  absl::StatusOr<client::Mesh> mesh = client::GetMesh(**s, "secure");
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  const HostTensor full = kernels::testing::RandomTensor(DType::kFloat32, {8, 4}, 7);
  HostTensor want = full.Clone();
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    kernels::testing::SetFromDouble(want, i, std::max(0.0, kernels::testing::GetDouble(full, i)));
  }
  absl::StatusOr<client::DTensor> t =
      client::DistributeTensor(**s, full, *mesh, {Placement::Shard(0)});
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<client::DTensor> relu = client::Relu(*t);
  ASSERT_TRUE(relu.ok()) << relu.status();
  absl::StatusOr<HostTensor> got = relu->FullTensor();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(TensorsMatch(*got, want));
  EXPECT_TRUE((*s)->DeleteMesh("secure").ok());
}

// A client with a valid token that opens idle op streams by the hundred takes only its own share
// (--max_streams_per_peer, 128 by default, counted by the client's name): the streams past it are
// refused RESOURCE_EXHAUSTED at once, and another client, from the same host and certificate but
// with a token of its own, streams tensors and ops meanwhile as if nothing happened.
TEST(Security, AClientsIdleStreamsTakeOnlyItsOwnShare) {
  const std::shared_ptr<grpc::Channel> channel =
      TlsChannel(shared->cluster->address(), "ca.pem", "client");
  std::unique_ptr<v1::DTensorService::Stub> stub = v1::DTensorService::NewStub(channel);
  struct Held {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::StreamCalls, v1::StreamResults>> stream;
  };
  std::vector<Held> held;
  for (int i = 0; i < 200; ++i) {
    Held h{std::make_unique<grpc::ClientContext>(), nullptr};
    h.context->AddMetadata("authorization", "Bearer bob-token-0123456789abcdef");
    h.context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    h.stream = stub->OpStream(h.context.get());
    held.push_back(std::move(h));
  }
  absl::StatusOr<std::shared_ptr<client::Session>> alice =
      client::Session::Connect(shared->cluster->address(), Options("ca.pem", "client", kToken));
  ASSERT_TRUE(alice.ok()) << alice.status();
  ASSERT_TRUE(client::InitDeviceMesh(**alice, TestDevice(), {2}, {"x"}, "shared-host").ok());
  const client::Mesh mesh = client::GetMesh(**alice, "shared-host").value();
  for (int i = 0; i < 5; ++i) {
    const HostTensor full = kernels::testing::RandomTensor(DType::kFloat32, {8, 4}, 20 + i);
    absl::StatusOr<client::DTensor> t =
        client::DistributeTensor(**alice, full, mesh, {Placement::Shard(0)});
    ASSERT_TRUE(t.ok()) << t.status();
    absl::StatusOr<client::DTensor> sum = client::Add(*t, *t);
    ASSERT_TRUE(sum.ok()) << sum.status();
    absl::StatusOr<HostTensor> got = t->FullTensor();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(TensorsMatch(*got, full));
  }
  int refused = 0;
  for (Held& h : held) {
    h.stream->WritesDone();
    const grpc::Status s = h.stream->Finish();
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      EXPECT_THAT(s.error_message(), HasSubstr("client bob has 128 streams open"));
    }
  }
  EXPECT_EQ(refused, 200 - 128);
  EXPECT_TRUE((*alice)->DeleteMesh("shared-host").ok());
}

// Under mutual TLS a client on the direct path reaches the workers with its own certificate (the
// workers accept it by the coordinator's grant, not as their coordinator): distribute_tensor with
// direct_data on (a failure of the direct path fails the call) round-trips bit for bit.
TEST(Security, DirectUploadsUseTheClientsOwnCredentials) {
  client::SessionOptions options = Options("ca.pem", "client", kToken);
  options.direct_data = client::DirectData::kOn;
  absl::StatusOr<std::shared_ptr<client::Session>> s =
      client::Session::Connect(shared->cluster->address(), options);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(client::InitDeviceMesh(**s, TestDevice(), {2}, {"x"}, "direct").ok());
  absl::StatusOr<client::Mesh> mesh = client::GetMesh(**s, "direct");
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  const HostTensor full = kernels::testing::RandomTensor(DType::kInt64, {9, 3}, 5);
  absl::StatusOr<client::DTensor> t =
      client::DistributeTensor(**s, full, *mesh, {Placement::Shard(0)});
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<HostTensor> got = t->FullTensor();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(TensorsMatch(*got, full));
  EXPECT_TRUE(t->Free().ok());
  EXPECT_TRUE((*s)->DeleteMesh("direct").ok());
}

struct TokenCase {
  std::string name;
  std::string token;
  std::string message_part;
};

class Tokens : public ::testing::TestWithParam<TokenCase> {};

// No token, or one not in the tokens file: UNAUTHENTICATED, and the message never repeats it.
TEST_P(Tokens, WithoutAValidOneCallsAreUnauthenticated) {
  const TokenCase& c = GetParam();
  absl::StatusOr<std::shared_ptr<client::Session>> s =
      client::Session::Connect(shared->cluster->address(), Options("ca.pem", "client", c.token));
  ASSERT_TRUE(s.ok()) << s.status();  // TLS itself is fine
  absl::StatusOr<std::vector<client::MeshInfo>> meshes = (*s)->ListMeshes();
  EXPECT_EQ(meshes.status().code(), absl::StatusCode::kUnauthenticated) << meshes.status();
  EXPECT_THAT(meshes.status().message(), HasSubstr(c.message_part));
  // The registry's list too, though it names no tensor: the service answers no one unknown.
  absl::StatusOr<std::vector<client::OpInfo>> ops = (*s)->ListOps();
  EXPECT_EQ(ops.status().code(), absl::StatusCode::kUnauthenticated) << ops.status();
  EXPECT_THAT(ops.status().message(), HasSubstr(c.message_part));
  if (!c.token.empty()) {
    EXPECT_THAT(ops.status().message(), Not(HasSubstr(c.token)));
    EXPECT_THAT(meshes.status().message(), Not(HasSubstr(c.token)));
    EXPECT_THAT(ReadFile(Cert("logs/coordinator.log")), Not(HasSubstr(c.token)));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Tokens,
    ::testing::Values(TokenCase{"None", "", "needs a bearer token"},
                      TokenCase{"Wrong", "mallory-guessed-0123456789", "not one this coordinator"},
                      TokenCase{"Truncated", std::string(kToken).substr(0, 20),
                                "not one this coordinator"}),
    [](const ::testing::TestParamInfo<TokenCase>& info) { return info.param.name; });

struct RefusedTls {
  std::string name;
  std::string ca;    // what the client trusts ("" for plaintext)
  std::string cert;  // what it presents
  std::string message_part;
};

class Handshakes : public ::testing::TestWithParam<RefusedTls> {};

// A certificate from another CA (either side), or plaintext to the TLS port: refused within a
// second or two, long before the connect timeout (the CLI's 10 s), with a message that says TLS.
TEST_P(Handshakes, AreRefusedFast) {
  const RefusedTls& c = GetParam();
  client::SessionOptions o = Options(c.ca, c.cert, kToken);
  o.timeout = absl::Seconds(10);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::shared_ptr<client::Session>> s =
      client::Session::Connect(shared->cluster->address(), o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr(c.message_part));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Handshakes,
    ::testing::Values(RefusedTls{"ClientCertificateFromAnotherCa", "ca.pem", "rogue", "over TLS"},
                      RefusedTls{"ServerNotSignedByTrustedCa", "other-ca.pem", "client",
                                 "over TLS"},
                      RefusedTls{"NoClientCertificate", "ca.pem", "", "over TLS"},
                      RefusedTls{"Plaintext", "", "", "serving TLS refuses plaintext"}),
    [](const ::testing::TestParamInfo<RefusedTls>& info) { return info.param.name; });

struct PlainPort {
  std::string name;
  std::string ca;  // what the client trusts ("" for plaintext)
  bool fast;       // whether it is refused long before the connect timeout
  std::string message_part;
};

void PrintTo(const PlainPort& c, std::ostream* os) { *os << c.name; }

class PlaintextPorts : public ::testing::TestWithParam<PlainPort> {};

// The reverse: TLS to a port serving plaintext is refused at once, saying the port does not speak
// TLS; a port where nothing listens yet is waited for until the timeout (a coordinator restarting).
TEST_P(PlaintextPorts, AreToldApart) {
  const PlainPort& c = GetParam();
  int port = 0;
  v1::MeshService::Service unimplemented;  // a server needs a service to start
  grpc::ServerBuilder builder;
  builder.RegisterService(&unimplemented);
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  if (!c.fast) server.reset();  // nothing listens there any more
  client::SessionOptions o = Options(c.ca, "", "");
  o.timeout = absl::Seconds(3);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::shared_ptr<client::Session>> s =
      client::Session::Connect(absl::StrCat("127.0.0.1:", port), o);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr(c.message_part));
  if (c.fast) {
    EXPECT_LT(took, absl::Seconds(2));
  } else {
    EXPECT_GE(took, absl::Seconds(3));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PlaintextPorts,
    ::testing::Values(PlainPort{"TlsToPlaintext", "ca.pem", true, "does not speak TLS"},
                      PlainPort{"TlsToNothing", "ca.pem", false, "cannot reach"},
                      PlainPort{"PlaintextToNothing", "", false, "cannot reach"}),
    [](const ::testing::TestParamInfo<PlainPort>& info) { return info.param.name; });

// A worker takes commands from a caller whose certificate names its coordinator only: a client
// certificate of the same CA is refused (PERMISSION_DENIED naming what it carried).
TEST(Security, WorkerRefusesACertificateItDidNotExpect) {
  for (const std::string& address : shared->worker_addresses) {
    std::unique_ptr<v1::Worker::Stub> worker =
        v1::Worker::NewStub(TlsChannel(address, "ca.pem", "client"));
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(absl::Seconds(5)));
    context.AddMetadata(kSecretMetadataKey, "guess");
    v1::Command command;
    v1::CommandReply reply;
    const grpc::Status s = worker->Execute(&context, command, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("'alice'"));
    EXPECT_THAT(s.error_message(), HasSubstr("not 'tessera-coordinator'"));
  }
}

// The Registry takes calls from workers only: a client certificate cannot register a fake worker
// (that a mesh would then include and send commands to) or bump a live worker's incarnation.
TEST(Security, RegistryRefusesANonWorker) {
  std::unique_ptr<v1::Registry::Stub> registry =
      v1::Registry::NewStub(TlsChannel(shared->cluster->address(), "ca.pem", "client"));
  grpc::ClientContext context;
  v1::RegisterRequest request;
  request.set_address(shared->worker_addresses[0]);
  request.set_device("cpu");
  v1::RegisterReply reply;
  const grpc::Status s = registry->Register(&context, request, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("'tessera-worker'"));
}

struct StoreAttack {
  std::string name;
  std::string caller;  // x-tessera-worker metadata
  std::string key;
  int64_t value_bytes;
  grpc::StatusCode code;
  std::string message_part;
};

class RendezvousStore : public ::testing::TestWithParam<StoreAttack> {};

// Calls with a worker's certificate: an oversized value, a key outside every mesh, a caller that
// is no registered worker, a key of a mesh the caller is not in.
TEST_P(RendezvousStore, RefusesAttacks) {
  const StoreAttack& c = GetParam();
  std::unique_ptr<v1::Registry::Stub> registry =
      v1::Registry::NewStub(TlsChannel(shared->cluster->address(), "ca.pem", "worker"));
  grpc::ClientContext context;
  if (!c.caller.empty()) context.AddMetadata("x-tessera-worker", c.caller);
  v1::StoreSetRequest request;
  request.set_key(c.key);
  request.set_value(std::string(c.value_bytes, 'v'));
  v1::StoreSetReply reply;
  const grpc::Status s = registry->StoreSet(&context, request, &reply);
  EXPECT_EQ(s.error_code(), c.code) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr(c.message_part));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RendezvousStore,
    ::testing::Values(StoreAttack{"OversizedValue", "0/1", "mesh/0/x", 8 << 20,
                                  grpc::StatusCode::RESOURCE_EXHAUSTED, "larger than the store's"},
                      StoreAttack{"KeyOutsideMeshes", "0/1", "gloo/x", 1,
                                  grpc::StatusCode::INVALID_ARGUMENT, "not under a mesh's prefix"},
                      StoreAttack{"UnregisteredCaller", "0/1", "mesh/0/x", 1,
                                  grpc::StatusCode::PERMISSION_DENIED, "registered workers only"},
                      StoreAttack{"NoCaller", "", "mesh/0/x", 1,
                                  grpc::StatusCode::PERMISSION_DENIED, "registered workers only"}),
    [](const ::testing::TestParamInfo<StoreAttack>& info) { return info.param.name; });

// Failed authentications are limited per host and logged with peer and method; the workers,
// known by their certificates, go on serving meanwhile.
TEST(Security, FailedAuthenticationsAreLimitedAndLogged) {
  std::unique_ptr<v1::Registry::Stub> registry =
      v1::Registry::NewStub(TlsChannel(shared->cluster->address(), "ca.pem", "client"));
  int unauthenticated = 0, limited = 0;
  for (int i = 0; i < 200; ++i) {
    grpc::ClientContext context;
    v1::HeartbeatRequest request;
    v1::HeartbeatReply reply;
    const grpc::Status s = registry->Heartbeat(&context, request, &reply);
    if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) ++unauthenticated;
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++limited;
      EXPECT_THAT(s.error_message(), HasSubstr("too many failed authentications from 127.0.0.1"));
    }
  }
  EXPECT_LE(unauthenticated, 25);  // the burst (20) and what refilled meanwhile
  EXPECT_EQ(unauthenticated + limited, 200);
  EXPECT_THAT(ReadFile(Cert("logs/coordinator.log")),
              HasSubstr("authentication failed: peer 127.0.0.1 calling"));
  EXPECT_THAT(ReadFile(Cert("logs/coordinator.log")), HasSubstr("tessera.v1.Registry/Heartbeat"));
  EXPECT_TRUE(shared->cluster->WaitForAliveWorkers(2, absl::Seconds(5)).ok());
}

// Wrong tokens sent with the same client certificate as a client with the right one, a burst and
// then steadily between its calls: every call with the right token is answered, none refused by
// the limiter (which used to count the certificate's failures before looking at the token, and
// refuse the right token once the burst was spent); the wrong ones are refused, past the burst
// with RESOURCE_EXHAUSTED.
TEST(Security, TheRightTokenIsNeverRefusedAfterWrongOnesOfTheSameCertificate) {
  // A certificate of this test's own, so that the failures it counts are no other test's.
  absl::StatusOr<std::shared_ptr<client::Session>> mallory = client::Session::Connect(
      shared->cluster->address(), Options("ca.pem", "worker-far", "mallory-guessed-0123456789"));
  ASSERT_TRUE(mallory.ok()) << mallory.status();
  absl::StatusOr<std::shared_ptr<client::Session>> alice =
      client::Session::Connect(shared->cluster->address(), Options("ca.pem", "worker-far", kToken));
  ASSERT_TRUE(alice.ok()) << alice.status();
  int refused = 0, limited = 0;
  for (int round = 0; round < 60; ++round) {
    for (int i = 0; i < 5; ++i) {
      const absl::Status s = (*mallory)->ListMeshes().status();
      refused += s.code() == absl::StatusCode::kUnauthenticated ? 1 : 0;
      limited += s.code() == absl::StatusCode::kResourceExhausted ? 1 : 0;
    }
    const absl::Status good = (*alice)->ListMeshes().status();
    ASSERT_TRUE(good.ok()) << "round " << round << ": " << good;
  }
  EXPECT_EQ(refused + limited, 300);
  EXPECT_GT(limited, 0);
}

class CertificatelessTokens : public ::testing::TestWithParam<TokenCase> {};

// Over TLS without client certificates (a coordinator without --tls_ca), bad tokens are limited
// per connection (gRPC's token hook sees no peer address): past the burst a connection's failures
// are answered with RESOURCE_EXHAUSTED, while a client with the right token goes on working.
TEST_P(CertificatelessTokens, AreLimitedPerConnection) {
  const TokenCase& c = GetParam();
  LocalClusterOptions options = TestClusterOptions(1);
  options.log_dir = Cert("logs-" + c.name);
  options.coordinator_flags = {"--tls_cert=" + Cert("coordinator.pem"),
                               "--tls_key=" + Cert("coordinator.key"),
                               "--tokens_file=" + Cert("tokens")};
  options.worker_flags = {"--tls_cert=" + Cert("worker.pem"), "--tls_key=" + Cert("worker.key"),
                          "--tls_ca=" + Cert("ca.pem")};
  options.tls_ca_file = Cert("ca.pem");
  options.token = kToken;
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status() << " (logs in " << options.log_dir << ")";
  absl::StatusOr<std::shared_ptr<client::Session>> attacker =
      client::Session::Connect((*cluster)->address(), Options("ca.pem", "", c.token));
  ASSERT_TRUE(attacker.ok()) << attacker.status();
  int unauthenticated = 0, limited = 0;
  for (int i = 0; i < 200; ++i) {
    const absl::Status s = (*attacker)->ListMeshes().status();
    if (s.code() == absl::StatusCode::kUnauthenticated) ++unauthenticated;
    if (s.code() == absl::StatusCode::kResourceExhausted) {
      ++limited;
      EXPECT_THAT(s.message(), HasSubstr("too many failed authentications from connection"));
    }
  }
  EXPECT_GE(unauthenticated, 20);  // the burst
  EXPECT_LE(unauthenticated, 25);  // and what refilled meanwhile
  EXPECT_EQ(unauthenticated + limited, 200);
  absl::StatusOr<std::shared_ptr<client::Session>> alice =
      client::Session::Connect((*cluster)->address(), Options("ca.pem", "", kToken));
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_TRUE((*alice)->ListMeshes().ok());
  const std::string log = ReadFile(options.log_dir + "/coordinator.log");
  EXPECT_THAT(log, HasSubstr("authentication failed: peer connection"));
  EXPECT_THAT(log, HasSubstr("(no client certificate) calling /tessera.v1.MeshService/ListMeshes"));
}

INSTANTIATE_TEST_SUITE_P(Cases, CertificatelessTokens,
                         ::testing::Values(TokenCase{"None", "", ""},
                                           TokenCase{"Wrong", "mallory-guessed-0123456789", ""}),
                         [](const ::testing::TestParamInfo<TokenCase>& info) {
                           return info.param.name;
                         });

// A cluster whose workers each have their own certificate (tessera-worker-0, -1), admitted by the
// coordinator's pattern --worker_identity=tessera-worker-*.
class OwnIdentities : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    LocalClusterOptions options = TestClusterOptions(2);
    // Each suite of this fixture starts its own cluster, logging apart.
    options.log_dir = Cert(
        absl::StrCat("logs-", ::testing::UnitTest::GetInstance()->current_test_suite()->name()));
    options.coordinator_flags = {
        "--tls_cert=" + Cert("coordinator.pem"), "--tls_key=" + Cert("coordinator.key"),
        "--tls_ca=" + Cert("ca.pem"), "--worker_identity=tessera-worker-*"};
    options.worker_flags = {"--tls_cert=" + Cert("worker-{i}.pem"),
                            "--tls_key=" + Cert("worker-{i}.key"), "--tls_ca=" + Cert("ca.pem"),
                            "--coordinator_identity=tessera-coordinator"};
    options.tls_ca_file = Cert("ca.pem");
    options.tls_cert_file = Cert("client.pem");
    options.tls_key_file = Cert("client.key");
    absl::StatusOr<std::unique_ptr<LocalCluster>> started = LocalCluster::Start(options);
    ASSERT_TRUE(started.ok()) << started.status() << " (logs in " << options.log_dir << ")";
    cluster_ = started->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  // The registry's record of local worker `i` (worker-i.pem).
  static client::WorkerInfo Worker(int i) {
    absl::StatusOr<std::shared_ptr<client::Session>> s =
        client::Session::Connect(cluster_->address(), Options("ca.pem", "client", ""));
    EXPECT_TRUE(s.ok()) << s.status();
    absl::StatusOr<std::vector<client::WorkerInfo>> workers = (*s)->ListWorkers();
    EXPECT_TRUE(workers.ok()) << workers.status();
    for (const client::WorkerInfo& w : *workers) {
      if (w.pid == cluster_->worker_pid(i)) return w;
    }
    ADD_FAILURE() << "no registered worker has the pid of local worker " << i;
    return {};
  }

  static LocalCluster* cluster_;
};
LocalCluster* OwnIdentities::cluster_ = nullptr;

// Workers with their own identities run a workload.
TEST_F(OwnIdentities, RunAWorkload) {
  absl::StatusOr<std::shared_ptr<client::Session>> s =
      client::Session::Connect(cluster_->address(), Options("ca.pem", "client", ""));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(client::InitDeviceMesh(**s, TestDevice(), {2}, {"x"}, "own").ok());
  absl::StatusOr<client::Mesh> mesh = client::GetMesh(**s, "own");
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  const HostTensor full = kernels::testing::RandomTensor(DType::kFloat32, {8, 4}, 3);
  absl::StatusOr<client::DTensor> t =
      client::DistributeTensor(**s, full, *mesh, {Placement::Shard(0)});
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<HostTensor> got = t->FullTensor();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(TensorsMatch(*got, full));
  EXPECT_TRUE((*s)->DeleteMesh("own").ok());
}

enum class RegistryCall { kRegister, kHeartbeat, kStoreSet };

struct Posing {
  std::string name;
  std::string cert;  // what the caller presents
  RegistryCall call;
  int target;  // the local worker it acts for; -1: a new address
  grpc::StatusCode code;
  std::string message_part;
};

void PrintTo(const Posing& c, std::ostream* os) { *os << c.name; }

class OwnIdentitiesPosing : public OwnIdentities, public ::testing::WithParamInterface<Posing> {};

// One worker's certificate cannot act for another worker (register its address, heartbeat or
// use the store as it), nor register an address its certificate does not name the host of; a
// worker's own certificate acting for itself is accepted.
TEST_P(OwnIdentitiesPosing, IsRefused) {
  const Posing& c = GetParam();
  client::WorkerInfo target;
  if (c.target >= 0) {
    target = Worker(c.target);
  } else {
    target.address = "127.0.0.1:1";
  }
  std::unique_ptr<v1::Registry::Stub> registry =
      v1::Registry::NewStub(TlsChannel(cluster_->address(), "ca.pem", c.cert));
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(absl::Seconds(5)));
  grpc::Status s;
  switch (c.call) {
    case RegistryCall::kRegister: {
      v1::RegisterRequest request;
      request.set_address(target.address);
      request.set_device("cpu");
      v1::RegisterReply reply;
      s = registry->Register(&context, request, &reply);
      break;
    }
    case RegistryCall::kHeartbeat: {
      v1::HeartbeatRequest request;
      request.set_worker_id(target.worker_id);
      request.set_incarnation(target.incarnation);
      request.set_used_bytes(target.used_bytes);
      v1::HeartbeatReply reply;
      s = registry->Heartbeat(&context, request, &reply);
      break;
    }
    case RegistryCall::kStoreSet: {
      context.AddMetadata("x-tessera-worker",
                          absl::StrCat(target.worker_id, "/", target.incarnation));
      v1::StoreSetRequest request;
      request.set_key("mesh/999999/x");
      request.set_value("v");
      v1::StoreSetReply reply;
      s = registry->StoreSet(&context, request, &reply);
      break;
    }
  }
  EXPECT_EQ(s.error_code(), c.code) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr(c.message_part));
  EXPECT_TRUE(cluster_->WaitForAliveWorkers(2, absl::Seconds(5)).ok());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, OwnIdentitiesPosing,
    ::testing::Values(
        Posing{"RegisterAnothersAddress", "worker-1", RegistryCall::kRegister, 0,
               grpc::StatusCode::PERMISSION_DENIED, "is 'tessera-worker-0'"},
        Posing{"HeartbeatAsAnother", "worker-1", RegistryCall::kHeartbeat, 0,
               grpc::StatusCode::PERMISSION_DENIED, "may not act for it"},
        Posing{"StoreAsAnother", "worker-0", RegistryCall::kStoreSet, 1,
               grpc::StatusCode::PERMISSION_DENIED, "is 'tessera-worker-1'"},
        Posing{"AddressItsCertificateDoesNotName", "worker-far", RegistryCall::kRegister, -1,
               grpc::StatusCode::PERMISSION_DENIED, "not the host of that address"},
        Posing{"SharedIdentityNotAdmitted", "worker", RegistryCall::kHeartbeat, 0,
               grpc::StatusCode::UNAUTHENTICATED, "'tessera-worker-*'"},
        Posing{"OwnHeartbeat", "worker-0", RegistryCall::kHeartbeat, 0, grpc::StatusCode::OK, ""},
        Posing{"OwnStoreCallReachesTheMeshCheck", "worker-1", RegistryCall::kStoreSet, 1,
               grpc::StatusCode::PERMISSION_DENIED, "is not a rank of mesh 999999"}),
    [](const ::testing::TestParamInfo<Posing>& info) { return info.param.name; });

const ::testing::Environment* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new SecurityEnvironment);

}  // namespace
}  // namespace tessera::testing
