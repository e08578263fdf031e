#ifndef TESSERA_SERVER_TABLES_DTENSOR_TABLE_H_
#define TESSERA_SERVER_TABLES_DTENSOR_TABLE_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/sharding/dtensor_spec.h"
#include "server/cluster/dispatcher.h"
#include "server/cluster/state_store.h"
#include "server/cluster/worker_bytes.h"
#include "server/tables/dtensor_entry.h"
#include "server/tables/mesh_table.h"
#include "server/tables/tensor_records.h"
#include "tessera/v1/tensor.pb.h"

namespace tessera {

// Every DTensor by name, the bytes their shards take on each worker (held in the ledger the local
// tensors share, against the workers' budgets), and the posting of the commands that write and
// free them (their records in the state store are kept by TensorRecords). Thread-safe.
class DTensorTable : public MeshUser {
 public:
  DTensorTable(MeshTable* meshes, Dispatcher* dispatcher, WorkerBytes* ledger)
      : meshes_(meshes), dispatcher_(dispatcher), ledger_(ledger) {}

  // Adds a tensor under `requested` (or a fresh name) after checking that each rank's shard fits
  // its worker's budget next to everything already there (DTensors and local tensors);
  // ALREADY_EXISTS, INVALID_ARGUMENT for a bad name, RESOURCE_EXHAUSTED naming the worker. Meshes
  // of every device type hold DTensors (a cuda worker keeps its shards in the GPU's memory).
  // With `write`, the tensor shares that write (an op's further outputs share its first's).
  absl::StatusOr<std::shared_ptr<DTensorEntry>> Add(const std::string& requested,
                                                    std::shared_ptr<Mesh> mesh, DTensorSpec spec,
                                                    const std::string& owner, bool hidden = false,
                                                    std::shared_ptr<TensorWrite> write = nullptr);
  // Makes a tensor added `hidden` visible: until then Find answers NOT_FOUND for it and OnMesh
  // leaves it out (its name, bytes and owner are held all the same).
  void Reveal(const DTensorEntry& tensor);
  // Replaces `tensor` by one of the same name (and worker-side name) laid out as `spec` (same
  // shape and dtype), whose write the caller posts: a redistribute in place. Its shards' bytes
  // move in the ledger first (RESOURCE_EXHAUSTED naming the worker, and nothing changes, if they
  // do not fit); the old entry counts as released (nothing more is posted for it or frees it).
  // With `write`, the new entry shares that work instead (a relayout undone before anything was
  // posted). NOT_FOUND if `tensor` is no longer in the table. With a store, the new spec is
  // recorded as a "relayout" intent first (erased once the new layout is written and recorded, or
  // by the undo), so that a restart finding an intent that differs from the tensor's record knows
  // the relayout was cut short and the shards may be in either layout.
  absl::StatusOr<std::shared_ptr<DTensorEntry>> Relayout(
      const DTensorEntry& tensor, DTensorSpec spec, std::shared_ptr<TensorWrite> write = nullptr);
  // Records every written tensor (its name, mesh, spec and owner) in `store` before its write
  // counts as done, and erases the record when the tensor is freed. Call before serving.
  void RecordIn(StateStore* store) { records_.RecordIn(store); }
  // Enters a tensor recovered from the store after a coordinator restart, written already; its
  // uses fail with `lost` (DATA_LOSS) unless that is OK. With `repair` (and `lost` OK), a command
  // that gives a worker that came back without its shard the block from a replica: posted as the
  // tensor's write, which its uses wait for.
  absl::Status Restore(const v1::TensorInfo& record, std::shared_ptr<Mesh> mesh,
                       const absl::Status& lost,
                       const std::optional<v1::Command>& repair = std::nullopt);
  // Moves every tensor of `old` onto `mesh` (the same ranks, re-formed after a worker came back):
  // each gets an entry of the same name, spec and owner whose write is done with
  // `repair(old entry, new entry)` unless that returns nullopt (then `repair` has posted the write
  // that makes the tensor whole again, before the new entry enters the table, so that every use
  // is ordered after it). The old entries count as released. Returns the moved entries.
  std::vector<std::shared_ptr<DTensorEntry>> Rehome(
      const Mesh& old, const std::shared_ptr<Mesh>& mesh,
      const std::function<std::optional<absl::Status>(const DTensorEntry&, const DTensorEntry&)>&
          repair);
  // Names being recovered after a coordinator restart: looking one up answers UNAVAILABLE until
  // DoneRecovering (NOT_FOUND after, if it was not recovered).
  void SetRecovering(std::set<std::string> names);
  void DoneRecovering(const std::string& name);
  // The named tensor; NOT_FOUND if unknown.
  absl::StatusOr<std::shared_ptr<DTensorEntry>> Find(const std::string& name) const;
  // The named tensor, ready to be read by a new command: its mesh is healthy and the work that
  // writes it has not failed (its error is returned, naming the tensor).
  absl::StatusOr<std::shared_ptr<DTensorEntry>> Usable(const std::string& name) const;
  // Tensors on the mesh named `mesh` (every tensor if empty), ordered by name.
  std::vector<std::shared_ptr<DTensorEntry>> OnMesh(const std::string& mesh) const;
  // Tensors owned by `client`, ordered by name.
  std::vector<std::shared_ptr<DTensorEntry>> OwnedBy(const std::string& client) const;
  // Frees a tensor's shards on its workers (asynchronously) and drops it from the table; again
  // does nothing. Its record's erasure is durable on return, or only queued (the caller then
  // calls Flush before answering). Returns the workers' free, which a caller may wait for; null
  // when none was posted to the whole mesh.
  std::shared_ptr<const TensorWrite> Release(const DTensorEntry& tensor,
                                             Durability durability = Durability::kBeforeReturn);
  // Posts `command`, which writes `tensor` (with Post's `inputs`), unless the tensor was released:
  // then its write fails and NOT_FOUND says it was freed.
  absl::Status PostWrite(const DTensorEntry& tensor, const v1::Command& command,
                         std::vector<std::shared_ptr<DTensorEntry>> inputs = {});
  // PostWrite of a command that writes several tensors sharing the first's write (Add's `write`):
  // each is recorded once written, and the write completes once every record is durable.
  absl::Status PostWrites(const std::vector<std::shared_ptr<DTensorEntry>>& tensors,
                          const v1::Command& command,
                          std::vector<std::shared_ptr<DTensorEntry>> inputs = {});
  // Completes the write of a tensor that needs no command after its upload; NOT_FOUND (and the
  // write fails) if it was released meanwhile.
  absl::Status FinishWrite(const DTensorEntry& tensor);
  // Waits until the work writing each of `tensors` is done, at most until `deadline`: the first
  // failure, naming its tensor; DEADLINE_EXCEEDED naming one still being written.
  static absl::Status AwaitWrites(const std::vector<std::shared_ptr<DTensorEntry>>& tensors,
                                  absl::Time deadline);
  static absl::Status AwaitWrite(const DTensorEntry& tensor, absl::Time deadline);
  // A fresh worker-side name for a temporary of the workers (e.g. a reduced copy to read).
  std::string TemporaryName();

  // Sends `command` to every rank of `mesh`; its result completes `write`. When it fails and one
  // of `inputs` failed before it, the input's error is the cause reported.
  // When it succeeds, `on_success` runs first and completes `write` with the status it is called
  // with, at once or later on another thread; a failure fails `write`.
  using OnSuccess = std::function<void(std::function<void(absl::Status)>)>;
  void Post(const Mesh& mesh, const v1::Command& command, std::shared_ptr<TensorWrite> write,
            std::vector<std::shared_ptr<DTensorEntry>> inputs = {}, OnSuccess on_success = nullptr);
  // Returns once every record change queued so far is durable (OK without a store).
  absl::Status Flush() const { return records_.Flush(); }
  // Drops the mesh's tensors from the table; returns their worker-side names.
  std::vector<std::string> ForgetMesh(const Mesh& mesh) override;

  // The answer to a call on `tensor` that failed with `failure`: DATA_LOSS naming the tensor and
  // the worker if a block of it went with a gone worker, UNAVAILABLE naming the worker if one of
  // its mesh is gone but every block survives, else `failure`; never with the workers' internal
  // tensor names. When `failure` may come from a gone worker and none is known to be gone, the
  // mesh's workers are asked first.
  absl::Status Explain(const DTensorEntry& tensor, const absl::Status& failure) const;

  v1::TensorInfo Describe(const DTensorEntry& tensor) const;
  // The worker-side name of a DTensorEntry.
  static std::string WorkerName(const std::string& tensor) { return "dt/" + tensor; }

  const MeshTable& meshes() const { return *meshes_; }
  Dispatcher& dispatcher() { return *dispatcher_; }

 private:
  // The ledger's holdings of a tensor named `name` laid out as `spec` on `mesh`.
  static std::vector<WorkerBytes::Holding> Holdings(const Mesh& mesh, const std::string& name,
                                                    const DTensorSpec& spec);
  // Drops `tensor` from the table (not from the workers) if the table still holds it.
  void Drop(const DTensorEntry& tensor, Durability durability);
  // Gives back the bytes of `tensor`'s shards in the ledger.
  void ReleaseBytes(const DTensorEntry& tensor);
  // Bytes of the shard at mesh `position` of a tensor laid out as `spec`.
  static int64_t ShardBytes(const DTensorSpec& spec, int64_t position);
  // The write of `tensor` fails: it was freed before it was written.
  static absl::Status Freed(const DTensorEntry& tensor);

  MeshTable* meshes_;
  Dispatcher* dispatcher_;
  WorkerBytes* ledger_;
  TensorRecords records_;  // the tensors' records and relayout intents in the state store
  mutable absl::Mutex mu_;
  std::set<std::string> recovering_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> hidden_ ABSL_GUARDED_BY(mu_);  // added hidden, not yet revealed
  // The named entry, hidden or not; null if none.
  std::shared_ptr<DTensorEntry> Entry(const std::string& name) const;
  std::map<std::string, std::shared_ptr<DTensorEntry>> tensors_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TABLES_DTENSOR_TABLE_H_
