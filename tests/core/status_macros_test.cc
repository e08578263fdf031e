#include "core/status_macros.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "core/status_context.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

// `code` with a message naming it, or OK.
absl::Status MakeStatus(absl::StatusCode code) {
  return code == absl::StatusCode::kOk ? absl::OkStatus()
                                       : absl::Status(code, absl::StrCat("failed with ", code));
}

// `value`, or MakeStatus(code) when `code` is not OK; counts its calls in `calls`.
template <typename T>
absl::StatusOr<T> Produce(absl::StatusCode code, T value, int& calls) {
  ++calls;
  if (code != absl::StatusCode::kOk) return MakeStatus(code);
  return value;
}

absl::Status Check(absl::StatusCode code, int& calls) {
  ++calls;
  return MakeStatus(code);
}

class StatusMacrosTest : public ::testing::TestWithParam<absl::StatusCode> {};

TEST_P(StatusMacrosTest, ReturnIfErrorInAFunctionReturningStatus) {
  int calls = 0;
  bool reached_end = false;
  const absl::Status status = [&]() -> absl::Status {
    RETURN_IF_ERROR(Check(GetParam(), calls));
    reached_end = true;
    return absl::OkStatus();
  }();
  EXPECT_EQ(status, MakeStatus(GetParam()));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(reached_end, GetParam() == absl::StatusCode::kOk);
}

TEST_P(StatusMacrosTest, ReturnIfErrorInAFunctionReturningStatusOr) {
  int calls = 0;
  const absl::StatusOr<int> result = [&]() -> absl::StatusOr<int> {
    RETURN_IF_ERROR(Check(GetParam(), calls));
    return 7;
  }();
  EXPECT_EQ(result.status(), MakeStatus(GetParam()));
  if (result.ok()) {
    EXPECT_EQ(*result, 7);
  }
  EXPECT_EQ(calls, 1);
}

TEST_P(StatusMacrosTest, AssignOrReturnDeclaresTheValueInAFunctionReturningStatus) {
  int calls = 0;
  std::string seen;
  const absl::Status status = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto text, Produce<std::string>(GetParam(), "shard", calls));
    ASSIGN_OR_RETURN(const std::string& more, Produce<std::string>(GetParam(), "s", calls));
    seen = text + more;
    return absl::OkStatus();
  }();
  EXPECT_EQ(status, MakeStatus(GetParam()));
  EXPECT_EQ(seen, GetParam() == absl::StatusCode::kOk ? "shards" : "");
  EXPECT_EQ(calls, GetParam() == absl::StatusCode::kOk ? 2 : 1);
}

TEST_P(StatusMacrosTest, AssignOrReturnMovesIntoAnExistingLvalueInAFunctionReturningStatusOr) {
  int calls = 0;
  auto out = std::make_unique<int>(-1);
  const absl::StatusOr<int> result = [&]() -> absl::StatusOr<int> {
    std::unique_ptr<int> owned;
    ASSIGN_OR_RETURN(owned, Produce(GetParam(), std::make_unique<int>(5), calls));
    ASSIGN_OR_RETURN(*out, Produce(GetParam(), *owned + 1, calls));
    return *owned * 10;
  }();
  EXPECT_EQ(result.status(), MakeStatus(GetParam()));
  if (result.ok()) {
    EXPECT_EQ(*result, 50);
  }
  EXPECT_EQ(*out, GetParam() == absl::StatusCode::kOk ? 6 : -1);
  EXPECT_EQ(calls, GetParam() == absl::StatusCode::kOk ? 2 : 1);
}

TEST_P(StatusMacrosTest, AssignOrReturnTakesATypeWithACommaInParenthesesTwiceOnOneLine) {
  int calls = 0;
  const absl::StatusOr<int> result = [&]() -> absl::StatusOr<int> {
    // clang-format off
    ASSIGN_OR_RETURN((std::pair<int, int> a), Produce(absl::StatusCode::kOk, std::pair(1, 2), calls)); ASSIGN_OR_RETURN((std::pair<int, int> b), Produce(GetParam(), std::pair(3, 4), calls));
    // clang-format on
    return a.first + a.second + b.first + b.second;
  }();
  EXPECT_EQ(result.status(), MakeStatus(GetParam()));
  if (result.ok()) {
    EXPECT_EQ(*result, 10);
  }
  EXPECT_EQ(calls, 2);
}

INSTANTIATE_TEST_SUITE_P(Codes, StatusMacrosTest,
                         ::testing::Values(absl::StatusCode::kOk,
                                           absl::StatusCode::kInvalidArgument,
                                           absl::StatusCode::kNotFound,
                                           absl::StatusCode::kUnavailable));

TEST(WithContextTest, PassesOkThrough) {
  EXPECT_EQ(WithContext("ctx", absl::OkStatus()), absl::OkStatus());
}

TEST(WithContextTest, KeepsTheCodeAndPutsTheContextBeforeTheMessage) {
  for (absl::StatusCode code : {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound,
                                absl::StatusCode::kUnavailable, absl::StatusCode::kInternal}) {
    const absl::Status status = WithContext("ctx", absl::Status(code, "msg"));
    EXPECT_EQ(status.code(), code);
    EXPECT_EQ(status.message(), "ctx: msg");
  }
}

TEST(WithContextTest, KeepsPayloads) {
  absl::Status inner = absl::NotFoundError("msg");
  inner.SetPayload("type.example/detail", absl::Cord("data"));
  const absl::Status status = WithContext("ctx", inner);
  EXPECT_EQ(status.message(), "ctx: msg");
  EXPECT_EQ(status.GetPayload("type.example/detail"), absl::Cord("data"));
}

}  // namespace
}  // namespace tessera
