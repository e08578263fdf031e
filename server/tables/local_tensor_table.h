#ifndef TESSERA_SERVER_TABLES_LOCAL_TENSOR_TABLE_H_
#define TESSERA_SERVER_TABLES_LOCAL_TENSOR_TABLE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/cluster/worker_bytes.h"
#include "server/tables/collective_layouts.h"

namespace tessera {

// Where a LocalTensorTable counts its bytes: the ledger (none: not counted), and by mesh position
// the worker and its memory budget.
struct LocalTensorAccount {
  WorkerBytes* ledger = nullptr;
  std::vector<int64_t> workers;
  std::vector<int64_t> budgets;
};

// What the ranks of one mesh hold under each local tensor name (uploads and collectives'
// outputs), as the workers will hold it once the commands accepted so far have run. A
// collective's output is entered when it is accepted, so that later calls can use it at once; the
// last writer accepted for a name settles its entry when it finishes. With a byte account, what
// each rank holds is also held in a WorkerBytes ledger against its worker's budget, and uploads
// and collective outputs that would pass it are refused before anything runs. Thread-safe.
class LocalTensorTable {
 public:
  LocalTensorTable(std::string mesh_name, size_t ranks, LocalTensorAccount account = {});

  // A write accepted for a name: its number among the writers, and what it changes.
  struct Reservation {
    int64_t write = 0;
    std::optional<RankLayouts> previous;  // the entry before it, if the name had one
    std::vector<bool> writes;             // by mesh position: whether it writes there
  };
  // What a rank reported holding under a collective's output once it ran.
  struct Reported {
    bool wrote = false;
    std::optional<LocalLayout> layout;  // nullopt when it wrote none or its layout was unreadable
  };

  // The layouts of `name` for a collective, which needs it on every rank: NOT_FOUND naming the
  // missing ranks, and the failure that removed the name if one did.
  absl::StatusOr<RankLayouts> OnEveryRank(const std::string& name) const;
  // Enters `outputs` (by mesh position; nullopt where the collective writes nothing, so the rank
  // keeps what it held) as what the ranks will hold under `name`; the caller is its last writer.
  // RESOURCE_EXHAUSTED naming the worker, and nothing changes, if an output would pass a worker's
  // budget.
  absl::StatusOr<Reservation> Reserve(const std::string& name, RankLayouts outputs);
  // Settles a collective's output `name` (read from `input`) once its workers replied. If it is
  // still the last writer of the name: on success each rank must report what was reserved
  // (INTERNAL otherwise); on failure the entry goes back to `previous` when the collective left it
  // alone (a failed in-place collective other than all_reduce and broadcast, `kept_input`), else
  // the name leaves the table and `erase_on_workers` runs under the table's lock, so that no
  // collective writing the name again is accepted before it. Returns the collective's outcome.
  absl::Status Settle(const std::string& name, bool kept_input, const Reservation& reservation,
                      absl::Status status, const std::vector<Reported>& reported,
                      absl::FunctionRef<void()> erase_on_workers);

  // Holds the bytes of an upload of `layout` to `rank` under `name` before it starts:
  // RESOURCE_EXHAUSTED naming the worker if they would pass its budget. Finished by RecordUpload,
  // or by CancelUpload if the upload fails.
  absl::Status ReserveUpload(const std::string& name, int64_t rank, const LocalLayout& layout);
  // Gives back what ReserveUpload held: `rank` holds what the table says under `name`.
  void CancelUpload(const std::string& name, int64_t rank);
  // Records that `rank` holds `layout` under `name` after an upload, which is the name's last
  // writer now: collectives still writing it leave its entry be.
  void RecordUpload(const std::string& name, int64_t rank, LocalLayout layout);
  // What `rank` holds under `name`; nullopt if nothing.
  std::optional<LocalLayout> LayoutOn(const std::string& name, int64_t rank) const;
  // Removes `name`; NOT_FOUND if the mesh has no such tensor. Collectives still writing it no
  // longer settle its entry.
  absl::Status Erase(const std::string& name);
  // Every name, ordered.
  std::vector<std::string> Names() const;
  // Forgets every tensor (the mesh is deleted and its workers free them) and gives their bytes
  // back; later calls change nothing in the ledger.
  void Forget();

 private:
  // The ledger's key of `name` on this mesh's workers.
  std::string Key(const std::string& name) const { return key_prefix_ + name; }
  // Sets the ledger's holding of `name` at `position` to `layout` (none: released).
  void Account(const std::string& name, size_t position, const std::optional<LocalLayout>& layout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string mesh_name_;
  const size_t ranks_;
  const LocalTensorAccount account_;
  const std::string key_prefix_;  // unique to this table
  mutable absl::Mutex mu_;
  bool forgotten_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, RankLayouts> tensors_ ABSL_GUARDED_BY(mu_);
  // For each name being written, the number of the last collective or upload accepted to write
  // it: only that one settles the name's entry when it finishes.
  std::map<std::string, int64_t> last_writer_ ABSL_GUARDED_BY(mu_);
  int64_t next_write_ ABSL_GUARDED_BY(mu_) = 1;
  // Why the last collective writing a tensor failed, until one writes it again.
  std::map<std::string, absl::Status> failed_writes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TABLES_LOCAL_TENSOR_TABLE_H_
