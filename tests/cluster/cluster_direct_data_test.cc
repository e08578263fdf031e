// The direct path (client <-> workers under the coordinator's grants: distribute_tensor and
// from_local up, full_tensor and to_local down) on a real local cluster of 4 CPU workers (meshes
// 1-D of 4 and 2x2): bit-exact round trips for every dtype and placement with the path on and off,
// compared with core's simulated mesh; the fallback to the relay; forged, altered, mismatched,
// replayed and expired upload and read grants refused with nothing lost; a client that takes
// routes and vanishes releases its workers' sequences; budget and ownership. Grants live
// kGrantLifetime (the coordinator's --direct_grant_lifetime) so that expiry is quick to test.

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/session_impl.h"
#include "core/sharding/simulated_mesh.h"
#include "grpcpp/grpcpp.h"
#include "kernels/testing/reference.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "tessera/tessera.h"
#include "tessera/v1/dtensor.grpc.pb.h"
#include "tessera/v1/worker.grpc.pb.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/support/placement_product.h"

namespace tessera {
namespace {

using ::tessera::client::DirectData;
using ::tessera::client::DTensor;
using ::tessera::client::Session;
using ::tessera::testing::TensorsMatch;

struct Shared {
  testing::TestCluster cluster;
  std::map<DirectData, std::shared_ptr<Session>> sessions;
  std::map<std::string, client::Mesh> meshes;
};
Shared* shared = nullptr;

constexpr absl::Duration kGrantLifetime = absl::Seconds(3);

std::shared_ptr<Session> Connect(DirectData mode) {
  client::SessionOptions options;
  options.direct_data = mode;
  options.timeout = absl::Seconds(30);
  absl::StatusOr<std::shared_ptr<Session>> s =
      Session::Connect(shared->cluster.cluster->address(), options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : nullptr;
}

class DirectDataEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    shared = new Shared;
    LocalClusterOptions options = testing::TestClusterOptions(4);
    options.memory_budget_bytes = int64_t{64} << 20;
    options.coordinator_flags.push_back(
        absl::StrCat("--direct_grant_lifetime=", absl::FormatDuration(kGrantLifetime)));
    ASSERT_TRUE(shared->cluster.Start(options).ok());
    Session& c = *shared->cluster.client;
    ASSERT_TRUE(client::InitDeviceMesh(c, testing::TestDevice(), {4}, {"x"}, "line").ok());
    ASSERT_TRUE(
        client::InitDeviceMesh(c, testing::TestDevice(), {2, 2}, {"dp", "tp"}, "grid").ok());
    for (DirectData mode : {DirectData::kOn, DirectData::kOff, DirectData::kAuto}) {
      shared->sessions[mode] = Connect(mode);
      ASSERT_NE(shared->sessions[mode], nullptr);
    }
    for (const char* name : {"line", "grid"}) {
      absl::StatusOr<client::Mesh> m = client::GetMesh(c, name);
      ASSERT_TRUE(m.ok()) << m.status();
      shared->meshes.emplace(name, *m);
    }
  }
  void TearDown() override {
    shared->sessions.clear();
    shared->cluster.Stop();
    delete shared;
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new DirectDataEnvironment);

Session& S(DirectData mode) { return *shared->sessions.at(mode); }
const client::Mesh& M(const std::string& name) { return shared->meshes.at(name); }

// Checks that `t` holds `full` as `placements` lay it out on `mesh`: every rank's shard against
// the simulated mesh, and the full tensor, bit for bit.
void ExpectHolds(const DTensor& t, const HostTensor& full, const client::Mesh& mesh,
                 const std::vector<Placement>& placements) {
  const DTensorSpec spec =
      MakeDTensorSpec(mesh.mesh, placements, full.shape(), full.dtype()).value();
  const std::vector<HostTensor> want = SimulatedMesh(mesh.mesh).Distribute(full, spec).value();
  for (int64_t r = 0; r < mesh.mesh.size(); ++r) {
    absl::StatusOr<HostTensor> local = t.ToLocal(r);
    ASSERT_TRUE(local.ok()) << local.status();
    EXPECT_TRUE(TensorsMatch(*local, want[r])) << "rank " << r;
  }
  absl::StatusOr<HostTensor> back = t.FullTensor();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(TensorsMatch(*back, full));
}

// ---------------------------------------------------------------------------------------------
// Round trips: direct on (a failure of the direct path fails the call) and off (relayed), both
// ways: the tensor is written and read back (to_local of every rank, full_tensor with Partial
// values reduced) through the same session.

using RoundTripCase = std::tuple<DirectData, std::string, Shape, DType>;
class DirectRoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(DirectRoundTripTest, EveryPlacementIsBitExact) {
  const auto& [mode, mesh_name, shape, dtype] = GetParam();
  const client::Mesh& mesh = M(mesh_name);
  const HostTensor full = kernels::testing::RandomTensor(dtype, shape, 11);
  std::vector<Placement> options;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) options.push_back(Placement::Shard(d));
  options.push_back(Placement::Replicate());
  options.push_back(Placement::Partial());
  for (const auto& placements : testing::PlacementProduct(options, mesh.mesh.ndim())) {
    SCOPED_TRACE(PlacementsToString(placements));
    for (int64_t src : {int64_t{0}, mesh.mesh.size() - 1}) {
      client::DistributeOptions distribute;
      distribute.src_data_rank = src;
      absl::StatusOr<DTensor> t =
          client::DistributeTensor(S(mode), full, mesh, placements, distribute);
      ASSERT_TRUE(t.ok()) << t.status();
      ExpectHolds(*t, full, mesh, placements);
      ASSERT_TRUE(t->Free().ok());
    }
  }
}

std::string RoundTripName(const ::testing::TestParamInfo<RoundTripCase>& info) {
  const auto& [mode, mesh, shape, dtype] = info.param;
  std::string s =
      absl::StrCat(mode == DirectData::kOn ? "direct_" : "relayed_", mesh, "_", DTypeName(dtype));
  for (int64_t d : shape) absl::StrAppend(&s, "_", d);
  return s;
}

INSTANTIATE_TEST_SUITE_P(DTypesPlacementsMeshes, DirectRoundTripTest,
                         ::testing::Combine(::testing::Values(DirectData::kOn, DirectData::kOff),
                                            ::testing::Values("line", "grid"),
                                            ::testing::Values(Shape{9, 5}, Shape{7}, Shape{0, 3}),
                                            ::testing::ValuesIn(kAllDTypes)),
                         RoundTripName);

// from_local with every rank's local tensor, written in one mode and read back in the other (so
// direct reads of relayed writes and relayed reads of direct writes are both checked).
class DirectFromLocalTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(DirectFromLocalTest, EveryPlacementIsBitExact) {
  const auto& [mode, mesh_name, shape, dtype] = GetParam();
  const DirectData other = mode == DirectData::kOn ? DirectData::kOff : DirectData::kOn;
  const client::Mesh& mesh = M(mesh_name);
  const HostTensor full = kernels::testing::RandomTensor(dtype, shape, 17);
  std::vector<Placement> options;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) options.push_back(Placement::Shard(d));
  options.push_back(Placement::Replicate());
  options.push_back(Placement::Partial());
  for (const auto& placements : testing::PlacementProduct(options, mesh.mesh.ndim())) {
    SCOPED_TRACE(PlacementsToString(placements));
    const DTensorSpec spec = MakeDTensorSpec(mesh.mesh, placements, shape, dtype).value();
    const std::vector<HostTensor> locals = SimulatedMesh(mesh.mesh).Distribute(full, spec).value();
    absl::StatusOr<DTensor> t =
        client::FromLocal(S(mode), locals, mesh, placements, {.shape = shape});
    ASSERT_TRUE(t.ok()) << t.status();
    absl::StatusOr<DTensor> seen = client::GetTensor(S(other), t->name());
    ASSERT_TRUE(seen.ok()) << seen.status();
    ExpectHolds(*seen, full, mesh, placements);
    ASSERT_TRUE(t->Free().ok());
  }
}

INSTANTIATE_TEST_SUITE_P(DTypesPlacementsMeshes, DirectFromLocalTest,
                         ::testing::Combine(::testing::Values(DirectData::kOn, DirectData::kOff),
                                            ::testing::Values("line", "grid"),
                                            ::testing::Values(Shape{9, 5}, Shape{7}),
                                            ::testing::ValuesIn(kAllDTypes)),
                         RoundTripName);

TEST(DirectDataTest, FromLocalRefusesShapesThatDoNotFitAndKeepsNothing) {
  const HostTensor a = kernels::testing::RandomTensor(DType::kFloat32, {2, 3}, 1);
  const HostTensor b = kernels::testing::RandomTensor(DType::kFloat32, {3, 3}, 2);
  std::vector<HostTensor> locals;  // rank 1's block is a row too long
  for (const HostTensor* l : {&a, &b, &a, &a}) locals.push_back(l->Clone());
  absl::StatusOr<DTensor> t = client::FromLocal(S(DirectData::kOn), locals, M("line"),
                                                {Placement::Shard(0)}, {.name = "misfit"});
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  EXPECT_NE(t.status().message().find("rank 1"), std::string::npos) << t.status();
  EXPECT_EQ(client::GetTensor(S(DirectData::kOff), "misfit").status().code(),
            absl::StatusCode::kNotFound);
}

// Several MiB per block: the chunking and the parallel streams, against the relay's result.
TEST(DirectDataTest, LargeTensorsMatchTheRelayedOnes) {
  const HostTensor full = kernels::testing::RandomTensor(DType::kFloat32, {1031, 1027}, 5);
  for (const auto& placements :
       {std::vector<Placement>{Placement::Shard(1), Placement::Shard(0)},
        std::vector<Placement>{Placement::Replicate(), Placement::Shard(1)}}) {
    absl::StatusOr<DTensor> t =
        client::DistributeTensor(S(DirectData::kOn), full, M("grid"), placements);
    ASSERT_TRUE(t.ok()) << t.status();
    ExpectHolds(*t, full, M("grid"), placements);
  }
}

// ---------------------------------------------------------------------------------------------
// Raw calls: a client's plan, its grants and the workers' answers.

class GrantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_ = v1::DTensorService::NewStub(grpc::CreateChannel(
        shared->cluster.cluster->address(), grpc::InsecureChannelCredentials()));
  }

  void Prepare(grpc::ClientContext& context, const std::string& client = "grant-test") {
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    context.AddMetadata("tessera-client", client);
  }

  v1::PlanUploadRequest Request(const std::string& name, const Shape& shape) {
    v1::PlanUploadRequest request;
    v1::DistributeHeader* h = request.mutable_header();
    h->set_name(name);
    h->set_mesh("line");
    *h->mutable_placements() = ToProto(std::vector<Placement>{Placement::Shard(0)});
    h->set_dtype(ToProto(DType::kFloat32));
    *h->mutable_shape() = ToProto(shape);
    return request;
  }

  absl::StatusOr<v1::UploadPlan> Plan(const std::string& name, const Shape& shape) {
    grpc::ClientContext context;
    Prepare(context);
    v1::UploadPlan plan;
    grpc::Status s = coordinator_->PlanUpload(&context, Request(name, shape), &plan);
    if (!s.ok())
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    return plan;
  }

  grpc::Status Commit(const v1::UploadPlan& plan, const std::vector<std::string>& receipts,
                      const std::string& client = "grant-test") {
    grpc::ClientContext context;
    Prepare(context, client);
    v1::CommitUploadRequest request;
    request.set_upload_id(plan.upload_id());
    for (const std::string& r : receipts) request.add_receipts(r);
    v1::TensorInfo info;
    return coordinator_->CommitUpload(&context, request, &info);
  }

  // Uploads `bytes` to `address` as the first chunk `chunk` (header and grant filled from
  // `grant` unless the caller set them) describes; returns the status and the receipt.
  static std::pair<grpc::Status, std::string> Upload(const std::string& address,
                                                     const v1::DirectGrant& grant,
                                                     const std::string& bytes,
                                                     std::string tensor = "") {
    auto stub =
        v1::Worker::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    context.AddMetadata(kGrantMetadataKey, grant.SerializeAsString());
    v1::UploadReply reply;
    auto writer = stub->Upload(&context, &reply);
    v1::TensorChunk chunk;
    chunk.set_tensor(tensor.empty() ? grant.tensor() : tensor);
    chunk.set_dtype(grant.dtype());
    *chunk.mutable_shape() = grant.shape();
    chunk.set_sequence(grant.sequence());
    chunk.set_incarnation(grant.incarnation());
    chunk.set_data(bytes);
    writer->Write(chunk);
    writer->WritesDone();
    grpc::Status s = writer->Finish();
    return {s, reply.receipt()};
  }

  absl::StatusOr<v1::DownloadPlan> PlanRead(const std::string& name, bool full, int64_t rank = 0,
                                            const std::string& client = "grant-test") {
    grpc::ClientContext context;
    Prepare(context, client);
    v1::PlanDownloadRequest request;
    request.set_name(name);
    request.set_full(full);
    request.set_rank(rank);
    v1::DownloadPlan plan;
    grpc::Status s = coordinator_->PlanDownload(&context, request, &plan);
    if (!s.ok())
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    return plan;
  }

  grpc::Status ReleaseRead(const v1::DownloadPlan& plan, const std::string& client = "grant-test") {
    grpc::ClientContext context;
    Prepare(context, client);
    v1::ReleaseDownloadRequest request;
    request.set_download_id(plan.download_id());
    v1::ReleaseDownloadReply reply;
    return coordinator_->ReleaseDownload(&context, request, &reply);
  }

  // Downloads the block `grant` admits from `address` (as `tensor` if set); the status and bytes.
  static std::pair<grpc::Status, std::string> Download(const std::string& address,
                                                       const v1::DirectGrant& grant,
                                                       std::string tensor = "") {
    auto stub =
        v1::Worker::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    v1::DownloadRequest request;
    request.set_tensor(tensor.empty() ? grant.tensor() : tensor);
    request.set_sequence(grant.sequence());
    request.set_incarnation(grant.incarnation());
    *request.mutable_grant() = grant;
    auto reader = stub->Download(&context, request);
    std::string bytes;
    v1::TensorChunk chunk;
    while (reader->Read(&chunk)) bytes += chunk.data();
    grpc::Status s = reader->Finish();
    return {s, bytes};
  }

  // The bytes of block `i` of an {8} float32 tensor of values 0..7 split over 4 ranks.
  static std::string BlockBytes(int i) {
    const float v[2] = {static_cast<float>(2 * i), static_cast<float>(2 * i + 1)};
    return std::string(reinterpret_cast<const char*>(v), sizeof(v));
  }

  static HostTensor Iota8() {
    return HostTensor::FromValues<float>(DType::kFloat32, {8}, {0, 1, 2, 3, 4, 5, 6, 7});
  }

  std::unique_ptr<v1::DTensorService::Stub> coordinator_;
};

TEST_F(GrantTest, ForgedAlteredMismatchedAndReplayedGrantsAreRefusedAndLoseNothing) {
  absl::StatusOr<v1::UploadPlan> plan = Plan("granted", {8});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->routes_size(), 4);
  // Not visible before its commit.
  EXPECT_EQ(client::GetTensor(S(DirectData::kOff), "granted").status().code(),
            absl::StatusCode::kNotFound);
  const v1::UploadRoute& r0 = plan->routes(0);
  v1::DirectGrant forged = r0.grant();
  forged.mutable_mac()->at(0) ^= 1;
  EXPECT_EQ(Upload(r0.address(), forged, BlockBytes(0)).first.error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::DirectGrant bigger = r0.grant();  // more bytes than granted, under the old mac
  bigger.mutable_shape()->set_dims(0, 3);
  EXPECT_EQ(Upload(r0.address(), bigger, BlockBytes(0) + "abcd").first.error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::DirectGrant later = r0.grant();  // a longer life, under the old mac
  later.set_expires_unix_ms(later.expires_unix_ms() + 3600 * 1000);
  EXPECT_EQ(Upload(r0.address(), later, BlockBytes(0)).first.error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  const grpc::Status renamed =
      Upload(r0.address(), r0.grant(), BlockBytes(0), "dt/elsewhere").first;
  EXPECT_EQ(renamed.error_code(), grpc::StatusCode::PERMISSION_DENIED) << renamed.error_message();
  // Another worker's grant, sent to this one.
  if (plan->routes(1).address() != r0.address()) {
    EXPECT_EQ(Upload(r0.address(), plan->routes(1).grant(), BlockBytes(1)).first.error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }

  std::vector<std::string> receipts;
  for (int i = 0; i < 4; ++i) {
    const auto [status, receipt] =
        Upload(plan->routes(i).address(), plan->routes(i).grant(), BlockBytes(i));
    ASSERT_TRUE(status.ok()) << "block " << i << ": " << status.error_message();
    receipts.push_back(receipt);
  }
  const grpc::Status replay = Upload(r0.address(), r0.grant(), BlockBytes(3)).first;
  EXPECT_EQ(replay.error_code(), grpc::StatusCode::PERMISSION_DENIED) << replay.error_message();
  // Another client cannot commit it.
  EXPECT_EQ(Commit(*plan, receipts, "someone-else").error_code(), grpc::StatusCode::NOT_FOUND);
  const grpc::Status committed = Commit(*plan, receipts);
  ASSERT_TRUE(committed.ok()) << committed.error_message();
  absl::StatusOr<DTensor> t = client::GetTensor(S(DirectData::kOff), "granted");
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<HostTensor> back = t->FullTensor();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(TensorsMatch(*back, Iota8()));
}

// A host that floods a worker with forged grants (far past the limiter's burst) costs other
// clients of the same host nothing: their direct puts, with the path required on, go straight
// through meanwhile (the limiter used to refuse every grant from the host once the forged ones
// had used up its failures, valid ones included).
TEST_F(GrantTest, ForgedGrantsFromAHostNeverRefuseItsValidOnes) {
  absl::StatusOr<v1::UploadPlan> plan = Plan("forgery-source", {8});
  ASSERT_TRUE(plan.ok()) << plan.status();
  v1::DirectGrant forged = plan->routes(0).grant();
  forged.mutable_mac()->at(0) ^= 1;
  int refused = 0, limited = 0;
  for (int i = 0; i < 200; ++i) {
    const grpc::StatusCode code =
        Upload(plan->routes(0).address(), forged, BlockBytes(0)).first.error_code();
    refused += code == grpc::StatusCode::PERMISSION_DENIED ? 1 : 0;
    limited += code == grpc::StatusCode::RESOURCE_EXHAUSTED ? 1 : 0;
  }
  EXPECT_EQ(refused + limited, 200);
  EXPECT_GT(limited, 0);
  for (int i = 0; i < 3; ++i) {
    const HostTensor full = kernels::testing::RandomTensor(DType::kFloat32, {8, 5}, 40 + i);
    absl::StatusOr<DTensor> t =
        client::DistributeTensor(S(DirectData::kOn), full, M("line"), {Placement::Shard(0)});
    ASSERT_TRUE(t.ok()) << t.status();
    ExpectHolds(*t, full, M("line"), {Placement::Shard(0)});
  }
  grpc::ClientContext context;
  Prepare(context);
  v1::CommitUploadRequest abort;
  abort.set_upload_id(plan->upload_id());
  abort.set_abort(true);
  v1::TensorInfo ignored;
  EXPECT_TRUE(coordinator_->CommitUpload(&context, abort, &ignored).ok());
}

TEST_F(GrantTest, AWrongReceiptDropsThePlanAndNothingBecomesVisible) {
  absl::StatusOr<v1::UploadPlan> plan = Plan("unreceipted", {8});
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::string> receipts;
  for (int i = 0; i < 4; ++i) {
    const auto [status, receipt] =
        Upload(plan->routes(i).address(), plan->routes(i).grant(), BlockBytes(i));
    ASSERT_TRUE(status.ok()) << status.error_message();
    receipts.push_back(receipt);
  }
  receipts[2][0] ^= 1;
  EXPECT_EQ(Commit(*plan, receipts).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(client::GetTensor(S(DirectData::kOff), "unreceipted").status().code(),
            absl::StatusCode::kNotFound);
  receipts[2][0] ^= 1;  // the plan is gone: the right receipts no longer commit it
  EXPECT_EQ(Commit(*plan, receipts).error_code(), grpc::StatusCode::NOT_FOUND);
  // The name is free again.
  absl::StatusOr<DTensor> t = client::DistributeTensor(
      S(DirectData::kOn), Iota8(), M("line"), {Placement::Shard(0)}, {.name = "unreceipted"});
  ASSERT_TRUE(t.ok()) << t.status();
  ExpectHolds(*t, Iota8(), M("line"), {Placement::Shard(0)});
}

TEST_F(GrantTest, AVanishedClientReleasesItsSequencesAndItsGrantsExpire) {
  absl::StatusOr<v1::UploadPlan> plan = Plan("vanished", {8});
  ASSERT_TRUE(plan.ok()) << plan.status();
  // The client takes its routes and never uploads. Work ordered after its sequences on the same
  // workers waits only until they are released (the grants' life and a margin).
  const absl::Time start = absl::Now();
  const HostTensor full = kernels::testing::RandomTensor(DType::kFloat32, {6, 4}, 3);
  absl::StatusOr<DTensor> after =
      client::DistributeTensor(S(DirectData::kOff), full, M("line"), {Placement::Shard(0)});
  ASSERT_TRUE(after.ok()) << after.status();
  ExpectHolds(*after, full, M("line"), {Placement::Shard(0)});
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  // The grant has expired by now (the later work ran only once it had).
  const grpc::Status late =
      Upload(plan->routes(0).address(), plan->routes(0).grant(), BlockBytes(0)).first;
  EXPECT_EQ(late.error_code(), grpc::StatusCode::PERMISSION_DENIED) << late.error_message();
  EXPECT_EQ(client::GetTensor(S(DirectData::kOff), "vanished").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Commit(*plan, std::vector<std::string>(4)).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(GrantTest, ReadGrantsForgedAlteredMismatchedReplayedOrForUploadsAreRefused) {
  absl::StatusOr<DTensor> t = client::DistributeTensor(S(DirectData::kOff), Iota8(), M("line"),
                                                       {Placement::Shard(0)}, {.name = "readable"});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->Synchronize().ok());
  absl::StatusOr<v1::DownloadPlan> plan = PlanRead("readable", /*full=*/true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->routes_size(), 4);
  EXPECT_EQ(plan->shape().dims_size(), 1);
  const v1::UploadRoute& r0 = plan->routes(0);
  EXPECT_TRUE(r0.grant().read());
  v1::DirectGrant forged = r0.grant();
  forged.mutable_mac()->at(0) ^= 1;
  EXPECT_EQ(Download(r0.address(), forged).first.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  v1::DirectGrant other_tensor = r0.grant();  // another tensor, under the old mac
  other_tensor.set_tensor("dt/elsewhere");
  EXPECT_EQ(Download(r0.address(), other_tensor).first.error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::DirectGrant later = r0.grant();  // a longer life, under the old mac
  later.set_expires_unix_ms(later.expires_unix_ms() + 3600 * 1000);
  EXPECT_EQ(Download(r0.address(), later).first.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  v1::DirectGrant as_upload = r0.grant();  // a read grant turned into an upload's
  as_upload.set_read(false);
  EXPECT_EQ(Upload(r0.address(), as_upload, BlockBytes(0)).first.error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Upload(r0.address(), r0.grant(), BlockBytes(0)).first.error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  const grpc::Status renamed = Download(r0.address(), r0.grant(), "dt/elsewhere").first;
  EXPECT_EQ(renamed.error_code(), grpc::StatusCode::PERMISSION_DENIED) << renamed.error_message();
  if (plan->routes(1).address() != r0.address()) {
    EXPECT_EQ(Download(r0.address(), plan->routes(1).grant()).first.error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  // An upload's grant does not admit a read.
  absl::StatusOr<v1::UploadPlan> upload = Plan("never-read", {8});
  ASSERT_TRUE(upload.ok()) << upload.status();
  EXPECT_EQ(Download(upload->routes(0).address(), upload->routes(0).grant()).first.error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  grpc::ClientContext context;
  Prepare(context);
  v1::CommitUploadRequest abort;
  abort.set_upload_id(upload->upload_id());
  abort.set_abort(true);
  v1::TensorInfo ignored;
  ASSERT_TRUE(coordinator_->CommitUpload(&context, abort, &ignored).ok());

  // The real grants read every block, at its offset.
  for (int i = 0; i < 4; ++i) {
    const auto [status, bytes] = Download(plan->routes(i).address(), plan->routes(i).grant());
    ASSERT_TRUE(status.ok()) << "block " << i << ": " << status.error_message();
    EXPECT_EQ(plan->routes(i).offset(0), 2 * i);
    EXPECT_EQ(bytes, BlockBytes(i)) << "block " << i;
  }
  const grpc::Status replay = Download(r0.address(), r0.grant()).first;
  EXPECT_EQ(replay.error_code(), grpc::StatusCode::PERMISSION_DENIED) << replay.error_message();
  // Nothing was lost: the tensor reads back whole both ways.
  for (DirectData mode : {DirectData::kOn, DirectData::kOff}) {
    absl::StatusOr<DTensor> again = client::GetTensor(S(mode), "readable");
    ASSERT_TRUE(again.ok()) << again.status();
    ExpectHolds(*again, Iota8(), M("line"), {Placement::Shard(0)});
  }
  ASSERT_TRUE(t->Free().ok());
}

TEST_F(GrantTest, ReadPlansCheckTheirTensorAndRank) {
  EXPECT_EQ(PlanRead("no-such-tensor", true).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<DTensor> t = client::DistributeTensor(S(DirectData::kOff), Iota8(), M("line"),
                                                       {Placement::Shard(0)}, {.name = "ranked"});
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<v1::DownloadPlan> bad = PlanRead("ranked", false, 4);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_NE(bad.status().message().find("rank 4"), std::string::npos) << bad.status();
  absl::StatusOr<v1::DownloadPlan> local = PlanRead("ranked", false, 2);
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_EQ(local->routes_size(), 1);
  const auto [status, bytes] = Download(local->routes(0).address(), local->routes(0).grant());
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(bytes, BlockBytes(2));
  // Another client cannot release a plan; its own can, once.
  EXPECT_EQ(ReleaseRead(*local, "someone-else").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(ReleaseRead(*local).ok());
  EXPECT_EQ(ReleaseRead(*local).error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(t->Free().ok());
}

TEST_F(GrantTest, UnusedReadsAreReleasedAtExpiryOrAtOnceAndTheirGrantsRefused) {
  absl::StatusOr<DTensor> t = client::DistributeTensor(S(DirectData::kOff), Iota8(), M("line"),
                                                       {Placement::Shard(0)}, {.name = "unread"});
  ASSERT_TRUE(t.ok()) << t.status();
  // A client that plans a read and vanishes: later work waits only for the grants' life.
  absl::StatusOr<v1::DownloadPlan> vanished = PlanRead("unread", true);
  ASSERT_TRUE(vanished.ok()) << vanished.status();
  absl::Time start = absl::Now();
  absl::StatusOr<HostTensor> after = t->FullTensor();  // relayed: ordered behind the plan
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(TensorsMatch(*after, Iota8()));
  EXPECT_LT(absl::Now() - start, kGrantLifetime + absl::Seconds(2 + 5));
  const grpc::Status expired =
      Download(vanished->routes(0).address(), vanished->routes(0).grant()).first;
  EXPECT_EQ(expired.error_code(), grpc::StatusCode::PERMISSION_DENIED) << expired.error_message();

  // A plan given up is released at once; its grants are refused afterwards.
  absl::StatusOr<v1::DownloadPlan> given_up = PlanRead("unread", true);
  ASSERT_TRUE(given_up.ok()) << given_up.status();
  ASSERT_TRUE(ReleaseRead(*given_up).ok());
  start = absl::Now();
  after = t->FullTensor();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(TensorsMatch(*after, Iota8()));
  EXPECT_LT(absl::Now() - start, kGrantLifetime);
  const grpc::Status released =
      Download(given_up->routes(0).address(), given_up->routes(0).grant()).first;
  EXPECT_EQ(released.error_code(), grpc::StatusCode::PERMISSION_DENIED) << released.error_message();
  ASSERT_TRUE(t->Free().ok());
}

TEST_F(GrantTest, PlansKeepTheRelayedBudgetAndNameRules) {
  absl::StatusOr<v1::UploadPlan> huge = Plan("huge", {int64_t{1} << 30});
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  absl::StatusOr<v1::UploadPlan> first = Plan("taken", {8});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(Plan("taken", {8}).status().code(), absl::StatusCode::kAlreadyExists);
  grpc::ClientContext context;
  Prepare(context);
  v1::CommitUploadRequest abort;
  abort.set_upload_id(first->upload_id());
  abort.set_abort(true);
  v1::TensorInfo ignored;
  ASSERT_TRUE(coordinator_->CommitUpload(&context, abort, &ignored).ok());
  // Aborted: the name is free and the workers' order goes on at once.
  const absl::Time start = absl::Now();
  absl::StatusOr<DTensor> t = client::DistributeTensor(S(DirectData::kOn), Iota8(), M("line"),
                                                       {Placement::Shard(0)}, {.name = "taken"});
  ASSERT_TRUE(t.ok()) << t.status();
  ExpectHolds(*t, Iota8(), M("line"), {Placement::Shard(0)});
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// ---------------------------------------------------------------------------------------------
// The fallback: a worker the client cannot reach.

TEST(DirectDataFallbackTest, AutoRelaysWhenAWorkerCannotBeReachedAndOnFails) {
  absl::StatusOr<std::vector<client::WorkerInfo>> workers = S(DirectData::kAuto).ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  std::string address;
  for (const client::WorkerInfo& w : *workers) {
    if (w.worker_id == M("line").mesh.ranks()[1]) address = w.address;
  }
  ASSERT_FALSE(address.empty());
  // Sessions of this test's own: what they remember of the address ends with them.
  std::map<DirectData, std::shared_ptr<Session>> own;
  for (DirectData mode : {DirectData::kAuto, DirectData::kOn}) {
    own[mode] = Connect(mode);
    ASSERT_NE(own[mode], nullptr);
    client::internal_impl(*own[mode]).workers.MarkUnreachable(address);
  }
  const HostTensor full = kernels::testing::RandomTensor(DType::kInt32, {10, 3}, 9);
  const absl::Time start = absl::Now();
  absl::StatusOr<DTensor> relayed =
      client::DistributeTensor(*own[DirectData::kAuto], full, M("line"), {Placement::Shard(0)});
  ASSERT_TRUE(relayed.ok()) << relayed.status();
  ExpectHolds(*relayed, full, M("line"), {Placement::Shard(0)});
  absl::StatusOr<DTensor> refused =
      client::DistributeTensor(*own[DirectData::kOn], full, M("line"), {Placement::Shard(0)});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  // Reads: direct on fails, and gives its plan up at once so that nothing waits for it.
  absl::StatusOr<DTensor> seen = client::GetTensor(*own[DirectData::kOn], relayed->name());
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->FullTensor().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(seen->ToLocal(1).status().code(), absl::StatusCode::kUnavailable);
  absl::StatusOr<HostTensor> local0 = seen->ToLocal(0);  // a worker it can reach
  ASSERT_TRUE(local0.ok()) << local0.status();
  // The abandoned plans released their sequences at once: nothing waited for the grants' life.
  absl::StatusOr<DTensor> after =
      client::DistributeTensor(S(DirectData::kOff), full, M("line"), {Placement::Shard(1)});
  ASSERT_TRUE(after.ok()) << after.status();
  ExpectHolds(*after, full, M("line"), {Placement::Shard(1)});
  EXPECT_LT(absl::Now() - start, absl::Seconds(8));
}

}  // namespace
}  // namespace tessera
