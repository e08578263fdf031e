#ifndef TESSERA_SERVER_MESH_SERVICE_H_
#define TESSERA_SERVER_MESH_SERVICE_H_

#include <vector>

#include "server/cluster/dispatcher.h"
#include "server/cluster/rendezvous_store.h"
#include "server/cluster/state_store.h"
#include "server/recovery/mesh_reformer.h"
#include "server/tables/mesh_table.h"
#include "tessera/v1/mesh.grpc.pb.h"

namespace tessera {

// The client-facing MeshService: registered workers, and meshes over them (init_device_mesh on
// the service). Creating a mesh sets up its communicators on the workers; deleting one tells
// every MeshUser to let go of what it keeps there and tears the communicators down.
class MeshService final : public v1::MeshService::Service {
 public:
  // A mesh's local tensors are counted in `ledger` against its workers' budgets; `reformer` forms
  // its communicators.
  MeshService(MeshTable* meshes, Dispatcher* dispatcher, RendezvousStore* store,
              MeshReformer* reformer, WorkerBytes* ledger, std::vector<MeshUser*> users)
      : meshes_(meshes),
        dispatcher_(dispatcher),
        store_(store),
        reformer_(reformer),
        ledger_(ledger),
        users_(std::move(users)) {}

  // Unary.
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersReply* reply) override;
  // Unary.
  grpc::Status CreateMesh(grpc::ServerContext*, const v1::CreateMeshRequest* request,
                          v1::MeshInfo* reply) override;
  // Unary.
  grpc::Status GetMesh(grpc::ServerContext*, const v1::GetMeshRequest* request,
                       v1::MeshInfo* reply) override;
  // Unary.
  grpc::Status ListMeshes(grpc::ServerContext*, const v1::ListMeshesRequest*,
                          v1::ListMeshesReply* reply) override;
  // Unary.
  grpc::Status DeleteMesh(grpc::ServerContext*, const v1::DeleteMeshRequest* request,
                          v1::DeleteMeshReply*) override;

  // Records every mesh created (its request, with the workers chosen) in `state` before the
  // creation is answered, and erases it when the mesh is deleted. Call before serving.
  void RecordIn(StateStore* state) { state_ = state; }

 private:
  // The handlers' bodies, each answered through ToGrpcStatus.
  absl::Status CreateMeshImpl(const grpc::ServerContext& context,
                              const v1::CreateMeshRequest& request, v1::MeshInfo& reply);
  absl::Status GetMeshImpl(const v1::GetMeshRequest& request, v1::MeshInfo& reply);
  absl::Status DeleteMeshImpl(const v1::DeleteMeshRequest& request);
  // The workers for a new mesh of `needed` ranks: those named, or the first live ones of the
  // device type; with their incarnations and memory budgets.
  absl::Status ChooseWorkers(const v1::CreateMeshRequest& request, int64_t needed,
                             std::vector<int64_t>* ids, std::vector<int64_t>* incarnations,
                             std::vector<int64_t>* budgets) const;
  v1::MeshInfo Describe(const Mesh& mesh) const;

  MeshTable* meshes_;
  Dispatcher* dispatcher_;
  RendezvousStore* store_;
  StateStore* state_ = nullptr;
  MeshReformer* reformer_;
  WorkerBytes* ledger_;
  const std::vector<MeshUser*> users_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_MESH_SERVICE_H_
