#ifndef TESSERA_BENCH_SOAK_CLIENT_H_
#define TESSERA_BENCH_SOAK_CLIENT_H_

// One soak client: a session of its own making a seeded mix of calls (distribute, ops,
// redistribute, collectives, full_tensor/get, free, and calls that must be refused), each valid
// result checked against a single-process reference and each refusal against its expected code.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "tessera/tessera.h"

namespace tessera::soak {

// The meshes the clients share: "line" (all 4 workers), "grid" (2x2 over them) and "pair" (the
// two workers a fault phase never touches).
struct SoakMeshes {
  client::Mesh line, grid, pair;
};

// What a phase may do to the cluster while clients run, and so which failures are allowed.
enum class Fault {
  kNone,         // every valid call succeeds; every refusal has its one code
  kWorkerLoss,   // a worker of line and grid dies and comes back: calls on them may fail
                 // UNAVAILABLE or DATA_LOSS (never wrong bytes); pair is untouched
  kCoordinator,  // the coordinator dies and comes back from its state directory: after the kill
                 // a call may fail UNAVAILABLE, and NOT_FOUND or FAILED_PRECONDITION on what was
                 // never acknowledged (a write cut short, local tensors); a tensor read back
                 // before the kill must read back after it, bit for bit
};

// Counts shared by every client of a phase.
struct SoakTally {
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> ok{0};
  std::atomic<int64_t> ok_after_fault{0};     // of `ok`, those after the fault began
  std::atomic<int64_t> checked{0};            // results compared with the reference
  std::atomic<int64_t> lost_acknowledged{0};  // tensors acknowledged, then unreadable
  // Tensors acknowledged before the fault and read back (checked) after it began.
  std::atomic<int64_t> read_back_after_fault{0};
  std::mutex mu;
  std::map<std::string, int64_t> refused_as_expected;  // by code: invalid calls
  std::map<std::string, int64_t> fault_failures;       // by code: calls the fault made fail
  std::vector<std::string> unexpected;                 // what went wrong, one line each
  void Unexpected(std::string what);
  void Count(std::map<std::string, int64_t> SoakTally::*which, absl::StatusCode code);
};

// What the phase runner tells the clients while they run.
struct SoakSignals {
  std::atomic<bool> fault_started{false};  // set just before the fault is injected
  std::atomic<bool> meshes_back{true};     // false from a coordinator kill until meshes exist again
  std::atomic<bool> abort{false};          // the runner gave up (a deadlock): stop at once
};

struct SoakClientOptions {
  std::string address;
  int index = 0;
  int64_t calls = 100;
  uint64_t seed = 1;
  bool op_stream = true;
  absl::Duration call_timeout = absl::Seconds(30);
  Fault fault = Fault::kNone;
  std::string victim;  // "worker N at ADDRESS" of the worker a kWorkerLoss phase kills
};

// Where a client is, for the deadlock report.
struct SoakProgress {
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::string current;  // the call being made
  absl::Time since;
};

// Runs one client to the end: its calls, then a read of everything it still holds, then frees.
void RunSoakClient(const SoakClientOptions& options, const SoakMeshes& meshes, SoakTally& tally,
                   SoakSignals& signals, SoakProgress& progress);

}  // namespace tessera::soak

#endif  // TESSERA_BENCH_SOAK_CLIENT_H_
