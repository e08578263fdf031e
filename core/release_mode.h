#ifndef TESSERA_CORE_RELEASE_MODE_H_
#define TESSERA_CORE_RELEASE_MODE_H_

#include "absl/synchronization/mutex.h"

namespace tessera {

// Debian's Abseil is built with mutex deadlock detection on: every mutex made or locked updates a
// process-wide lock graph (2-5% of a daemon's CPU per collective in profiles here). The daemons,
// the CLI and the benches turn it off at start; test programs keep it, to catch lock-order bugs.
inline void UseReleaseMutexes() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace tessera

#endif  // TESSERA_CORE_RELEASE_MODE_H_
