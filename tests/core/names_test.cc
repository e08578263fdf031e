// The name rules of core/names.h over a product of kinds and names (valid ones, each rule's edge,
// empty, too long, control bytes, '/'), and QuotedName's escaping and cutting.

#include "core/names.h"

#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using ::tessera::testing::StatusIs;

struct NameCase {
  NameKind kind;
  std::string name;
  bool valid;
};

class CheckNameTest : public ::testing::TestWithParam<NameCase> {};

TEST_P(CheckNameTest, FollowsItsKindsRule) {
  const NameCase& c = GetParam();
  const absl::Status s = CheckName(c.kind, c.name);
  if (c.valid) {
    EXPECT_TRUE(s.ok()) << s;
  } else {
    EXPECT_TRUE(StatusIs(s, absl::StatusCode::kInvalidArgument, {"must be"})) << s;
    EXPECT_LE(s.message().size(), 400u) << "the refusal echoes too much";
  }
}

const std::string k100(100, 'a'), k101(101, 'a'), k200(200, 'b'), k201(201, 'b'), k64(64, 'c'),
    k65(65, 'c'), k128(128, 'd'), k129(129, 'd'), kHuge(100000, 'x');

INSTANTIATE_TEST_SUITE_P(
    Names, CheckNameTest,
    ::testing::Values(
        NameCase{NameKind::kMesh, "world", true}, NameCase{NameKind::kMesh, "tp-line_2", true},
        NameCase{NameKind::kMesh, k100, true}, NameCase{NameKind::kMesh, k101, false},
        NameCase{NameKind::kMesh, "", false}, NameCase{NameKind::kMesh, "a/b", false},
        NameCase{NameKind::kMesh, "a\nb", false}, NameCase{NameKind::kMesh, "a.b", false},
        NameCase{NameKind::kMesh, kHuge, false},
        NameCase{NameKind::kMesh, std::string("a\0b", 3), false},
        NameCase{NameKind::kModule, "mlp", true}, NameCase{NameKind::kModule, "m m", false},
        NameCase{NameKind::kModel, "resnet.v2", true}, NameCase{NameKind::kModel, ".hidden", false},
        NameCase{NameKind::kModel, "weird/model", false}, NameCase{NameKind::kMeshDim, "tp", true},
        NameCase{NameKind::kMeshDim, "_x1", true}, NameCase{NameKind::kMeshDim, "1", false},
        NameCase{NameKind::kMeshDim, "-x", false}, NameCase{NameKind::kMeshDim, k64, true},
        NameCase{NameKind::kMeshDim, k65, false},
        NameCase{NameKind::kTensor, "mlp.net1.weight.grad", true},
        NameCase{NameKind::kTensor, "py-dup", true}, NameCase{NameKind::kTensor, k200, true},
        NameCase{NameKind::kTensor, k201, false}, NameCase{NameKind::kTensor, ".read", false},
        NameCase{NameKind::kTensor, "a..b", false}, NameCase{NameKind::kTensor, "dt/x", false},
        NameCase{NameKind::kChild, "net1", true}, NameCase{NameKind::kChild, "0", true},
        NameCase{NameKind::kChild, "a.b", false}, NameCase{NameKind::kChild, "*", false},
        NameCase{NameKind::kChild, k65, false}, NameCase{NameKind::kClient, "py-0123abcd", true},
        NameCase{NameKind::kClient, "alice@host:1", true}, NameCase{NameKind::kClient, k128, true},
        NameCase{NameKind::kClient, k129, false}, NameCase{NameKind::kClient, "a/b", false}));

TEST(QuotedNameTest, EscapesAndCuts) {
  EXPECT_EQ(QuotedName("w"), "'w'");
  EXPECT_EQ(QuotedName("a\nb'\\"), "'a\\x0ab\\x27\\x5c'");
  EXPECT_EQ(QuotedName(std::string(100, 'x'), 4), "'xxxx'... (100 bytes)");
  EXPECT_EQ(QuotedName(""), "''");
}

}  // namespace
}  // namespace tessera
