#ifndef TESSERA_SERVER_COORDINATOR_SERVICE_H_
#define TESSERA_SERVER_COORDINATOR_SERVICE_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/device_mesh.h"
#include "server/dispatcher.h"
#include "server/rendezvous_store.h"
#include "tessera/v1/coordinator.grpc.pb.h"

namespace tessera {

// The client-facing Coordinator service: meshes over registered workers, and collectives, uploads
// and downloads on the tensors their ranks hold. It computes and checks; workers move the bytes.
class CoordinatorService final : public v1::Coordinator::Service {
 public:
  CoordinatorService(Dispatcher* dispatcher, RendezvousStore* store);

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
  grpc::Status PutLocal(grpc::ServerContext* context,
                        grpc::ServerReader<v1::PutLocalChunk>* reader,
                        v1::PutLocalReply* reply) override;
  grpc::Status GetLocal(grpc::ServerContext* context, const v1::GetLocalRequest* request,
                        grpc::ServerWriter<v1::TensorChunk>* writer) override;
  grpc::Status RunCollective(grpc::ServerContext*, const v1::CollectiveRequest* request,
                             v1::CollectiveReply* reply) override;
  grpc::Status DeleteTensor(grpc::ServerContext*, const v1::DeleteTensorRequest* request,
                            v1::DeleteTensorReply*) override;

 private:
  // A mesh: its workers (as ranks), their incarnations when it was set up, and its tensors.
  struct Mesh {
    explicit Mesh(DeviceMesh m) : mesh(std::move(m)) {}
    int64_t id = 0;
    std::string name;
    DeviceMesh mesh;
    std::vector<int64_t> incarnations;
    absl::Duration timeout;
    absl::Mutex mu;
    // Tensor names, each with the ranks (row-major positions) that hold it.
    std::map<std::string, std::vector<bool>> tensors ABSL_GUARDED_BY(mu);
  };

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
};

}  // namespace tessera

#endif  // TESSERA_SERVER_COORDINATOR_SERVICE_H_
