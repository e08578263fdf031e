#ifndef TESSERA_SERVER_TABLES_TENSOR_RECORDS_H_
#define TESSERA_SERVER_TABLES_TENSOR_RECORDS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/cluster/state_store.h"
#include "server/tables/dtensor_entry.h"

namespace tessera {

// When a change to the store's records is durable: before the call returns, or queued (durable
// once a later Flush returns).
enum class Durability { kBeforeReturn, kQueued };

// The DTensors' records in the state store: each written tensor's record (a v1::TensorInfo of its
// name, mesh, spec and owner, kind "tensor"), and while a relayout in place is under way, its
// intent (the same record of the new spec, kind "relayout"). Without a store nothing is recorded.
// As thread-safe as the store.
class TensorRecords {
 public:
  // Records in `store` from now on (null: nothing is recorded). Call before serving.
  void RecordIn(StateStore* store) { store_ = store; }
  // Records the new spec of a tensor being relaid out in place, `relaid`, as its "relayout"
  // intent, durable on return; whether an intent was recorded (none without a store).
  absl::StatusOr<bool> RecordRelayout(const DTensorEntry& relaid) const;
  // Records `tensor` in the store unless it was released (its "relayout" intent, if it has one,
  // erased after); the caller holds its post_mu.
  absl::Status Persist(const DTensorEntry& tensor) const;
  // Queues the record of `tensor` (its post_mu held) and calls `done` once it is durable, from the
  // store's commit thread; false (and `done` not called) when there is nothing to record.
  bool PersistAsync(const DTensorEntry& tensor, StateStore::Done done) const;
  // Erases the "relayout" intent of the tensor named `name` from the store, logging a failure.
  void EraseRelayout(const std::string& name, Durability durability) const;
  // Erases the record of the tensor named `name` from the store, logging a failure.
  void Unrecord(const std::string& name, Durability durability) const;
  // Returns once every record change queued so far is durable (OK without a store).
  absl::Status Flush() const;

 private:
  // The v1::TensorInfo of `tensor` (name, mesh, spec, owner), serialized.
  static std::string Encode(const DTensorEntry& tensor);
  // The store record of `tensor`; none without a store or once it was released (the caller holds
  // its post_mu).
  std::optional<std::string> RecordOf(const DTensorEntry& tensor) const;
  // Erases (`kind`, `name`) from the store; a failure is logged as "`name`: `what_stays`".
  void EraseRecord(const char* kind, const std::string& name, Durability durability,
                   const char* what_stays) const;

  StateStore* store_ = nullptr;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TABLES_TENSOR_RECORDS_H_
