// Bad requests to a real cluster: each gets its status code and a message naming the bad value, and
// leaves every existing tensor intact and the mesh's communicators working.

#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/small_integer_tensor.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "tessera/v1/collective.grpc.pb.h"
#include "tests/cluster/cluster_fixture.h"

namespace tessera {
namespace {

using ::tessera::client::CollectiveOp;
using ::tessera::client::CollectiveRequest;
using ::tessera::client::CollectiveResult;
using ::tessera::client::CollectiveStream;
using ::tessera::client::Session;
using ::tessera::testing::StatusIs;
using ::tessera::testing::TensorsMatch;
using ::tessera::testing::TestCluster;
using ::tessera::testing::TestClusterOptions;

constexpr int kWorkers = 4;
constexpr int64_t kBudget = int64_t{1} << 20;  // per worker
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
constexpr auto kNotFound = absl::StatusCode::kNotFound;
constexpr auto kFailedPrecondition = absl::StatusCode::kFailedPrecondition;

// The tensors every test must leave as they were, on every rank of mesh "m".
const char* const kKept[] = {"a", "b"};

CollectiveRequest Collective(CollectiveOp op, const std::string& mesh_dim, const std::string& input,
                             int64_t root = 0) {
  return CollectiveRequest{op, {"m", mesh_dim}, input, "out", ReduceOp::kSum, root};
}

// The status of `request` run synchronously, or started with async_op.
absl::Status Issue(Session& session, const CollectiveRequest& request, bool async) {
  return async ? session.StartCollective(request).status()
               : session.RunCollective(request).status();
}

// The first chunk of an upload of `tensor` to rank `rank` of mesh "m".
v1::PutLocalChunk Header(int64_t rank, const std::string& tensor, DType dtype, const Shape& shape) {
  v1::PutLocalChunk chunk;
  chunk.set_mesh("m");
  chunk.set_rank(rank);
  chunk.set_tensor(tensor);
  chunk.set_dtype(ToProto(dtype));
  *chunk.mutable_shape() = ToProto(shape);
  return chunk;
}

// Mesh "m" (2x2, dims "dp" and "tp") on a cluster whose workers hold 1 MiB each, with tensors "a"
// and "b" on every rank.
class ClusterBadInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new TestCluster;
    LocalClusterOptions options = TestClusterOptions(kWorkers);
    options.memory_budget_bytes = kBudget;
    startup_ = cluster_->Start(std::move(options));
    if (!startup_.ok()) return;
    Session& client = *cluster_->client;
    if (absl::StatusOr<client::MeshInfo> m = CreateMesh("m", "cpu", {2, 2}, {"dp", "tp"});
        !m.ok()) {
      startup_ = m.status();
      return;
    }
    kept_ = new std::vector<std::vector<HostTensor>>(kWorkers);
    for (int64_t r = 0; r < kWorkers; ++r) {
      (*kept_)[r].push_back(SmallIntegerTensor(DType::kFloat32, {5, 3}, 10 + r));
      (*kept_)[r].push_back(SmallIntegerTensor(DType::kInt64, {2, 4}, 20 + r));
      for (size_t t = 0; t < std::size(kKept); ++t) {
        startup_ = client.PutLocal("m", r, kKept[t], (*kept_)[r][t]);
        if (!startup_.ok()) return;
      }
    }
    stub_ = v1::CollectiveService::NewStub(grpc::CreateChannel(cluster_->cluster->address(),
                                                               grpc::InsecureChannelCredentials()))
                .release();
  }

  static void TearDownTestSuite() {
    delete stub_;
    stub_ = nullptr;
    delete kept_;
    kept_ = nullptr;
    cluster_->Stop();
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(startup_.ok()) << "the cluster did not start: " << startup_ << cluster_->LogHint();
  }

  // Whatever the test did: the mesh is ready, every kept tensor is as uploaded, and a collective on
  // the mesh still gives the right answer.
  void TearDown() override {
    if (!startup_.ok()) return;
    Session& client = *cluster_->client;
    absl::StatusOr<client::MeshInfo> mesh = client::GetMesh(client, "m");
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    EXPECT_TRUE(mesh->ready) << mesh->broken_reason;
    for (int64_t r = 0; r < kWorkers; ++r) {
      for (size_t t = 0; t < std::size(kKept); ++t) {
        absl::StatusOr<HostTensor> got = client.GetLocal("m", r, kKept[t]);
        ASSERT_TRUE(got.ok()) << "tensor '" << kKept[t] << "' of rank " << r << ": "
                              << got.status();
        EXPECT_TRUE(TensorsMatch(*got, (*kept_)[r][t]))
            << "tensor '" << kKept[t] << "' of rank " << r << " changed";
      }
    }
    ASSERT_TRUE(client.RunCollective(Collective(CollectiveOp::kAllReduce, "", "a")).ok());
    HostTensor sum = (*kept_)[0][0].Clone();
    for (int64_t r = 1; r < kWorkers; ++r) {
      ReduceInto(ReduceOp::kSum, sum.dtype(), sum.data(), (*kept_)[r][0].data(),
                 sum.num_elements());
    }
    absl::StatusOr<HostTensor> out = client.GetLocal("m", kWorkers - 1, "out");
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(TensorsMatch(*out, sum)) << "all_reduce after the bad request";
  }

  // Sends `chunks` as one PutLocal stream, as a client that miscounts its bytes would.
  static absl::Status RawPutLocal(const std::vector<v1::PutLocalChunk>& chunks) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::PutLocalReply reply;
    std::unique_ptr<grpc::ClientWriter<v1::PutLocalChunk>> writer =
        stub_->PutLocal(&context, &reply);
    for (const v1::PutLocalChunk& chunk : chunks) {
      if (!writer->Write(chunk)) break;
    }
    writer->WritesDone();
    return FromGrpcStatus(writer->Finish());
  }

  static Session& client() { return *cluster_->client; }

  // init_device_mesh as mesh `name` on the suite's session.
  static absl::StatusOr<client::MeshInfo> CreateMesh(const std::string& name,
                                                     const std::string& device, const Shape& shape,
                                                     const std::vector<std::string>& names = {},
                                                     const std::vector<int64_t>& ids = {},
                                                     absl::Duration timeout = absl::Seconds(30)) {
    client::MeshOptions options;
    options.worker_ids = ids;
    options.collective_timeout = timeout;
    return client::InitDeviceMesh(client(), device, shape, names, name, options);
  }

  static inline TestCluster* cluster_ = nullptr;
  static inline absl::Status startup_;
  static inline std::vector<std::vector<HostTensor>>* kept_ = nullptr;
  static inline v1::CollectiveService::Stub* stub_ = nullptr;
};

TEST_F(ClusterBadInputTest, UnknownMeshIsNotFound) {
  const std::vector<std::string> names = {"'nope'"};
  EXPECT_TRUE(StatusIs(client::GetMesh(client(), "nope").status(), kNotFound, names));
  EXPECT_TRUE(StatusIs(client().DeleteMesh("nope"), kNotFound, names));
  CollectiveRequest request = Collective(CollectiveOp::kAllReduce, "", "a");
  request.group.mesh = "nope";
  EXPECT_TRUE(StatusIs(client().RunCollective(request).status(), kNotFound, names));
  EXPECT_TRUE(StatusIs(client().PutLocal("nope", 0, "a", (*kept_)[0][0]), kNotFound, names));
  EXPECT_TRUE(StatusIs(client().GetLocal("nope", 0, "a").status(), kNotFound, names));
  EXPECT_TRUE(StatusIs(client().DeleteLocal("nope", "a"), kNotFound, names));
}

TEST_F(ClusterBadInputTest, MeshShapeThatDoesNotMatchTheWorkers) {
  EXPECT_TRUE(StatusIs(CreateMesh("nine", "cpu", {3, 3}).status(), kInvalid,
                       {"[3, 3]", "needs 9", "4 are live"}));
  EXPECT_TRUE(StatusIs(CreateMesh("three_ids", "cpu", {2, 2}, {}, {0, 1, 2}).status(), kInvalid,
                       {"[2, 2]", "needs 4", "names 3"}));
  EXPECT_TRUE(StatusIs(CreateMesh("twice", "cpu", {2}, {}, {1, 1}).status(), kInvalid,
                       {"rank 1 appears twice"}));
  EXPECT_TRUE(StatusIs(CreateMesh("stranger", "cpu", {1}, {}, {17}).status(), kNotFound, {"17"}));
  EXPECT_TRUE(StatusIs(CreateMesh("empty_dim", "cpu", {2, 0}).status(), kInvalid,
                       {"[2, 0]", "size 0 at dim 1"}));
  EXPECT_TRUE(
      StatusIs(CreateMesh("m", "cpu", {2}).status(), absl::StatusCode::kAlreadyExists, {"'m'"}));
  // None of them left a mesh behind.
  absl::StatusOr<std::vector<client::MeshInfo>> meshes = client().ListMeshes();
  ASSERT_TRUE(meshes.ok()) << meshes.status();
  ASSERT_EQ(meshes->size(), 1u);
  EXPECT_EQ((*meshes)[0].name, "m");
}

// Shapes whose sizes are hostile: refused naming the value before the coordinator allocates
// anything in proportion to them, and meshes of more than kMaxMeshDims dims are refused.
TEST_F(ClusterBadInputTest, MeshShapesPastTheLimits) {
  EXPECT_TRUE(StatusIs(CreateMesh("max", "cpu", {std::numeric_limits<int64_t>::max()}).status(),
                       kInvalid, {"9223372036854775807"}));
  EXPECT_TRUE(StatusIs(CreateMesh("wide", "cpu", {30000000}).status(), kInvalid, {"30000000"}));
  EXPECT_TRUE(StatusIs(CreateMesh("wraps", "cpu", {int64_t{1} << 32, int64_t{1} << 32}).status(),
                       kInvalid, {"4294967296"}));
  // At the slot limit, the count of live workers refuses it.
  EXPECT_TRUE(StatusIs(CreateMesh("limit", "cpu", {kMaxMeshSize}).status(), kInvalid,
                       {absl::StrCat("needs ", kMaxMeshSize), "4 are live"}));
  EXPECT_TRUE(StatusIs(CreateMesh("deep", "cpu", Shape(10000, 1)).status(), kInvalid,
                       {"10000 dims", absl::StrCat(kMaxMeshDims)}));
  EXPECT_TRUE(StatusIs(CreateMesh("nine", "cpu", Shape(kMaxMeshDims + 1, 1), {}, {0}).status(),
                       kInvalid, {absl::StrCat(kMaxMeshDims + 1, " dims")}));
  absl::StatusOr<std::vector<client::MeshInfo>> meshes = client().ListMeshes();
  ASSERT_TRUE(meshes.ok()) << meshes.status();
  EXPECT_EQ(meshes->size(), 1u);
}

TEST_F(ClusterBadInputTest, UnknownDeviceType) {
  EXPECT_TRUE(StatusIs(CreateMesh("t", "tpu", {4}).status(), kInvalid, {"'tpu'"}));
}

TEST_F(ClusterBadInputTest, DuplicateDimNames) {
  EXPECT_TRUE(StatusIs(CreateMesh("d", "cpu", {2, 2}, {"dp", "dp"}).status(), kInvalid, {"'dp'"}));
  EXPECT_TRUE(
      StatusIs(CreateMesh("d", "cpu", {2, 2}, {"dp"}).status(), kInvalid, {"1 names", "2 dims"}));
}

TEST_F(ClusterBadInputTest, UnknownTensor) {
  const std::vector<std::string> names = {"'ghost'"};
  EXPECT_TRUE(
      StatusIs(client().RunCollective(Collective(CollectiveOp::kAllReduce, "", "ghost")).status(),
               kNotFound, names));
  EXPECT_TRUE(StatusIs(client().GetLocal("m", 0, "ghost").status(), kNotFound, names));
  EXPECT_TRUE(StatusIs(client().DeleteLocal("m", "ghost"), kNotFound, names));
}

TEST_F(ClusterBadInputTest, TensorOnSomeRanksOnly) {
  // Its own mesh with a short timeout, in case a rank waits in the collective for the others.
  ASSERT_TRUE(CreateMesh("p", "cpu", {kWorkers}, {}, {}, absl::Seconds(2)).ok());
  ASSERT_TRUE(client().PutLocal("p", 0, "lonely", (*kept_)[0][0]).ok());
  CollectiveRequest lonely = Collective(CollectiveOp::kAllReduce, "", "lonely");
  lonely.group.mesh = "p";
  EXPECT_TRUE(
      StatusIs(client().RunCollective(lonely).status(), kNotFound, {"'lonely'", "ranks 1, 2, 3"}));
  EXPECT_TRUE(
      StatusIs(client().GetLocal("p", 2, "lonely").status(), kNotFound, {"'lonely'", "rank 2"}));
  // The mesh still runs collectives.
  for (int64_t r = 0; r < kWorkers; ++r) {
    ASSERT_TRUE(client().PutLocal("p", r, "a", (*kept_)[r][0]).ok());
  }
  CollectiveRequest request = Collective(CollectiveOp::kAllReduce, "", "a");
  request.group.mesh = "p";
  EXPECT_TRUE(client().RunCollective(request).ok());
  ASSERT_TRUE(client().DeleteMesh("p").ok());
}

TEST_F(ClusterBadInputTest, RankOrRootOutOfRange) {
  EXPECT_TRUE(
      StatusIs(client().RunCollective(Collective(CollectiveOp::kBroadcast, "", "a", 4)).status(),
               kInvalid, {"root 4", "group of 4"}));
  EXPECT_TRUE(
      StatusIs(client().RunCollective(Collective(CollectiveOp::kReduce, "", "a", -1)).status(),
               kInvalid, {"root -1"}));
  EXPECT_TRUE(
      StatusIs(client().RunCollective(Collective(CollectiveOp::kScatter, "dp", "a", 2)).status(),
               kInvalid, {"root 2", "group of 2"}));
  CollectiveRequest send = Collective(CollectiveOp::kSendRecv, "tp", "a", 1);
  send.peer = 1;
  EXPECT_TRUE(StatusIs(client().RunCollective(send).status(), kInvalid, {"peer 1", "sender 1"}));
  send.peer = 2;
  EXPECT_TRUE(StatusIs(client().RunCollective(send).status(), kInvalid, {"peer 2", "group of 2"}));
  EXPECT_TRUE(StatusIs(client().GetLocal("m", 4, "a").status(), kInvalid, {"rank 4", "4 ranks"}));
  EXPECT_TRUE(StatusIs(client().PutLocal("m", -1, "a", (*kept_)[0][0]), kInvalid, {"rank -1"}));
}

TEST_F(ClusterBadInputTest, UnknownMeshDimOrOp) {
  EXPECT_TRUE(
      StatusIs(client().RunCollective(Collective(CollectiveOp::kAllGather, "pp", "a")).status(),
               kInvalid, {"'pp'", "dp, tp"}));
  EXPECT_TRUE(
      StatusIs(client().RunCollective(Collective(CollectiveOp::kAllGather, "2", "a")).status(),
               kInvalid, {"mesh dim 2", "2 dims"}));
  EXPECT_TRUE(
      StatusIs(client().RunCollective(Collective(CollectiveOp::kAllGather, "-1", "a")).status(),
               kInvalid, {"mesh dim -1"}));
  EXPECT_TRUE(
      StatusIs(client().RunCollective(Collective(static_cast<CollectiveOp>(42), "", "a")).status(),
               kInvalid, {"42"}));
  EXPECT_TRUE(
      StatusIs(client().RunCollective(Collective(static_cast<CollectiveOp>(0), "", "a")).status(),
               kInvalid));
  CollectiveRequest reduce = Collective(CollectiveOp::kAllReduce, "", "a");
  reduce.reduce_op = static_cast<ReduceOp>(9);
  EXPECT_TRUE(StatusIs(client().RunCollective(reduce).status(), kInvalid, {"9"}));
}

TEST_F(ClusterBadInputTest, UploadThatEndsEarly) {
  // 60 bytes announced, 20 sent, under the name of a tensor that exists.
  v1::PutLocalChunk chunk = Header(1, "a", DType::kFloat32, {5, 3});
  chunk.set_data(std::string(20, '\x7f'));
  EXPECT_TRUE(StatusIs(RawPutLocal({chunk}), kInvalid, {"ended after 20 of the 60 bytes"}));
  // A header and nothing else, for a new tensor: not created.
  EXPECT_TRUE(StatusIs(RawPutLocal({Header(1, "c", DType::kFloat32, {5, 3})}), kInvalid,
                       {"ended after 0 of the 60 bytes"}));
  EXPECT_TRUE(StatusIs(client().GetLocal("m", 1, "c").status(), kNotFound, {"'c'"}));
  EXPECT_TRUE(StatusIs(RawPutLocal({}), kInvalid, {"no chunks"}));
}

TEST_F(ClusterBadInputTest, UploadThatSendsTooManyBytes) {
  v1::PutLocalChunk first = Header(2, "a", DType::kFloat32, {5, 3});
  first.set_data(std::string(60, '\x7f'));
  v1::PutLocalChunk extra;
  extra.set_data(std::string(4, '\x7f'));
  EXPECT_TRUE(StatusIs(RawPutLocal({first, extra}), kInvalid, {"more than the 60 bytes"}));
  first.set_data(std::string(61, '\x7f'));
  EXPECT_TRUE(StatusIs(RawPutLocal({first}), kInvalid, {"more than the 60 bytes"}));
}

TEST_F(ClusterBadInputTest, UploadWithBadHeader) {
  v1::PutLocalChunk chunk = Header(0, "a", DType::kFloat32, {5, 3});
  chunk.set_dtype(v1::DTYPE_UNSPECIFIED);
  EXPECT_TRUE(StatusIs(RawPutLocal({chunk}), kInvalid, {"DTYPE_UNSPECIFIED"}));
  chunk = Header(0, "a", DType::kFloat32, {5, -3});
  EXPECT_TRUE(StatusIs(RawPutLocal({chunk}), kInvalid, {"-3"}));
  chunk = Header(0, "a/b", DType::kFloat32, {1});
  EXPECT_TRUE(StatusIs(RawPutLocal({chunk}), kInvalid, {"'a/b'"}));
}

TEST_F(ClusterBadInputTest, TensorOverTheMemoryBudget) {
  const HostTensor two_mib = HostTensor::Zeros(DType::kFloat32, {512, 1024}).value();
  const std::vector<std::string> sizes = {"2097152", absl::StrCat(kBudget)};
  EXPECT_TRUE(StatusIs(client().PutLocal("m", 0, "huge", two_mib),
                       absl::StatusCode::kResourceExhausted, sizes));
  EXPECT_TRUE(StatusIs(client().GetLocal("m", 0, "huge").status(), kNotFound, {"'huge'"}));
  // Replacing a kept tensor with one over the budget keeps the old one.
  EXPECT_TRUE(StatusIs(client().PutLocal("m", 3, "a", two_mib),
                       absl::StatusCode::kResourceExhausted, sizes));

  // Shapes far past any budget, up to byte counts that overflow 64 bits, are refused up front.
  for (const Shape& shape : {Shape{int64_t{1} << 40}, Shape{int64_t{1} << 61},
                             Shape{int64_t{1} << 31, int64_t{1} << 31}}) {
    SCOPED_TRACE(ShapeToString(shape));
    absl::Status s = RawPutLocal({Header(0, "vast", DType::kFloat64, shape)});
    EXPECT_TRUE(s.code() == absl::StatusCode::kResourceExhausted ||
                s.code() == absl::StatusCode::kInvalidArgument)
        << s;
    EXPECT_TRUE(StatusIs(client().GetLocal("m", 0, "vast").status(), kNotFound, {"'vast'"}));
  }

  // A collective whose output would pass the budget fails on every worker before sending a byte.
  const HostTensor third = HostTensor::Zeros(DType::kFloat32, {300, 256}).value();  // 307200 B
  for (int64_t r = 0; r < kWorkers; ++r)
    ASSERT_TRUE(client().PutLocal("m", r, "third", third).ok());
  EXPECT_TRUE(StatusIs(
      client().RunCollective(Collective(CollectiveOp::kAllGather, "", "third")).status(),
      absl::StatusCode::kResourceExhausted, {absl::StrCat(4 * 307200), absl::StrCat(kBudget)}));
  ASSERT_TRUE(client().DeleteLocal("m", "third").ok());
}

TEST_F(ClusterBadInputTest, UploadsAndOutputsAreCountedAgainstTheBudgetUpFront) {
  // The coordinator counts every rank's local tensors against its worker's budget, so what would
  // pass it is refused before a byte is sent or a collective accepted, naming the worker.
  absl::StatusOr<client::MeshInfo> mesh = client::GetMesh(client(), "m");
  ASSERT_TRUE(mesh.ok());
  const std::string worker0 = absl::StrCat("worker ", mesh->mesh.ranks()[0], ",");
  const HostTensor fill = SmallIntegerTensor(DType::kFloat32, {175000}, 3);  // 700000 B
  ASSERT_TRUE(client().PutLocal("m", 0, "fill", fill).ok());
  const HostTensor more = HostTensor::Zeros(DType::kFloat32, {100000}).value();  // 400000 B
  EXPECT_TRUE(StatusIs(client().PutLocal("m", 0, "more", more),
                       absl::StatusCode::kResourceExhausted,
                       {"'more'", "needs 400000 bytes on " + worker0, absl::StrCat(kBudget)}));
  EXPECT_TRUE(StatusIs(client().GetLocal("m", 0, "more").status(), kNotFound, {"'more'"}));
  // Other ranks have room for it.
  ASSERT_TRUE(client().PutLocal("m", 1, "more", more).ok());
  // A collective whose output does not fit is refused when it is started, even async.
  const HostTensor quarter = HostTensor::Zeros(DType::kFloat32, {25000}).value();  // 100000 B
  for (int64_t r = 0; r < kWorkers; ++r) {
    ASSERT_TRUE(client().PutLocal("m", r, "quarter", quarter).ok());
  }
  CollectiveRequest gather = Collective(CollectiveOp::kAllGather, "", "quarter");
  gather.output = "gathered";
  EXPECT_TRUE(StatusIs(client().StartCollective(gather).status(),
                       absl::StatusCode::kResourceExhausted,
                       {"'gathered'", "needs 400000 bytes on " + worker0}));
  EXPECT_TRUE(StatusIs(client().GetLocal("m", 1, "gathered").status(), kNotFound));
  // Once "fill" is gone, both fit.
  absl::StatusOr<HostTensor> kept = client().GetLocal("m", 0, "fill");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(TensorsMatch(*kept, fill));
  ASSERT_TRUE(client().DeleteLocal("m", "fill").ok());
  EXPECT_TRUE(client().RunCollective(gather).ok());
  EXPECT_TRUE(client().PutLocal("m", 0, "more", more).ok());
  for (const char* name : {"more", "quarter", "gathered"}) {
    EXPECT_TRUE(client().DeleteLocal("m", name).ok()) << name;
  }
}

TEST_F(ClusterBadInputTest, RanksHoldingDifferentShapesOrDTypes) {
  // Positions 0-2 hold float32[3, 2]; position 3 a float32[4, 2] in "odd" and an int32[3, 2] in
  // "mixed". Gloo would be handed different byte counts on the ranks of one group (which kills
  // the worker process in Gloo's receive path): the coordinator refuses before anything runs.
  for (int64_t r = 0; r < kWorkers; ++r) {
    const bool last = r == kWorkers - 1;
    ASSERT_TRUE(
        client()
            .PutLocal("m", r, "odd", SmallIntegerTensor(DType::kFloat32, {last ? 4 : 3, 2}, 30 + r))
            .ok());
    ASSERT_TRUE(
        client()
            .PutLocal("m", r, "mixed",
                      SmallIntegerTensor(last ? DType::kInt32 : DType::kFloat32, {3, 2}, 40 + r))
            .ok());
  }
  for (bool async : {false, true}) {
    SCOPED_TRACE(async ? "async" : "sync");
    for (CollectiveOp op :
         {CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter,
          CollectiveOp::kAllToAll, CollectiveOp::kBroadcast}) {
      // Over the whole mesh, and over dim "tp", whose group {2, 3} disagrees.
      for (const char* dim : {"", "tp"}) {
        CollectiveRequest request = Collective(op, dim, "odd");
        EXPECT_TRUE(StatusIs(Issue(client(), request, async), kFailedPrecondition,
                             {"'odd'", "float32[3, 2]", "float32[4, 2]", "positions"}))
            << client::CollectiveOpName(op) << " over '" << dim << "'";
        request.input = "mixed";
        EXPECT_TRUE(StatusIs(Issue(client(), request, async), kFailedPrecondition,
                             {"'mixed'", "float32[3, 2]", "int32[3, 2]"}))
            << client::CollectiveOpName(op) << " over '" << dim << "'";
      }
    }
    // Over dim "dp" every group agrees ({0, 2} and {1, 3} differ only between groups)... but
    // {1, 3} does not: position 3 differs from 1. A send from position 0 to 2 reads only those.
    CollectiveRequest send = Collective(CollectiveOp::kSendRecv, "", "odd", 0);
    send.peer = 2;
    send.output = "sent";
    if (async) {
      absl::StatusOr<client::Work> sent = client().StartCollective(send);
      ASSERT_TRUE(sent.ok()) << sent.status();
      absl::StatusOr<std::vector<absl::StatusOr<CollectiveResult>>> outcomes =
          client().WaitCollectives("m", {sent->id()});
      ASSERT_TRUE(outcomes.ok()) << outcomes.status();
      EXPECT_TRUE((*outcomes)[0].ok()) << (*outcomes)[0].status();
    } else {
      absl::StatusOr<CollectiveResult> sent = client().RunCollective(send);
      ASSERT_TRUE(sent.ok()) << sent.status();
    }
    absl::StatusOr<HostTensor> got = client().GetLocal("m", 2, "sent");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(TensorsMatch(*got, SmallIntegerTensor(DType::kFloat32, {3, 2}, 30)));
  }
  for (const char* name : {"odd", "mixed", "sent"}) {
    EXPECT_TRUE(client().DeleteLocal("m", name).ok()) << name;
  }
}

TEST_F(ClusterBadInputTest, AsyncFailureIsReportedByWaitAndByTheNextUse) {
  // An async reduce to rank 0, accepted (the coordinator counts its output, which only rank 0
  // holds), that fails on rank 1, whose worker has no room left for the buffer it reduces in. The
  // failing rank still takes part, so the all_reduce queued behind it runs on every worker; both
  // outcomes come back from WaitCollectives.
  const HostTensor third = HostTensor::Zeros(DType::kFloat32, {300, 256}).value();  // 307200 B
  for (int64_t r = 0; r < kWorkers; ++r) {
    ASSERT_TRUE(client().PutLocal("m", r, "third", third).ok());
  }
  const HostTensor filler = HostTensor::Zeros(DType::kFloat32, {150000}).value();  // 600000 B
  ASSERT_TRUE(client().PutLocal("m", 1, "filler", filler).ok());
  CollectiveRequest reduce = Collective(CollectiveOp::kReduce, "", "third");
  reduce.output = "reduced";
  CollectiveRequest sum = Collective(CollectiveOp::kAllReduce, "", "a");
  sum.output = "summed";
  const absl::Time start = absl::Now();
  absl::StatusOr<client::Work> first = client().StartCollective(reduce);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<client::Work> second = client().StartCollective(sum);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(second->id(), first->id());
  const std::vector<int64_t> works = {first->id(), second->id()};

  absl::StatusOr<std::vector<absl::StatusOr<CollectiveResult>>> outcomes =
      client().WaitCollectives("m", works);
  ASSERT_TRUE(outcomes.ok()) << outcomes.status();
  ASSERT_EQ(outcomes->size(), works.size());
  absl::StatusOr<client::MeshInfo> mesh = client::GetMesh(client(), "m");
  ASSERT_TRUE(mesh.ok());
  const std::string rank1 = absl::StrCat("worker ", mesh->mesh.ranks()[1], " ");
  EXPECT_TRUE(StatusIs((*outcomes)[0].status(), absl::StatusCode::kResourceExhausted,
                       {rank1, "307200", absl::StrCat(kBudget)}));
  EXPECT_TRUE((*outcomes)[1].ok()) << (*outcomes)[1].status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "a rank was stranded in the reduce";
  // The failed output is gone, and the next use says why.
  EXPECT_TRUE(StatusIs(client().GetLocal("m", 0, "reduced").status(), kNotFound, {"'reduced'"}));
  CollectiveRequest again = Collective(CollectiveOp::kAllReduce, "", "reduced");
  EXPECT_TRUE(StatusIs(client().RunCollective(again).status(), kNotFound,
                       {"'reduced'", "failed", absl::StrCat(kBudget)}));

  // Each work is reported once; unknown ids and meshes are NOT_FOUND, naming them.
  EXPECT_TRUE(StatusIs(first->Wait().status(), kNotFound, {absl::StrCat("work ", first->id())}));
  EXPECT_TRUE(StatusIs(client().WaitCollectives("m", {987654}).status(), kNotFound, {"987654"}));
  EXPECT_TRUE(
      StatusIs(client().WaitCollectives("nowhere", {1}).status(), kNotFound, {"'nowhere'"}));
  for (const char* name : {"third", "filler", "summed"}) {
    EXPECT_TRUE(client().DeleteLocal("m", name).ok()) << name;
  }
}

TEST_F(ClusterBadInputTest, InPlaceCollectivesLeaveRanksThatWriteNothingAlone) {
  // "p" on every rank; an in-place reduce to root 0 writes rank 0 only, an in-place send from
  // rank 0 to 1 writes rank 1 only: the other ranks keep "p" as it was, and it stays usable.
  std::vector<HostTensor> p;
  for (int64_t r = 0; r < kWorkers; ++r) {
    p.push_back(SmallIntegerTensor(DType::kFloat32, {4, 3}, 50 + static_cast<uint32_t>(r)));
    ASSERT_TRUE(client().PutLocal("m", r, "p", p.back()).ok());
  }
  CollectiveRequest reduce = Collective(CollectiveOp::kReduce, "", "p", 0);
  reduce.output = "";
  ASSERT_TRUE(client().RunCollective(reduce).ok());
  HostTensor sum = p[0].Clone();
  for (int64_t r = 1; r < kWorkers; ++r) {
    ReduceInto(ReduceOp::kSum, sum.dtype(), sum.data(), p[r].data(), sum.num_elements());
  }
  p[0] = std::move(sum);
  CollectiveRequest send = Collective(CollectiveOp::kSendRecv, "", "p", 0);
  send.peer = 1;
  send.output = "";
  ASSERT_TRUE(client().RunCollective(send).ok());
  p[1] = p[0].Clone();
  for (int64_t r = 0; r < kWorkers; ++r) {
    absl::StatusOr<HostTensor> got = client().GetLocal("m", r, "p");
    ASSERT_TRUE(got.ok()) << "rank " << r << ": " << got.status();
    EXPECT_TRUE(TensorsMatch(*got, p[r])) << "rank " << r;
  }
  EXPECT_TRUE(client().RunCollective(Collective(CollectiveOp::kAllReduce, "", "p")).ok());

  // An in-place all_gather over the budget fails without touching its input.
  const HostTensor third = HostTensor::Zeros(DType::kFloat32, {300, 256}).value();  // 307200 B
  for (int64_t r = 0; r < kWorkers; ++r) {
    ASSERT_TRUE(client().PutLocal("m", r, "third", third).ok());
  }
  CollectiveRequest gather = Collective(CollectiveOp::kAllGather, "", "third");
  gather.output = "";
  EXPECT_TRUE(StatusIs(client().RunCollective(gather).status(),
                       absl::StatusCode::kResourceExhausted, {absl::StrCat(kBudget)}));
  for (int64_t r = 0; r < kWorkers; ++r) {
    absl::StatusOr<HostTensor> got = client().GetLocal("m", r, "third");
    ASSERT_TRUE(got.ok()) << "rank " << r << ": " << got.status();
    EXPECT_TRUE(TensorsMatch(*got, third)) << "rank " << r;
  }
  for (const char* name : {"p", "third"}) {
    EXPECT_TRUE(client().DeleteLocal("m", name).ok()) << name;
  }
}

TEST_F(ClusterBadInputTest, StreamRefusesPastItsUnreadLimitAndEndsCleanly) {
  absl::StatusOr<std::unique_ptr<CollectiveStream>> stream = client().OpenCollectiveStream();
  ASSERT_TRUE(stream.ok()) << stream.status();
  const CollectiveRequest barrier = client::Barrier({"m", ""});
  for (int64_t i = 0; i < CollectiveStream::kMaxUnread; ++i) {
    ASSERT_TRUE((*stream)->Submit(barrier).ok()) << i;
  }
  EXPECT_TRUE(StatusIs((*stream)->Submit(barrier), kFailedPrecondition, {"Next"}));
  for (int64_t i = 0; i < CollectiveStream::kMaxUnread; ++i) {
    absl::StatusOr<CollectiveResult> r = (*stream)->Next();
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
  }
  EXPECT_TRUE((*stream)->Submit(barrier).ok());
  stream->reset();  // one outcome unread: the stream still closes cleanly

  // A stream past its deadline reports it from Next, and again, and closes without trouble.
  absl::StatusOr<std::unique_ptr<CollectiveStream>> brief =
      client().OpenCollectiveStream(absl::Milliseconds(300));
  ASSERT_TRUE(brief.ok()) << brief.status();
  ASSERT_TRUE((*brief)->Submit(barrier).ok());
  absl::SleepFor(absl::Milliseconds(600));
  (void)(*brief)->Submit(barrier);
  absl::StatusOr<CollectiveResult> first = (*brief)->Next();
  if (!first.ok()) {
    EXPECT_EQ(first.status().code(), absl::StatusCode::kDeadlineExceeded) << first.status();
  }
  absl::StatusOr<CollectiveResult> late = (*brief)->Next();
  EXPECT_FALSE(late.ok());
  brief->reset();
}

TEST_F(ClusterBadInputTest, StreamReportsARefusedCollectiveInItsPlace) {
  absl::StatusOr<std::unique_ptr<CollectiveStream>> stream = client().OpenCollectiveStream();
  ASSERT_TRUE(stream.ok()) << stream.status();
  CollectiveRequest first = Collective(CollectiveOp::kAllReduce, "", "a");
  first.output = "s1";
  CollectiveRequest last = first;
  last.output = "s2";
  for (const CollectiveRequest& request :
       {first, Collective(CollectiveOp::kAllReduce, "", "ghost"),
        Collective(CollectiveOp::kBroadcast, "", "a", 9), last}) {
    ASSERT_TRUE((*stream)->Submit(request).ok());
  }
  absl::StatusOr<CollectiveResult> one = (*stream)->Next();
  EXPECT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(StatusIs((*stream)->Next().status(), kNotFound, {"'ghost'"}));
  EXPECT_TRUE(StatusIs((*stream)->Next().status(), kInvalid, {"root 9"}));
  absl::StatusOr<CollectiveResult> four = (*stream)->Next();
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_EQ(four->outputs.size(), size_t{kWorkers});
  stream->reset();
  HostTensor sum = (*kept_)[0][0].Clone();
  for (int64_t r = 1; r < kWorkers; ++r) {
    ReduceInto(ReduceOp::kSum, sum.dtype(), sum.data(), (*kept_)[r][0].data(), sum.num_elements());
  }
  for (const char* name : {"s1", "s2"}) {
    absl::StatusOr<HostTensor> got = client().GetLocal("m", 2, name);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status();
    EXPECT_TRUE(TensorsMatch(*got, sum)) << name;
    EXPECT_TRUE(client().DeleteLocal("m", name).ok()) << name;
  }
}

}  // namespace
}  // namespace tessera
