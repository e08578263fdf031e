#include "server/cluster/mesh_communicators.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

TEST(MeshCommunicatorsTest, OneReformPerBrokenGeneration) {
  MeshCommunicators comms;
  EXPECT_TRUE(comms.Health().ok());
  EXPECT_THAT(comms.Broke(0, "worker 2: timed out"), Optional(1));
  EXPECT_EQ(comms.generation(), 1);
  EXPECT_EQ(comms.Health().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(comms.Health().message(), HasSubstr("broke (worker 2: timed out); re-forming"));
  // More reports of the broken generation, from other workers or later commands: under way.
  EXPECT_EQ(comms.Broke(0, "worker 3: broken by an earlier failure"), std::nullopt);
  EXPECT_EQ(comms.Formed(0, absl::OkStatus()), std::nullopt);  // not the one being formed
  EXPECT_EQ(comms.Formed(1, absl::OkStatus()), std::nullopt);
  EXPECT_TRUE(comms.Health().ok());
  EXPECT_EQ(comms.Broke(0, "late report"), std::nullopt);  // stale: re-formed already
  EXPECT_TRUE(comms.Health().ok());
  // The new generation can break in turn.
  EXPECT_THAT(comms.Broke(1, "worker 0: peer gone"), Optional(2));
}

TEST(MeshCommunicatorsTest, ABreakOfTheGenerationBeingFormedStartsAnother) {
  MeshCommunicators comms;
  ASSERT_THAT(comms.Broke(0, "first"), Optional(1));
  // A worker that formed generation 1 already sees it break before the others are done.
  EXPECT_EQ(comms.Broke(1, "second"), std::nullopt);
  EXPECT_THAT(comms.Formed(1, absl::OkStatus()), Optional(2));
  EXPECT_THAT(comms.Health().message(), HasSubstr("(second)"));
  EXPECT_EQ(comms.Formed(2, absl::OkStatus()), std::nullopt);
  EXPECT_TRUE(comms.Health().ok());
}

TEST(MeshCommunicatorsTest, AFailedReformIsRetriedThenGivenUp) {
  MeshCommunicators comms;
  ASSERT_THAT(comms.Broke(0, "timed out"), Optional(1));
  for (int attempt = 2; attempt <= MeshCommunicators::kMaxAttempts; ++attempt) {
    EXPECT_THAT(comms.Formed(attempt - 1, absl::DeadlineExceededError("rendezvous")),
                Optional(attempt));
    EXPECT_THAT(comms.Health().message(), HasSubstr(absl::StrCat("(attempt ", attempt)));
  }
  EXPECT_EQ(comms.Formed(MeshCommunicators::kMaxAttempts, absl::DeadlineExceededError("again")),
            std::nullopt);
  EXPECT_EQ(comms.Health().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(comms.Health().message(), HasSubstr("failed 3 times, the last: again"));
  EXPECT_THAT(comms.Health().message(), HasSubstr("delete and create the mesh again"));
  EXPECT_EQ(comms.Broke(comms.generation(), "more"), std::nullopt);
}

TEST(MeshCommunicatorsTest, ARetryThatSucceedsResetsTheAttempts) {
  MeshCommunicators comms;
  ASSERT_THAT(comms.Broke(0, "timed out"), Optional(1));
  ASSERT_THAT(comms.Formed(1, absl::DeadlineExceededError("rendezvous")), Optional(2));
  EXPECT_EQ(comms.Formed(2, absl::OkStatus()), std::nullopt);
  EXPECT_TRUE(comms.Health().ok());
  for (int64_t g = 2; g < 2 + MeshCommunicators::kMaxAttempts; ++g) {
    ASSERT_THAT(comms.Broke(g, "again"), Optional(g + 1));
    ASSERT_EQ(comms.Formed(g + 1, absl::OkStatus()), std::nullopt);
  }
  EXPECT_TRUE(comms.Health().ok());
}

}  // namespace
}  // namespace tessera
