#ifndef TESSERA_WORKER_WORKER_SERVICE_H_
#define TESSERA_WORKER_WORKER_SERVICE_H_

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"
#include "kernels/backend.h"
#include "security/auth_failures.h"
#include "security/idle_streams.h"
#include "security/stream_limits.h"
#include "tessera/v1/worker.grpc.pb.h"
#include "worker/command_executor.h"
#include "worker/command_sequencer.h"
#include "worker/incarnation_gate.h"
#include "worker/shard_store.h"

namespace tessera {

// The Worker service: checks the caller's secret and the incarnation, admits commands, uploads and
// downloads in sequence order, and runs them on the executor. It serves the device of `kernels`:
// shards live in that backend's memory space, and uploads and downloads stream through it (pinned
// staging buffers on a GPU).
class WorkerService final : public v1::Worker::Service {
 public:
  // `stall_limit`: how long a gap in the command order (a sequence neither used nor released by
  // the coordinator) may hold commands up before the order counts as broken (CommandSequencer).
  // An upload whose client sends nothing, or a download whose client takes nothing, for
  // `stream_idle_timeout` is cut (IdleStreams), the turn it holds released.
  WorkerService(std::string secret, std::unique_ptr<kernels::KernelBackend> kernels,
                int64_t memory_budget_bytes, absl::Duration stall_limit,
                absl::Duration stream_idle_timeout = absl::Seconds(30));

  // Clients' direct uploads and downloads are admitted to `limits` (per peer and in all); set
  // before serving. None: all are.
  void LimitStreams(StreamLimits* limits) { limits_ = limits; }

  // Accepts commands only from a caller whose verified TLS certificate names `identity` (its
  // common name or a subject alternative name) instead of by the secret; set before serving.
  void RequireCoordinatorIdentity(std::string identity) {
    coordinator_identity_ = std::move(identity);
  }

  // Checkpoints are read and written only inside `root` (ResolveCheckpointPath; none where it is
  // empty); set before serving.
  void SetCheckpointRoot(std::string root) { checkpoint_root_ = std::move(root); }

  // A registration is being sent: calls for an incarnation other than the current one wait for
  // BeginIncarnation rather than being refused (IncarnationGate).
  void BeginRegistering() { incarnation_.BeginRegistering(); }

  // The key that signs the coordinator's grants of direct client uploads (RegisterReply.grant_key);
  // set with each registration, before BeginIncarnation. Empty: no direct upload is accepted.
  void SetGrantKey(std::string key) {
    absl::MutexLock lock(&grant_mu_);
    grant_key_ = std::move(key);
  }

  // Starts a new incarnation (after registering): drops every communicator, and every tensor
  // unless `keep_tensors` (a restarted coordinator recovered them), then only `drop_tensors`.
  // `collective_host` is where this worker's Gloo connections bind.
  void BeginIncarnation(int64_t worker_id, int64_t incarnation,
                        std::unique_ptr<gloo::rendezvous::Store> rendezvous,
                        const std::string& collective_host, bool keep_tensors = false,
                        const std::vector<std::string>& drop_tensors = {});
  // The names of the tensors it holds, ordered.
  std::vector<std::string> tensor_names() const { return store_.Names(); }
  int64_t used_bytes() const { return store_.used_bytes(); }
  // What the device's memory holds now (shards and temporaries) and, on a GPU, its free memory.
  kernels::MemoryUsage memory_usage() const { return kernels_->usage(); }
  // The device's model (a GPU's name); empty for cpu.
  std::string device_name() const { return kernels_->device_name(); }
  int64_t held_tensors() const { return store_.tensor_count(); }
  // OK, or why the command order is broken: the worker must register again to serve.
  absl::Status command_order_broken() const { return sequencer_.broken(); }

  grpc::Status Execute(grpc::ServerContext* context, const v1::Command* command,
                       v1::CommandReply* reply) override;
  grpc::Status ExecuteBatch(grpc::ServerContext* context, const v1::CommandBatch* batch,
                            v1::CommandBatchReply* reply) override;
  grpc::Status CommandStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CommandBatchReply, v1::CommandBatch>* stream) override;
  grpc::Status Upload(grpc::ServerContext* context, grpc::ServerReader<v1::TensorChunk>* reader,
                      v1::UploadReply* reply) override;
  grpc::Status Download(grpc::ServerContext* context, const v1::DownloadRequest* request,
                        grpc::ServerWriter<v1::TensorChunk>* writer) override;
  grpc::Status Release(grpc::ServerContext* context, const v1::ReleaseRequest* request,
                       v1::ReleaseReply* reply) override;

 private:
  // The handlers' bodies, each answered through ToGrpcStatus.
  absl::Status CommandStreamImpl(
      const grpc::ServerContext& context,
      grpc::ServerReaderWriter<v1::CommandBatchReply, v1::CommandBatch>* stream);
  absl::Status UploadImpl(const grpc::ServerContext& context,
                          grpc::ServerReader<v1::TensorChunk>* reader, v1::UploadReply& reply);
  absl::Status DownloadImpl(const grpc::ServerContext& context, const v1::DownloadRequest& request,
                            grpc::ServerWriter<v1::TensorChunk>* writer);
  absl::Status ReleaseImpl(const grpc::ServerContext& context, const v1::ReleaseRequest& request,
                           v1::ReleaseReply& reply);
  // Admits the upload whose first chunk is `header`: by `grant` when the call carries one (the
  // header must match it), else as the coordinator's for the header's incarnation.
  absl::Status AdmitUploadHeader(const grpc::ServerContext& context,
                                 const std::optional<v1::DirectGrant>& grant,
                                 const v1::TensorChunk& header);
  // Stores the upload whose first chunk is `header` and the rest on `reader`, in its turn
  // `sequence`, and answers `reply` (bytes, and `grant`'s receipt); a granted one that fails is
  // moved to the failed grants.
  absl::Status StoreUpload(grpc::ServerReaderInterface<v1::TensorChunk>& reader,
                           v1::TensorChunk& header, const std::optional<v1::DirectGrant>& grant,
                           int64_t sequence, v1::UploadReply& reply);
  // OK if the caller is the coordinator (its certificate's identity, or the secret) and the call
  // is for the current incarnation (waited for until `deadline` while a registration is under
  // way). A caller that fails is counted and logged (AuthFailures).
  absl::Status Admit(const grpc::ServerContext& context, const char* method, int64_t incarnation,
                     absl::Time deadline) const;
  // OK if the caller is the coordinator (its certificate's identity, or the secret); counted and
  // logged (AuthFailures) otherwise.
  absl::Status Authenticate(const grpc::ServerContext& context, const char* method) const;
  // The grant a client's call carries in its metadata (kGrantMetadataKey), if any.
  static std::optional<v1::DirectGrant> GrantOf(const grpc::ServerContext& context);
  // OK if `grant` is signed for this worker's incarnation, unexpired and of the kind the call
  // needs (`read`: a download), checked before the call's stream is read; refused as AdmitGrant's.
  absl::Status CheckGrantSignature(const grpc::ServerContext& context, const v1::DirectGrant& grant,
                                   bool read);
  // OK if `grant` is valid (CheckGrant), of the kind `call` needs (`read`: a download), `matches`
  // the call (as its caller found) and has not been used; PERMISSION_DENIED otherwise (counted and
  // rate-limited as Admit's refusals). On OK the grant's sequence counts as used by this call.
  absl::Status AdmitGrant(const grpc::ServerContext& context, const v1::DirectGrant& grant,
                          bool read, bool matches, absl::string_view call);
  // Runs every command of `batch` in its turn (each admitted and waited for until `deadline`) and
  // records each one's outcome in `reply`, in the batch's order.
  void RunBatch(const grpc::ServerContext& context, absl::Time deadline,
                const v1::CommandBatch& batch, v1::CommandBatchReply* reply);
  // AdmitAndRun as a gRPC status (ToGrpcStatus: a batch's results carry its bounded message),
  // logging one line (worker, mesh, sequence, why) when the command fails.
  grpc::Status RunInTurn(const grpc::ServerContext& context, absl::Time deadline,
                         const v1::Command& command, v1::CommandReply* reply, bool* admitted);
  // Admits `command`, waits for its turn (until `deadline`) and runs it; `*admitted` says whether
  // it got past Admit (and so spent its sequence, run or not).
  absl::Status AdmitAndRun(const grpc::ServerContext& context, absl::Time deadline,
                           const v1::Command& command, v1::CommandReply* reply, bool* admitted);
  // Waits for `sequence`'s turn until `deadline`; on OK the caller must call
  // sequencer_.Done(sequence).
  absl::Status AwaitTurn(int64_t sequence, absl::Time deadline);

  const std::string secret_;
  std::string coordinator_identity_;
  std::string checkpoint_root_;
  StreamLimits* limits_ = nullptr;
  mutable AuthFailures auth_failures_{"worker commands"};
  // Refused grants, counted apart: a client's failures never lock its host's coordinator out.
  AuthFailures grant_failures_{"worker grants"};
  const std::unique_ptr<kernels::KernelBackend> kernels_;
  const std::string device_;
  ShardStore store_;
  CommandSequencer sequencer_;
  IdleStreams idle_;                             // clients' direct streams
  IdleStreams unwatched_{absl::ZeroDuration()};  // the coordinator's: it cuts its clients
  mutable absl::Mutex grant_mu_;
  std::string grant_key_ ABSL_GUARDED_BY(grant_mu_);
  // Sequences of granted calls admitted and not failed: running, waiting for their turn, or done
  // (a replayed grant is refused even while its first use waits or runs). Of those done, behind
  // the sequencer's head, the latest kGrantsKept are kept.
  static constexpr size_t kGrantsKept = 4096;
  std::set<int64_t> granted_ ABSL_GUARDED_BY(grant_mu_);
  // Sequences of granted calls that were admitted and failed, the latest kFailedGrantsKept, so
  // that a Release asking about one says so (the coordinator then drops its plan) and frees a
  // number that was never used.
  static constexpr size_t kFailedGrantsKept = 4096;
  // Moves `sequence`, admitted by a grant, from granted_ to the failed ones.
  void GrantFailed(int64_t sequence) ABSL_EXCLUSIVE_LOCKS_REQUIRED(grant_mu_);
  std::set<int64_t> failed_grants_ ABSL_GUARDED_BY(grant_mu_);
  std::deque<int64_t> failed_order_ ABSL_GUARDED_BY(grant_mu_);  // oldest first
  mutable absl::Mutex mu_;
  // Read without mu_ so that queued commands are admitted while another one runs.
  IncarnationGate incarnation_;
  std::atomic<int64_t> worker_id_{-1};  // the coordinator's id of this worker, for log lines
  std::unique_ptr<gloo::rendezvous::Store> rendezvous_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<CommandExecutor> executor_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_WORKER_WORKER_SERVICE_H_
