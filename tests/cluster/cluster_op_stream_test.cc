// The op stream (SessionOptions::op_stream) on a real cluster: an op's handle comes back at once
// with the metadata the coordinator's own answer has (a session on unary calls is the reference),
// values equal the unary path's and hand-computed ones, frees stay ordered after the ops that read
// the tensor, and what only the coordinator can refuse shows on the output.

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/sharding/op_call.h"
#include "grpcpp/grpcpp.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "tessera/tessera.h"
#include "tessera/v1/dtensor.grpc.pb.h"
#include "tests/cluster/cluster_fixture.h"

namespace tessera {
namespace {

using ::tessera::client::DTensor;
using ::tessera::client::Session;
using ::tessera::testing::StatusIs;
using ::tessera::testing::TensorsMatch;

struct Shared {
  testing::TestCluster cluster;
  std::shared_ptr<Session> stream;  // op_stream on
  std::shared_ptr<Session> unary;   // op_stream off: the coordinator's answers, one call each
  std::optional<client::Mesh> stream_mesh, unary_mesh;
};
Shared* shared = nullptr;

absl::StatusOr<std::shared_ptr<Session>> Connect(bool op_stream) {
  client::SessionOptions options;
  options.op_stream = op_stream;
  options.timeout = absl::Seconds(30);
  return Session::Connect(shared->cluster.cluster->address(), options);
}

class OpStreamEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    shared = new Shared;
    ASSERT_TRUE(shared->cluster.Start(testing::TestClusterOptions(2)).ok());
    ASSERT_TRUE(client::InitDeviceMesh(*shared->cluster.client, "cpu", {2}, {"x"}, "pair").ok());
    absl::StatusOr<std::shared_ptr<Session>> s = Connect(true);
    ASSERT_TRUE(s.ok()) << s.status();
    shared->stream = *s;
    s = Connect(false);
    ASSERT_TRUE(s.ok()) << s.status();
    shared->unary = *s;
    absl::StatusOr<client::Mesh> m = client::GetMesh(*shared->stream, "pair");
    ASSERT_TRUE(m.ok()) << m.status();
    shared->stream_mesh = *m;
    m = client::GetMesh(*shared->unary, "pair");
    ASSERT_TRUE(m.ok()) << m.status();
    shared->unary_mesh = *m;
  }
  void TearDown() override {
    shared->stream.reset();
    shared->unary.reset();
    shared->cluster.Stop();
    delete shared;
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new OpStreamEnvironment);

// [rows, cols] float32 with element (i, j) = scale * (i * cols + j) + offset.
HostTensor Ramp(int64_t rows, int64_t cols, float scale, float offset) {
  HostTensor t = HostTensor::ZerosOfValidShape(DType::kFloat32, {rows, cols});
  float* p = reinterpret_cast<float*>(t.data());
  for (int64_t i = 0; i < rows * cols; ++i) p[i] = scale * static_cast<float>(i) + offset;
  return t;
}

// An op on two [4, 4] tensors with these placements, through both sessions.
using OpCase = std::tuple<Placement, Placement, OpKind>;

class OpStreamMatchesUnaryTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpStreamMatchesUnaryTest, SameMetadataRedistributionsAndValues) {
  const auto& [pa, pb, kind] = GetParam();
  const HostTensor a = Ramp(4, 4, 0.5f, -3.0f), b = Ramp(4, 4, -0.25f, 1.0f);
  OpCall op;
  op.kind = kind;
  std::vector<absl::StatusOr<DTensor>> outputs;
  std::vector<std::vector<client::InputRedistribution>> moved;
  for (auto [session, mesh] : {std::pair{shared->stream.get(), &*shared->stream_mesh},
                               std::pair{shared->unary.get(), &*shared->unary_mesh}}) {
    absl::StatusOr<DTensor> da = client::DistributeTensor(*session, a, *mesh, {pa});
    absl::StatusOr<DTensor> db = client::DistributeTensor(*session, b, *mesh, {pb});
    ASSERT_TRUE(da.ok() && db.ok()) << da.status() << db.status();
    outputs.push_back(client::RunOp(op, {*da, *db}));
    ASSERT_TRUE(outputs.back().ok()) << outputs.back().status();
    moved.push_back(outputs.back()->redistributions());
  }
  const DTensor& streamed = *outputs[0];
  const DTensor& unary = *outputs[1];
  EXPECT_EQ(streamed.spec().shape, unary.spec().shape);
  EXPECT_EQ(streamed.dtype(), unary.dtype());
  EXPECT_EQ(PlacementsToString(streamed.placements()), PlacementsToString(unary.placements()));
  EXPECT_EQ(streamed.info().shards.size(), unary.info().shards.size());
  EXPECT_TRUE(streamed.info().shards == unary.info().shards);
  EXPECT_EQ(streamed.info().nbytes, unary.info().nbytes);
  ASSERT_EQ(moved[0].size(), moved[1].size());
  for (size_t i = 0; i < moved[0].size(); ++i) {
    EXPECT_EQ(PlacementsToString(moved[0][i].from), PlacementsToString(moved[1][i].from));
    EXPECT_EQ(PlacementsToString(moved[0][i].to), PlacementsToString(moved[1][i].to));
    EXPECT_EQ(moved[0][i].plan.steps.size(), moved[1][i].plan.steps.size());
  }
  absl::StatusOr<HostTensor> got = streamed.FullTensor();
  absl::StatusOr<HostTensor> want = unary.FullTensor();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_TRUE(TensorsMatch(*got, *want));
  if (kind == OpKind::kAdd) {  // and by hand: 0.25 i - 2
    EXPECT_TRUE(TensorsMatch(*got, Ramp(4, 4, 0.25f, -2.0f)));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Placements, OpStreamMatchesUnaryTest,
    ::testing::Combine(
        ::testing::Values(Placement::Shard(0), Placement::Shard(1), Placement::Replicate()),
        ::testing::Values(Placement::Shard(0), Placement::Shard(1), Placement::Replicate()),
        ::testing::Values(OpKind::kAdd, OpKind::kMm)));

// 1,000 ops, each output replacing the last (so its predecessor is freed right behind the op that
// reads it): x_n = x_0 + n * b, and only the live tensors remain.
TEST(OpStreamTest, FreesStayBehindTheOpsThatReadTheTensor) {
  Session& s = *shared->stream;
  absl::StatusOr<DTensor> x = client::DistributeTensor(s, Ramp(4, 4, 1.0f, 0.0f),
                                                       *shared->stream_mesh, {Placement::Shard(0)});
  absl::StatusOr<DTensor> b = client::DistributeTensor(s, Ramp(4, 4, 0.0f, 1.0f),
                                                       *shared->stream_mesh, {Placement::Shard(1)});
  ASSERT_TRUE(x.ok() && b.ok()) << x.status() << b.status();
  constexpr int kOps = 1000;
  for (int i = 0; i < kOps; ++i) {
    absl::StatusOr<DTensor> next = client::Add(*x, *b);
    ASSERT_TRUE(next.ok()) << next.status();
    x = *std::move(next);
  }
  absl::StatusOr<HostTensor> got = x->FullTensor();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(TensorsMatch(*got, Ramp(4, 4, 1.0f, kOps)));
  // A call answered after every free was sent: then only x, b and it are left.
  absl::StatusOr<DTensor> fence = client::Relu(*b);
  ASSERT_TRUE(fence.ok() && fence->Synchronize().ok());
  absl::StatusOr<std::vector<client::DTensorInfo>> listed = s.ListTensors("pair");
  ASSERT_TRUE(listed.ok()) << listed.status();
  std::vector<std::string> mine;
  for (const client::DTensorInfo& t : *listed) {
    if (t.owner == s.client_id()) mine.push_back(t.name);
  }
  EXPECT_EQ(mine.size(), 3u) << absl::StrJoin(mine, ", ");
}

// What the client cannot foresee: an input freed through another handle. The output's handle
// carries the coordinator's NOT_FOUND naming the input; an op on that output fails at once.
TEST(OpStreamTest, ACoordinatorRefusalShowsOnTheOutput) {
  Session& s = *shared->stream;
  absl::StatusOr<DTensor> t = client::Zeros(s, *shared->stream_mesh, {4, 4}, {Placement::Shard(0)});
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<DTensor> alias = client::GetTensor(s, t->name());
  ASSERT_TRUE(alias.ok()) << alias.status();
  ASSERT_TRUE(t->Free().ok());
  absl::StatusOr<DTensor> r = client::Relu(*alias);
  ASSERT_TRUE(r.ok()) << r.status();  // the handle comes back at once
  EXPECT_TRUE(StatusIs(r->Synchronize(), absl::StatusCode::kNotFound, {r->name(), t->name()}));
  EXPECT_TRUE(StatusIs(r->FullTensor().status(), absl::StatusCode::kNotFound, {t->name()}));
  EXPECT_TRUE(StatusIs(client::Relu(*r).status(), absl::StatusCode::kNotFound, {t->name()}));
  // The stream goes on.
  absl::StatusOr<DTensor> ok =
      client::Relu(*client::Ones(s, *shared->stream_mesh, {2}, {Placement::Replicate()}));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->Synchronize().ok());
}

TEST(OpStreamTest, ATakenOutputNameFailsTheOutput) {
  Session& s = *shared->stream;
  absl::StatusOr<DTensor> a = client::Ones(s, *shared->stream_mesh, {4, 4}, {Placement::Shard(0)});
  ASSERT_TRUE(a.ok()) << a.status();
  OpCall relu;
  relu.kind = OpKind::kRelu;
  absl::StatusOr<DTensor> r = client::RunOp(relu, {*a}, a->name());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(StatusIs(r->Synchronize(), absl::StatusCode::kAlreadyExists, {a->name()}));
  r->Detach();  // it was never made; `a` must stay
  r = absl::UnknownError("dropped");
  absl::StatusOr<HostTensor> still = a->FullTensor();
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_TRUE(TensorsMatch(*still, Ramp(4, 4, 0.0f, 1.0f)));
}

// Errors the client's own planner finds come back from the call itself, as on the unary path.
TEST(OpStreamTest, ShapeErrorsAreImmediate) {
  Session& s = *shared->stream;
  absl::StatusOr<DTensor> a = client::Ones(s, *shared->stream_mesh, {4, 3}, {Placement::Shard(0)});
  absl::StatusOr<DTensor> b = client::Ones(s, *shared->stream_mesh, {4, 3}, {Placement::Shard(0)});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(
      StatusIs(client::Mm(*a, *b).status(), absl::StatusCode::kInvalidArgument, {"[4, 3]"}));
}

// The stream as any client sees it (a raw stub): results in order with their ids; an op that asks
// to be described gets RunOp's reply; a failed call fails alone, with its code and message.
// A coordinator with --session_stream_idle_timeout=2s: an op stream that sends nothing is cut
// with DEADLINE_EXCEEDED naming the limit (it held a server thread for as long as it stayed
// open), and a session whose op stream was cut while idle opens another for its next op.
TEST(OpStreamIdleTest, AnIdleStreamIsCutAndTheSessionOpensAnother) {
  testing::TestCluster cluster;
  LocalClusterOptions options = testing::TestClusterOptions(2);
  options.coordinator_flags = {"--session_stream_idle_timeout=2s"};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.LogHint();
  ASSERT_TRUE(client::InitDeviceMesh(*cluster.client, "cpu", {2}, {"x"}, "idle").ok());
  client::SessionOptions session_options;
  session_options.op_stream = true;
  session_options.timeout = absl::Seconds(30);
  absl::StatusOr<std::shared_ptr<Session>> s =
      Session::Connect(cluster.cluster->address(), session_options);
  ASSERT_TRUE(s.ok()) << s.status();
  const client::Mesh mesh = client::GetMesh(**s, "idle").value();
  const HostTensor x = Ramp(4, 4, 1.0f, -8.0f);
  absl::StatusOr<DTensor> a = client::DistributeTensor(**s, x, mesh, {Placement::Shard(0)});
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<DTensor> first = client::Relu(*a);
  ASSERT_TRUE(first.ok() && first->Synchronize().ok()) << first.status();

  auto stub = v1::DTensorService::NewStub(
      grpc::CreateChannel(cluster.cluster->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(absl::Seconds(30)));
  context.AddMetadata("tessera-client", (*s)->client_id());
  auto raw = stub->OpStream(&context);
  const absl::Time opened = absl::Now();
  v1::StreamResults r;
  EXPECT_FALSE(raw->Read(&r));
  const grpc::Status cut = raw->Finish();
  EXPECT_EQ(cut.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << cut.error_message();
  EXPECT_NE(cut.error_message().find("--session_stream_idle_timeout"), std::string::npos)
      << cut.error_message();
  EXPECT_LT(absl::Now() - opened, absl::Seconds(10));

  // The session's own stream was idle as long: cut too, by the checker's next pass at the latest
  // (waited for, so that the next op is not sent just as the cut comes: that call would fail, as
  // docs/security.md says). Its next op goes on another.
  absl::SleepFor(absl::Seconds(3));
  absl::StatusOr<DTensor> second = client::Relu(*a);
  ASSERT_TRUE(second.ok()) << second.status();
  absl::StatusOr<HostTensor> got = second->FullTensor();
  ASSERT_TRUE(got.ok()) << got.status();
  absl::StatusOr<HostTensor> want = first->FullTensor();
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_TRUE(TensorsMatch(*got, *want));
  s->reset();
  cluster.Stop();
}

TEST(OpStreamTest, RawStreamAnswersEachCallInOrder) {
  Session& s = *shared->unary;
  absl::StatusOr<DTensor> a = client::Ones(s, *shared->unary_mesh, {4, 4}, {Placement::Shard(0)});
  ASSERT_TRUE(a.ok()) << a.status();
  auto stub = v1::DTensorService::NewStub(
      grpc::CreateChannel(shared->cluster.cluster->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(absl::Seconds(30)));
  context.AddMetadata("tessera-client", s.client_id());
  auto stream = stub->OpStream(&context);
  OpCall relu;
  relu.kind = OpKind::kRelu;
  std::vector<v1::StreamCall> calls(4);
  for (int i = 0; i < 2; ++i) {
    v1::OpRequest* op = calls[i].mutable_op();
    *op->mutable_op() = ToProto(relu);
    op->add_inputs(a->name());
    op->set_output(absl::StrCat("raw-relu-", i));
  }
  calls[0].set_describe(true);
  calls[2].mutable_free()->set_name("no-such-tensor");
  // calls[3] carries neither an op nor a free. Two messages: calls 100-102, then 103.
  v1::StreamCalls first, second;
  for (size_t i = 0; i < calls.size(); ++i) {
    calls[i].set_id(100 + i);
    *(i < 3 ? first : second).add_calls() = calls[i];
  }
  ASSERT_TRUE(stream->Write(first));
  ASSERT_TRUE(stream->Write(second));
  stream->WritesDone();
  std::vector<v1::StreamResult> results;
  std::vector<int> per_message;
  v1::StreamResults r;
  while (stream->Read(&r)) {
    per_message.push_back(r.results_size());
    for (const v1::StreamResult& one : r.results()) results.push_back(one);
  }
  ASSERT_TRUE(stream->Finish().ok());
  EXPECT_EQ(per_message, (std::vector<int>{3, 1}));  // one message of results per message
  ASSERT_EQ(results.size(), 4u);
  for (size_t i = 0; i < results.size(); ++i) EXPECT_EQ(results[i].id(), 100 + i);
  EXPECT_EQ(results[0].code(), 0) << results[0].message();
  EXPECT_EQ(results[0].op().output().name(), "raw-relu-0");
  absl::StatusOr<DTensor> described = client::GetTensor(s, "raw-relu-0");
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_EQ(results[0].op().output().meta().SerializeAsString(),
            ToProto(described->spec()).SerializeAsString());
  EXPECT_EQ(results[1].code(), 0) << results[1].message();
  EXPECT_FALSE(results[1].has_op());
  EXPECT_EQ(results[2].code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_NE(results[2].message().find("no-such-tensor"), std::string::npos) << results[2].message();
  EXPECT_EQ(results[3].code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(results[3].message().find("103"), std::string::npos) << results[3].message();
  for (const char* name : {"raw-relu-0", "raw-relu-1"}) {
    absl::StatusOr<DTensor> t = client::GetTensor(s, name);
    ASSERT_TRUE(t.ok()) << t.status();
    absl::StatusOr<HostTensor> full = t->FullTensor();
    ASSERT_TRUE(full.ok()) << full.status();
    EXPECT_TRUE(TensorsMatch(*full, Ramp(4, 4, 0.0f, 1.0f)));
    EXPECT_TRUE(t->Free().ok());
  }
}

}  // namespace
}  // namespace tessera
