#ifndef TESSERA_SERVER_TABLES_MESH_TABLE_H_
#define TESSERA_SERVER_TABLES_MESH_TABLE_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/sharding/device_mesh.h"
#include "server/cluster/mesh_communicators.h"
#include "server/cluster/worker_bytes.h"
#include "server/cluster/worker_registry.h"
#include "server/tables/local_tensor_table.h"

namespace tessera {

// A mesh over registered workers: its ranks, their incarnations and budgets when it was set up,
// and the local tensors its ranks hold (counted in `ledger` against the budgets, when given).
struct Mesh {
  Mesh(std::string name, DeviceMesh mesh, std::vector<int64_t> incarnations, absl::Duration timeout,
       std::vector<int64_t> budgets = {}, WorkerBytes* ledger = nullptr);

  int64_t id = 0;  // set when the mesh enters a MeshTable
  const std::string name;
  const DeviceMesh mesh;
  const std::vector<int64_t> incarnations;  // by rank, as registered when the mesh was set up
  const absl::Duration timeout;             // of its collectives
  const std::vector<int64_t> budgets;       // by rank, the workers' memory budgets (0: none)
  // Held from accepting a command until it is posted, so that the workers run a mesh's commands in
  // the order the coordinator accepted them. Never taken by completions.
  absl::Mutex submit_mu;
  // Held while the mesh is deleted or set up again over workers that came back (ReplicaRepair),
  // so that the two never interleave. Taken before submit_mu and MeshTable's lock.
  absl::Mutex change_mu;
  LocalTensorTable locals;  // what each rank holds under each name (uploads and collectives)
  MeshCommunicators comms;  // their generation, and whether a failure broke them

  // Time a command gets beyond the collectives it runs (set-up, deletes, the RPC itself).
  static constexpr absl::Duration kRpcSlack = absl::Seconds(10);
  // The deadline of a command on this mesh's workers.
  absl::Duration command_timeout() const { return timeout + kRpcSlack; }
};

// Something that keeps state on meshes (collective works, DTensors) and lets go of it when a mesh
// is deleted.
class MeshUser {
 public:
  virtual ~MeshUser() = default;
  // Forgets everything on `mesh`; returns the worker-side tensor names its workers should free.
  virtual std::vector<std::string> ForgetMesh(const Mesh& mesh) = 0;
};

// Every mesh by name, and each mesh's health as the worker registry sees it. Thread-safe.
class MeshTable {
 public:
  explicit MeshTable(const WorkerRegistry* registry) : registry_(registry) {}

  // Enters `mesh` under its name with a fresh id; ALREADY_EXISTS if the name is taken.
  absl::Status Add(const std::shared_ptr<Mesh>& mesh);
  // Removes and returns the named mesh; NOT_FOUND if unknown.
  absl::StatusOr<std::shared_ptr<Mesh>> Remove(const std::string& name);
  // Removes `mesh` if it is still the mesh under its name; NOT_FOUND otherwise.
  absl::Status Remove(const Mesh& mesh);
  // Puts `mesh` (same name, a fresh id) in the place of `old`; NOT_FOUND if `old` is no longer the
  // mesh under that name (deleted meanwhile).
  absl::Status Replace(const Mesh& old, const std::shared_ptr<Mesh>& mesh);
  // Names being recovered after a coordinator restart: looking one up answers UNAVAILABLE until
  // DoneRecovering (NOT_FOUND after, if it was not recovered).
  void SetRecovering(std::set<std::string> names);
  void DoneRecovering(const std::string& name);
  // The named mesh; NOT_FOUND if unknown.
  absl::StatusOr<std::shared_ptr<Mesh>> Find(const std::string& name) const;
  // The mesh with id `id`; NOT_FOUND if there is none (any more).
  absl::StatusOr<std::shared_ptr<Mesh>> FindById(int64_t id) const;
  // The named mesh if it can run commands: NOT_FOUND if unknown, UNAVAILABLE if broken.
  absl::StatusOr<std::shared_ptr<Mesh>> Ready(const std::string& name) const;
  // The named mesh if its workers serve it, for transfers that use no communicator (while its
  // communicators are re-formed too): NOT_FOUND if unknown, UNAVAILABLE if a worker is lost.
  absl::StatusOr<std::shared_ptr<Mesh>> Reachable(const std::string& name) const;
  // Every mesh, ordered by name.
  std::vector<std::shared_ptr<Mesh>> List() const;

  // The workers of a mesh's ranks, in rank order, looked up once: UNAVAILABLE naming the worker
  // when one is dead or restarted since the mesh was set up.
  absl::StatusOr<std::vector<WorkerHandle>> Workers(const Mesh& mesh) const;
  // OK, or why the mesh cannot run commands (UNAVAILABLE): a worker dead or restarted since
  // set-up, or its communicators broken by a failure and not yet re-formed.
  absl::Status Health(const Mesh& mesh) const;
  // The workers of a mesh that can run commands, as Workers; UNAVAILABLE as Health.
  absl::StatusOr<std::vector<WorkerHandle>> ReadyWorkers(const Mesh& mesh) const;
  // The mesh's workers still serving the incarnation it was set up with, in rank order.
  std::vector<WorkerHandle> LiveWorkers(const Mesh& mesh) const;
  // Their ids.
  std::vector<int64_t> LiveWorkerIds(const Mesh& mesh) const;

 private:
  // NOT_FOUND for a mesh named `name`, or UNAVAILABLE while it is being recovered.
  absl::Status Missing(const std::string& name) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WorkerRegistry* registry_;
  mutable absl::Mutex mu_;
  std::set<std::string> recovering_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Mesh>> meshes_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TABLES_MESH_TABLE_H_
