#ifndef TESSERA_SERVER_STATE_STORE_H_
#define TESSERA_SERVER_STATE_STORE_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

struct sqlite3;

namespace tessera {

// The coordinator's durable state: records (serialized protos) by kind ("worker", "mesh",
// "tensor", ...) and key, kept in one SQLite database in WAL mode with synchronous=FULL, so that a
// Put or Erase that returned OK survives kill -9 and power loss, and a transaction cut short is
// never seen. Thread-safe.
class StateStore {
 public:
  // Opens (creating if needed) the database `state.db` under `dir` (created if missing);
  // UNAVAILABLE naming the path if it cannot be opened or is not a Tessera state database.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(const std::string& dir);
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  // Writes `value` under (`kind`, `key`), replacing any record there, durably before returning.
  absl::Status Put(const std::string& kind, const std::string& key, const std::string& value);
  // Removes (`kind`, `key`), durably; removing an absent record is OK.
  absl::Status Erase(const std::string& kind, const std::string& key);
  // Every record of `kind`, by key.
  absl::StatusOr<std::map<std::string, std::string>> Load(const std::string& kind) const;

  const std::string& path() const { return path_; }

 private:
  StateStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  // Runs one statement with up to three blob parameters (null: not bound).
  absl::Status Exec(const char* sql, const std::string* a, const std::string* b,
                    const std::string* c) const;

  mutable absl::Mutex mu_;
  sqlite3* db_ ABSL_PT_GUARDED_BY(mu_);
  const std::string path_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_STATE_STORE_H_
