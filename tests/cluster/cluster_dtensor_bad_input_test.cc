// Bad input to the DTensor RPCs on a real local cluster: each error class of the architecture gets
// its status code and a message naming the wrong value, and every tensor that existed before is
// still there and still correct afterwards. Also: a failure on a worker after an op has returned
// surfaces on the next call that touches the tensor and on Synchronize.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/sharding/elementwise_reduce.h"
#include "grpcpp/grpcpp.h"
#include "kernels/testing/reference.h"
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

  // Bytes each worker reported holding last, by worker id.
  static std::vector<int64_t> UsedBytes() {
    std::vector<int64_t> used;
    absl::StatusOr<std::vector<client::WorkerInfo>> workers = cluster_->client->ListWorkers();
    if (!workers.ok()) return used;
    for (const client::WorkerInfo& w : *workers) {
      if (w.worker_id >= static_cast<int64_t>(used.size())) used.resize(w.worker_id + 1);
      used[w.worker_id] = w.used_bytes;
    }
    return used;
  }

  // UsedBytes() once two reports half a second apart agree (up to 5 s).
  static std::vector<int64_t> SettledUsedBytes() {
    std::vector<int64_t> last = UsedBytes();
    for (int i = 0; i < 10; ++i) {
      absl::SleepFor(absl::Milliseconds(500));
      std::vector<int64_t> now = UsedBytes();
      if (now == last) break;
      last = std::move(now);
    }
    return last;
  }

  // Waits (up to 5 s) until `done(UsedBytes())`.
  static bool UsedBytesBecome(const std::function<bool(const std::vector<int64_t>&)>& done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (absl::Now() < deadline) {
      if (done(UsedBytes())) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  static ::testing::AssertionResult UsedBytesReturnTo(const std::vector<int64_t>& before) {
    if (UsedBytesBecome([&](const std::vector<int64_t>& used) { return used == before; })) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "workers hold " << absl::StrJoin(UsedBytes(), ", ")
                                         << " bytes, not " << absl::StrJoin(before, ", ");
  }

  // Local tensors on every rank of `mesh` all-reduce to their sum; they are deleted afterwards.
  static ::testing::AssertionResult LocalAllReduceWorks(const std::string& mesh, int64_t ranks) {
    Session& client = *cluster_->client;
    HostTensor sum = HostTensor::Zeros(DType::kFloat32, {6, 2}).value();
    for (int64_t r = 0; r < ranks; ++r) {
      const HostTensor mine =
          kernels::testing::RandomTensor(DType::kFloat32, {6, 2}, 40 + static_cast<uint32_t>(r));
      ReduceInto(ReduceOp::kSum, DType::kFloat32, sum.data(), mine.data(), sum.num_elements());
      if (absl::Status s = client.PutLocal(mesh, r, "lar_in", mine); !s.ok()) {
        return ::testing::AssertionFailure() << "upload to rank " << r << ": " << s;
      }
    }
    if (absl::Status s =
            client.RunCollective(client::AllReduce({mesh, ""}, "lar_in", "lar_out", ReduceOp::kSum))
                .status();
        !s.ok()) {
      return ::testing::AssertionFailure() << "all_reduce on mesh '" << mesh << "': " << s;
    }
    for (int64_t r = 0; r < ranks; ++r) {
      absl::StatusOr<HostTensor> got = client.GetLocal(mesh, r, "lar_out");
      if (!got.ok()) return ::testing::AssertionFailure() << got.status();
      // Summed in ring order: equal within rounding.
      if (::testing::AssertionResult m = TensorsMatch(*got, sum, 1e-6); !m) return m;
    }
    for (const char* name : {"lar_in", "lar_out"}) {
      if (absl::Status s = client.DeleteLocal(mesh, name); !s.ok()) {
        return ::testing::AssertionFailure() << s;
      }
    }
    return ::testing::AssertionSuccess();
  }

  // Bytes on a worker that the coordinator does not count against its budget: the reduced copy a
  // FullTensor of a Partial tensor makes on the workers and keeps while its stream is being read.
  // The stream is left unread after its first window, so the copy stays until the hold ends.
  class UncountedHold {
   public:
    static constexpr int64_t kBytes = int64_t{30} << 20;  // the Partial tensor, and its copy

    // Holds kBytes uncounted (next to the kBytes of the Partial tensor, which are counted) on
    // `worker` and on worker 2, over a mesh "hold" made for it.
    static absl::StatusOr<std::unique_ptr<UncountedHold>> Start(int64_t worker) {
      std::unique_ptr<UncountedHold> hold(new UncountedHold);
      hold->worker_ = worker;
      absl::StatusOr<client::MeshInfo> mesh =
          client::InitDeviceMesh(*cluster_->client, "cpu", {2}, {}, "hold",
                                 client::MeshOptions{.worker_ids = {worker, 2}});
      if (!mesh.ok()) return mesh.status();
      hold->mesh_ = true;
      absl::StatusOr<client::Mesh> m = client::GetMesh(S(), "hold");
      if (!m.ok()) return m.status();
      absl::StatusOr<DTensor> partial =
          client::Zeros(S(), *m, {kBytes / 4}, {Placement::Partial()});
      if (!partial.ok()) return partial.status();
      hold->partial_ = std::make_unique<DTensor>(*std::move(partial));
      Prepare(&hold->context_);
      v1::FullTensorRequest request;
      request.set_name(hold->partial_->name());
      // A channel of its own whose flow-control window stays small: on a shared channel, earlier
      // transfers can grow the window (BDP probing) until the whole stream fits in the client's
      // buffers, and the workers then drop the copy before the hold is measured.
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
      args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1 << 20);
      args.SetMaxReceiveMessageSize(64 << 20);
      hold->channel_stub_ = v1::DTensorService::NewStub(grpc::CreateCustomChannel(
          cluster_->cluster->address(), grpc::InsecureChannelCredentials(), args));
      hold->reader_ = hold->channel_stub_->FullTensor(&hold->context_, request);
      v1::TensorData first;
      if (!hold->reader_->Read(&first)) return absl::InternalError("FullTensor sent nothing");
      // The worker holds the tensor and its copy (the tests leave little else on it).
      if (!UsedBytesBecome(
              [&](const std::vector<int64_t>& used) { return used[worker] >= 2 * kBytes; })) {
        return absl::FailedPreconditionError(
            absl::StrCat("worker ", worker, " holds ", UsedBytes()[worker], " bytes, not ",
                         2 * kBytes, ": the FullTensor stream did not keep the copy"));
      }
      return hold;
    }

    // Ends the stream, frees the tensor and the mesh, and waits until the worker reports holding
    // neither, for the next hold to measure.
    ~UncountedHold() {
      const int64_t held = UsedBytes()[worker_];
      if (reader_ != nullptr) {
        context_.TryCancel();
        v1::TensorData rest;
        while (reader_->Read(&rest)) {
        }
        reader_->Finish().IgnoreError();
        // The copy goes once the coordinator sees the stream end.
        UsedBytesBecome(
            [&](const std::vector<int64_t>& used) { return used[worker_] <= held - kBytes; });
      }
      if (partial_ != nullptr) partial_->Free().IgnoreError();
      if (mesh_) cluster_->client->DeleteMesh("hold").IgnoreError();
      UsedBytesBecome(
          [&](const std::vector<int64_t>& used) { return used[worker_] <= held - 2 * kBytes; });
    }

   private:
    UncountedHold() = default;
    int64_t worker_ = 0;
    bool mesh_ = false;
    std::unique_ptr<DTensor> partial_;
    std::unique_ptr<v1::DTensorService::Stub> channel_stub_;  // its own channel
    grpc::ClientContext context_;
    std::unique_ptr<grpc::ClientReader<v1::TensorData>> reader_;
  };

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

// Handles dropped just before listing: their frees go out on the op stream, and the list (TearDown)
// is made only once they were answered.
TEST_F(DTensorBadInputTest, DroppedHandlesAreNotListed) {
  std::vector<DTensor> dropped;
  for (int i = 0; i < 32; ++i) {
    absl::StatusOr<DTensor> t = client::Ones(S(), *line_, {4}, {Placement::Shard(0)});
    ASSERT_TRUE(t.ok()) << t.status();
    dropped.push_back(*std::move(t));
  }
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

// A factory tensor whose byte count passes int64 is refused before the budget is counted, and the
// count stays sound: a tensor past the budget is still refused after it.
TEST_F(DTensorBadInputTest, TensorWhoseByteCountPassesInt64) {
  const int64_t elements_that_wrap = int64_t{1} << 62;  // x 4 bytes = 2^64
  EXPECT_TRUE(StatusIs(
      client::Zeros(S(), *line_, {elements_that_wrap}, {Placement::Shard(0)}).status(),
      absl::StatusCode::kInvalidArgument,
      {"float32", absl::StrCat("[", elements_that_wrap, "]"), "more bytes than fit in int64"}));
  EXPECT_TRUE(StatusIs(client::Full(S(), *line_, {int64_t{1} << 31, int64_t{1} << 31},
                                    {Placement::Replicate()}, 1.0, DType::kFloat64)
                           .status(),
                       absl::StatusCode::kInvalidArgument, {"float64", "more bytes"}));
  // 2^60 float32 elements fit in int64 bytes (2^62): counted, and refused against the budget.
  EXPECT_TRUE(
      StatusIs(client::Zeros(S(), *line_, {int64_t{1} << 60}, {Placement::Replicate()}).status(),
               absl::StatusCode::kResourceExhausted, {"budget"}));
  EXPECT_TRUE(StatusIs(client::Zeros(S(), *line_, {4, 5 << 20}, {Placement::Replicate()}).status(),
                       absl::StatusCode::kResourceExhausted, {"67108864"}));
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

// A client id that is no name (too long, a space, '/') is refused by every call that reads
// it, naming it cut and escaped, before a lease is made for it or a tensor is touched.
TEST_F(DTensorBadInputTest, ClientIdThatIsNoName) {
  for (const std::string& id :
       {std::string(129, 'c'), std::string("a b"), std::string("x/y"), std::string(1000, 'z')}) {
    SCOPED_TRACE(id.substr(0, 16));
    {
      grpc::ClientContext context;
      context.set_deadline(DeadlineAfter(absl::Seconds(60)));
      context.AddMetadata("tessera-client", id);
      v1::CreateTensorRequest request;
      request.set_name("by_a_bad_id");
      request.set_mesh("line");
      *request.mutable_shape() = ToProto(Shape{4});
      *request.mutable_placements() = ToProto(std::vector<Placement>{Placement::Shard(0)});
      request.set_dtype(v1::FLOAT32);
      v1::TensorInfo info;
      const absl::Status s = FromGrpcStatus(stub_->CreateTensor(&context, request, &info));
      EXPECT_TRUE(StatusIs(s, absl::StatusCode::kInvalidArgument, {"client id"})) << s;
      EXPECT_LT(s.message().size(), 400u);
    }
    {
      grpc::ClientContext context;
      context.set_deadline(DeadlineAfter(absl::Seconds(60)));
      context.AddMetadata("tessera-client", id);
      v1::FreeTensorRequest request;
      request.set_name(sentinel_->name());
      v1::FreeTensorReply reply;
      EXPECT_TRUE(StatusIs(FromGrpcStatus(stub_->FreeTensor(&context, request, &reply)),
                           absl::StatusCode::kInvalidArgument, {"client id"}));
    }
    {
      grpc::ClientContext context;
      context.set_deadline(DeadlineAfter(absl::Seconds(60)));
      context.AddMetadata("tessera-client", id);
      v1::KeepAliveReply reply;
      EXPECT_TRUE(StatusIs(FromGrpcStatus(stub_->KeepAlive(&context, {}, &reply)),
                           absl::StatusCode::kInvalidArgument, {"client id"}));
    }
  }
  EXPECT_TRUE(
      StatusIs(client::GetTensor(S(), "by_a_bad_id").status(), absl::StatusCode::kNotFound));
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

// The coordinator counts DTensors and local tensors against each worker's budget; a worker also
// holds the temporaries of running commands, which it alone counts. Here one holds the reduced
// copy a FullTensor of a Partial tensor makes, while the stream is left unread, so that the worker
// refuses a write after the call has returned: the error reaches the client on its next touch and
// on Synchronize.
TEST_F(DTensorBadInputTest, AWorkerFailureSurfacesOnTheNextCall) {
  absl::StatusOr<std::unique_ptr<UncountedHold>> hold = UncountedHold::Start(0);
  ASSERT_TRUE(hold.ok()) << hold.status();
  absl::StatusOr<DTensor> t =
      client::Zeros(S(), *pair_, {2, 2 << 20}, {Placement::Shard(0)});  // 8 MiB per rank
  ASSERT_TRUE(t.ok()) << t.status();  // accepted: the coordinator's count has room
  EXPECT_TRUE(StatusIs(t->Synchronize(), absl::StatusCode::kResourceExhausted,
                       {t->name(), "budget", "worker 0 "}));
  EXPECT_TRUE(
      StatusIs(t->FullTensor().status(), absl::StatusCode::kResourceExhausted, {t->name()}));
  // An op on it: on the op stream the handle comes back at once and carries the failure.
  absl::StatusOr<DTensor> relu = client::Relu(*t);
  EXPECT_TRUE(StatusIs(relu.ok() ? relu->Synchronize() : relu.status(),
                       absl::StatusCode::kResourceExhausted, {t->name()}));
  absl::StatusOr<client::DTensorInfo> info = t->Refresh();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state, client::TensorState::kFailed);
  EXPECT_TRUE(t->Free().ok());
}

// An op pipelined behind a failing one: the rank without its input still takes part in the
// collectives (with zeros), so its peer is not stranded, the error names the input that failed,
// and the mesh keeps working at once.
TEST_F(DTensorBadInputTest, AFailureDoesNotStrandThePeersOfAPipelinedCollective) {
  absl::StatusOr<std::unique_ptr<UncountedHold>> hold = UncountedHold::Start(0);
  ASSERT_TRUE(hold.ok()) << hold.status();
  const absl::Time start = absl::Now();
  absl::StatusOr<DTensor> t = client::Zeros(S(), *pair_, {2, 2 << 20}, {Placement::Shard(0)});
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<DTensor> r = t->Redistribute({Placement::Replicate()});  // an all_gather
  const absl::Status failure = r.ok() ? r->Synchronize() : r.status();
  EXPECT_TRUE(StatusIs(failure, absl::StatusCode::kResourceExhausted, {t->name()}));
  absl::StatusOr<DTensor> ok = client::Ones(S(), *pair_, {4, 3}, {Placement::Shard(0)});
  ASSERT_TRUE(ok.ok());
  absl::StatusOr<DTensor> gathered = ok->Redistribute({Placement::Replicate()});
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_TRUE(gathered->Synchronize().ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "a rank was stranded in a collective";
}

// RunOp naming the outputs of an op with several: a count other than the op's, `output` beside
// `outputs`, a name given twice or one in use are refused with the code and what was wrong, and
// leave no tensor (TearDown checks the sentinel is the only one, and intact).
TEST_F(DTensorBadInputTest, NamesForSeveralOutputsAreChecked) {
  struct Case {
    std::vector<std::string> outputs;
    std::string output;
    absl::StatusCode code;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {{"values"},
       "",
       absl::StatusCode::kInvalidArgument,
       {"aten::max.dim", "gives 2 outputs here", "'outputs' names 1"}},
      {{"a", "b", "c"}, "", absl::StatusCode::kInvalidArgument, {"gives 2", "names 3"}},
      {{"values", "indices"},
       "out",
       absl::StatusCode::kInvalidArgument,
       {"'output' or 'outputs', not both"}},
      {{"twice", "twice"}, "", absl::StatusCode::kAlreadyExists, {"'twice'"}},
      {{"fresh", sentinel_->name()}, "", absl::StatusCode::kAlreadyExists, {sentinel_->name()}},
  };
  for (const Case& c : cases) {
    grpc::ClientContext context;
    Prepare(&context);
    v1::OpRequest request;
    request.mutable_op()->set_name("max.dim");
    request.mutable_op()->add_args()->set_tensor(0);
    request.mutable_op()->add_args()->set_int_value(0);
    request.add_inputs(sentinel_->name());
    request.set_output(c.output);
    for (const std::string& name : c.outputs) request.add_outputs(name);
    v1::OpReply reply;
    EXPECT_TRUE(
        StatusIs(FromGrpcStatus(stub_->RunOp(&context, request, &reply)), c.code, c.message))
        << absl::StrJoin(c.outputs, ", ");
  }
}

// Local tensors count against a worker's budget next to DTensors, both ways: a 32 MiB Replicate
// put onto a worker that PutLocal filled is refused up front, naming the worker (it used to be
// accepted and then leave its peer waiting in the broadcast), and a local tensor that does not fit
// next to a DTensor is refused too; every tensor stays as it was.
TEST_F(DTensorBadInputTest, ADTensorThatDoesNotFitNextToLocalTensorsIsRefused) {
  const HostTensor raw = kernels::testing::RandomTensor(DType::kFloat32, {12 << 20}, 5);  // 48 MiB
  ASSERT_TRUE(cluster_->client->PutLocal("pair", 1, "raw", raw).ok());
  const HostTensor value = kernels::testing::RandomTensor(DType::kFloat32, {8 << 20}, 6);  // 32 MiB
  EXPECT_TRUE(
      StatusIs(client::DistributeTensor(S(), value, *pair_, {Placement::Replicate()}).status(),
               absl::StatusCode::kResourceExhausted,
               {"needs 33554432 bytes on worker 1,", "which holds 5033", "of its 67108864"}));
  EXPECT_TRUE(StatusIs(client::Zeros(S(), *pair_, {2, 5 << 20}, {Placement::Shard(0)}).status(),
                       absl::StatusCode::kResourceExhausted, {"worker 1,"}));
  absl::StatusOr<HostTensor> kept = cluster_->client->GetLocal("pair", 1, "raw");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(TensorsMatch(*kept, raw));
  ASSERT_TRUE(cluster_->client->DeleteLocal("pair", "raw").ok());

  absl::StatusOr<DTensor> t =
      client::DistributeTensor(S(), value, *pair_, {Placement::Replicate()});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(StatusIs(cluster_->client->PutLocal("pair", 0, "raw", raw),
                       absl::StatusCode::kResourceExhausted,
                       {"'raw'", "needs 50331648 bytes on worker 0,", "which holds 3355"}));
  EXPECT_TRUE(
      StatusIs(cluster_->client->GetLocal("pair", 0, "raw").status(), absl::StatusCode::kNotFound));
  absl::StatusOr<HostTensor> whole = t->FullTensor();
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(TensorsMatch(*whole, value));
  EXPECT_TRUE(t->Free().ok());
  EXPECT_TRUE(LocalAllReduceWorks("pair", 2));
}

// A Replicate distribute whose shard the receiving rank cannot hold: that rank still takes part in
// the broadcast (with a stand-in), so the tensor fails at once with the worker's refusal, naming
// the worker, instead of after the collective timeout (30 s here), and the mesh keeps working.
TEST_F(DTensorBadInputTest, AReplicaThatDoesNotFitFailsAtOnceAndTheMeshKeepsWorking) {
  absl::StatusOr<std::unique_ptr<UncountedHold>> hold = UncountedHold::Start(1);
  ASSERT_TRUE(hold.ok()) << hold.status();
  const HostTensor value = kernels::testing::RandomTensor(DType::kFloat32, {2 << 20}, 4);  // 8 MiB
  const absl::Time start = absl::Now();
  absl::StatusOr<DTensor> t =
      client::DistributeTensor(S(), value, *pair_, {Placement::Replicate()});  // from rank 0
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(StatusIs(t->Synchronize(), absl::StatusCode::kResourceExhausted,
                       {t->name(), "worker 1 ", "budget"}));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3)) << "rank 0 waited in its broadcast";
  EXPECT_TRUE(t->Free().ok());
  hold->reset();
  // Collectives on the mesh work: a broadcast of the next Replicate tensor, and a local all_reduce.
  absl::StatusOr<DTensor> again =
      client::DistributeTensor(S(), value, *pair_, {Placement::Replicate()});
  ASSERT_TRUE(again.ok()) << again.status();
  for (int64_t rank = 0; rank < 2; ++rank) {
    absl::StatusOr<HostTensor> got = again->ToLocal(rank);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(TensorsMatch(*got, value)) << "rank " << rank;
  }
  EXPECT_TRUE(again->Free().ok());
  EXPECT_TRUE(LocalAllReduceWorks("pair", 2));
}

// `tessera tensor rm` of a Replicate tensor while its upload is still streaming: the upload ends
// with NOT_FOUND, nothing is spread after the free (no rank is left waiting in a broadcast, none
// keeps a copy), and the mesh serves the next call at once.
TEST_F(DTensorBadInputTest, FreeDuringAReplicateUpload) {
  const std::vector<int64_t> before = SettledUsedBytes();
  grpc::ClientContext context;
  Prepare(&context);
  v1::TensorInfo info;
  auto writer = stub_->DistributeTensor(&context, &info);
  v1::DistributeChunk chunk;
  v1::DistributeHeader* h = chunk.mutable_header();
  h->set_name("slow");
  h->set_mesh("line");
  *h->mutable_placements() = ToProto(std::vector<Placement>{Placement::Replicate()});
  h->set_dtype(v1::FLOAT32);
  *h->mutable_shape() = ToProto(Shape{1 << 20});  // 4 MiB
  chunk.set_data(std::string(2 << 20, '\1'));
  ASSERT_TRUE(writer->Write(chunk));
  // The tensor exists once the coordinator has read the header; its owner frees it while the
  // rest of its bytes are still to come.
  absl::StatusOr<DTensor> pending = absl::NotFoundError("not looked up");
  for (const absl::Time deadline = absl::Now() + absl::Seconds(5);
       !pending.ok() && absl::Now() < deadline; absl::SleepFor(absl::Milliseconds(10))) {
    pending = client::GetTensor(S(), "slow");
  }
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_EQ(pending->info().state, client::TensorState::kPending);
  ASSERT_TRUE(pending->Free().ok());
  chunk.Clear();
  chunk.set_data(std::string(2 << 20, '\1'));
  ASSERT_TRUE(writer->Write(chunk));
  writer->WritesDone();
  const absl::Time start = absl::Now();
  EXPECT_TRUE(
      StatusIs(FromGrpcStatus(writer->Finish()), absl::StatusCode::kNotFound, {"'slow'", "freed"}));
  EXPECT_TRUE(StatusIs(client::GetTensor(S(), "slow").status(), absl::StatusCode::kNotFound));
  // The mesh answers at once: a read of another tensor and a collective.
  absl::StatusOr<HostTensor> got = sentinel_->FullTensor();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(LocalAllReduceWorks("line", 4));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  // No worker keeps a byte of it.
  EXPECT_TRUE(UsedBytesReturnTo(before));
}

}  // namespace
}  // namespace tessera
