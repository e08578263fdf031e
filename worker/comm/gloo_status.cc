#include "worker/comm/gloo_status.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tessera::comm {

absl::Status StatusFromGlooException(const std::exception& e, bool io_error, absl::Time deadline) {
  const std::string lower = absl::AsciiStrToLower(e.what());
  if (absl::StrContains(lower, "timed out") || absl::StrContains(lower, "timeout") ||
      absl::Now() >= deadline) {
    return absl::DeadlineExceededError(absl::StrCat("Gloo timed out: ", e.what()));
  }
  if (io_error) return absl::UnavailableError(absl::StrCat("Gloo I/O failure: ", e.what()));
  return absl::InternalError(absl::StrCat("Gloo failure: ", e.what()));
}

}  // namespace tessera::comm
