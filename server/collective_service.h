#ifndef TESSERA_SERVER_COLLECTIVE_SERVICE_H_
#define TESSERA_SERVER_COLLECTIVE_SERVICE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "core/sharding/dtensor_spec.h"
#include "security/idle_streams.h"
#include "security/stream_limits.h"
#include "server/cluster/dispatcher.h"
#include "server/tables/local_tensor_table.h"
#include "server/tables/mesh_table.h"
#include "tessera/v1/collective.grpc.pb.h"

namespace tessera {

// The client-facing CollectiveService: torch.distributed's collectives on the local tensors that
// a mesh's ranks hold, and their uploads and downloads. The coordinator knows every rank's dtype
// and shape of every such tensor (each mesh's LocalTensorTable) and refuses a collective whose
// groups disagree before anything runs; a mesh runs its collectives in the order accepted here.
class CollectiveService final : public v1::CollectiveService::Service, public MeshUser {
 public:
  // A PutLocal stream whose client sends nothing, or a GetLocal stream whose client takes
  // nothing, for `stream_idle_timeout` is ended (IdleStreams).
  // A CollectiveStream whose client sends nothing for `session_idle_timeout` is cut.
  CollectiveService(MeshTable* meshes, Dispatcher* dispatcher,
                    absl::Duration stream_idle_timeout = absl::Seconds(30),
                    absl::Duration session_idle_timeout = absl::Minutes(10))
      : meshes_(meshes),
        dispatcher_(dispatcher),
        idle_(stream_idle_timeout),
        session_idle_(session_idle_timeout, "the coordinator's --session_stream_idle_timeout") {}

  // Streams are admitted to `limits` (per peer and in all); set before serving. None: all are.
  void LimitStreams(StreamLimits* limits) { limits_ = limits; }

  // Client stream.
  grpc::Status PutLocal(grpc::ServerContext* context, grpc::ServerReader<v1::PutLocalChunk>* reader,
                        v1::PutLocalReply* reply) override;
  // Server stream.
  grpc::Status GetLocal(grpc::ServerContext* context, const v1::GetLocalRequest* request,
                        grpc::ServerWriter<v1::TensorChunk>* writer) override;
  // Unary.
  grpc::Status RunCollective(grpc::ServerContext*, const v1::CollectiveRequest* request,
                             v1::CollectiveReply* reply) override;
  // Unary.
  grpc::Status WaitCollectives(grpc::ServerContext* context,
                               const v1::WaitCollectivesRequest* request,
                               v1::WaitCollectivesReply* reply) override;
  // Bidirectional stream.
  grpc::Status CollectiveStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CollectiveResult, v1::CollectiveRequest>* stream) override;
  // Unary.
  grpc::Status DeleteTensor(grpc::ServerContext*, const v1::DeleteTensorRequest* request,
                            v1::DeleteTensorReply*) override;

  // Forgets the mesh's unwaited works; its local tensors are freed with it.
  std::vector<std::string> ForgetMesh(const Mesh& mesh) override;

  // The worker-side name of a mesh's local tensor.
  static std::string WorkerTensorName(const Mesh& mesh, const std::string& tensor);

 private:
  // A collective posted to a mesh's workers: its outcome once every worker replied.
  struct Work {
    bool claimed = false;  // a WaitCollectives call is waiting on it (guarded by works_mu_)
    absl::Notification done;
    absl::Status status;        // written before done is notified
    v1::CollectiveReply reply;  // written before done is notified
  };
  // A mesh's collectives started with async_op and not yet waited on, by work id.
  struct MeshWorks {
    std::map<int64_t, std::shared_ptr<Work>> works;
    int64_t next = 1;
  };
  // A collective request checked against its mesh, before anything is reserved.
  struct Checked {
    int mesh_dim = -1;   // -1: the whole mesh
    std::string output;  // the input for an in-place collective; empty for a barrier
  };
  // A collective accepted on a mesh: its worker command and its reservation of the output.
  struct Accepted {
    v1::Command command;
    LocalTensorTable::Reservation reservation;
  };
  // Finished async collectives a mesh remembers for WaitCollectives before it forgets the oldest.
  static constexpr size_t kMaxUnwaitedWorks = 4096;
  // Collectives a CollectiveStream holds accepted but not yet reported before it stops reading.
  static constexpr size_t kMaxUnreportedInStream = 1024;

  // The handlers' bodies, each answered through ToGrpcStatus.
  absl::Status RunCollectiveImpl(const v1::CollectiveRequest& request, v1::CollectiveReply& reply);
  absl::Status CollectiveStreamImpl(
      const grpc::ServerContext& context,
      grpc::ServerReaderWriter<v1::CollectiveResult, v1::CollectiveRequest>* stream);
  absl::Status WaitCollectivesImpl(const grpc::ServerContext& context,
                                   const v1::WaitCollectivesRequest& request,
                                   v1::WaitCollectivesReply& reply);
  absl::Status DeleteTensorImpl(const v1::DeleteTensorRequest& request);
  absl::Status PutLocalImpl(const grpc::ServerContext& context,
                            grpc::ServerReader<v1::PutLocalChunk>* reader,
                            v1::PutLocalReply& reply);
  absl::Status GetLocalImpl(const grpc::ServerContext& context, const v1::GetLocalRequest& request,
                            grpc::ServerWriter<v1::TensorChunk>* writer);
  // Accepts a collective and posts it to the mesh's workers (from this thread with `send_here`):
  // the work completes when they have all replied. With `work_id`, the work is also kept for
  // WaitCollectives under the id written there. Errors are for requests refused up front.
  absl::StatusOr<std::shared_ptr<Work>> Start(const v1::CollectiveRequest& request, bool send_here,
                                              int64_t* work_id);
  // Checks the request's mesh dim, op, root and peer and names its output; INVALID_ARGUMENT.
  static absl::StatusOr<Checked> Check(const Mesh& mesh, const v1::CollectiveRequest& request);
  // Checks the input's layouts on every rank and reserves what the collective writes in the mesh's
  // table (FinishCollective settles it). The caller holds mesh.submit_mu until it is posted.
  static absl::StatusOr<LocalTensorTable::Reservation> ReserveOutput(
      Mesh& mesh, const v1::CollectiveRequest& request, const Checked& checked);
  // The worker command that runs the checked collective.
  static v1::Command CommandFor(const Mesh& mesh, const v1::CollectiveRequest& request,
                                const Checked& checked);
  // The block of one rank's local tensor of `layout`, as a spec on a mesh of that rank alone
  // (what the shard streams route); INVALID_ARGUMENT for a rank not in the mesh.
  static absl::StatusOr<DTensorSpec> RankBlock(const Mesh& mesh, int64_t rank,
                                               const LocalLayout& layout);
  // Keeps `work` for WaitCollectives; returns its id.
  int64_t Keep(const Mesh& mesh, std::shared_ptr<Work> work);
  // Settles a collective's output in its mesh's table once the workers replied and makes its
  // reply; a failed output that the collective made undefined is freed on the workers.
  absl::Status Finish(const std::shared_ptr<Mesh>& mesh, const v1::CollectiveRequest& request,
                      const LocalTensorTable::Reservation& reservation, absl::Status status,
                      const std::vector<v1::CommandReply>& replies, v1::CollectiveReply* reply);

  MeshTable* meshes_;
  Dispatcher* dispatcher_;
  IdleStreams idle_;
  IdleStreams session_idle_;
  StreamLimits* limits_ = nullptr;
  absl::Mutex works_mu_;
  std::map<int64_t, MeshWorks> works_ ABSL_GUARDED_BY(works_mu_);  // by mesh id
};

}  // namespace tessera

#endif  // TESSERA_SERVER_COLLECTIVE_SERVICE_H_
