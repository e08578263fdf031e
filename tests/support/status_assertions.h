// Assertions on absl::Status for the tests: code and the values the message must name.
#ifndef TESSERA_TESTS_STATUS_ASSERTIONS_H_
#define TESSERA_TESTS_STATUS_ASSERTIONS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace tessera::testing {

// Success iff `status` has `code` and its message contains every one of `fragments`.
inline ::testing::AssertionResult StatusIs(const absl::Status& status, absl::StatusCode code,
                                           const std::vector<std::string>& fragments = {}) {
  if (status.code() != code) {
    return ::testing::AssertionFailure()
           << "want code " << absl::StatusCodeToString(code) << ", got " << status;
  }
  for (const std::string& f : fragments) {
    if (!absl::StrContains(status.message(), f)) {
      return ::testing::AssertionFailure()
             << "message of " << status << " does not name '" << f << "'";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_STATUS_ASSERTIONS_H_
