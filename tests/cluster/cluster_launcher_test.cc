// `tessera up` as a launcher: its daemons start with no signal blocked or ignored (it blocks SIGINT
// and SIGTERM itself), die with it when it is killed with SIGKILL, and it reports a daemon's end:
// a worker's while serving on, the coordinator's by restarting it with the same flags and state
// dir (the workers and their shards stay), or with --no-restart_coordinator by stopping the
// workers and exiting nonzero.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/small_integer_tensor.h"
#include "gtest/gtest.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

// The text of a file, or "" if it cannot be read.
std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The value of `field` ("SigBlk", "PPid", "State", ...) in /proc/<pid>/status; "" if none.
std::string ProcStatusField(pid_t pid, const std::string& field) {
  for (absl::string_view line :
       absl::StrSplit(ReadFile(absl::StrCat("/proc/", pid, "/status")), '\n')) {
    if (absl::ConsumePrefix(&line, field + ":"))
      return std::string(absl::StripAsciiWhitespace(line));
  }
  return "";
}

// Whether `pid` has ended: gone, or a zombie nobody has reaped yet.
bool Ended(pid_t pid) {
  const std::string state = ProcStatusField(pid, "State");
  return state.empty() || state[0] == 'Z' || state[0] == 'X';
}

// The processes whose parent is `parent`, with the programs they run (/proc/<pid>/cmdline's first
// word; /proc/<pid>/comm says "exe" for a worker that started itself again).
std::vector<std::pair<pid_t, std::string>> Children(pid_t parent) {
  std::vector<std::pair<pid_t, std::string>> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    if (ProcStatusField(pid, "PPid") != absl::StrCat(parent) || Ended(pid)) continue;
    const std::string command = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
    out.push_back({pid, std::filesystem::path(command.c_str()).filename().string()});
  }
  return out;
}

// `tessera up --workers N` started as a child, its output in a file.
class UpProcess {
 public:
  UpProcess(int workers, const std::string& output, std::vector<std::string> flags = {})
      : output_(output) {
    const std::string binary = TESSERA_CLI_BINARY;
    std::vector<std::string> args = {binary, "up", absl::StrCat("--workers=", workers),
                                     "--heartbeat_interval=200ms"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int fd = open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    close(fd);
  }
  ~UpProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }
  std::string output() const { return ReadFile(output_); }

  // Waits until its output contains `text`, for at most `timeout`.
  bool WaitForOutput(const std::string& text, absl::Duration timeout) const {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (absl::StrContains(output(), text)) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  // Waits for it to exit within `timeout`; its wait status, or nullopt if it still runs.
  std::optional<int> WaitForExit(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return std::nullopt;
  }

 private:
  std::string output_;
  pid_t pid_ = -1;
};

// Waits until every pid of `pids` has ended, for at most `timeout`; the ones still running.
std::vector<pid_t> StillRunning(const std::vector<pid_t>& pids, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<pid_t> running = pids;
  while (true) {
    std::erase_if(running, Ended);
    if (running.empty() || absl::Now() > deadline) return running;
    absl::SleepFor(absl::Milliseconds(50));
  }
}

class ClusterLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        (std::filesystem::temp_directory_path() / absl::StrCat("tessera-launcher-test-", getpid()))
            .string();
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    if (!HasFailure()) std::filesystem::remove_all(dir_, ignored);
  }
  std::string dir_;
};

constexpr char kReady[] = "mesh 'world' ready";

TEST_F(ClusterLauncherTest, DaemonsStartWithNoSignalBlockedAndDieWithTheLauncher) {
  UpProcess up(2, dir_ + "/up.out");
  ASSERT_TRUE(up.WaitForOutput(kReady, absl::Seconds(60))) << up.output();
  const std::vector<std::pair<pid_t, std::string>> children = Children(up.pid());
  ASSERT_EQ(children.size(), 3u) << "expected a coordinator and 2 workers; " << up.output();
  std::vector<pid_t> pids;
  // SIGINT (2) and SIGTERM (15) as bits of /proc's hexadecimal signal sets.
  const uint64_t stop_bits = (uint64_t{1} << (SIGINT - 1)) | (uint64_t{1} << (SIGTERM - 1));
  for (const auto& [pid, name] : children) {
    pids.push_back(pid);
    EXPECT_TRUE(name == "tessera-coordinator" || name == "tessera-worker") << name;
    EXPECT_EQ(ProcStatusField(pid, "SigBlk"), "0000000000000000") << name << " pid " << pid;
    uint64_t ignored = 0;
    ASSERT_TRUE(absl::SimpleHexAtoi(ProcStatusField(pid, "SigIgn"), &ignored)) << name;
    EXPECT_EQ(ignored & stop_bits, 0u) << name << " ignores SIGINT or SIGTERM";
  }
  ASSERT_EQ(kill(up.pid(), SIGKILL), 0);
  ASSERT_TRUE(up.WaitForExit(absl::Seconds(5)).has_value());
  const std::vector<pid_t> orphans = StillRunning(pids, absl::Seconds(5));
  for (pid_t pid : orphans) kill(pid, SIGKILL);  // leave nothing behind for the next test
  EXPECT_TRUE(orphans.empty()) << orphans.size() << " daemon(s) outlived the launcher by 5 s";
}

TEST_F(ClusterLauncherTest, ReportsAWorkersEndAndStopsWhenTheCoordinatorEndsWithoutRestarts) {
  UpProcess up(2, dir_ + "/up.out", {"--no-restart_coordinator"});
  ASSERT_TRUE(up.WaitForOutput(kReady, absl::Seconds(60))) << up.output();
  pid_t coordinator = -1;
  std::vector<pid_t> workers;
  for (const auto& [pid, name] : Children(up.pid())) {
    (name == "tessera-coordinator" ? coordinator : workers.emplace_back()) = pid;
  }
  ASSERT_GT(coordinator, 0) << up.output();
  ASSERT_EQ(workers.size(), 2u) << up.output();

  // A worker's end is reported (which one, how it ended) and the launcher serves on.
  ASSERT_EQ(kill(workers[0], SIGKILL), 0);
  EXPECT_TRUE(up.WaitForOutput("was killed by signal 9", absl::Seconds(5))) << up.output();
  EXPECT_TRUE(absl::StrContains(up.output(), absl::StrCat("pid ", workers[0]))) << up.output();
  EXPECT_FALSE(up.WaitForExit(absl::Milliseconds(500)).has_value()) << up.output();

  // The coordinator's end stops the launcher, with the rest, and a nonzero exit status.
  ASSERT_EQ(kill(coordinator, SIGKILL), 0);
  const std::optional<int> status = up.WaitForExit(absl::Seconds(10));
  ASSERT_TRUE(status.has_value()) << "tessera up still runs 10 s after its coordinator died";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << "wait status " << *status;
  const std::string output = up.output();
  EXPECT_TRUE(absl::StrContains(output, absl::StrCat("the coordinator, pid ", coordinator)))
      << output;
  EXPECT_TRUE(StillRunning({workers[1]}, absl::Seconds(5)).empty()) << output;
}

// The address `tessera up` printed (its "export TESSERA_COORDINATOR=" line); "" if none.
std::string PrintedAddress(const std::string& output) {
  const std::string kExport = "export TESSERA_COORDINATOR=";
  const size_t at = output.find(kExport);
  if (at == std::string::npos) return "";
  const size_t from = at + kExport.size();
  return output.substr(from, output.find('\n', from) - from);
}

// With its default flags, `tessera up` restarts a coordinator killed with SIGKILL with the same
// flags and state dir: the workers keep running (same processes) and their shards, and the cluster
// serves the tensors it held bit for bit, on the mesh 'world' it made, to a client that connected
// before. A coordinator that dies again right after its restart stops the launcher.
TEST_F(ClusterLauncherTest, RestartsAKilledCoordinatorWhichServesTheSameTensors) {
  UpProcess up(3, dir_ + "/up.out");
  ASSERT_TRUE(up.WaitForOutput(kReady, absl::Seconds(60))) << up.output();
  const std::string address = PrintedAddress(up.output());
  ASSERT_FALSE(address.empty()) << up.output();
  EXPECT_TRUE(absl::StrContains(up.output(), "/state\n")) << up.output();
  pid_t coordinator = -1;
  std::vector<pid_t> workers;
  for (const auto& [pid, name] : Children(up.pid())) {
    (name == "tessera-coordinator" ? coordinator : workers.emplace_back()) = pid;
  }
  ASSERT_GT(coordinator, 0) << up.output();
  ASSERT_EQ(workers.size(), 3u) << up.output();

  absl::StatusOr<std::shared_ptr<client::Session>> session = client::Session::Connect(address);
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<client::MeshInfo> world = client::GetMesh(**session, "world");
  ASSERT_TRUE(world.ok()) << world.status();
  using P = Placement;
  std::vector<std::pair<std::string, HostTensor>> kept;
  std::vector<client::DTensor> handles;
  uint32_t seed = 1;
  for (const std::vector<Placement>& placements :
       std::vector<std::vector<Placement>>{{P::Shard(0)}, {P::Replicate()}, {P::Shard(1)}}) {
    const std::string name = absl::StrCat("kept", kept.size());
    HostTensor values = SmallIntegerTensor(DType::kFloat32, {7, 5}, seed++);
    client::DistributeOptions named;
    named.name = name;
    absl::StatusOr<client::DTensor> t =
        client::DistributeTensor(**session, values, *world, placements, named);
    ASSERT_TRUE(t.ok()) << t.status();
    // Acknowledged once written: a Replicate distribute answers once its broadcast is posted, and
    // a tensor whose first write still runs when the coordinator dies is not recorded.
    ASSERT_TRUE(t->Synchronize(absl::Seconds(30)).ok()) << name;
    handles.push_back(*std::move(t));
    kept.emplace_back(name, std::move(values));
  }

  ASSERT_EQ(kill(coordinator, SIGKILL), 0);
  ASSERT_TRUE(up.WaitForOutput("coordinator restarted at", absl::Seconds(30))) << up.output();
  EXPECT_FALSE(up.WaitForExit(absl::Milliseconds(200)).has_value()) << up.output();
  EXPECT_TRUE(StillRunning(workers, absl::Milliseconds(1)).size() == workers.size())
      << "a worker ended with the coordinator: " << up.output();
  for (const auto& [name, values] : kept) {
    const absl::Time deadline = absl::Now() + absl::Seconds(40);
    absl::StatusOr<HostTensor> back = absl::UnavailableError("not read yet");
    while (!back.ok() && back.status().code() == absl::StatusCode::kUnavailable &&
           absl::Now() < deadline) {
      absl::StatusOr<client::DTensor> t = client::GetTensor(**session, name);
      back = t.ok() ? t->FullTensor() : absl::StatusOr<HostTensor>(t.status());
      if (!back.ok()) absl::SleepFor(absl::Milliseconds(200));
    }
    ASSERT_TRUE(back.ok()) << name << ": " << back.status() << "\n" << up.output();
    EXPECT_EQ(back->nbytes(), values.nbytes());
    EXPECT_EQ(std::memcmp(back->data(), values.data(), values.nbytes()), 0) << name;
  }
  pid_t restarted = -1;
  for (const auto& [pid, name] : Children(up.pid())) {
    if (name == "tessera-coordinator") restarted = pid;
  }
  ASSERT_GT(restarted, 0) << up.output();
  EXPECT_NE(restarted, coordinator);

  // Killed again at once: not restarted a second time; the launcher stops with everything.
  handles.clear();
  session->reset();
  ASSERT_EQ(kill(restarted, SIGKILL), 0);
  const std::optional<int> status = up.WaitForExit(absl::Seconds(10));
  ASSERT_TRUE(status.has_value()) << up.output();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << "wait status " << *status;
  EXPECT_TRUE(absl::StrContains(up.output(), "is not restarted again")) << up.output();
  EXPECT_TRUE(StillRunning(workers, absl::Seconds(5)).empty()) << up.output();
}

}  // namespace
}  // namespace tessera
