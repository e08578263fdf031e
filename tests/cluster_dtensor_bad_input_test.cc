// Bad input to the DTensor RPCs on a real local cluster: each error class of the architecture gets
// its status code and a message naming the wrong value, and every tensor that existed before is
// still there and still correct afterwards. Also: a failure on a worker after an op has returned
// surfaces on the next call that touches the tensor and on Synchronize.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "kernels/testing/reference.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "tessera/tessera.h"
#include "tessera/v1/dtensor.grpc.pb.h"
#include "tests/cluster_fixture.h"

namespace tessera {
namespace {

using ::tessera::client::DTensor;
using ::tessera::client::Session;
using ::tessera::testing::StatusIs;
using ::tessera::testing::TensorsMatch;

constexpr int64_t kBudget = int64_t{64} << 20;

class DTensorBadInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new testing::TestCluster;
    LocalClusterOptions options = testing::TestClusterOptions(4);
    options.memory_budget_bytes = kBudget;
    ASSERT_TRUE(cluster_->Start(options).ok());
    ASSERT_TRUE(client::InitDeviceMesh(*cluster_->client, "cpu", {4}, {}, "line").ok());
    client::MeshOptions pair;
    pair.worker_ids = {0, 1};
    ASSERT_TRUE(client::InitDeviceMesh(*cluster_->client, "cpu", {2}, {}, "pair", pair).ok());
    session_ = new std::shared_ptr<Session>(Session::Connect(cluster_->cluster->address()).value());
    stub_ = v1::DTensorService::NewStub(grpc::CreateChannel(cluster_->cluster->address(),
                                                            grpc::InsecureChannelCredentials()))
                .release();
    line_ = new client::Mesh(client::GetMesh(**session_, "line").value());
    pair_ = new client::Mesh(client::GetMesh(**session_, "pair").value());
    sentinel_value_ = new HostTensor(kernels::testing::RandomTensor(DType::kFloat32, {5, 3}, 9));
    sentinel_ = new DTensor(
        client::DistributeTensor(**session_, *sentinel_value_, *line_, {Placement::Shard(0)})
            .value());
  }
  static void TearDownTestSuite() {
    delete stub_;
    delete sentinel_;
    delete sentinel_value_;
    delete line_;
    delete pair_;
    delete session_;
    cluster_->Stop();
    delete cluster_;
  }

  // Every tensor that existed is still there, and the sentinel still holds its values.
  void TearDown() override {
    absl::StatusOr<HostTensor> got = sentinel_->FullTensor();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(TensorsMatch(*got, *sentinel_value_));
    absl::StatusOr<std::vector<client::DTensorInfo>> list = S().ListTensors();
    ASSERT_TRUE(list.ok()) << list.status();
    ASSERT_EQ(list->size(), 1u);
    EXPECT_EQ((*list)[0].name, sentinel_->name());
  }

  static Session& S() { return **session_; }

  // A call of the raw stub, as the session's client.
  static void Prepare(grpc::ClientContext* context) {
    context->set_deadline(DeadlineAfter(absl::Seconds(60)));
    context->AddMetadata("tessera-client", S().client_id());
  }

  // Sends a DistributeTensor stream of `bytes` bytes for a float32 tensor of `shape`.
  static absl::Status DistributeRaw(const Shape& shape, size_t bytes, const std::string& name) {
    grpc::ClientContext context;
    Prepare(&context);
    v1::TensorInfo info;
    auto writer = stub_->DistributeTensor(&context, &info);
    v1::DistributeChunk chunk;
    v1::DistributeHeader* h = chunk.mutable_header();
    h->set_name(name);
    h->set_mesh("line");
    *h->mutable_placements() = ToProto(std::vector<Placement>{Placement::Shard(0)});
    h->set_dtype(v1::FLOAT32);
    *h->mutable_shape() = ToProto(shape);
    chunk.set_data(std::string(bytes, '\1'));
    writer->Write(chunk);
    writer->WritesDone();
    return FromGrpcStatus(writer->Finish());
  }

  static testing::TestCluster* cluster_;
  static std::shared_ptr<Session>* session_;
  static client::Mesh* line_;
  static client::Mesh* pair_;
  static HostTensor* sentinel_value_;
  static DTensor* sentinel_;
  static v1::DTensorService::Stub* stub_;  // for requests the library would never send
};

testing::TestCluster* DTensorBadInputTest::cluster_ = nullptr;
std::shared_ptr<Session>* DTensorBadInputTest::session_ = nullptr;
client::Mesh* DTensorBadInputTest::line_ = nullptr;
client::Mesh* DTensorBadInputTest::pair_ = nullptr;
HostTensor* DTensorBadInputTest::sentinel_value_ = nullptr;
DTensor* DTensorBadInputTest::sentinel_ = nullptr;
v1::DTensorService::Stub* DTensorBadInputTest::stub_ = nullptr;

TEST_F(DTensorBadInputTest, ShardDimOutOfRange) {
  const HostTensor t = kernels::testing::RandomTensor(DType::kFloat32, {4, 4}, 1);
  EXPECT_TRUE(StatusIs(client::DistributeTensor(S(), t, *line_, {Placement::Shard(2)}).status(),
                       absl::StatusCode::kInvalidArgument, {"S(2)", "2 dims"}));
}

TEST_F(DTensorBadInputTest, WrongNumberOfPlacements) {
  EXPECT_TRUE(StatusIs(
      client::Zeros(S(), *line_, {4}, {Placement::Shard(0), Placement::Replicate()}).status(),
      absl::StatusCode::kInvalidArgument, {"(S(0), R)", "2 entries", "1 dims"}));
}

TEST_F(DTensorBadInputTest, LocalShapeThatDoesNotFitTheGlobalShape) {
  std::vector<HostTensor> locals;
  for (int r = 0; r < 4; ++r) locals.push_back(HostTensor::Zeros(DType::kFloat32, {2, 3}).value());
  locals[2] = HostTensor::Zeros(DType::kFloat32, {1, 3}).value();
  client::FromLocalOptions options;
  options.shape = Shape{8, 3};
  EXPECT_TRUE(
      StatusIs(client::FromLocal(S(), locals, *line_, {Placement::Shard(0)}, options).status(),
               absl::StatusCode::kInvalidArgument, {"rank 2", "[1, 3]", "[2, 3]"}));
}

TEST_F(DTensorBadInputTest, DtypeMismatch) {
  absl::StatusOr<DTensor> a = client::Ones(S(), *line_, {4}, {Placement::Shard(0)});
  absl::StatusOr<DTensor> b = client::Ones(S(), *line_, {4}, {Placement::Shard(0)}, DType::kInt32);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(StatusIs(client::Add(*a, *b).status(), absl::StatusCode::kInvalidArgument,
                       {"float32", "int32"}));
}

TEST_F(DTensorBadInputTest, MatmulShapesThatDoNotChain) {
  absl::StatusOr<DTensor> a = client::Ones(S(), *line_, {4, 3}, {Placement::Shard(0)});
  absl::StatusOr<DTensor> b = client::Ones(S(), *line_, {4, 3}, {Placement::Replicate()});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(
      StatusIs(client::Mm(*a, *b).status(), absl::StatusCode::kInvalidArgument, {"[4, 3]"}));
}

TEST_F(DTensorBadInputTest, UnknownTensorAndMesh) {
  EXPECT_TRUE(
      StatusIs(client::GetTensor(S(), "nope").status(), absl::StatusCode::kNotFound, {"'nope'"}));
  EXPECT_TRUE(StatusIs(client::GetMesh(S(), "nowhere").status(), absl::StatusCode::kNotFound,
                       {"'nowhere'"}));
  client::Mesh ghost{"nowhere", line_->mesh};
  EXPECT_TRUE(StatusIs(client::Zeros(S(), ghost, {4}, {Placement::Shard(0)}).status(),
                       absl::StatusCode::kNotFound, {"'nowhere'"}));
  v1::FreeTensorRequest request;
  request.set_name("nope");
  grpc::ClientContext context;
  Prepare(&context);
  v1::FreeTensorReply reply;
  EXPECT_TRUE(StatusIs(FromGrpcStatus(stub_->FreeTensor(&context, request, &reply)),
                       absl::StatusCode::kNotFound, {"'nope'"}));
}

TEST_F(DTensorBadInputTest, StreamThatEndsEarly) {
  EXPECT_TRUE(StatusIs(DistributeRaw({8, 4}, 64, "short"), absl::StatusCode::kInvalidArgument,
                       {"ended after 64", "128"}));
  EXPECT_TRUE(StatusIs(client::GetTensor(S(), "short").status(), absl::StatusCode::kNotFound));
}

TEST_F(DTensorBadInputTest, StreamThatSendsTooManyBytes) {
  EXPECT_TRUE(StatusIs(DistributeRaw({8, 4}, 200, "long"), absl::StatusCode::kInvalidArgument,
                       {"more than", "128"}));
  EXPECT_TRUE(StatusIs(client::GetTensor(S(), "long").status(), absl::StatusCode::kNotFound));
}

TEST_F(DTensorBadInputTest, TensorOverTheMemoryBudget) {
  // 4 x 20 MiB replicated is 80 MiB on each worker, past the 64 MiB budget.
  EXPECT_TRUE(StatusIs(client::Zeros(S(), *line_, {4, 5 << 20}, {Placement::Replicate()}).status(),
                       absl::StatusCode::kResourceExhausted,
                       {"83886080 bytes", "worker", "67108864"}));
}

TEST_F(DTensorBadInputTest, NameTakenAndBadName) {
  EXPECT_TRUE(
      StatusIs(client::CreateTensor(S(), client::Factory::kZeros, *line_, {4},
                                    {Placement::Shard(0)}, DType::kFloat32, 0, 0, sentinel_->name())
                   .status(),
               absl::StatusCode::kAlreadyExists, {sentinel_->name()}));
  EXPECT_TRUE(StatusIs(client::CreateTensor(S(), client::Factory::kZeros, *line_, {4},
                                            {Placement::Shard(0)}, DType::kFloat32, 0, 0, "a/b")
                           .status(),
                       absl::StatusCode::kInvalidArgument, {"'a/b'"}));
}

TEST_F(DTensorBadInputTest, RedistributeToAnImpossibleLayout) {
  EXPECT_TRUE(StatusIs(sentinel_->Redistribute({Placement::Partial(ReduceOp::kMax)}).status(),
                       absl::StatusCode::kInvalidArgument, {"S(0)", "P(max)"}));
  EXPECT_TRUE(StatusIs(sentinel_->Redistribute({Placement::Shard(0)}, "nowhere").status(),
                       absl::StatusCode::kNotFound, {"'nowhere'"}));
}

TEST_F(DTensorBadInputTest, RandomOfAnIntegerDtype) {
  EXPECT_TRUE(
      StatusIs(client::Rand(S(), *line_, {4}, {Placement::Shard(0)}, 1, DType::kInt32).status(),
               absl::StatusCode::kInvalidArgument, {"int32"}));
}

// The coordinator counts DTensors against each worker's budget, but a worker also holds raw
// tensors of the collective API; when those leave too little room the worker refuses after the
// call has returned, and the error reaches the client on its next touch and on Synchronize.
TEST_F(DTensorBadInputTest, AWorkerFailureSurfacesOnTheNextCall) {
  const HostTensor big = HostTensor::Zeros(DType::kFloat32, {12 << 20}).value();  // 48 MiB
  ASSERT_TRUE(cluster_->client->PutLocal("pair", 0, "raw", big).ok());
  absl::StatusOr<DTensor> t =
      client::Zeros(S(), *pair_, {2, 5 << 20}, {Placement::Shard(0)});  // 20 MiB per rank
  ASSERT_TRUE(t.ok()) << t.status();  // accepted: the DTensor table has room
  EXPECT_TRUE(
      StatusIs(t->Synchronize(), absl::StatusCode::kResourceExhausted, {t->name(), "budget"}));
  EXPECT_TRUE(
      StatusIs(t->FullTensor().status(), absl::StatusCode::kResourceExhausted, {t->name()}));
  EXPECT_TRUE(
      StatusIs(client::Relu(*t).status(), absl::StatusCode::kResourceExhausted, {t->name()}));
  absl::StatusOr<client::DTensorInfo> info = t->Refresh();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state, client::TensorState::kFailed);
  EXPECT_TRUE(t->Free().ok());
  ASSERT_TRUE(cluster_->client->DeleteLocal("pair", "raw").ok());
}

// An op pipelined behind a failing one: the rank without its input still takes part in the
// collectives (with zeros), so its peer is not stranded, the error names the input that failed,
// and the mesh keeps working at once.
TEST_F(DTensorBadInputTest, AFailureDoesNotStrandThePeersOfAPipelinedCollective) {
  const HostTensor big = HostTensor::Zeros(DType::kFloat32, {12 << 20}).value();  // 48 MiB
  ASSERT_TRUE(cluster_->client->PutLocal("pair", 0, "raw", big).ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<DTensor> t = client::Zeros(S(), *pair_, {2, 5 << 20}, {Placement::Shard(0)});
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<DTensor> r = t->Redistribute({Placement::Replicate()});  // an all_gather
  const absl::Status failure = r.ok() ? r->Synchronize() : r.status();
  EXPECT_TRUE(StatusIs(failure, absl::StatusCode::kResourceExhausted, {t->name()}));
  ASSERT_TRUE(cluster_->client->DeleteLocal("pair", "raw").ok());
  absl::StatusOr<DTensor> ok = client::Ones(S(), *pair_, {4, 3}, {Placement::Shard(0)});
  ASSERT_TRUE(ok.ok());
  absl::StatusOr<DTensor> gathered = ok->Redistribute({Placement::Replicate()});
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_TRUE(gathered->Synchronize().ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "a rank was stranded in a collective";
}

}  // namespace
}  // namespace tessera
