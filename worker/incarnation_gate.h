#ifndef TESSERA_WORKER_INCARNATION_GATE_H_
#define TESSERA_WORKER_INCARNATION_GATE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tessera {

// Which incarnation a worker serves, for admitting calls by the incarnation they carry. The
// coordinator counts a worker registered, and may send it commands for its new incarnation, as soon
// as it answers the registration, before the worker has read the answer; a command refused then
// would leave its sequence neither used nor released, and stall the new incarnation's order. So a
// call for another incarnation than the current one waits while a registration is under way, and is
// judged once its answer is taken. Thread-safe.
class IncarnationGate {
 public:
  // A registration is being sent: calls for other incarnations wait for its answer.
  void BeginRegistering();
  // The registration's answer: `incarnation` is served from now on.
  void Take(int64_t incarnation);
  // The incarnation served; -1 before the first.
  int64_t current() const;

  // OK if `incarnation` is the one served, at once or once a registration under way (waited for
  // until `deadline`) took it; otherwise FAILED_PRECONDITION naming both.
  absl::Status Admit(int64_t incarnation, absl::Time deadline) const;

 private:
  mutable absl::Mutex mu_;
  int64_t current_ ABSL_GUARDED_BY(mu_) = -1;
  bool registering_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_INCARNATION_GATE_H_
