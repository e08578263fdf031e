#include "client/local_cluster/local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tessera/session.h"

namespace tessera {
namespace {

std::string RandomSecret() {
  std::random_device rd;
  return absl::StrCat(absl::Hex(rd(), absl::kZeroPad8), absl::Hex(rd(), absl::kZeroPad8),
                      absl::Hex(rd(), absl::kZeroPad8), absl::Hex(rd(), absl::kZeroPad8));
}

// Waits for the `nth` line (from 1) of `log` that contains `marker` and returns the text after it.
absl::StatusOr<std::string> WaitForLine(const std::string& log, const std::string& marker,
                                        pid_t pid, absl::Duration timeout, int nth = 1) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream in(log);
    std::string line;
    int seen = 0;
    while (std::getline(in, line)) {
      if (size_t at = line.find(marker); at != std::string::npos && ++seen == nth) {
        return line.substr(at + marker.size());
      }
    }
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      std::ifstream again(log);
      std::stringstream text;
      text << again.rdbuf();
      return absl::UnavailableError(absl::StrCat(
          "process ", pid, " exited before it was ready; its log ", log, ":\n", text.str()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("no '", marker, "' in ", log, " within ", absl::FormatDuration(timeout)));
}

// "exited with status N" or "killed by signal N (NAME)", from a waitpid status.
std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = strsignal(WTERMSIG(status));
    return absl::StrCat("was killed by signal ", WTERMSIG(status), name ? " (" : "",
                        name ? name : "", name ? ")" : "");
  }
  return absl::StrCat("ended with wait status ", status);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ListWorkerCudaDevices(const std::string& worker_binary) {
  // The worker links CUDA; this client does not: ask it. Its stderr (the reason) comes along.
  const std::string command =
      absl::StrCat("'", worker_binary, "' --log_level=off --list_devices 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("cannot run ", worker_binary));
  }
  std::string text;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) text.append(buffer, n);
  const int status = pclose(pipe);
  std::vector<std::string> devices;
  std::string other;  // lines that name no device: the reason there is none
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "cuda:")) {
      devices.emplace_back(line.substr(0, line.find('\t')));
    } else {
      absl::StrAppend(&other, other.empty() ? "" : "; ", line);
    }
  }
  if (status != 0 || devices.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device to start a worker on: ", worker_binary, " --list_devices found ",
        devices.size(), other.empty() ? "" : absl::StrCat(" (", other, ")")));
  }
  return devices;
}

std::string SelfDirectory() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "." : self.parent_path().string();
}

absl::StatusOr<std::string> FindDaemonBinary(const std::string& name) {
  const std::filesystem::path self = SelfDirectory();
  for (const std::filesystem::path& candidate :
       {self / name, self / ".." / "server" / name, self / ".." / "worker" / name,
        self / ".." / ".." / "server" / name, self / ".." / ".." / "worker" / name}) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate.lexically_normal().string();
  }
  if (const char* path = std::getenv("PATH")) {
    for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
      const std::filesystem::path candidate = std::filesystem::path(std::string(dir)) / name;
      if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
  }
  return absl::NotFoundError(
      absl::StrCat("cannot find ", name, " beside ", self.string(), " or on PATH"));
}

absl::StatusOr<LocalCluster::Process> LocalCluster::Spawn(const std::string& binary,
                                                          const std::vector<std::string>& args,
                                                          const std::string& log) {
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat("cannot open log ", log));
  std::vector<std::string> argv_strings = {binary};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string secret_env = absl::StrCat("TESSERA_SECRET=", options_.secret);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    return absl::ResourceExhaustedError("fork failed");
  }
  if (pid == 0) {
    // The daemon starts with the signals of a fresh process, whatever the launcher blocked or
    // ignored (`tessera up` blocks SIGINT and SIGTERM to sigwait for them).
    struct sigaction default_action = {};
    default_action.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &default_action, nullptr);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the parent died before prctl took effect
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    putenv(const_cast<char*>(secret_env.c_str()));
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(fd);
  return Process{pid, log, "", ""};
}

absl::Status LocalCluster::StartWorker(int i, const std::string& listen) {
  std::vector<std::string> args = {
      absl::StrCat("--coordinator=", address_),
      options_.device == "cuda" ? absl::StrCat("--device=cuda:", i) : "--device=cpu",
      absl::StrCat("--listen=", listen),
      absl::StrCat("--memory_budget=", options_.memory_budget_bytes),
      absl::StrCat("--checkpoint_root=", options_.checkpoint_root),
      absl::StrCat("--metrics_port=", options_.metrics ? 0 : -1)};
  for (const std::string& flag : options_.worker_flags) {
    args.push_back(absl::StrReplaceAll(flag, {{"{i}", absl::StrCat(i)}}));
  }
  absl::StatusOr<Process> p =
      Spawn(options_.worker_binary, args, absl::StrCat(options_.log_dir, "/worker-", i, ".log"));
  if (!p.ok()) return p.status();
  const std::string marker = "serving on ";
  absl::StatusOr<std::string> rest = WaitForLine(p->log, marker, p->pid, absl::Seconds(30));
  if (!rest.ok()) return rest.status();
  // The log may hold an earlier incarnation's line: the address is the same on restart anyway.
  p->address = rest->substr(0, rest->find(','));
  if (options_.metrics) {
    // Printed before the worker registers, so it is in the log by now.
    absl::StatusOr<std::string> url = WaitForLine(p->log, " metrics on ", p->pid, absl::Seconds(5));
    if (!url.ok()) return url.status();
    p->metrics_url = *url;
  }
  if (i < static_cast<int>(workers_.size())) {
    workers_[i] = *p;
  } else {
    workers_.push_back(*p);
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::StartCoordinator(int port) {
  const LocalClusterOptions& o = options_;
  std::vector<std::string> args = {
      absl::StrCat("--listen=127.0.0.1:", port),
      absl::StrCat("--heartbeat_interval=", absl::FormatDuration(o.heartbeat_interval)),
      absl::StrCat("--dead_after=", absl::FormatDuration(o.dead_after)),
      absl::StrCat("--client_grace=", absl::FormatDuration(o.client_grace)),
      absl::StrCat("--stream_idle_timeout=", absl::FormatDuration(o.stream_idle_timeout)),
      absl::StrCat("--metrics_port=", o.metrics ? 0 : -1),
      absl::StrCat("--recovery_wait=", absl::FormatDuration(o.recovery_wait))};
  // Only when set: CLI11 takes "--state_dir=" with nothing after it as wanting the next argument.
  if (!o.state_dir.empty()) args.push_back(absl::StrCat("--state_dir=", o.state_dir));
  args.insert(args.end(), o.coordinator_flags.begin(), o.coordinator_flags.end());
  absl::StatusOr<Process> coordinator =
      Spawn(o.coordinator_binary, args, o.log_dir + "/coordinator.log");
  if (!coordinator.ok()) return coordinator.status();
  coordinator_ = *coordinator;
  // The log may hold an earlier process's line: wait for as many lines as starts so far.
  absl::StatusOr<std::string> bound =
      WaitForLine(coordinator->log, "listening on port ", coordinator->pid, absl::Seconds(30),
                  ++coordinator_starts_);
  if (!bound.ok()) return bound.status();
  address_ = absl::StrCat("127.0.0.1:", *bound);
  if (o.metrics) {
    absl::StatusOr<std::string> url = WaitForLine(
        coordinator->log, " metrics on ", coordinator->pid, absl::Seconds(30), coordinator_starts_);
    if (!url.ok()) return url.status();
    coordinator_.metrics_url = *url;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(LocalClusterOptions options) {
  if (options.device != "cpu" && options.device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", options.device, "' is not cpu or cuda"));
  }
  if (options.workers < (options.device == "cuda" ? 0 : 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a cluster needs at least one worker, got ", options.workers));
  }
  for (auto [path, name] : {std::pair{&options.coordinator_binary, "tessera-coordinator"},
                            std::pair{&options.worker_binary, "tessera-worker"}}) {
    if (!path->empty()) continue;
    absl::StatusOr<std::string> found = FindDaemonBinary(name);
    if (!found.ok()) return found.status();
    *path = *found;
  }
  if (options.device == "cuda") {
    absl::StatusOr<std::vector<std::string>> gpus = ListWorkerCudaDevices(options.worker_binary);
    if (!gpus.ok()) return gpus.status();
    if (options.workers > static_cast<int>(gpus->size())) {
      return absl::FailedPreconditionError(absl::StrCat(
          options.workers, " cuda workers asked for, ", gpus->size(), " GPU(s) visible"));
    }
    if (options.workers == 0) options.workers = static_cast<int>(gpus->size());
  }
  if (options.secret.empty()) options.secret = RandomSecret();
  if (options.log_dir.empty()) {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::PermissionDeniedError("cannot create a log directory");
    }
    options.log_dir = pattern;
  }
  if (options.checkpoint_root.empty()) options.checkpoint_root = options.log_dir + "/checkpoints";
  std::error_code made;
  std::filesystem::create_directories(options.checkpoint_root, made);
  if (made) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create the checkpoint root ",
                                                    options.checkpoint_root, ": ", made.message()));
  }
  std::filesystem::create_directories(options.log_dir);
  if (options.keep_state && options.state_dir.empty())
    options.state_dir = options.log_dir + "/state";
  std::unique_ptr<LocalCluster> cluster(new LocalCluster(std::move(options)));
  LocalClusterOptions& o = cluster->options_;

  if (absl::Status s = cluster->StartCoordinator(o.coordinator_port); !s.ok()) return s;
  for (int i = 0; i < o.workers; ++i) {
    if (absl::Status s = cluster->StartWorker(i, "127.0.0.1:0"); !s.ok()) return s;
  }
  if (absl::Status s = cluster->WaitForAliveWorkers(o.workers, absl::Seconds(30)); !s.ok()) {
    return s;
  }
  return cluster;
}

LocalCluster::~LocalCluster() { Stop(); }

absl::Status LocalCluster::KillCoordinator() {
  if (coordinator_.pid < 0) return absl::FailedPreconditionError("the coordinator is not running");
  kill(coordinator_.pid, SIGKILL);
  waitpid(coordinator_.pid, nullptr, 0);
  coordinator_.pid = -1;
  return absl::OkStatus();
}

absl::Status LocalCluster::RestartCoordinator() {
  if (coordinator_.pid >= 0) {
    if (absl::Status s = KillCoordinator(); !s.ok()) return s;
  }
  int port = 0;
  if (!absl::SimpleAtoi(address_.substr(address_.rfind(':') + 1), &port)) {
    return absl::InternalError(absl::StrCat("no port in the coordinator's address ", address_));
  }
  return StartCoordinator(port);
}

std::vector<absl::Status> LocalCluster::ReapEnded() {
  std::vector<std::pair<Process*, std::string>> all = {{&coordinator_, "the coordinator"}};
  for (size_t i = 0; i < workers_.size(); ++i) {
    all.push_back({&workers_[i], absl::StrCat("worker ", i, " (", workers_[i].address, ")")});
  }
  std::vector<absl::Status> ended;
  for (auto& [p, name] : all) {
    int status = 0;
    if (p->pid < 0 || waitpid(p->pid, &status, WNOHANG) != p->pid) continue;
    ended.push_back(absl::FailedPreconditionError(
        absl::StrCat(name, ", pid ", p->pid, ", ", DescribeExit(status), "; its log is ", p->log)));
    p->pid = -1;
  }
  return ended;
}

absl::Status LocalCluster::KillWorker(int i) {
  if (i < 0 || i >= num_workers() || workers_[i].pid < 0) {
    return absl::InvalidArgumentError(absl::StrCat("no running worker ", i));
  }
  kill(workers_[i].pid, SIGKILL);
  waitpid(workers_[i].pid, nullptr, 0);
  workers_[i].pid = -1;
  return absl::OkStatus();
}

absl::Status LocalCluster::RestartWorker(int i) {
  if (i < 0 || i >= num_workers()) return absl::InvalidArgumentError(absl::StrCat("no worker ", i));
  if (workers_[i].pid >= 0) {
    if (absl::Status s = KillWorker(i); !s.ok()) return s;
  }
  std::filesystem::remove(workers_[i].log);
  return StartWorker(i, workers_[i].address);
}

absl::Status LocalCluster::WaitForAliveWorkers(int count, absl::Duration timeout) {
  client::SessionOptions session_options;
  session_options.keep_alive = false;
  session_options.timeout = timeout;
  session_options.tls_ca_file = options_.tls_ca_file;
  session_options.tls_cert_file = options_.tls_cert_file;
  session_options.tls_key_file = options_.tls_key_file;
  session_options.token = options_.token;
  absl::StatusOr<std::shared_ptr<client::Session>> session =
      client::Session::Connect(address_, session_options);
  if (!session.ok()) return session.status();
  const absl::Time deadline = absl::Now() + timeout;
  int alive = 0;
  while (absl::Now() < deadline) {
    absl::StatusOr<std::vector<client::WorkerInfo>> workers = (*session)->ListWorkers();
    if (workers.ok()) {
      alive = 0;
      for (const client::WorkerInfo& w : *workers) alive += w.alive ? 1 : 0;
      if (alive >= count) return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat(alive, " of ", count, " workers alive after ",
                                                  absl::FormatDuration(timeout), "; logs in ",
                                                  options_.log_dir));
}

void LocalCluster::Stop() {
  std::vector<pid_t> pids;
  for (Process& w : workers_) {
    if (w.pid > 0) pids.push_back(w.pid);
    w.pid = -1;
  }
  if (coordinator_.pid > 0) pids.push_back(coordinator_.pid);
  coordinator_.pid = -1;
  for (pid_t pid : pids) kill(pid, SIGTERM);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  for (pid_t pid : pids) {
    while (waitpid(pid, nullptr, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
}

}  // namespace tessera
