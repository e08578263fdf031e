#ifndef TESSERA_SERVER_CLUSTER_STATE_STORE_H_
#define TESSERA_SERVER_CLUSTER_STATE_STORE_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

struct sqlite3;

namespace tessera {

// The coordinator's durable state: records (serialized protos) by kind ("worker", "mesh",
// "tensor", ...) and key, kept in one SQLite database in WAL mode with synchronous=FULL, so that a
// write reported durable survives kill -9 and power loss, and a transaction cut short is never
// seen. Writes apply in the order they are queued; one commit thread takes every write queued
// while the previous commit ran into one transaction (group commit: one fsync for many writes).
// Thread-safe.
class StateStore {
 public:
  // Opens (creating if needed) the database `state.db` under `dir` (created if missing);
  // UNAVAILABLE naming the path if it cannot be opened or is not a Tessera state database.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(const std::string& dir);
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  // Called with a write's outcome once it is durable (OK) or failed, on the commit thread, after
  // the callbacks of every write queued before it. It must not wait for the store.
  using Done = std::function<void(absl::Status)>;

  // Writes `value` under (`kind`, `key`), replacing any record there, durably before returning.
  absl::Status Put(const std::string& kind, const std::string& key, const std::string& value);
  // Removes (`kind`, `key`), durably; removing an absent record is OK.
  absl::Status Erase(const std::string& kind, const std::string& key);
  // Put and Erase that return at once, queued in order with every other write; `done` (may be
  // empty) hears when the write is durable.
  void PutAsync(const std::string& kind, const std::string& key, std::string value, Done done);
  void EraseAsync(const std::string& kind, const std::string& key, Done done);
  // Returns once every write queued before the call is durable; the first failure among them.
  absl::Status Flush();
  // Every record of `kind`, by key, with every write queued before the call applied.
  absl::StatusOr<std::map<std::string, std::string>> Load(const std::string& kind);

  const std::string& path() const { return path_; }

 private:
  // One queued write: a put when `value` is set, else an erase; or only a marker (`kind` empty).
  struct Write {
    std::string kind;
    std::string key;
    std::optional<std::string> value;
    Done done;
  };

  StateStore(sqlite3* db, std::string path);
  void Queue(Write write);
  // Queues `write` and waits for its outcome.
  absl::Status Wait(Write write);
  // The commit thread: takes what is queued, commits it as one transaction, reports each write.
  void CommitLoop();
  absl::Status Commit(const std::vector<Write>& writes);
  // Runs one statement with up to three blob parameters (null: not bound).
  absl::Status Exec(const char* sql, const std::string* a, const std::string* b,
                    const std::string* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(db_mu_);
  absl::Status Apply(const Write& write) ABSL_EXCLUSIVE_LOCKS_REQUIRED(db_mu_);

  absl::Mutex db_mu_;
  sqlite3* db_ ABSL_PT_GUARDED_BY(db_mu_);
  const std::string path_;

  absl::Mutex queue_mu_;
  std::vector<Write> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::thread committer_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_CLUSTER_STATE_STORE_H_
