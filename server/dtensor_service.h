#ifndef TESSERA_SERVER_DTENSOR_SERVICE_H_
#define TESSERA_SERVER_DTENSOR_SERVICE_H_

#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "security/idle_streams.h"
#include "security/stream_limits.h"
#include "server/tables/client_leases.h"
#include "server/tables/dtensor_table.h"
#include "server/tables/eager_ops.h"
#include "server/transfers/checkpoints.h"
#include "server/transfers/direct_downloads.h"
#include "server/transfers/direct_uploads.h"
#include "server/transfers/dtensor_streams.h"
#include "tessera/v1/dtensor.grpc.pb.h"

namespace tessera {

// The client-facing DTensorService: DTensors sharded over meshes, their factories,
// redistribution, ops with sharding propagation, and the leases that reclaim an absent client's
// tensors. Calls that run work validate it, compute the output spec (no data needed), post the
// command to the workers and return; streams go through DTensorStreams.
class DTensorService final : public v1::DTensorService::Service {
 public:
  // A client whose leases go `client_grace` without a call loses its tensors; an upload stream
  // whose client sends nothing for `stream_idle_timeout` is ended (IdleStreams).
  // Grants of the direct path last `grant_lifetime`.
  // An op stream that moves nothing for `session_idle_timeout` is cut.
  DTensorService(DTensorTable* tensors, absl::Duration client_grace,
                 absl::Duration stream_idle_timeout,
                 absl::Duration grant_lifetime = absl::Seconds(10),
                 absl::Duration session_idle_timeout = absl::Minutes(10));
  ~DTensorService() override;

  // Streams are admitted to `limits` (per peer and in all); set before serving. None: all are.
  void LimitStreams(StreamLimits* limits) { limits_ = limits; }

  // Client stream.
  grpc::Status DistributeTensor(grpc::ServerContext* context,
                                grpc::ServerReader<v1::DistributeChunk>* reader,
                                v1::TensorInfo* reply) override;
  // Client stream.
  grpc::Status FromLocal(grpc::ServerContext* context,
                         grpc::ServerReader<v1::FromLocalChunk>* reader,
                         v1::TensorInfo* reply) override;
  // Server stream.
  grpc::Status ToLocal(grpc::ServerContext* context, const v1::ToLocalRequest* request,
                       grpc::ServerWriter<v1::TensorData>* writer) override;
  // Server stream.
  grpc::Status FullTensor(grpc::ServerContext* context, const v1::FullTensorRequest* request,
                          grpc::ServerWriter<v1::TensorData>* writer) override;
  // Unary.
  grpc::Status CreateTensor(grpc::ServerContext* context, const v1::CreateTensorRequest* request,
                            v1::TensorInfo* reply) override;
  // Unary.
  grpc::Status GetTensor(grpc::ServerContext* context, const v1::GetTensorRequest* request,
                         v1::TensorInfo* reply) override;
  // Unary.
  grpc::Status ListTensors(grpc::ServerContext* context, const v1::ListTensorsRequest* request,
                           v1::ListTensorsReply* reply) override;
  // Unary.
  grpc::Status FreeTensor(grpc::ServerContext* context, const v1::FreeTensorRequest* request,
                          v1::FreeTensorReply*) override;
  // Unary.
  grpc::Status Redistribute(grpc::ServerContext* context, const v1::RedistributeRequest* request,
                            v1::RedistributeReply* reply) override;
  // Unary.
  grpc::Status RunOp(grpc::ServerContext* context, const v1::OpRequest* request,
                     v1::OpReply* reply) override;
  // Unary.
  grpc::Status ListOps(grpc::ServerContext* context, const v1::ListOpsRequest* request,
                       v1::ListOpsReply* reply) override;
  // Bidirectional stream: ops and frees in order, one result each.
  grpc::Status OpStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::StreamResults, v1::StreamCalls>* stream) override;
  // Unary.
  grpc::Status SaveTensor(grpc::ServerContext* context, const v1::SaveTensorRequest* request,
                          v1::SaveTensorReply* reply) override;
  // Unary.
  grpc::Status LoadTensor(grpc::ServerContext* context, const v1::LoadTensorRequest* request,
                          v1::TensorInfo* reply) override;
  // Unary.
  grpc::Status Synchronize(grpc::ServerContext* context, const v1::SynchronizeRequest* request,
                           v1::SynchronizeReply*) override;
  // Unary.
  grpc::Status KeepAlive(grpc::ServerContext* context, const v1::KeepAliveRequest*,
                         v1::KeepAliveReply* reply) override;
  // Unary.
  grpc::Status ManualSeed(grpc::ServerContext* context, const v1::ManualSeedRequest* request,
                          v1::ManualSeedReply*) override;

  // Unary: distribute_tensor on the direct path (DirectUploads).
  grpc::Status PlanUpload(grpc::ServerContext* context, const v1::PlanUploadRequest* request,
                          v1::UploadPlan* reply) override;
  grpc::Status CommitUpload(grpc::ServerContext* context, const v1::CommitUploadRequest* request,
                            v1::TensorInfo* reply) override;
  // Unary: full_tensor and to_local on the direct path (DirectDownloads).
  grpc::Status PlanDownload(grpc::ServerContext* context, const v1::PlanDownloadRequest* request,
                            v1::DownloadPlan* reply) override;
  grpc::Status ReleaseDownload(grpc::ServerContext* context,
                               const v1::ReleaseDownloadRequest* request,
                               v1::ReleaseDownloadReply* reply) override;

  // Frees every tensor of clients whose lease expired; run periodically.
  void ReclaimExpired();

  // The caller's client id (the "tessera-client" metadata entry); "" for an anonymous caller.
  // INVALID_ARGUMENT for an id that is not a client id's name (core/names.h).
  static absl::StatusOr<std::string> ClientId(const grpc::ServerContext& context);

 private:
  // The caller's client id, its lease renewed; ClientId's refusal of an invalid id.
  absl::StatusOr<std::string> Caller(const grpc::ServerContext& context);
  // The handlers' bodies, each answered through ToGrpcStatus.
  absl::Status DistributeTensorImpl(grpc::ServerContext& context,
                                    grpc::ServerReader<v1::DistributeChunk>* reader,
                                    v1::TensorInfo& reply);
  absl::Status FromLocalImpl(grpc::ServerContext& context,
                             grpc::ServerReader<v1::FromLocalChunk>* reader, v1::TensorInfo& reply);
  absl::Status ToLocalImpl(const grpc::ServerContext& context, const v1::ToLocalRequest& request,
                           grpc::ServerWriter<v1::TensorData>* writer);
  absl::Status FullTensorImpl(const grpc::ServerContext& context,
                              const v1::FullTensorRequest& request,
                              grpc::ServerWriter<v1::TensorData>* writer);
  absl::Status CreateTensorImpl(const grpc::ServerContext& context,
                                const v1::CreateTensorRequest& request, v1::TensorInfo& reply);
  absl::Status GetTensorImpl(const grpc::ServerContext& context,
                             const v1::GetTensorRequest& request, v1::TensorInfo& reply);
  absl::Status ListTensorsImpl(const grpc::ServerContext& context,
                               const v1::ListTensorsRequest& request, v1::ListTensorsReply& reply);
  absl::Status FreeTensorImpl(const grpc::ServerContext& context,
                              const v1::FreeTensorRequest& request);
  absl::Status RedistributeImpl(const grpc::ServerContext& context,
                                const v1::RedistributeRequest& request,
                                v1::RedistributeReply& reply);
  absl::Status RunOpImpl(const grpc::ServerContext& context, const v1::OpRequest& request,
                         v1::OpReply& reply);
  absl::Status ListOpsImpl(const grpc::ServerContext& context, const v1::ListOpsRequest& request,
                           v1::ListOpsReply& reply);
  absl::Status OpStreamImpl(const grpc::ServerContext& context,
                            grpc::ServerReaderWriter<v1::StreamResults, v1::StreamCalls>* stream);
  absl::Status SaveTensorImpl(const grpc::ServerContext& context,
                              const v1::SaveTensorRequest& request, v1::SaveTensorReply& reply);
  absl::Status LoadTensorImpl(const grpc::ServerContext& context,
                              const v1::LoadTensorRequest& request, v1::TensorInfo& reply);
  absl::Status SynchronizeImpl(const grpc::ServerContext& context,
                               const v1::SynchronizeRequest& request);
  absl::Status KeepAliveImpl(const grpc::ServerContext& context, v1::KeepAliveReply& reply);
  absl::Status ManualSeedImpl(const grpc::ServerContext& context,
                              const v1::ManualSeedRequest& request);
  absl::Status PlanUploadImpl(const grpc::ServerContext& context,
                              const v1::PlanUploadRequest& request, v1::UploadPlan& reply);
  absl::Status CommitUploadImpl(const grpc::ServerContext& context,
                                const v1::CommitUploadRequest& request, v1::TensorInfo& reply);
  absl::Status PlanDownloadImpl(const grpc::ServerContext& context,
                                const v1::PlanDownloadRequest& request, v1::DownloadPlan& reply);
  absl::Status ReleaseDownloadImpl(const grpc::ServerContext& context,
                                   const v1::ReleaseDownloadRequest& request);
  // RunOp and FreeTensor for `client`, on either path; a null `reply` is not filled in (the op
  // stream's client computes the output's metadata itself).
  absl::Status RunOpFor(const std::string& client, const v1::OpRequest& request,
                        v1::OpReply* reply);
  // `workers_freed`, when given, gets the workers' free to wait for (null when none was posted).
  absl::Status FreeTensorFor(const std::string& client, const std::string& name,
                             std::shared_ptr<const TensorWrite>* workers_freed = nullptr);
  // Redistributes within the tensor's mesh: plans, adds the output and posts the plan's run.
  absl::Status RedistributeInMesh(const v1::RedistributeRequest& request,
                                  const std::shared_ptr<DTensorEntry>& src,
                                  std::vector<Placement> placements, const std::string& owner,
                                  v1::RedistributeReply* reply);

  DTensorTable* tensors_;
  IdleStreams session_idle_;
  DTensorStreams streams_;
  DirectUploads direct_;
  DirectDownloads direct_reads_;
  Checkpoints checkpoints_;
  EagerOps eager_ops_;
  ClientLeases leases_;
  StreamLimits* limits_ = nullptr;
  absl::Notification stopping_;
  std::thread reaper_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_DTENSOR_SERVICE_H_
