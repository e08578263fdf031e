#ifndef TESSERA_SERVER_RECOVERY_REPLICA_REPAIR_H_
#define TESSERA_SERVER_RECOVERY_REPLICA_REPAIR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/sharding/dtensor_spec.h"
#include "server/cluster/dispatcher.h"
#include "server/cluster/rendezvous_store.h"
#include "server/cluster/worker_bytes.h"
#include "server/cluster/worker_registry.h"
#include "server/recovery/mesh_reformer.h"
#include "server/tables/dtensor_table.h"
#include "server/tables/mesh_table.h"
#include "tessera/v1/worker.pb.h"

namespace tessera {

// Takes a worker that came back (registered again under its id with a new incarnation, empty)
// into the meshes it was part of, and repairs what it lost from replicas. Every `interval` it looks
// for a mesh whose workers are all alive but some restarted since the mesh was set up; such a mesh
// is set up again over the same ranks under the same name (communicators formed anew), once every
// worker of it answered a Ping posted when the mesh became ready to (a worker runs its commands one
// at a time in order: one busy with long work on another mesh would reach the set-up's rendezvous
// only after its peers gave up waiting for it), and each of
// its DTensors is moved onto it: one whose every block on a restarted worker is held by a live rank
// along a Replicate mesh dim gets it back by a SpreadTensor broadcast from that rank, posted in the
// workers' command order before anything else can use the tensor (which reads as pending until
// then); one with a block only restarted workers held (Partial blocks are summands, never
// replicas) answers DATA_LOSS naming the tensor, the block and the worker. A mesh whose ranks hold
// local tensors (collectives API), which cannot be repaired, is not taken back: it stays broken
// until deleted. Thread-safe.
class ReplicaRepair {
 public:
  ReplicaRepair(WorkerRegistry* registry, MeshTable* meshes, Dispatcher* dispatcher,
                RendezvousStore* store, MeshReformer* reformer, DTensorTable* tensors,
                WorkerBytes* ledger, absl::Duration interval = absl::Milliseconds(200))
      : registry_(registry),
        meshes_(meshes),
        dispatcher_(dispatcher),
        store_(store),
        reformer_(reformer),
        tensors_(tensors),
        ledger_(ledger),
        interval_(interval) {}
  ~ReplicaRepair();

  // Called once a mesh took its restarted workers back: `old` set up again as `now`, its tensors
  // moved onto it. Set once, before Start.
  using Rejoined = std::function<void(const Mesh& old, const std::shared_ptr<Mesh>& now)>;
  void OnRejoined(Rejoined rejoined) { rejoined_ = std::move(rejoined); }

  // Starts looking in the background.
  void Start();

  // How long a rejoin's Ping waits for a busy worker before it is posted again.
  static constexpr absl::Duration kPingTimeout = absl::Seconds(30);

  // The SpreadTensor that gives the ranks at mesh positions `restarted` of a tensor laid out as
  // `spec` their blocks back from live replicas: a broadcast along one Replicate mesh dim, each
  // group along it from its first rank that was not restarted (groups may differ: two diagonal
  // ranks of a 2x2 mesh). nullopt when no dim has a live rank in every group (the caller reports
  // a loss).
  static std::optional<v1::SpreadTensor> RepairCommand(const DTensorSpec& spec,
                                                       const std::vector<int64_t>& restarted);

 private:
  void Run();
  // Whether some worker of `mesh` registered again since the mesh was set up, and every worker of
  // it runs now under the incarnation the registry hands out: each sent a heartbeat later than the
  // latest of those registrations (a worker that died with a restarted one, e.g. in the same pod,
  // sends none until it registers again, though it counts as alive until its heartbeats lapse).
  bool ReadyToRejoin(const Mesh& mesh) const;
  // Whether every worker of `mesh` answered a Ping posted to its current incarnation: none has
  // older work queued before the rejoin's set-up. Posts the Ping when none is in flight for these
  // incarnations (again after one that failed or timed out); false until it is answered.
  bool Reached(const Mesh& mesh);
  // Sets `old` up again over its workers' current incarnations and repairs its tensors, under
  // the change locks of both meshes (a DeleteMesh waits for it); returns the new mesh, or null if
  // there was nothing to do. NOT_FOUND if `old` was deleted.
  absl::StatusOr<std::shared_ptr<Mesh>> Rejoin(Mesh& old);
  // Rejoin's parts, each called under its locks.
  struct Returned;
  // How the workers of `old` came back, by mesh position.
  absl::StatusOr<Returned> GatherReturned(const Mesh& old) const;
  // The write of `entry`, tensor `t` moved onto `mesh` (over `ranks`, whose communicators' set-up
  // ended with `formed`), as Rehome's repair wants it: its status, or nullopt once the
  // SpreadTensor giving restarted workers their blocks is posted.
  std::optional<absl::Status> RepairMoved(const Returned& back, const std::vector<int64_t>& ranks,
                                          const Mesh& mesh, const absl::Status& formed,
                                          const DTensorEntry& t, const DTensorEntry& entry);
  // Tears down the communicators of `old` on the workers that kept them and erases its store keys.
  void TearDownOld(const Mesh& old, const Returned& back);

  WorkerRegistry* registry_;
  MeshTable* meshes_;
  Dispatcher* dispatcher_;
  RendezvousStore* store_;
  MeshReformer* reformer_;
  DTensorTable* tensors_;
  WorkerBytes* ledger_;
  const absl::Duration interval_;
  Rejoined rejoined_;
  // The Pings of Reached by mesh id, shared with their callbacks (which may outlive this).
  struct Pings {
    struct Ping {
      std::vector<int64_t> incarnations;  // of the workers it went to, by mesh position
      bool answered = false;
    };
    absl::Mutex mu;
    std::map<int64_t, Ping> by_mesh ABSL_GUARDED_BY(mu);
  };
  const std::shared_ptr<Pings> pings_ = std::make_shared<Pings>();
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_RECOVERY_REPLICA_REPAIR_H_
