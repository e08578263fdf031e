#ifndef TESSERA_WORKER_COMM_GLOO_STATUS_H_
#define TESSERA_WORKER_COMM_GLOO_STATUS_H_

#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"

namespace tessera::comm {

// The boundary where Gloo's exceptions (its collectives and its rendezvous stores throw) become
// statuses: DEADLINE_EXCEEDED for a timeout (the message says so, or `deadline` has passed),
// UNAVAILABLE for other I/O failures (a peer gone, a closed connection), INTERNAL otherwise.
absl::Status StatusFromGlooException(const std::exception& e, bool io_error, absl::Time deadline);

// Runs `body` and returns OK, or the status of the exception it threw.
template <typename F>
absl::Status CallGloo(absl::Time deadline, F&& body) {
  try {
    std::forward<F>(body)();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    return StatusFromGlooException(e, /*io_error=*/true, deadline);
  } catch (const std::exception& e) {
    return StatusFromGlooException(e, /*io_error=*/false, deadline);
  }
}

}  // namespace tessera::comm

#endif  // TESSERA_WORKER_COMM_GLOO_STATUS_H_
