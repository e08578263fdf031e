#include "server/state_store.h"

#include <sqlite3.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

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
    absl::MutexLock lock(&store->mu_);
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

StateStore::~StateStore() { sqlite3_close(db_); }

absl::Status StateStore::Exec(const char* sql, const std::string* a, const std::string* b,
                              const std::string* c) const {
  absl::MutexLock lock(&mu_);
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
  return Exec("INSERT OR REPLACE INTO records (kind, key, value) VALUES (?1, ?2, ?3)", &kind, &key,
              &value);
}

absl::Status StateStore::Erase(const std::string& kind, const std::string& key) {
  return Exec("DELETE FROM records WHERE kind = ?1 AND key = ?2", &kind, &key, nullptr);
}

absl::StatusOr<std::map<std::string, std::string>> StateStore::Load(const std::string& kind) const {
  absl::MutexLock lock(&mu_);
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
