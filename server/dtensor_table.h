#ifndef TESSERA_SERVER_DTENSOR_TABLE_H_
#define TESSERA_SERVER_DTENSOR_TABLE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "core/dtensor_spec.h"
#include "server/dispatcher.h"
#include "server/mesh_table.h"
#include "tessera/v1/tensor.pb.h"

namespace tessera {

// Work posted to the workers that writes a tensor: done once every worker replied.
struct TensorWrite {
  absl::Notification done;
  absl::Status status;  // written before done is notified
};

// A DTensor as the table holds it: its spec on a mesh, its owner and the work that writes it.
// Immutable once made.
struct DTensorEntry {
  std::string name;
  std::shared_ptr<Mesh> mesh;
  DTensorSpec spec;
  std::string owner;
  std::shared_ptr<TensorWrite> write;
};

// Every DTensor by name, the bytes their shards take on each worker (checked against the
// workers' budgets), and the posting of the commands that write and free them. Thread-safe.
class DTensorTable : public MeshUser {
 public:
  DTensorTable(MeshTable* meshes, Dispatcher* dispatcher)
      : meshes_(meshes), dispatcher_(dispatcher) {}

  // Adds a tensor under `requested` (or a fresh name) after checking that each rank's shard fits
  // its worker's budget next to the tensors already there; ALREADY_EXISTS, INVALID_ARGUMENT for a
  // bad name, RESOURCE_EXHAUSTED naming the worker, UNIMPLEMENTED on a cuda mesh.
  absl::StatusOr<std::shared_ptr<DTensorEntry>> Add(const std::string& requested,
                                                    std::shared_ptr<Mesh> mesh, DTensorSpec spec,
                                                    const std::string& owner);
  // The named tensor; NOT_FOUND if unknown.
  absl::StatusOr<std::shared_ptr<DTensorEntry>> Find(const std::string& name) const;
  // The named tensor, ready to be read by a new command: its mesh is healthy and the work that
  // writes it has not failed (its error is returned, naming the tensor).
  absl::StatusOr<std::shared_ptr<DTensorEntry>> Usable(const std::string& name) const;
  // Tensors on the mesh named `mesh` (every tensor if empty), ordered by name.
  std::vector<std::shared_ptr<DTensorEntry>> OnMesh(const std::string& mesh) const;
  // Tensors owned by `client`, ordered by name.
  std::vector<std::shared_ptr<DTensorEntry>> OwnedBy(const std::string& client) const;
  // Frees a tensor's shards on its workers (asynchronously) and drops it from the table.
  void Release(const DTensorEntry& tensor);
  // A fresh worker-side name for a temporary of the workers (e.g. a reduced copy to read).
  std::string TemporaryName();

  // Sends `command` to every rank of `mesh`; its result completes `write`. When it fails and one
  // of `inputs` failed before it, the input's error is the cause reported.
  void Post(const Mesh& mesh, const v1::Command& command, std::shared_ptr<TensorWrite> write,
            std::vector<std::shared_ptr<DTensorEntry>> inputs = {});
  // Drops the mesh's tensors from the table; returns their worker-side names.
  std::vector<std::string> ForgetMesh(const Mesh& mesh) override;

  v1::TensorInfo Describe(const DTensorEntry& tensor) const;
  // The worker-side name of a DTensorEntry.
  static std::string WorkerName(const std::string& tensor) { return "dt/" + tensor; }

  const MeshTable& meshes() const { return *meshes_; }
  Dispatcher& dispatcher() { return *dispatcher_; }

 private:
  // Drops a tensor from the table (not from the workers).
  void Drop(const std::string& name);
  // Bytes of the shard at mesh `position` of a tensor laid out as `spec`.
  static int64_t ShardBytes(const DTensorSpec& spec, int64_t position);

  MeshTable* meshes_;
  Dispatcher* dispatcher_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<DTensorEntry>> tensors_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Bytes of DTensorEntry shards on each worker, by worker id, as the specs say.
  std::map<int64_t, int64_t> held_bytes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_SERVER_DTENSOR_TABLE_H_
