// A fake tessera-worker for the coordinator's unit tests: a real gRPC server in this process that
// implements tessera.v1.Worker, records every command, batch, sequence and stream it receives, can
// be told to fail, delay or hang commands, and keeps uploaded tensors in memory (and serves
// downloads from there). Registered with a real WorkerRegistry, the dispatcher and the shard
// streams address it exactly as they address a real worker.
#ifndef TESSERA_TESTS_FAKE_WORKER_H_
#define TESSERA_TESTS_FAKE_WORKER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "grpcpp/grpcpp.h"
#include "server/cluster/dispatcher.h"
#include "server/cluster/worker_registry.h"
#include "tessera/v1/worker.grpc.pb.h"

namespace tessera::testing {

// A cheap command the fake tells apart by `label`: a DeleteTensors of that one name.
v1::Command LabeledCommand(const std::string& label);
// The label of a command made by LabeledCommand; "" for any other command.
std::string LabelOf(const v1::Command& command);

// Which commands a rule applies to.
using CommandMatcher = std::function<bool(const v1::Command&)>;
// Commands labelled `label`.
CommandMatcher HasLabel(std::string label);
// Every command.
CommandMatcher AnyCommand();

// A tensor the fake holds: what an upload declared and the bytes it carried.
struct FakeTensor {
  DType dtype = DType::kFloat32;
  Shape shape;
  std::string bytes;
};

// One Upload stream as it arrived.
struct ReceivedUpload {
  v1::TensorChunk header;           // the first chunk, without its data
  std::vector<size_t> chunk_sizes;  // data bytes of every chunk, in order
  std::string bytes;                // all data, in order
  bool complete = false;            // ended by the client with every byte of the shape
};

class FakeWorker final : public v1::Worker::Service {
 public:
  // Serves on a free port of 127.0.0.1.
  static std::unique_ptr<FakeWorker> Start();
  // Stops serving first (held commands are let go).
  ~FakeWorker() override;

  // "127.0.0.1:PORT".
  const std::string& address() const { return address_; }
  // Registers with `registry` as tessera-worker does when it starts; returns the id and
  // incarnation the registry gave.
  v1::RegisterReply RegisterWith(WorkerRegistry& registry, const std::string& device = "cpu");
  // Stops serving: calls to address() fail as calls to a dead worker do (a batch running on a
  // CommandStream ends it UNAVAILABLE, unanswered). Idempotent.
  void Stop();
  // Forgets every record, tensor and rule.
  void Reset();
  // Ends every open CommandStream from the worker's side, as a broken connection would.
  void BreakStreams();

  // What a command's reply carries, so a test can tell which worker and command it came from:
  // one LocalTensorInfo named "<address> <label>".
  std::string ReplyName(const std::string& label) const { return address_ + " " + label; }

  // Matching commands fail with `status`. Of all rules added, the first that matches applies.
  void FailCommands(CommandMatcher match, absl::Status status);
  // Matching commands are refused before their turn with `status`, as a real worker refuses a
  // caller or an incarnation it does not accept: their sequences are not spent (not_admitted).
  void RefuseCommands(CommandMatcher match, absl::Status status);
  // Matching commands are answered `delay` after they arrive.
  void DelayCommands(CommandMatcher match, absl::Duration delay);
  // Matching commands are held until ReleaseHeld(), the call is cancelled, or the fake stops.
  void HoldCommands(CommandMatcher match);
  // Lets every held command go and drops the hold rules.
  void ReleaseHeld();
  // Every Upload and Download fails with `status` (OK: they work again), after the fake recorded
  // the upload's first chunk or the download request.
  void FailTransfers(absl::Status status);
  // Downloads are sent in chunks of at most `bytes` data bytes (default 1 MiB).
  void SetDownloadChunkBytes(size_t bytes);
  // Stores `tensor` as `name`, to be downloaded (its bytes need not match its shape).
  void Put(const std::string& name, FakeTensor tensor);

  // Every batch of a CommandStream or ExecuteBatch (and Execute, as a batch of one), in arrival
  // order.
  std::vector<std::vector<v1::Command>> batches() const;
  // The commands of batches(), in order.
  std::vector<v1::Command> commands() const;
  // Every Upload stream, in arrival order.
  std::vector<ReceivedUpload> uploads() const;
  // Every Download request, in arrival order.
  std::vector<v1::DownloadRequest> downloads() const;
  // Every Release request (sequences the coordinator will not use), in arrival order.
  std::vector<v1::ReleaseRequest> release_requests() const;
  // The cluster secret every call carried, in arrival order.
  std::vector<std::string> secrets() const;
  // CommandStream calls opened since the last Reset.
  int64_t streams_opened() const;
  // The tensor stored as `name`, if any.
  std::optional<FakeTensor> tensor(const std::string& name) const;
  // Waits until `n` commands have arrived (counting held ones); false if `timeout` passes first.
  bool WaitForCommands(size_t n, absl::Duration timeout = absl::Seconds(10)) const;

  grpc::Status Execute(grpc::ServerContext* context, const v1::Command* command,
                       v1::CommandReply* reply) override;
  grpc::Status ExecuteBatch(grpc::ServerContext* context, const v1::CommandBatch* batch,
                            v1::CommandBatchReply* reply) override;
  // Runs each batch as ExecuteBatch does; once stopped, fails UNAVAILABLE as a dead worker's would.
  grpc::Status CommandStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CommandBatchReply, v1::CommandBatch>* stream) override;
  grpc::Status Upload(grpc::ServerContext* context, grpc::ServerReader<v1::TensorChunk>* reader,
                      v1::UploadReply* reply) override;
  grpc::Status Release(grpc::ServerContext* context, const v1::ReleaseRequest* request,
                       v1::ReleaseReply* reply) override;
  grpc::Status Download(grpc::ServerContext* context, const v1::DownloadRequest* request,
                        grpc::ServerWriter<v1::TensorChunk>* writer) override;

 private:
  enum class Action { kFail, kRefuse, kDelay, kHold };
  struct Rule {
    CommandMatcher match;
    Action action;
    absl::Status status;
    absl::Duration delay;
  };

  FakeWorker() = default;
  void RecordSecret(const grpc::ServerContext& context) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the first matching rule to `command` and returns its outcome.
  v1::CommandResult Run(const grpc::ServerContext& context, const v1::Command& command);

  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // CommandStreams open now, and whether each is running a batch.
  std::map<grpc::ServerContext*, bool> streams_ ABSL_GUARDED_BY(mu_);
  int64_t streams_opened_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t releases_ ABSL_GUARDED_BY(mu_) = 0;  // ReleaseHeld() calls so far
  std::vector<Rule> rules_ ABSL_GUARDED_BY(mu_);
  absl::Status transfer_failure_ ABSL_GUARDED_BY(mu_);
  size_t download_chunk_bytes_ ABSL_GUARDED_BY(mu_) = size_t{1} << 20;
  std::map<std::string, FakeTensor> tensors_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<v1::Command>> batches_ ABSL_GUARDED_BY(mu_);
  size_t commands_received_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<ReceivedUpload> uploads_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::DownloadRequest> downloads_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReleaseRequest> release_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> secrets_ ABSL_GUARDED_BY(mu_);
};

// The first `n` of this process's fake workers, started on first use and kept until it exits:
// tests register them afresh with their own FakeCluster rather than start servers per test.
std::vector<FakeWorker*> SharedFakeWorkers(size_t n);

// The secret the fake clusters' dispatchers send.
inline constexpr char kFakeSecret[] = "fake-cluster-secret";

// A fresh registry and dispatcher over fake workers, registered in the order given so that
// workers[i] has id i. The workers are reset first; the caller keeps them alive.
class FakeCluster {
 public:
  explicit FakeCluster(std::vector<FakeWorker*> workers,
                       absl::Duration dead_after = absl::Hours(1));

  WorkerRegistry& registry() { return registry_; }
  Dispatcher& dispatcher() { return *dispatcher_; }
  FakeWorker& worker(int64_t id) { return *workers_[id]; }
  // The incarnation worker `id` registered with.
  int64_t incarnation(int64_t id) const { return incarnations_[id]; }

 private:
  WorkerRegistry registry_;
  std::vector<FakeWorker*> workers_;
  std::vector<int64_t> incarnations_;
  std::unique_ptr<Dispatcher> dispatcher_;
};

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_FAKE_WORKER_H_
