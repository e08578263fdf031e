#ifndef TESSERA_SERVER_COORDINATOR_SERVICE_H_
#define TESSERA_SERVER_COORDINATOR_SERVICE_H_

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "core/device_mesh.h"
#include "core/dtensor_spec.h"
#include "server/client_leases.h"
#include "server/collective_layouts.h"
#include "server/dispatcher.h"
#include "server/rendezvous_store.h"
#include "tessera/v1/coordinator.grpc.pb.h"

namespace tessera {

// The client-facing Coordinator service: meshes over registered workers, and collectives, uploads
// and downloads on the tensors their ranks hold. It computes and checks; workers move the bytes.
class CoordinatorService final : public v1::Coordinator::Service {
 public:
  // `client_grace`: how long a client's tensors outlive its last call once it held a lease.
  CoordinatorService(Dispatcher* dispatcher, RendezvousStore* store,
                     absl::Duration client_grace = absl::Seconds(60));
  ~CoordinatorService() override;

  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersReply* reply) override;
  grpc::Status CreateMesh(grpc::ServerContext*, const v1::CreateMeshRequest* request,
                          v1::MeshInfo* reply) override;
  grpc::Status GetMesh(grpc::ServerContext*, const v1::GetMeshRequest* request,
                       v1::MeshInfo* reply) override;
  grpc::Status ListMeshes(grpc::ServerContext*, const v1::ListMeshesRequest*,
                          v1::ListMeshesReply* reply) override;
  grpc::Status DeleteMesh(grpc::ServerContext*, const v1::DeleteMeshRequest* request,
                          v1::DeleteMeshReply*) override;
  grpc::Status PutLocal(grpc::ServerContext* context, grpc::ServerReader<v1::PutLocalChunk>* reader,
                        v1::PutLocalReply* reply) override;
  grpc::Status GetLocal(grpc::ServerContext* context, const v1::GetLocalRequest* request,
                        grpc::ServerWriter<v1::TensorChunk>* writer) override;
  grpc::Status RunCollective(grpc::ServerContext*, const v1::CollectiveRequest* request,
                             v1::CollectiveReply* reply) override;
  grpc::Status WaitCollectives(grpc::ServerContext* context,
                               const v1::WaitCollectivesRequest* request,
                               v1::WaitCollectivesReply* reply) override;
  grpc::Status CollectiveStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CollectiveResult, v1::CollectiveRequest>* stream) override;
  grpc::Status DeleteTensor(grpc::ServerContext*, const v1::DeleteTensorRequest* request,
                            v1::DeleteTensorReply*) override;

  // DTensors (coordinator_tensors.cc, coordinator_tensor_streams.cc).
  grpc::Status DistributeTensor(grpc::ServerContext* context,
                                grpc::ServerReader<v1::DistributeChunk>* reader,
                                v1::TensorInfo* reply) override;
  grpc::Status FromLocal(grpc::ServerContext* context,
                         grpc::ServerReader<v1::FromLocalChunk>* reader,
                         v1::TensorInfo* reply) override;
  grpc::Status ToLocal(grpc::ServerContext* context, const v1::ToLocalRequest* request,
                       grpc::ServerWriter<v1::TensorData>* writer) override;
  grpc::Status FullTensor(grpc::ServerContext* context, const v1::FullTensorRequest* request,
                          grpc::ServerWriter<v1::TensorData>* writer) override;
  grpc::Status CreateTensor(grpc::ServerContext* context, const v1::CreateTensorRequest* request,
                            v1::TensorInfo* reply) override;
  grpc::Status GetTensor(grpc::ServerContext* context, const v1::GetTensorRequest* request,
                         v1::TensorInfo* reply) override;
  grpc::Status ListTensors(grpc::ServerContext* context, const v1::ListTensorsRequest* request,
                           v1::ListTensorsReply* reply) override;
  grpc::Status FreeTensor(grpc::ServerContext* context, const v1::FreeTensorRequest* request,
                          v1::FreeTensorReply*) override;
  grpc::Status Redistribute(grpc::ServerContext* context, const v1::RedistributeRequest* request,
                            v1::RedistributeReply* reply) override;
  grpc::Status RunOp(grpc::ServerContext* context, const v1::OpRequest* request,
                     v1::OpReply* reply) override;
  grpc::Status Synchronize(grpc::ServerContext* context, const v1::SynchronizeRequest* request,
                           v1::SynchronizeReply*) override;
  grpc::Status KeepAlive(grpc::ServerContext* context, const v1::KeepAliveRequest*,
                         v1::KeepAliveReply* reply) override;

  // Frees every tensor of clients whose lease expired; run periodically.
  void ReclaimExpired();

 private:
  // A collective posted to a mesh's workers: its outcome once every worker replied.
  struct CollectiveWork {
    bool claimed = false;  // a WaitCollectives call is waiting on it (guarded by Mesh::mu)
    absl::Notification done;
    absl::Status status;        // written before done is notified
    v1::CollectiveReply reply;  // written before done is notified
  };
  // A mesh: its workers (as ranks), their incarnations when it was set up, and its tensors.
  struct Mesh {
    explicit Mesh(DeviceMesh m) : mesh(std::move(m)) {}
    int64_t id = 0;
    std::string name;
    DeviceMesh mesh;
    std::vector<int64_t> incarnations;
    absl::Duration timeout;
    // Held from accepting a collective or a delete until it is posted, so that the workers run a
    // mesh's commands in the order the coordinator accepted them. Never taken by completions.
    absl::Mutex submit_mu ABSL_ACQUIRED_BEFORE(mu);
    absl::Mutex mu;
    // Tensor names, each with what every rank (row-major position) holds of it. A collective's
    // output is entered when it is accepted, as the workers will write it, so that later calls
    // can use it at once; if the collective fails, the entry goes.
    std::map<std::string, RankLayouts> tensors ABSL_GUARDED_BY(mu);
    // For each name being written, the number of the last collective or upload accepted to write
    // it: only that one settles the name's entry when it finishes.
    std::map<std::string, int64_t> last_writer ABSL_GUARDED_BY(mu);
    int64_t next_write ABSL_GUARDED_BY(mu) = 1;
    // Why the last collective writing a tensor failed, until one writes it again.
    std::map<std::string, absl::Status> failed_writes ABSL_GUARDED_BY(mu);
    // Collectives started with async_op and not yet waited on, by work id.
    std::map<int64_t, std::shared_ptr<CollectiveWork>> works ABSL_GUARDED_BY(mu);
    int64_t next_work ABSL_GUARDED_BY(mu) = 1;
  };
  // Finished async collectives a mesh remembers for WaitCollectives before it forgets the oldest.
  static constexpr size_t kMaxUnwaitedWorks = 4096;
  // Collectives a CollectiveStream holds accepted but not yet reported before it stops reading.
  static constexpr size_t kMaxUnreportedInStream = 1024;

  // Work posted to the workers that writes a tensor: done once every worker replied.
  struct Work {
    absl::Notification done;
    absl::Status status;  // written before done is notified
  };
  // A DTensor: its spec on a mesh, its owner and the work that writes it. Immutable once made.
  struct Tensor {
    std::string name;
    std::shared_ptr<Mesh> mesh;
    DTensorSpec spec;
    std::string owner;
    std::shared_ptr<Work> write;
  };

  // The named tensor; NOT_FOUND if unknown.
  absl::StatusOr<std::shared_ptr<Tensor>> FindTensor(const std::string& name) const;
  // The named tensor, ready to be read by a new command: its mesh is healthy and the work that
  // writes it has not failed (its error is returned, naming the tensor).
  absl::StatusOr<std::shared_ptr<Tensor>> UsableTensor(const std::string& name) const;
  // Adds a tensor under `requested` (or a fresh name) after checking that each rank's shard fits
  // its worker's budget next to the tensors already there; ALREADY_EXISTS, INVALID_ARGUMENT for a
  // bad name, RESOURCE_EXHAUSTED naming the worker, UNIMPLEMENTED on a cuda mesh.
  absl::StatusOr<std::shared_ptr<Tensor>> AddTensor(const std::string& requested,
                                                    std::shared_ptr<Mesh> mesh, DTensorSpec spec,
                                                    const std::string& owner);
  // Drops a tensor from the table (not from the workers).
  void DropTensor(const std::string& name);
  // Sends `command` to every rank of `mesh`; its result completes `work`. When it fails and one
  // of `inputs` failed before it, the input's error is the cause reported.
  void PostWork(const Mesh& mesh, const v1::Command& command, std::shared_ptr<Work> work,
                std::vector<std::shared_ptr<Tensor>> inputs = {});
  // Frees a tensor's shards on its workers (asynchronously) and drops it.
  void Release(const Tensor& tensor);
  v1::TensorInfo Describe(const Tensor& tensor) const;
  // Bytes of the shard at mesh `position` of a tensor laid out as `spec`.
  static int64_t ShardBytes(const DTensorSpec& spec, int64_t position) {
    return NumElements(LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(position)).shape) *
           static_cast<int64_t>(DTypeSize(spec.dtype));
  }
  // The caller's client id (the "tessera-client" metadata entry); "" for an anonymous caller.
  static std::string ClientId(const grpc::ServerContext& context);
  // The worker-side name of a DTensor.
  static std::string WorkerName(const std::string& tensor) { return "dt/" + tensor; }
  // Runs a cross-mesh redistribute: streams the tensor out of its mesh into `dst` (synchronous).
  grpc::Status MoveAcrossMeshes(grpc::ServerContext* context, const Tensor& src,
                                std::shared_ptr<Mesh> dst_mesh, std::vector<Placement> placements,
                                const std::string& output, const std::string& owner,
                                v1::RedistributeReply* reply);
  // Where a tensor's values can be read from: its own shards, or (with Partial placements) a
  // temporary the workers reduce them into first.
  struct Readable {
    DTensorSpec spec;
    std::string worker_tensor;
    bool temporary = false;
  };
  absl::StatusOr<Readable> ReadableLayout(const Tensor& tensor);
  void DropReadable(const Tensor& tensor, const Readable& readable);
  // Why reading `tensor` failed: its write's error if that failed, else `download`.
  static absl::Status ReadFailure(const Tensor& tensor, absl::Status download);
  // Posts the SpreadTensor that completes an upload, or completes `work` if nothing is to spread.
  void Spread(const Tensor& tensor, const std::vector<int64_t>& source,
              const std::vector<int>& broadcast_dims, bool partition, std::shared_ptr<Work> work);

  // Accepts a collective and posts it to the mesh's workers (from this thread with `send_here`):
  // the work completes when they have all replied. With `work_id`, the work is also kept for
  // WaitCollectives under the id written there. Errors are for requests refused up front.
  absl::StatusOr<std::shared_ptr<CollectiveWork>> StartCollective(
      const v1::CollectiveRequest& request, bool send_here, int64_t* work_id);
  // A collective accepted on a mesh: its worker command, its number as a writer of its output,
  // and the output's entry before it (restored if the collective fails without touching it).
  struct Accepted {
    v1::Command command;
    int64_t write = 0;
    std::optional<RankLayouts> previous;
    std::vector<bool> writes;  // by mesh position: whether the collective writes its output there
  };
  // Checks a collective request against `mesh` and makes its worker command; on success the
  // output's entry in the mesh's table says what the ranks will hold (FinishCollective settles
  // it). The caller holds mesh.submit_mu until the command is posted.
  absl::StatusOr<Accepted> AcceptCollective(Mesh& mesh, const v1::CollectiveRequest& request);
  // Settles a collective's output in the mesh's table and makes its reply. If it is still the last
  // writer of its output: on success each rank's reported layout must be the one accepted; on
  // failure the entry goes back to what it was when the collective left it alone (a failed
  // in-place collective other than all_reduce and broadcast), else the name leaves the table and
  // the workers.
  absl::Status FinishCollective(const std::shared_ptr<Mesh>& mesh,
                                const v1::CollectiveRequest& request, const Accepted& accepted,
                                absl::Status status, std::vector<v1::CommandReply> replies,
                                v1::CollectiveReply* reply);
  // The workers of a mesh's ranks, in rank order, looked up once: UNAVAILABLE naming the worker
  // when one is dead or restarted since the mesh was set up.
  absl::StatusOr<std::vector<WorkerHandle>> MeshWorkers(const Mesh& mesh) const;
  // The named mesh; NOT_FOUND if unknown, UNAVAILABLE naming the worker if it is broken.
  absl::StatusOr<std::shared_ptr<Mesh>> ReadyMesh(const std::string& name) const;
  absl::StatusOr<std::shared_ptr<Mesh>> FindMesh(const std::string& name) const;
  // OK, or why the mesh cannot run commands (a worker dead or restarted since set-up).
  absl::Status MeshHealth(const Mesh& mesh) const;
  v1::MeshInfo Describe(Mesh& mesh) const;
  // The worker-side name of a mesh's tensor.
  static std::string WorkerTensorName(const Mesh& mesh, const std::string& tensor);

  Dispatcher* dispatcher_;
  RendezvousStore* store_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Mesh>> meshes_ ABSL_GUARDED_BY(mu_);
  int64_t next_mesh_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, std::shared_ptr<Tensor>> tensors_ ABSL_GUARDED_BY(mu_);
  int64_t next_tensor_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Bytes of DTensor shards on each worker, by worker id, as the specs say.
  std::map<int64_t, int64_t> held_bytes_ ABSL_GUARDED_BY(mu_);
  ClientLeases leases_;
  absl::Notification stopping_;
  std::thread reaper_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_COORDINATOR_SERVICE_H_
