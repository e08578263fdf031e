// A flood of streams that never send a byte, from the cluster's own host on plaintext (no
// credential needed to open one): a thousand at the coordinator (OpStream, CollectiveStream,
// LoadModule, DistributeTensor) and hundreds at a worker (CommandStream and Upload without a
// credential, Upload with a forged grant). The coordinator admits at most --max_streams_per_peer
// of one host's and refuses the rest at once with RESOURCE_EXHAUSTED; those admitted that wait for
// a message (LoadModule, DistributeTensor) are cut after --stream_idle_timeout; the worker refuses
// every one before it reads a byte. Meanwhile the daemons' own traffic keeps threads of its own:
// for twice the time a worker may miss heartbeats no worker is declared dead or restarts, unary
// calls are answered, and once the flood ends streams work again and every tensor reads back.
// (A thousand idle streams used to take every thread of the coordinator's and a worker's server:
// every call answered "Server Threadpool Exhausted", and the workers later lost their shards.)

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "kernels/testing/reference.h"
#include "proto/grpc_status.h"
#include "tessera/v1/collective.grpc.pb.h"
#include "tessera/v1/dtensor.grpc.pb.h"
#include "tessera/v1/module.grpc.pb.h"
#include "tessera/v1/worker.grpc.pb.h"
#include "tests/cluster/cluster_fixture.h"

namespace tessera {
namespace {

using ::tessera::testing::TensorsMatch;

constexpr int kPerPeer = 64;  // --max_streams_per_peer of both daemons
constexpr absl::Duration kIdle = absl::Seconds(2);

// One idle stream: its call, and a way to end it and read its status.
struct IdleStream {
  std::unique_ptr<grpc::ClientContext> context = std::make_unique<grpc::ClientContext>();
  std::function<grpc::Status()> finish;
};

// A channel of its own (a connection apart from the others) to `address`.
std::shared_ptr<grpc::Channel> OwnChannel(const std::string& address, int i) {
  grpc::ChannelArguments args;
  args.SetInt("tessera.test.channel", i);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// Opens a stream of kind `kind` (0..3: OpStream, CollectiveStream, LoadModule, DistributeTensor)
// on `channel` and sends nothing on it.
IdleStream OpenAtCoordinator(const std::shared_ptr<grpc::Channel>& channel, int kind) {
  IdleStream s;
  s.context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  switch (kind) {
    case 0: {
      std::shared_ptr<grpc::ClientReaderWriter<v1::StreamCalls, v1::StreamResults>> stream =
          v1::DTensorService::NewStub(channel)->OpStream(s.context.get());
      s.finish = [stream] {
        stream->WritesDone();
        return stream->Finish();
      };
      break;
    }
    case 1: {
      std::shared_ptr<grpc::ClientReaderWriter<v1::CollectiveRequest, v1::CollectiveResult>>
          stream = v1::CollectiveService::NewStub(channel)->CollectiveStream(s.context.get());
      s.finish = [stream] {
        stream->WritesDone();
        return stream->Finish();
      };
      break;
    }
    case 2: {
      auto reply = std::make_shared<v1::ModuleInfo>();
      std::shared_ptr<grpc::ClientWriter<v1::LoadModuleChunk>> stream =
          v1::ModuleService::NewStub(channel)->LoadModule(s.context.get(), reply.get());
      s.finish = [stream, reply] {
        stream->WritesDone();
        return stream->Finish();
      };
      break;
    }
    default: {
      auto reply = std::make_shared<v1::TensorInfo>();
      std::shared_ptr<grpc::ClientWriter<v1::DistributeChunk>> stream =
          v1::DTensorService::NewStub(channel)->DistributeTensor(s.context.get(), reply.get());
      s.finish = [stream, reply] {
        stream->WritesDone();
        return stream->Finish();
      };
      break;
    }
  }
  return s;
}

// Opens a stream at a worker (0: CommandStream, 1: Upload, both without a credential; 2: Upload
// with a forged grant) and sends nothing on it.
IdleStream OpenAtWorker(const std::shared_ptr<grpc::Channel>& channel, int kind) {
  IdleStream s;
  s.context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  if (kind == 0) {
    std::shared_ptr<grpc::ClientReaderWriter<v1::CommandBatch, v1::CommandBatchReply>> stream =
        v1::Worker::NewStub(channel)->CommandStream(s.context.get());
    s.finish = [stream] {
      stream->WritesDone();
      return stream->Finish();
    };
    return s;
  }
  if (kind == 2) {
    v1::DirectGrant forged;
    forged.set_worker_id(0);
    forged.set_sequence(1);
    forged.set_mac(std::string(32, 'x'));
    s.context->AddMetadata(kGrantMetadataKey, forged.SerializeAsString());
  }
  auto reply = std::make_shared<v1::UploadReply>();
  std::shared_ptr<grpc::ClientWriter<v1::TensorChunk>> stream =
      v1::Worker::NewStub(channel)->Upload(s.context.get(), reply.get());
  s.finish = [stream, reply] {
    stream->WritesDone();
    return stream->Finish();
  };
  return s;
}

TEST(IdleStreamFlood, TakesOnlyItsHostsShareAndTheDaemonsGoOn) {
  testing::TestCluster cluster;
  LocalClusterOptions options = testing::TestClusterOptions(2);
  options.stream_idle_timeout = kIdle;
  for (std::vector<std::string>* flags : {&options.coordinator_flags, &options.worker_flags}) {
    *flags = {"--max_rpc_threads=256", "--max_streams=128",
              absl::StrCat("--max_streams_per_peer=", kPerPeer)};
  }
  options.worker_flags.push_back(
      absl::StrCat("--stream_idle_timeout=", absl::FormatDuration(kIdle)));
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.LogHint();
  client::Session& s = *cluster.client;
  ASSERT_TRUE(client::InitDeviceMesh(s, testing::TestDevice(), {2}, {"x"}, "pair").ok());
  const client::Mesh pair = client::GetMesh(s, "pair").value();
  const HostTensor kept = kernels::testing::RandomTensor(DType::kFloat32, {8, 5}, 3);
  absl::StatusOr<client::DTensor> t =
      client::DistributeTensor(s, kept, pair, {Placement::Shard(0)});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(testing::AllWritten(s));
  const std::vector<client::WorkerInfo> before = s.ListWorkers().value();

  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < 8; ++i) channels.push_back(OwnChannel(cluster.cluster->address(), i));
  auto worker_channel = OwnChannel(before[0].address, 100);
  std::vector<IdleStream> at_coordinator, at_worker;
  for (int i = 0; i < 1000; ++i)
    at_coordinator.push_back(OpenAtCoordinator(channels[i % 8], i % 4));
  for (int i = 0; i < 300; ++i) at_worker.push_back(OpenAtWorker(worker_channel, i % 3));

  // The cluster's own traffic, for twice the time a worker may go without heartbeats (2 s).
  const absl::Time end = absl::Now() + absl::Seconds(4);
  int calls = 0;
  while (absl::Now() < end) {
    absl::StatusOr<std::vector<client::WorkerInfo>> workers = s.ListWorkers();
    ASSERT_TRUE(workers.ok()) << workers.status();
    for (size_t i = 0; i < workers->size(); ++i) {
      EXPECT_TRUE((*workers)[i].alive) << "worker " << i;
      EXPECT_EQ((*workers)[i].incarnation, before[i].incarnation) << "worker " << i;
    }
    absl::StatusOr<client::DTensor> zeros =
        client::Zeros(s, pair, {4, 4}, {Placement::Replicate()});
    ASSERT_TRUE(zeros.ok()) << zeros.status();
    ASSERT_TRUE(client::GetTensor(s, t->name()).ok());
    ++calls;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_GT(calls, 10);

  std::map<grpc::StatusCode, int> codes;
  for (IdleStream& stream : at_coordinator) {
    ++codes[stream.finish().error_code()];
  }
  // At most the host's share was admitted; the rest refused at once.
  EXPECT_GE(codes[grpc::StatusCode::RESOURCE_EXHAUSTED], 1000 - kPerPeer);
  // The admitted LoadModule and DistributeTensor streams were cut for sending nothing.
  EXPECT_GT(codes[grpc::StatusCode::DEADLINE_EXCEEDED], 0);
  std::map<grpc::StatusCode, int> worker_codes;
  for (IdleStream& stream : at_worker) {
    ++worker_codes[stream.finish().error_code()];
  }
  // Every one refused before a byte was read: no credential, or a grant that does not check out
  // (past a burst of such failures, RESOURCE_EXHAUSTED).
  EXPECT_GT(worker_codes[grpc::StatusCode::PERMISSION_DENIED], 0);
  EXPECT_EQ(worker_codes[grpc::StatusCode::PERMISSION_DENIED] +
                worker_codes[grpc::StatusCode::RESOURCE_EXHAUSTED],
            300);

  const std::vector<client::WorkerInfo> after = s.ListWorkers().value();
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].incarnation, before[i].incarnation) << "worker " << i;
  }
  absl::StatusOr<HostTensor> got = t->FullTensor();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(TensorsMatch(*got, kept));
  const HostTensor fresh = kernels::testing::RandomTensor(DType::kFloat32, {6, 3}, 9);
  absl::StatusOr<client::DTensor> again =
      client::DistributeTensor(s, fresh, pair, {Placement::Shard(1)});
  ASSERT_TRUE(again.ok()) << again.status();
  absl::StatusOr<HostTensor> back = again->FullTensor();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(TensorsMatch(*back, fresh));
  cluster.Stop();
}

}  // namespace
}  // namespace tessera
