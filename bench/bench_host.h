// What the benchmark programs record about the machine and how they write their JSON.
#ifndef TESSERA_BENCH_BENCH_HOST_H_
#define TESSERA_BENCH_BENCH_HOST_H_

#include <sched.h>
#include <unistd.h>

#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tessera::bench {

// The CPU model named in /proc/cpuinfo.
inline std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// The first three fields of /proc/loadavg.
inline std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

// This process's scheduling policy.
inline std::string Scheduler() {
  switch (sched_getscheduler(0)) {
    case SCHED_RR:
      return "SCHED_RR";
    case SCHED_FIFO:
      return "SCHED_FIFO";
    default:
      return "SCHED_OTHER";
  }
}

// `v` rounded to `decimals` decimals, or null for NaN (a figure not measured).
inline nlohmann::ordered_json JsonNumber(double v, int decimals = 3) {
  if (std::isnan(v)) return nullptr;
  const double scale = std::pow(10.0, decimals);
  return std::round(v * scale) / scale;
}

// The local time now, as 2024-01-31T12:00:00+0100.
inline std::string LocalDate() {
  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S%z", std::localtime(&now));
  return date;
}

// The "machine" object of a results file: cores, CPU, scheduler and the load average at the start
// and now.
inline nlohmann::ordered_json MachineJson(const std::string& load_at_start) {
  return {{"nproc", std::thread::hardware_concurrency()},
          {"cpu", CpuModel()},
          {"scheduler", Scheduler()},
          {"loadavg_at_start", load_at_start},
          {"loadavg_at_end", LoadAverage()}};
}

// Writes `results` to `path`, indented by two spaces (bytes that are not UTF-8 replaced).
inline absl::Status WriteJsonFile(const std::string& path, const nlohmann::ordered_json& results) {
  std::ofstream f(path);
  if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  f << results.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  return f ? absl::OkStatus() : absl::DataLossError(absl::StrCat("short write to ", path));
}

// utime + stime of `pid` in milliseconds.
inline double CpuMillis(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(text.substr(text.rfind(')') + 2));  // from field 3, the state
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) * 1000.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The pid of this process's child running `binary_name` (the coordinator LocalCluster forked).
inline absl::StatusOr<pid_t> ChildNamed(const std::string& binary_name) {
  const pid_t self = getpid();
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(entry.path() / "status");
    std::string line, name;
    pid_t ppid = -1;
    while (std::getline(status, line)) {
      if (line.rfind("Name:", 0) == 0) std::istringstream(line.substr(5)) >> name;
      if (line.rfind("PPid:", 0) == 0) std::istringstream(line.substr(5)) >> ppid;
    }
    // The kernel keeps 15 characters of the name.
    if (ppid == self && name == binary_name.substr(0, 15)) return std::stoi(pid);
  }
  return absl::NotFoundError(absl::StrCat("no child process ", binary_name));
}

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_BENCH_HOST_H_
