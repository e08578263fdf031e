#include "server/cluster/state_store.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
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

// Queued writes, mixed with waited-for ones: after Flush returns in a process that then dies, the
// reopened store holds exactly what applying every write in queue order gives, and each write's
// callback heard OK, in queue order.
class QueuedWrites : public ::testing::TestWithParam<int> {};

TEST_P(QueuedWrites, ApplyInQueueOrderAndAreDurableOnceFlushed) {
  const int n = GetParam();
  const std::string dir = FreshDir(absl::StrCat("queued_", n));
  std::map<std::string, std::string> want;
  for (int i = 0; i < n; ++i) {
    if (i % 7 != 3) want[absl::StrCat("t", i % 50)] = absl::StrCat("v", i);
    if (i % 7 == 3) want.erase(absl::StrCat("t", i % 50));
  }
  want["sync"] = "waited";
  WriteAndDie(dir, [n](StateStore& s) {
    std::vector<int> heard;
    absl::Mutex mu;
    bool all_ok = true;
    for (int i = 0; i < n; ++i) {
      auto done = [&, i](absl::Status st) {
        absl::MutexLock lock(&mu);
        heard.push_back(i);
        all_ok = all_ok && st.ok();
      };
      const std::string key = absl::StrCat("t", i % 50);
      if (i % 7 == 3) {
        s.EraseAsync("tensor", key, done);
      } else {
        s.PutAsync("tensor", key, absl::StrCat("v", i), done);
      }
      if (i == n / 2 && !s.Put("tensor", "sync", "waited").ok()) return false;
    }
    if (!s.Flush().ok()) return false;
    absl::MutexLock lock(&mu);
    std::vector<int> in_order(n);
    for (int i = 0; i < n; ++i) in_order[i] = i;
    return all_ok && heard == in_order;
  });
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->Load("tensor"), want);
}

INSTANTIATE_TEST_SUITE_P(Counts, QueuedWrites, ::testing::Values(1, 10, 2000));

// A callback may write and wait (it runs on the commit thread, which applies it at once).
TEST(StateStore, ACallbackThatWritesAndWaitsDoesNotDeadlock) {
  const std::string dir = FreshDir("callback");
  WriteAndDie(dir, [](StateStore& s) {
    absl::Notification wrote;
    absl::Status inner;
    s.PutAsync("tensor", "outer", "first", [&](absl::Status st) {
      inner = st.ok() ? s.Put("tensor", "inner", "from the callback") : st;
      wrote.Notify();
    });
    return wrote.WaitForNotificationWithTimeout(absl::Seconds(30)) && inner.ok();
  });
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->Load("tensor"), (std::map<std::string, std::string>{
                                           {"inner", "from the callback"}, {"outer", "first"}}));
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
