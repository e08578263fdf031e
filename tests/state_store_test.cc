#include "server/state_store.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the test's temporary directory.
std::string FreshDir(const std::string& name) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / absl::StrCat("state_store_", name, "_", getpid());
  fs::remove_all(dir);
  return dir.string();
}

// Runs `writes` on a store opened in a child process that then dies without closing it (as on
// kill -9), so that its write-ahead log is left as it was.
template <typename F>
void WriteAndDie(const std::string& dir, F writes) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(dir);
    if (!store.ok()) _exit(2);
    _exit(writes(**store) ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
}

TEST(StateStore, ReopenedStoreHoldsWhatWasWrittenAndNotWhatWasErased) {
  const std::string dir = FreshDir("reopen");
  {
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Put("tensor", "a", std::string("\0\1bytes", 7)).ok());
    ASSERT_TRUE((*store)->Put("tensor", "b", "old").ok());
    ASSERT_TRUE((*store)->Put("tensor", "b", "new").ok());
    ASSERT_TRUE((*store)->Put("tensor", "c", "gone").ok());
    ASSERT_TRUE((*store)->Erase("tensor", "c").ok());
    ASSERT_TRUE((*store)->Erase("tensor", "never").ok());
    ASSERT_TRUE((*store)->Put("mesh", "a", "a mesh").ok());
  }
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::map<std::string, std::string>> tensors = (*store)->Load("tensor");
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(*tensors,
            (std::map<std::string, std::string>{{"a", std::string("\0\1bytes", 7)}, {"b", "new"}}));
  EXPECT_EQ(*(*store)->Load("mesh"), (std::map<std::string, std::string>{{"a", "a mesh"}}));
  EXPECT_TRUE((*store)->Load("module")->empty());
}

TEST(StateStore, WritesOfAProcessKilledWithoutClosingSurvive) {
  const std::string dir = FreshDir("killed");
  WriteAndDie(dir, [](StateStore& s) {
    for (int i = 0; i < 20; ++i) {
      if (!s.Put("tensor", absl::StrCat("t", i), absl::StrCat("v", i)).ok()) return false;
    }
    return s.Erase("tensor", "t3").ok();
  });
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  std::map<std::string, std::string> want;
  for (int i = 0; i < 20; ++i) {
    if (i != 3) want[absl::StrCat("t", i)] = absl::StrCat("v", i);
  }
  EXPECT_EQ(*(*store)->Load("tensor"), want);
}

// A crash while the last transaction's log frames were written: that transaction is not seen,
// every one before it is.
TEST(StateStore, TornLastTransactionIsNotSeen) {
  const std::string dir = FreshDir("torn");
  WriteAndDie(dir, [](StateStore& s) {
    return s.Put("tensor", "first", "kept").ok() && s.Put("tensor", "last", "torn").ok();
  });
  const fs::path wal = fs::path(dir) / "state.db-wal";
  ASSERT_TRUE(fs::exists(wal)) << "the killed process left no write-ahead log";
  const uintmax_t size = fs::file_size(wal);
  ASSERT_GT(size, 100u);
  fs::resize_file(wal, size - 100);  // the last frame (the last commit) cut short
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->Load("tensor"), (std::map<std::string, std::string>{{"first", "kept"}}));
}

TEST(StateStore, UnusableDirectoryIsUnavailableNamingIt) {
  const std::string file = FreshDir("file");
  fs::create_directories(fs::path(file).parent_path());
  { std::ofstream(file) << "x"; }
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(file);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(store.status().message().find(file), std::string::npos) << store.status();
}

}  // namespace
}  // namespace tessera
