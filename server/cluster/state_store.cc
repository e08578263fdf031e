#include "server/cluster/state_store.h"

#include <sqlite3.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

absl::Status SqliteError(sqlite3* db, const std::string& path, const std::string& what) {
  return absl::UnavailableError(
      absl::StrCat("state store ", path, ": ", what, ": ", db ? sqlite3_errmsg(db) : "no memory"));
}

// Binds `value` (may be null: nothing bound) as parameter `index` of `stmt`.
int BindText(sqlite3_stmt* stmt, int index, const std::string* value) {
  if (value == nullptr) return SQLITE_OK;
  return sqlite3_bind_blob64(stmt, index, value->data(), value->size(), SQLITE_TRANSIENT);
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("state directory ", dir, " cannot be created: ", ec.message()));
  }
  const std::string path = (std::filesystem::path(dir) / "state.db").string();
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    absl::Status s = SqliteError(db, path, "open");
    sqlite3_close(db);
    return s;
  }
  std::unique_ptr<StateStore> store(new StateStore(db, path));
  sqlite3_busy_timeout(db, 5000);
  for (const char* sql : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL",
                          "CREATE TABLE IF NOT EXISTS records (kind TEXT NOT NULL, key BLOB NOT "
                          "NULL, value BLOB NOT NULL, PRIMARY KEY (kind, key))"}) {
    absl::MutexLock lock(&store->db_mu_);
    char* error = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &error) != SQLITE_OK) {
      absl::Status s = absl::UnavailableError(
          absl::StrCat("state store ", path, ": ", sql, ": ", error ? error : "failed"));
      sqlite3_free(error);
      return s;
    }
  }
  return store;
}

StateStore::StateStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {
  committer_ = std::thread([this] { CommitLoop(); });
}

StateStore::~StateStore() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  committer_.join();  // commits what is queued first
  sqlite3_close(db_);
}

void StateStore::Queue(Write write) {
  absl::MutexLock lock(&queue_mu_);
  queue_.push_back(std::move(write));
}

absl::Status StateStore::Wait(Write write) {
  if (std::this_thread::get_id() == committer_.get_id()) {
    // A callback writing: the commit thread is between transactions, so it applies at once.
    absl::MutexLock lock(&db_mu_);
    return Apply(write);
  }
  absl::Notification done;
  absl::Status outcome;
  write.done = [&](absl::Status s) {
    outcome = std::move(s);
    done.Notify();
  };
  Queue(std::move(write));
  done.WaitForNotification();
  return outcome;
}

void StateStore::CommitLoop() {
  for (;;) {
    std::vector<Write> writes;
    {
      absl::MutexLock lock(&queue_mu_);
      queue_mu_.Await(absl::Condition(
          +[](StateStore* s)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return !s->queue_.empty() || s->stopping_; },
          this));
      if (queue_.empty()) return;  // stopping, and nothing left
      writes.swap(queue_);
    }
    const absl::Status committed = Commit(writes);
    for (Write& w : writes) {
      if (w.done) w.done(committed);
    }
  }
}

absl::Status StateStore::Commit(const std::vector<Write>& writes) {
  absl::MutexLock lock(&db_mu_);
  absl::Status s = Exec("BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
  for (size_t i = 0; s.ok() && i < writes.size(); ++i) s = Apply(writes[i]);
  if (s.ok()) s = Exec("COMMIT", nullptr, nullptr, nullptr);
  if (!s.ok() && !sqlite3_get_autocommit(db_))
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  return s;
}

absl::Status StateStore::Apply(const Write& w) {
  if (w.kind.empty()) return absl::OkStatus();  // a marker
  if (w.value.has_value()) {
    return Exec("INSERT OR REPLACE INTO records (kind, key, value) VALUES (?1, ?2, ?3)", &w.kind,
                &w.key, &*w.value);
  }
  return Exec("DELETE FROM records WHERE kind = ?1 AND key = ?2", &w.kind, &w.key, nullptr);
}

absl::Status StateStore::Exec(const char* sql, const std::string* a, const std::string* b,
                              const std::string* c) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr) != SQLITE_OK) {
    return SqliteError(db_, path_, sql);
  }
  int rc = BindText(stmt, 1, a);
  if (rc == SQLITE_OK) rc = BindText(stmt, 2, b);
  if (rc == SQLITE_OK) rc = BindText(stmt, 3, c);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  absl::Status s = rc == SQLITE_DONE ? absl::OkStatus() : SqliteError(db_, path_, sql);
  sqlite3_finalize(stmt);
  return s;
}

absl::Status StateStore::Put(const std::string& kind, const std::string& key,
                             const std::string& value) {
  return Wait({kind, key, value, nullptr});
}

absl::Status StateStore::Erase(const std::string& kind, const std::string& key) {
  return Wait({kind, key, std::nullopt, nullptr});
}

void StateStore::PutAsync(const std::string& kind, const std::string& key, std::string value,
                          Done done) {
  Queue({kind, key, std::move(value), std::move(done)});
}

void StateStore::EraseAsync(const std::string& kind, const std::string& key, Done done) {
  Queue({kind, key, std::nullopt, std::move(done)});
}

absl::Status StateStore::Flush() { return Wait({"", "", std::nullopt, nullptr}); }

absl::StatusOr<std::map<std::string, std::string>> StateStore::Load(const std::string& kind) {
  RETURN_IF_ERROR(Flush());
  absl::MutexLock lock(&db_mu_);
  sqlite3_stmt* stmt = nullptr;
  const char* sql = "SELECT key, value FROM records WHERE kind = ?1";
  if (sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr) != SQLITE_OK) {
    return SqliteError(db_, path_, sql);
  }
  std::map<std::string, std::string> out;
  int rc = BindText(stmt, 1, &kind);
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW) break;
    auto text = [&](int column) {
      const char* data = static_cast<const char*>(sqlite3_column_blob(stmt, column));
      return std::string(data ? data : "", static_cast<size_t>(sqlite3_column_bytes(stmt, column)));
    };
    out[text(0)] = text(1);
  }
  absl::Status s = rc == SQLITE_DONE ? absl::OkStatus() : SqliteError(db_, path_, sql);
  sqlite3_finalize(stmt);
  if (!s.ok()) return s;
  return out;
}

}  // namespace tessera
