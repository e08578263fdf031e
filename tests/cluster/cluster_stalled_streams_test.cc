// Clients that stop half-way through an upload stream and keep the channel open, against a
// coordinator and workers with --stream_idle_timeout=1s: each stalled call (a relayed distribute,
// from_local, put, a module load with its weights, a direct upload to a worker) ends with
// DEADLINE_EXCEEDED once it has sent nothing for a second, its workers' sequences are released so
// that puts and gets on the same workers complete promptly after it, and the bytes it had reserved
// against the workers' budgets are given back (a tensor that fits only without them is accepted;
// a direct upload's plan gives them back once its grants expire, kGrantLifetime).

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "kernels/testing/reference.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "tessera/v1/collective.grpc.pb.h"
#include "tessera/v1/dtensor.grpc.pb.h"
#include "tessera/v1/module.grpc.pb.h"
#include "tessera/v1/worker.grpc.pb.h"
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
constexpr absl::Duration kIdleTimeout = absl::Seconds(1);
constexpr int64_t kBudget = int64_t{16} << 20;  // per worker
// The stalled tensor: 12 MiB on each worker it reaches, of which one 1 MiB chunk is sent.
const Shape kStalledShape = {3 << 20};
constexpr size_t kChunkBytes = 1 << 20;
// How long the calls queued behind a stalled stream may take: the timeout, the checker's period
// and some slack, far under the 30 s the session waits.
const absl::Duration kPrompt = kIdleTimeout + absl::Seconds(3);
// How long a stalled client keeps its stream open at most before it gives up on its own.
constexpr absl::Duration kStallAtMost = absl::Seconds(10);
// The coordinator's --direct_grant_lifetime: a direct upload's plan gives its bytes back soon
// after.
constexpr absl::Duration kGrantLifetime = absl::Seconds(2);
// The coordinator releases a plan's sequences this long after its grants expire
// (DirectUploads::kReleaseMargin).
constexpr absl::Duration kReleaseMargin = absl::Seconds(2);
// A module whose one Linear weight is 12 MiB, Replicate on every worker.
constexpr char kBigLinear[] =
    R"js({"type": "Module", "input": {"dtype": "float32", "shape": [-1, 3072]},
  "children": [{"name": "fc", "type": "Linear", "in_features": 3072, "out_features": 1024,
                "bias": false}]})js";

enum class Stalled { kDistributeTensor, kFromLocal, kPutLocal, kLoadModule, kDirectUpload };

std::string StalledName(Stalled s) {
  switch (s) {
    case Stalled::kDistributeTensor:
      return "DistributeTensor";
    case Stalled::kFromLocal:
      return "FromLocal";
    case Stalled::kPutLocal:
      return "PutLocal";
    case Stalled::kLoadModule:
      return "LoadModule";
    case Stalled::kDirectUpload:
      return "Upload";
  }
  return "?";
}

class StalledStreamTest : public ::testing::TestWithParam<std::tuple<Stalled, FollowUp>> {
 public:
  static void SetUpTestSuite() {
    cluster_ = new testing::TestCluster;
    LocalClusterOptions options = testing::TestClusterOptions(kWorkers);
    options.memory_budget_bytes = kBudget;
    options.stream_idle_timeout = kIdleTimeout;
    options.worker_flags.push_back(
        absl::StrCat("--stream_idle_timeout=", absl::FormatDuration(kIdleTimeout)));
    options.coordinator_flags.push_back(
        absl::StrCat("--direct_grant_lifetime=", absl::FormatDuration(kGrantLifetime)));
    ASSERT_TRUE(cluster_->Start(options).ok());
    ASSERT_TRUE(client::InitDeviceMesh(*cluster_->client, "cpu", {kWorkers}, {}, "line").ok());
    session_ = new std::shared_ptr<Session>(Session::Connect(cluster_->cluster->address()).value());
    line_ = new client::Mesh(client::GetMesh(S(), "line").value());
    channel_ = new std::shared_ptr<grpc::Channel>(
        grpc::CreateChannel(cluster_->cluster->address(), grpc::InsecureChannelCredentials()));
  }
  static void TearDownTestSuite() {
    delete channel_;
    delete line_;
    delete session_;
    cluster_->Stop();
    delete cluster_;
  }

 protected:
  static Session& S() { return **session_; }

  // Opens a stream of kind `s`, sends its header and one chunk, then sends nothing until `done`
  // is notified (or kStallAtMost passes) while the channel stays open; the call's status.
  static absl::Status StallOnce(Stalled s, absl::Notification& done) {
    grpc::ClientContext context;
    context.AddMetadata("tessera-client", S().client_id());
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    const std::string data(kChunkBytes, '\1');
    auto stall_then_finish = [&](auto& writer) {
      done.WaitForNotificationWithTimeout(kStallAtMost);
      writer->WritesDone();
      return FromGrpcStatus(writer->Finish());
    };
    switch (s) {
      case Stalled::kDistributeTensor: {
        v1::TensorInfo info;
        auto writer = v1::DTensorService::NewStub(*channel_)->DistributeTensor(&context, &info);
        v1::DistributeChunk chunk;
        v1::DistributeHeader* h = chunk.mutable_header();
        h->set_mesh("line");
        *h->mutable_placements() = ToProto(std::vector<Placement>{Placement::Replicate()});
        h->set_dtype(v1::FLOAT32);
        *h->mutable_shape() = ToProto(kStalledShape);
        chunk.set_data(data);
        writer->Write(chunk);
        return stall_then_finish(writer);
      }
      case Stalled::kFromLocal: {
        v1::TensorInfo info;
        auto writer = v1::DTensorService::NewStub(*channel_)->FromLocal(&context, &info);
        v1::FromLocalChunk chunk;
        v1::FromLocalHeader* h = chunk.mutable_header();
        h->set_mesh("line");
        *h->mutable_placements() = ToProto(std::vector<Placement>{Placement::Replicate()});
        h->set_dtype(v1::FLOAT32);
        chunk.set_begins_rank(true);
        chunk.set_rank(0);
        *chunk.mutable_local_shape() = ToProto(kStalledShape);
        chunk.set_data(data);
        writer->Write(chunk);
        return stall_then_finish(writer);
      }
      case Stalled::kLoadModule: {
        v1::ModuleInfo info;
        auto writer = v1::ModuleService::NewStub(*channel_)->LoadModule(&context, &info);
        v1::LoadModuleChunk chunk;
        v1::LoadModuleHeader* h = chunk.mutable_header();
        h->set_name("stalled");
        h->set_mesh("line");
        h->set_spec_json(kBigLinear);
        h->set_weights_follow(true);
        v1::WeightsEntry* w = chunk.mutable_weights()->add_tensors();
        w->set_name("fc.weight");
        w->set_dtype(v1::FLOAT32);
        *w->mutable_shape() = ToProto(Shape{1024, 3072});
        chunk.set_data(data);
        writer->Write(chunk);
        return stall_then_finish(writer);
      }
      case Stalled::kDirectUpload: {
        grpc::ClientContext plan_context;
        plan_context.AddMetadata("tessera-client", S().client_id());
        v1::PlanUploadRequest request;
        v1::DistributeHeader* h = request.mutable_header();
        h->set_name("stalled");
        h->set_mesh("line");
        *h->mutable_placements() = ToProto(std::vector<Placement>{Placement::Replicate()});
        h->set_dtype(v1::FLOAT32);
        *h->mutable_shape() = ToProto(kStalledShape);
        v1::UploadPlan plan;
        const grpc::Status planned =
            v1::DTensorService::NewStub(*channel_)->PlanUpload(&plan_context, request, &plan);
        if (!planned.ok()) return FromGrpcStatus(planned);
        const v1::UploadRoute& route = plan.routes(0);
        auto worker = v1::Worker::NewStub(
            grpc::CreateChannel(route.address(), grpc::InsecureChannelCredentials()));
        grpc::ClientContext upload_context;
        upload_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        upload_context.AddMetadata(kGrantMetadataKey, route.grant().SerializeAsString());
        v1::UploadReply reply;
        auto writer = worker->Upload(&upload_context, &reply);
        v1::TensorChunk chunk;
        chunk.set_tensor(route.grant().tensor());
        chunk.set_dtype(route.grant().dtype());
        *chunk.mutable_shape() = route.grant().shape();
        chunk.set_sequence(route.grant().sequence());
        chunk.set_incarnation(route.grant().incarnation());
        chunk.set_data(data);
        writer->Write(chunk);
        return stall_then_finish(writer);
      }
      case Stalled::kPutLocal: {
        v1::PutLocalReply reply;
        auto writer = v1::CollectiveService::NewStub(*channel_)->PutLocal(&context, &reply);
        v1::PutLocalChunk chunk;
        chunk.set_mesh("line");
        chunk.set_rank(1);
        chunk.set_tensor("stalled");
        chunk.set_dtype(v1::FLOAT32);
        *chunk.mutable_shape() = ToProto(kStalledShape);
        chunk.set_data(data);
        writer->Write(chunk);
        return stall_then_finish(writer);
      }
    }
    return absl::InternalError("unknown case");
  }

  static testing::TestCluster* cluster_;
  static std::shared_ptr<Session>* session_;
  static client::Mesh* line_;
  static std::shared_ptr<grpc::Channel>* channel_;
};

testing::TestCluster* StalledStreamTest::cluster_ = nullptr;
std::shared_ptr<Session>* StalledStreamTest::session_ = nullptr;
client::Mesh* StalledStreamTest::line_ = nullptr;
std::shared_ptr<grpc::Channel>* StalledStreamTest::channel_ = nullptr;

TEST_P(StalledStreamTest, EndsWithDeadlineExceededAndReleasesItsWorkersAndBytes) {
  const auto [stalled, follow_up] = GetParam();
  absl::Notification follow_up_done;
  absl::Status stalled_status;
  std::thread holder(
      [&, stalled = stalled] { stalled_status = StallOnce(stalled, follow_up_done); });
  absl::SleepFor(absl::Milliseconds(200));  // the stream has reserved its workers
  const absl::Time start = absl::Now();
  EXPECT_TRUE(RunFollowUp(follow_up, S(), *line_, kWorkers, 7));
  const absl::Duration took = absl::Now() - start;
  follow_up_done.Notify();
  holder.join();
  EXPECT_LT(took, kPrompt) << "the calls behind the stalled stream waited for it"
                           << cluster_->LogHint();
  EXPECT_TRUE(testing::StatusIs(stalled_status, absl::StatusCode::kDeadlineExceeded,
                                {StalledName(stalled), "sent nothing for 1s"}))
      << stalled_status;
  // Its 12 MiB per worker were given back: 8 MiB more fit in each 16 MiB budget (a direct
  // upload's plan gives them back once its grants have expired and its worker cut the upload).
  const absl::Time expired = start + kGrantLifetime + absl::Seconds(5);
  absl::StatusOr<DTensor> big = client::Zeros(S(), *line_, {2 << 20}, {Placement::Replicate()});
  while (!big.ok() && stalled == Stalled::kDirectUpload && absl::Now() < expired) {
    absl::SleepFor(absl::Milliseconds(200));
    big = client::Zeros(S(), *line_, {2 << 20}, {Placement::Replicate()});
  }
  EXPECT_TRUE(big.ok()) << big.status();
  if (big.ok()) {
    EXPECT_TRUE(big->Free().ok());
  }
  EXPECT_TRUE(
      testing::StatusIs(S().GetLocal("line", 1, "stalled").status(), absl::StatusCode::kNotFound));
}

INSTANTIATE_TEST_SUITE_P(
    Streams, StalledStreamTest,
    ::testing::Combine(
        ::testing::Values(Stalled::kDistributeTensor, Stalled::kFromLocal, Stalled::kPutLocal,
                          Stalled::kLoadModule, Stalled::kDirectUpload),
        ::testing::Values(FollowUp::kPutThenGetLocal, FollowUp::kDistributeThenFullTensor)),
    [](const ::testing::TestParamInfo<std::tuple<Stalled, FollowUp>>& info) {
      return StalledName(std::get<0>(info.param)) + "_" + FollowUpName(std::get<1>(info.param));
    });

// A direct upload that sends steadily past its grants' expiry (so its worker says it is held),
// then stalls: its worker cuts it, the coordinator learns so when it asks again (every grant
// lifetime) and drops the plan, and the bytes the plan held are free long before its commit
// deadline (the default 10 minutes).
class StalledAfterGrantTest : public StalledStreamTest {};

TEST_F(StalledAfterGrantTest, ADirectUploadThatStallsAfterItsGrantsExpiredGivesItsBytesBack) {
  grpc::ClientContext plan_context;
  plan_context.AddMetadata("tessera-client", S().client_id());
  v1::PlanUploadRequest request;
  v1::DistributeHeader* h = request.mutable_header();
  h->set_name("stalled_late");
  h->set_mesh("line");
  *h->mutable_placements() = ToProto(std::vector<Placement>{Placement::Replicate()});
  h->set_dtype(v1::FLOAT32);
  *h->mutable_shape() = ToProto(kStalledShape);
  v1::UploadPlan plan;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(
      v1::DTensorService::NewStub(*channel_)->PlanUpload(&plan_context, request, &plan).ok());
  const v1::UploadRoute& route = plan.routes(0);
  auto worker =
      v1::Worker::NewStub(grpc::CreateChannel(route.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext upload_context;
  upload_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  upload_context.AddMetadata(kGrantMetadataKey, route.grant().SerializeAsString());
  v1::UploadReply reply;
  auto writer = worker->Upload(&upload_context, &reply);
  v1::TensorChunk chunk;
  chunk.set_tensor(route.grant().tensor());
  chunk.set_dtype(route.grant().dtype());
  *chunk.mutable_shape() = route.grant().shape();
  chunk.set_sequence(route.grant().sequence());
  chunk.set_incarnation(route.grant().incarnation());
  // 64 KiB every 300 ms (under the 1 s idle limit) until well past the grants' release.
  const absl::Time steady_until = start + kGrantLifetime + kReleaseMargin + absl::Seconds(1);
  while (absl::Now() < steady_until) {
    chunk.set_data(std::string(64 << 10, '\1'));
    ASSERT_TRUE(writer->Write(chunk));
    chunk.clear_tensor();
    chunk.clear_shape();
    absl::SleepFor(absl::Milliseconds(300));
  }
  // Now it stalls, the stream left open: the plan's 12 MiB per worker come back within the idle
  // limit and two grant lifetimes.
  absl::StatusOr<DTensor> big = client::Zeros(S(), *line_, {2 << 20}, {Placement::Replicate()});
  EXPECT_FALSE(big.ok()) << "the plan held no bytes while its upload ran";
  const absl::Time freed_by = absl::Now() + kIdleTimeout + 2 * kGrantLifetime + absl::Seconds(4);
  while (!big.ok() && absl::Now() < freed_by) {
    absl::SleepFor(absl::Milliseconds(200));
    big = client::Zeros(S(), *line_, {2 << 20}, {Placement::Replicate()});
  }
  ASSERT_TRUE(big.ok()) << big.status() << cluster_->LogHint();
  EXPECT_TRUE(big->Free().ok());
  writer->WritesDone();
  EXPECT_TRUE(testing::StatusIs(FromGrpcStatus(writer->Finish()),
                                absl::StatusCode::kDeadlineExceeded, {"sent nothing for 1s"}));
  // Its commit finds nothing.
  grpc::ClientContext commit_context;
  commit_context.AddMetadata("tessera-client", S().client_id());
  v1::CommitUploadRequest commit;
  commit.set_upload_id(plan.upload_id());
  v1::TensorInfo info;
  EXPECT_TRUE(testing::StatusIs(FromGrpcStatus(v1::DTensorService::NewStub(*channel_)->CommitUpload(
                                    &commit_context, commit, &info)),
                                absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace tessera
