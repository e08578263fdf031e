// What the benchmark programs record about the machine and how they print numbers into JSON.
#ifndef TESSERA_BENCH_BENCH_HOST_H_
#define TESSERA_BENCH_BENCH_HOST_H_

#include <sched.h>

#include <cmath>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

// `v` with three decimals, or null for NaN (a figure not measured).
inline std::string JsonNumber(double v) {
  return std::isnan(v) ? "null" : absl::StrFormat("%.3f", v);
}

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_BENCH_HOST_H_
