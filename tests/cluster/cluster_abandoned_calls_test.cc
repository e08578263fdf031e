// Client calls that end before they use every command sequence the coordinator reserved for them
// on the workers: a deadline that expires at once (DistributeTensor, ToLocal, FullTensor,
// GetLocal, a move across meshes), a FromLocal missing a rank, a client that cancels a stream in
// the middle (DistributeTensor, PutLocal). Each is followed by puts and gets on the same workers,
// which must complete promptly and correctly: every reserved sequence is used or released, so no
// worker waits for a number that will never come, and no call is refused as one that "already
// ran".

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "kernels/testing/reference.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "tessera/v1/collective.grpc.pb.h"
#include "tessera/v1/dtensor.grpc.pb.h"
#include "tessera/v1/mesh.grpc.pb.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/cluster/follow_up_calls.h"

namespace tessera {
namespace {

using ::tessera::client::DTensor;
using ::tessera::client::Session;
using ::tessera::testing::FollowUp;
using ::tessera::testing::FollowUpName;
using ::tessera::testing::RunFollowUp;
using ::tessera::testing::TensorsMatch;

constexpr int kWorkers = 4;
// Well under the 5 s a worker used to wait before skipping a gap in its sequence.
constexpr absl::Duration kPrompt = absl::Seconds(2);
// Deadlines short enough that the calls die at every stage: before the coordinator reads the
// request, after it reserved sequences, while the worker streams are opening.
const std::vector<absl::Duration>& ShortDeadlines() {
  static const auto* deadlines = new std::vector<absl::Duration>{
      absl::Milliseconds(1), absl::Milliseconds(1), absl::Milliseconds(2),
      absl::Milliseconds(3), absl::Milliseconds(5), absl::Milliseconds(10)};
  return *deadlines;
}

// How long a stream cancelled in the middle stays open first: long enough for the coordinator to
// have opened the worker streams.
constexpr absl::Duration kMidStreamHold = absl::Milliseconds(100);

// How a call is abandoned.
enum class Abandon {
  kDistributeDeadline,
  kToLocalDeadline,
  kFullTensorDeadline,
  kGetLocalDeadline,
  kMoveAcrossMeshesDeadline,
  kFromLocalMissingRank,
  kDistributeCancelledMidStream,
  kPutLocalCancelledMidStream,
};

// What must still work at once afterwards, on the same workers.

std::string AbandonName(Abandon a) {
  switch (a) {
    case Abandon::kDistributeDeadline:
      return "DistributeDeadline";
    case Abandon::kToLocalDeadline:
      return "ToLocalDeadline";
    case Abandon::kFullTensorDeadline:
      return "FullTensorDeadline";
    case Abandon::kGetLocalDeadline:
      return "GetLocalDeadline";
    case Abandon::kMoveAcrossMeshesDeadline:
      return "MoveAcrossMeshesDeadline";
    case Abandon::kFromLocalMissingRank:
      return "FromLocalMissingRank";
    case Abandon::kDistributeCancelledMidStream:
      return "DistributeCancelledMidStream";
    case Abandon::kPutLocalCancelledMidStream:
      return "PutLocalCancelledMidStream";
  }
  return "?";
}

// No status of any call may say that a worker refused a sequence it had skipped or already ran.
::testing::AssertionResult NotRefusedBySequence(const absl::Status& status) {
  if (absl::StrContains(status.message(), "already ran") ||
      absl::StrContains(status.message(), "skipped")) {
    return ::testing::AssertionFailure() << "a worker refused a sequence: " << status;
  }
  return ::testing::AssertionSuccess();
}

// OK (the call beat its deadline), or the deadline or cancellation that ended it.
::testing::AssertionResult EndedByTheClient(const absl::Status& status) {
  if (status.ok() || absl::IsDeadlineExceeded(status) || absl::IsCancelled(status)) {
    return NotRefusedBySequence(status);
  }
  return ::testing::AssertionFailure() << "unexpected " << status;
}

// The calls the tests make, on one cluster shared by every test (ClusterEnvironment).
class ClusterCalls : public ::testing::Test {
 public:
  static void StartCluster() {
    cluster_ = new testing::TestCluster;
    ASSERT_TRUE(cluster_->Start(testing::TestClusterOptions(kWorkers)).ok());
    ASSERT_TRUE(client::InitDeviceMesh(*cluster_->client, "cpu", {kWorkers}, {}, "line").ok());
    ASSERT_TRUE(client::InitDeviceMesh(*cluster_->client, "cpu", {2}, {}, "pair",
                                       client::MeshOptions{.worker_ids = {2, 3}})
                    .ok());
    session_ = new std::shared_ptr<Session>(Session::Connect(cluster_->cluster->address()).value());
    line_ = new client::Mesh(client::GetMesh(S(), "line").value());
    pair_ = new client::Mesh(client::GetMesh(S(), "pair").value());
    source_value_ = new HostTensor(kernels::testing::RandomTensor(DType::kFloat32, {512, 1024}, 5));
    source_ = new DTensor(
        client::DistributeTensor(S(), *source_value_, *line_, {Placement::Shard(0)}).value());
    const std::shared_ptr<grpc::Channel> channel =
        grpc::CreateChannel(cluster_->cluster->address(), grpc::InsecureChannelCredentials());
    collectives_ = v1::CollectiveService::NewStub(channel).release();
    dtensors_ = v1::DTensorService::NewStub(channel).release();
  }
  static void StopCluster() {
    delete collectives_;
    delete dtensors_;
    delete source_;
    delete source_value_;
    delete line_;
    delete pair_;
    delete session_;
    cluster_->Stop();
    delete cluster_;
  }

 protected:
  static Session& S() { return **session_; }
  // A raw call as S()'s client (the calls below abandon streams the library would finish).
  static void Prepare(grpc::ClientContext* context) {
    context->AddMetadata("tessera-client", S().client_id());
  }

  // A DistributeTensor of a 4 MiB tensor under `deadline`, or (with a `hold`) cancelled that long
  // after its first 1 MiB.
  static absl::Status Distribute(absl::Duration deadline,
                                 absl::Duration hold = absl::ZeroDuration()) {
    grpc::ClientContext context;
    Prepare(&context);
    context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline));
    v1::TensorInfo info;
    auto writer = dtensors_->DistributeTensor(&context, &info);
    v1::DistributeChunk chunk;
    v1::DistributeHeader* h = chunk.mutable_header();
    h->set_mesh("line");
    *h->mutable_placements() = ToProto(std::vector<Placement>{Placement::Replicate()});
    h->set_dtype(v1::FLOAT32);
    *h->mutable_shape() = ToProto(Shape{1024, 1024});
    for (int piece = 0; piece < 4; ++piece) {
      chunk.set_data(std::string(1 << 20, '\1'));
      if (!writer->Write(chunk)) break;
      chunk.Clear();
      if (hold > absl::ZeroDuration()) {
        absl::SleepFor(hold);
        context.TryCancel();
        break;
      }
    }
    writer->WritesDone();
    const absl::Status status = FromGrpcStatus(writer->Finish());
    if (status.ok()) FreeByName(info.name());
    return status;
  }

  // A PutLocal of 4 MiB to rank 1 of "line" cancelled `hold` after its first 1 MiB.
  static absl::Status PutLocalCancelledMidStream(absl::Duration hold) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::PutLocalReply reply;
    auto writer = collectives_->PutLocal(&context, &reply);
    v1::PutLocalChunk chunk;
    chunk.set_mesh("line");
    chunk.set_rank(1);
    chunk.set_tensor("abandoned");
    chunk.set_dtype(v1::FLOAT32);
    *chunk.mutable_shape() = ToProto(Shape{1 << 20});
    chunk.set_data(std::string(1 << 20, '\1'));
    writer->Write(chunk);
    absl::SleepFor(hold);
    context.TryCancel();
    writer->WritesDone();
    return FromGrpcStatus(writer->Finish());
  }

  // Reads a server stream of tensor bytes to its end; its status.
  template <typename Reader>
  static absl::Status Drain(Reader& reader) {
    v1::TensorData data;
    while (reader.Read(&data)) {
    }
    return FromGrpcStatus(reader.Finish());
  }

  static absl::Status ToLocal(absl::Duration deadline) {
    grpc::ClientContext context;
    Prepare(&context);
    context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline));
    v1::ToLocalRequest request;
    request.set_name(source_->name());
    request.set_rank(2);
    auto reader = dtensors_->ToLocal(&context, request);
    return Drain(*reader);
  }

  static absl::Status FullTensor(absl::Duration deadline) {
    grpc::ClientContext context;
    Prepare(&context);
    context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline));
    v1::FullTensorRequest request;
    request.set_name(source_->name());
    auto reader = dtensors_->FullTensor(&context, request);
    return Drain(*reader);
  }

  static absl::Status GetLocal(absl::Duration deadline) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline));
    v1::GetLocalRequest request;
    request.set_mesh("line");
    request.set_rank(3);
    request.set_tensor("resident");
    auto reader = collectives_->GetLocal(&context, request);
    v1::TensorChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return FromGrpcStatus(reader->Finish());
  }

  static absl::Status MoveAcrossMeshes(absl::Duration deadline) {
    grpc::ClientContext context;
    Prepare(&context);
    context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline));
    v1::RedistributeRequest request;
    request.set_name(source_->name());
    request.set_mesh("pair");
    *request.mutable_placements() = ToProto(std::vector<Placement>{Placement::Shard(1)});
    v1::RedistributeReply reply;
    const absl::Status status = FromGrpcStatus(dtensors_->Redistribute(&context, request, &reply));
    if (status.ok()) FreeByName(reply.output().name());
    return status;
  }

  // FromLocal with the shards of ranks 0..2 of "line" only: refused, naming rank 3.
  static absl::Status FromLocalMissingRank() {
    std::vector<HostTensor> locals;
    for (int r = 0; r < kWorkers - 1; ++r) {
      locals.push_back(kernels::testing::RandomTensor(DType::kFloat32, {256, 64}, 20 + r));
    }
    return client::FromLocal(S(), locals, *line_, {Placement::Shard(0)}).status();
  }

  static void FreeByName(const std::string& name) {
    absl::StatusOr<DTensor> t = client::GetTensor(S(), name);
    if (t.ok()) t->Free().IgnoreError();
  }

  // Abandons one call of kind `a` (those with a deadline under `deadline`); its status.
  static absl::Status AbandonOnce(Abandon a, absl::Duration deadline) {
    switch (a) {
      case Abandon::kDistributeDeadline:
        return Distribute(deadline);
      case Abandon::kToLocalDeadline:
        return ToLocal(deadline);
      case Abandon::kFullTensorDeadline:
        return FullTensor(deadline);
      case Abandon::kGetLocalDeadline:
        return GetLocal(deadline);
      case Abandon::kMoveAcrossMeshesDeadline:
        return MoveAcrossMeshes(deadline);
      case Abandon::kFromLocalMissingRank:
        return FromLocalMissingRank();
      case Abandon::kDistributeCancelledMidStream:
        return Distribute(absl::Seconds(30), kMidStreamHold);
      case Abandon::kPutLocalCancelledMidStream:
        return PutLocalCancelledMidStream(kMidStreamHold);
    }
    return absl::InternalError("unknown case");
  }

  static testing::TestCluster* cluster_;
  static std::shared_ptr<Session>* session_;
  static client::Mesh* line_;
  static client::Mesh* pair_;
  static HostTensor* source_value_;
  static DTensor* source_;
  static v1::CollectiveService::Stub* collectives_;
  static v1::DTensorService::Stub* dtensors_;
};

testing::TestCluster* ClusterCalls::cluster_ = nullptr;
std::shared_ptr<Session>* ClusterCalls::session_ = nullptr;
client::Mesh* ClusterCalls::line_ = nullptr;
client::Mesh* ClusterCalls::pair_ = nullptr;
HostTensor* ClusterCalls::source_value_ = nullptr;
DTensor* ClusterCalls::source_ = nullptr;
v1::CollectiveService::Stub* ClusterCalls::collectives_ = nullptr;
v1::DTensorService::Stub* ClusterCalls::dtensors_ = nullptr;

class ClusterEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { ClusterCalls::StartCluster(); }
  void TearDown() override { ClusterCalls::StopCluster(); }
};
::testing::Environment* const cluster_environment =
    ::testing::AddGlobalTestEnvironment(new ClusterEnvironment);

class AbandonedCallTest : public ClusterCalls,
                          public ::testing::WithParamInterface<std::tuple<Abandon, FollowUp>> {};

TEST_P(AbandonedCallTest, TheNextPutsAndGetsCompletePromptly) {
  const auto [abandon, follow_up] = GetParam();
  // What the abandoned GetLocal reads.
  ASSERT_TRUE(cluster_->client
                  ->PutLocal("line", 3, "resident",
                             kernels::testing::RandomTensor(DType::kFloat32, {256, 1024}, 3))
                  .ok());
  uint32_t seed = 100;
  for (absl::Duration deadline : ShortDeadlines()) {
    SCOPED_TRACE(absl::StrCat("deadline ", absl::FormatDuration(deadline)));
    const absl::Status abandoned = AbandonOnce(abandon, deadline);
    if (abandon == Abandon::kFromLocalMissingRank) {
      EXPECT_TRUE(testing::StatusIs(abandoned, absl::StatusCode::kInvalidArgument, {"rank 3"}));
    } else {
      EXPECT_TRUE(EndedByTheClient(abandoned));
    }
    const absl::Time start = absl::Now();
    EXPECT_TRUE(RunFollowUp(follow_up, S(), *line_, kWorkers, seed));
    const absl::Duration took = absl::Now() - start;
    EXPECT_LT(took, kPrompt) << "a worker waited for a sequence the abandoned call never used"
                             << cluster_->LogHint();
    ++seed;
  }
  // The tensor read by the abandoned calls is intact.
  absl::StatusOr<HostTensor> source = source_->FullTensor();
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_TRUE(TensorsMatch(*source, *source_value_));
}

INSTANTIATE_TEST_SUITE_P(
    Calls, AbandonedCallTest,
    ::testing::Combine(
        ::testing::Values(Abandon::kDistributeDeadline, Abandon::kToLocalDeadline,
                          Abandon::kFullTensorDeadline, Abandon::kGetLocalDeadline,
                          Abandon::kMoveAcrossMeshesDeadline, Abandon::kFromLocalMissingRank,
                          Abandon::kDistributeCancelledMidStream,
                          Abandon::kPutLocalCancelledMidStream),
        ::testing::Values(FollowUp::kPutThenGetLocal, FollowUp::kDistributeThenFullTensor)),
    [](const ::testing::TestParamInfo<std::tuple<Abandon, FollowUp>>& info) {
      return AbandonName(std::get<0>(info.param)) + "_" + FollowUpName(std::get<1>(info.param));
    });

// A stream a client holds open and then cancels.
enum class HeldStream { kDistributeTensor, kPutLocal };

class HeldStreamTest : public ClusterCalls,
                       public ::testing::WithParamInterface<std::tuple<HeldStream, FollowUp>> {};

// A client that holds a stream open delays the calls queued behind it on its workers only until
// it cancels; they then complete at once and correctly.
TEST_P(HeldStreamTest, DelaysTheCallsBehindItOnlyUntilItIsCancelled) {
  const auto [held, follow_up] = GetParam();
  constexpr absl::Duration kHold = absl::Seconds(1);
  absl::Time cancelled;
  absl::Status abandoned;
  std::thread holder([&, held = held] {
    abandoned = held == HeldStream::kDistributeTensor ? Distribute(absl::Seconds(30), kHold)
                                                      : PutLocalCancelledMidStream(kHold);
    cancelled = absl::Now();
  });
  absl::SleepFor(kHold / 4);
  const absl::Time start = absl::Now();
  EXPECT_TRUE(RunFollowUp(follow_up, S(), *line_, kWorkers, 7));
  const absl::Time end = absl::Now();
  holder.join();
  EXPECT_TRUE(EndedByTheClient(abandoned));
  // The held stream kept its turn (nothing skipped it), and nothing waited once it was gone.
  EXPECT_GT(end, cancelled - absl::Milliseconds(300)) << "a call overtook the held stream";
  EXPECT_LT(end - std::max(start, cancelled), kPrompt) << cluster_->LogHint();
}

INSTANTIATE_TEST_SUITE_P(
    Streams, HeldStreamTest,
    ::testing::Combine(::testing::Values(HeldStream::kDistributeTensor, HeldStream::kPutLocal),
                       ::testing::Values(FollowUp::kPutThenGetLocal,
                                         FollowUp::kDistributeThenFullTensor)),
    [](const ::testing::TestParamInfo<std::tuple<HeldStream, FollowUp>>& info) {
      return std::string(std::get<0>(info.param) == HeldStream::kDistributeTensor
                             ? "DistributeTensor"
                             : "PutLocal") +
             "_" + FollowUpName(std::get<1>(info.param));
    });

// A CreateMesh whose deadline passes while one of its workers is busy (its turn held by another
// client's stream): the call fails DEADLINE_EXCEEDED, and the workers that came to its set-up give
// up waiting for the busy one with the call, not at the mesh's collective timeout (a minute), so
// work on them goes on at once; the mesh does not exist.
TEST_F(ClusterCalls, ASetUpEndsWithItsCall) {
  ASSERT_TRUE(
      client::InitDeviceMesh(S(), "cpu", {1}, {}, "solo", client::MeshOptions{.worker_ids = {0}})
          .ok());
  const client::Mesh solo = client::GetMesh(S(), "solo").value();
  // Worker 1's turn is held by a put that sends one chunk and waits (line's rank 1).
  absl::Status held;
  std::thread holder([&] { held = PutLocalCancelledMidStream(absl::Seconds(6)); });
  absl::SleepFor(absl::Milliseconds(300));
  grpc::ClientContext context;
  context.AddMetadata("tessera-client", S().client_id());
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  v1::CreateMeshRequest request;
  request.set_name("brief");
  request.set_device_type("cpu");
  request.add_shape(2);
  request.add_worker_ids(0);
  request.add_worker_ids(1);
  v1::MeshInfo info;
  const grpc::Status created =
      v1::MeshService::NewStub(
          grpc::CreateChannel(cluster_->cluster->address(), grpc::InsecureChannelCredentials()))
          ->CreateMesh(&context, request, &info);
  EXPECT_EQ(created.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << created.error_message();
  const absl::Time start = absl::Now();
  EXPECT_TRUE(testing::PutThenGetLocal(S(), "solo", 1, 31));
  EXPECT_LT(absl::Now() - start, kPrompt)
      << "worker 0 waited in the abandoned set-up's rendezvous" << cluster_->LogHint();
  holder.join();
  EXPECT_TRUE(EndedByTheClient(held));
  EXPECT_EQ(client::GetMesh(S(), "brief").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(S().DeleteMesh("solo").ok());
}

}  // namespace
}  // namespace tessera
