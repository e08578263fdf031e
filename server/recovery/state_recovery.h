#ifndef TESSERA_SERVER_RECOVERY_STATE_RECOVERY_H_
#define TESSERA_SERVER_RECOVERY_STATE_RECOVERY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/cluster/state_store.h"
#include "server/cluster/worker_bytes.h"
#include "server/cluster/worker_registry.h"
#include "server/recovery/mesh_reformer.h"
#include "server/tables/dtensor_table.h"
#include "server/tables/mesh_table.h"
#include "tessera/v1/mesh.pb.h"
#include "tessera/v1/tensor.pb.h"

namespace tessera {

// Brings back what the state store recorded before a coordinator restart: the workers' ids (before
// serving, so that each worker registering again gets its id back and keeps its tensors), then,
// once the meshes' workers registered again or `wait` passed, each mesh (its communicators formed
// anew) and its tensors. A tensor a returned worker no longer holds a block of (and no replica
// does), or whose relayout in place the restart cut short, answers DATA_LOSS; one on a worker that
// did not return answers as a gone worker's does.
// While a mesh or tensor is being recovered, its name answers UNAVAILABLE.
class StateRecovery {
 public:
  StateRecovery(StateStore* store, WorkerRegistry* registry, MeshTable* meshes,
                MeshReformer* reformer, DTensorTable* tensors, WorkerBytes* ledger,
                absl::Duration wait)
      : store_(store),
        registry_(registry),
        meshes_(meshes),
        reformer_(reformer),
        tensors_(tensors),
        ledger_(ledger),
        wait_(wait) {}
  ~StateRecovery();

  // Reads the records and restores the workers' ids; call before serving. UNAVAILABLE if the store
  // cannot be read, INVALID_ARGUMENT naming a record that cannot be parsed.
  absl::Status Load();
  // Runs `then` once the meshes and tensors are recovered (modules, which need both); call before
  // Start.
  void Then(std::function<void()> then) { then_ = std::move(then); }
  // Recovers the meshes and tensors in the background once the server serves.
  void Start();
  // Waits until every recorded mesh is back (or could not be); for tests and shutdown.
  void Join();

 private:
  void Run();
  // Re-creates the mesh of `record` and its tensors.
  absl::Status RestoreMesh(const v1::CreateMeshRequest& record);

  StateStore* store_;
  WorkerRegistry* registry_;
  MeshTable* meshes_;
  MeshReformer* reformer_;
  DTensorTable* tensors_;
  WorkerBytes* ledger_;
  const absl::Duration wait_;
  std::map<std::string, v1::CreateMeshRequest> meshes_recorded_;
  std::map<std::string, v1::TensorInfo> tensors_recorded_;
  // Tensors whose relayout in place the restart cut short, with their DATA_LOSS.
  std::map<std::string, absl::Status> cut_short_;
  std::function<void()> then_;
  std::thread thread_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_RECOVERY_STATE_RECOVERY_H_
