#include "core/sharding/placement.h"

#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const Placement kR = Placement::Replicate();
Placement S(int dim) { return Placement::Shard(dim); }
Placement P(ReduceOp op = ReduceOp::kSum) { return Placement::Partial(op); }

TEST(ReduceOpTest, NamesRoundTrip) {
  const std::pair<ReduceOp, const char*> names[] = {{ReduceOp::kSum, "sum"},
                                                    {ReduceOp::kAvg, "avg"},
                                                    {ReduceOp::kMax, "max"},
                                                    {ReduceOp::kMin, "min"},
                                                    {ReduceOp::kProduct, "product"}};
  ASSERT_EQ(std::size(names), std::size(kAllReduceOps));
  for (const auto& [op, name] : names) {
    EXPECT_EQ(ReduceOpName(op), name);
    absl::StatusOr<ReduceOp> parsed = ParseReduceOp(name);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, op);
  }
  EXPECT_EQ(ParseReduceOp("prod").value(), ReduceOp::kProduct);
}

TEST(ReduceOpTest, UnknownOpNamesIt) {
  absl::StatusOr<ReduceOp> op = ParseReduceOp("mean");
  ASSERT_FALSE(op.ok());
  EXPECT_EQ(op.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(op.status().message(), HasSubstr("'mean'"));
}

TEST(PlacementTest, EqualityIgnoresUnusedFields) {
  EXPECT_EQ(S(0), S(0));
  EXPECT_NE(S(0), S(1));
  EXPECT_EQ(kR, (Placement{Placement::Kind::kReplicate, 3, ReduceOp::kMax}));
  EXPECT_EQ(P(ReduceOp::kMax), (Placement{Placement::Kind::kPartial, 7, ReduceOp::kMax}));
  EXPECT_NE(P(ReduceOp::kMax), P(ReduceOp::kMin));
  EXPECT_NE(S(0), kR);
  EXPECT_NE(kR, P());
  EXPECT_NE(S(0), P());
}

TEST(PlacementTest, Predicates) {
  EXPECT_TRUE(S(1).is_shard());
  EXPECT_TRUE(S(1).is_shard(1));
  EXPECT_FALSE(S(1).is_shard(0));
  EXPECT_FALSE(kR.is_shard());
  EXPECT_FALSE(kR.is_shard(0));
  EXPECT_TRUE(kR.is_replicate());
  EXPECT_TRUE(P().is_partial());
  EXPECT_FALSE(P().is_shard(0));
}

TEST(PlacementTest, ToStringUsesDTensorShortForms) {
  EXPECT_EQ(PlacementToString(S(0)), "S(0)");
  EXPECT_EQ(PlacementToString(S(-1)), "S(-1)");
  EXPECT_EQ(PlacementToString(kR), "R");
  EXPECT_EQ(PlacementToString(P()), "P(sum)");
  EXPECT_EQ(PlacementToString(P(ReduceOp::kAvg)), "P(avg)");
  EXPECT_EQ(PlacementToString(P(ReduceOp::kProduct)), "P(product)");
  const std::vector<Placement> two{S(0), kR};
  EXPECT_EQ(PlacementsToString(two), "(S(0), R)");
  const std::vector<Placement> one{P(ReduceOp::kMax)};
  EXPECT_EQ(PlacementsToString(one), "(P(max))");
  EXPECT_EQ(PlacementsToString({}), "()");
}

struct ParseCase {
  const char* text;
  Placement want;
};

class ParsePlacementTest : public ::testing::TestWithParam<ParseCase> {};

TEST_P(ParsePlacementTest, Parses) {
  absl::StatusOr<Placement> p = ParsePlacement(GetParam().text);
  ASSERT_TRUE(p.ok()) << "'" << GetParam().text << "': " << p.status();
  EXPECT_EQ(*p, GetParam().want) << "'" << GetParam().text << "' -> " << PlacementToString(*p);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, ParsePlacementTest,
    ::testing::Values(
        ParseCase{"S(0)", S(0)}, ParseCase{"S0", S(0)}, ParseCase{"S1", S(1)},
        ParseCase{"S12", S(12)}, ParseCase{"Shard(1)", S(1)}, ParseCase{"shard(2)", S(2)},
        ParseCase{"S(-1)", S(-1)}, ParseCase{"S-1", S(-1)}, ParseCase{" S( 3 ) ", S(3)},
        ParseCase{"R", kR}, ParseCase{"r", kR}, ParseCase{"Replicate()", kR},
        ParseCase{"Replicate", kR}, ParseCase{"P", P()}, ParseCase{"P(sum)", P()},
        ParseCase{"P(max)", P(ReduceOp::kMax)}, ParseCase{"P(min)", P(ReduceOp::kMin)},
        ParseCase{"P(prod)", P(ReduceOp::kProduct)}, ParseCase{"Partial(avg)", P(ReduceOp::kAvg)},
        ParseCase{"Partial()", P()}, ParseCase{"Partial", P()},
        ParseCase{"Partial(reduce_op=prod)", P(ReduceOp::kProduct)}));

// The ways a placement can be written: Tessera's short form and torch's spellings.
enum class Spelling {
  kShort,         // S(1), R, P(sum)
  kLong,          // Shard(1), Replicate(), Partial(sum)
  kKeyword,       // Shard(dim=1), Replicate(), Partial(reduce_op="sum")
  kDoubleQuoted,  // Shard(1), Replicate(), Partial("sum")
  kSingleQuoted,  // Shard(dim=1), Replicate(), Partial(reduce_op='sum')
  kSpaced,        // Shard( dim = 1 ), Replicate( ), Partial( 'sum' )
};

std::string Spell(const Placement& p, Spelling s) {
  if (s == Spelling::kShort) return PlacementToString(p);
  const std::string op(ReduceOpName(p.op));
  switch (p.kind) {
    case Placement::Kind::kShard:
      if (s == Spelling::kKeyword || s == Spelling::kSingleQuoted) {
        return absl::StrCat("Shard(dim=", p.dim, ")");
      }
      return s == Spelling::kSpaced ? absl::StrCat("Shard( dim = ", p.dim, " )")
                                    : absl::StrCat("Shard(", p.dim, ")");
    case Placement::Kind::kReplicate:
      return s == Spelling::kSpaced ? "Replicate( )" : "Replicate()";
    case Placement::Kind::kPartial:
      switch (s) {
        case Spelling::kKeyword:
          return absl::StrCat("Partial(reduce_op=\"", op, "\")");
        case Spelling::kDoubleQuoted:
          return absl::StrCat("Partial(\"", op, "\")");
        case Spelling::kSingleQuoted:
          return absl::StrCat("Partial(reduce_op='", op, "')");
        case Spelling::kSpaced:
          return absl::StrCat("Partial( '", op, "' )");
        default:
          return absl::StrCat("Partial(", op, ")");
      }
  }
  return "?";
}

const Spelling kAllSpellings[] = {Spelling::kShort,        Spelling::kLong,
                                  Spelling::kKeyword,      Spelling::kDoubleQuoted,
                                  Spelling::kSingleQuoted, Spelling::kSpaced};

const Placement kEveryPlacement[] = {S(0),
                                     S(1),
                                     S(-1),
                                     kR,
                                     P(ReduceOp::kSum),
                                     P(ReduceOp::kAvg),
                                     P(ReduceOp::kMax),
                                     P(ReduceOp::kMin),
                                     P(ReduceOp::kProduct)};

class SpellingTest : public ::testing::TestWithParam<std::tuple<Placement, Spelling>> {};

TEST_P(SpellingTest, ParsesToThePlacement) {
  const auto& [placement, spelling] = GetParam();
  const std::string text = Spell(placement, spelling);
  absl::StatusOr<Placement> p = ParsePlacement(text);
  ASSERT_TRUE(p.ok()) << "'" << text << "': " << p.status();
  EXPECT_EQ(*p, placement) << "'" << text << "' -> " << PlacementToString(*p);
}

TEST_P(SpellingTest, ParsesInsideAList) {
  const auto& [placement, spelling] = GetParam();
  const std::string text =
      absl::StrCat("[", Spell(placement, spelling), ", ", Spell(S(0), spelling), ", ",
                   Spell(P(ReduceOp::kMax), spelling), "]");
  absl::StatusOr<std::vector<Placement>> p = ParsePlacements(text);
  ASSERT_TRUE(p.ok()) << "'" << text << "': " << p.status();
  EXPECT_THAT(*p, ElementsAre(placement, S(0), P(ReduceOp::kMax))) << text;
}

INSTANTIATE_TEST_SUITE_P(Product, SpellingTest,
                         ::testing::Combine(::testing::ValuesIn(kEveryPlacement),
                                            ::testing::ValuesIn(kAllSpellings)),
                         [](const auto& info) {
                           std::string name = absl::StrCat(
                               PlacementToString(std::get<0>(info.param)), "_",
                               static_cast<int>(std::get<1>(info.param)), "_", info.index);
                           for (char& c : name) {
                             if (!absl::ascii_isalnum(c)) c = '_';
                           }
                           return name;
                         });

// Every placement's ToString form parses back to it.
class PlacementRoundTripTest : public ::testing::TestWithParam<Placement> {};

TEST_P(PlacementRoundTripTest, ToStringParsesBack) {
  absl::StatusOr<Placement> p = ParsePlacement(PlacementToString(GetParam()));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, GetParam());
}

INSTANTIATE_TEST_SUITE_P(All, PlacementRoundTripTest,
                         ::testing::Values(S(0), S(1), S(3), S(-1), S(-2), kR, P(ReduceOp::kSum),
                                           P(ReduceOp::kAvg), P(ReduceOp::kMax), P(ReduceOp::kMin),
                                           P(ReduceOp::kProduct)));

class ParsePlacementErrorTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ParsePlacementErrorTest, IsInvalidArgumentQuotingTheText) {
  absl::StatusOr<Placement> p = ParsePlacement(GetParam());
  ASSERT_FALSE(p.ok()) << "'" << GetParam() << "' parsed as " << PlacementToString(*p);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(
    BadInput, ParsePlacementErrorTest,
    ::testing::Values("", "X", "X(0)", "S", "S()", "S(a)", "S(1.5)", "S(0", "Shard(0)x", "R1",
                      "R(0)", "Replicate(1)", "P(", "Partial(sum", "5", "(0)", "S(0)(1)",
                      "Shard(d=1)", "Shard(dim=)", "Shard(dim=x)", "Shard(\"1\")", "Shard('1')",
                      "Partial(\"sum')", "Partial(\"\")", "Partial('sum",
                      "Partial(reduce_op=\"mean\")", "Partial(op='sum')", "Partial(reduce_op=)",
                      "Partial(\"su\"m\")", "Partial(sum=max)", "Replicate(dim=0)", "Shard(dim=1"));

TEST(ParsePlacementTest, WrongKeywordNamesTheExpectedOne) {
  absl::StatusOr<Placement> p = ParsePlacement("Partial(op='sum')");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("reduce_op="));
  p = ParsePlacement("Shard(d=1)");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("dim="));
}

TEST(ParsePlacementTest, UnknownReduceOpNamesTheOp) {
  absl::StatusOr<Placement> p = ParsePlacement("P(mean)");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("'mean'"));
}

struct ListCase {
  const char* text;
  std::vector<Placement> want;
};

class ParsePlacementsTest : public ::testing::TestWithParam<ListCase> {};

TEST_P(ParsePlacementsTest, Parses) {
  absl::StatusOr<std::vector<Placement>> p = ParsePlacements(GetParam().text);
  ASSERT_TRUE(p.ok()) << "'" << GetParam().text << "': " << p.status();
  EXPECT_EQ(*p, GetParam().want) << "'" << GetParam().text << "' -> " << PlacementsToString(*p);
}

INSTANTIATE_TEST_SUITE_P(Forms, ParsePlacementsTest,
                         ::testing::Values(ListCase{"(S(0), R)", {S(0), kR}},
                                           ListCase{"S0,R", {S(0), kR}},
                                           ListCase{"(R, R)", {kR, kR}},
                                           ListCase{"[Shard(1), Partial(sum)]", {S(1), P()}},
                                           ListCase{"S(0)", {S(0)}}, ListCase{"(S(0))", {S(0)}},
                                           ListCase{"(S(0),)", {S(0)}}, ListCase{"R", {kR}},
                                           ListCase{" ( P(max) , S(-1) , Replicate() ) ",
                                                    {P(ReduceOp::kMax), S(-1), kR}},
                                           ListCase{"S(1),S(1)", {S(1), S(1)}},
                                           ListCase{"(Replicate(), Replicate())", {kR, kR}}));

TEST(ParsePlacementsTest, RoundTripsPlacementsToString) {
  const std::vector<std::vector<Placement>> lists{
      {S(0)}, {S(0), kR}, {kR, P(ReduceOp::kAvg), S(2)}, {P(ReduceOp::kMin), P(ReduceOp::kMax)}};
  for (const std::vector<Placement>& list : lists) {
    absl::StatusOr<std::vector<Placement>> p = ParsePlacements(PlacementsToString(list));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(*p, list) << PlacementsToString(list);
  }
}

class ParsePlacementsErrorTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ParsePlacementsErrorTest, IsInvalidArgument) {
  absl::StatusOr<std::vector<Placement>> p = ParsePlacements(GetParam());
  ASSERT_FALSE(p.ok()) << "'" << GetParam() << "' parsed as " << PlacementsToString(*p);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(BadInput, ParsePlacementsErrorTest,
                         ::testing::Values("", "()", "[]", " ", "(S(0), X)", "S(0), P(mean)",
                                           "(S(0)", "S(0), R)", "[S(0), R", "S(0) R"));

TEST(ParsePlacementsTest, ErrorNamesTheBadElement) {
  absl::StatusOr<std::vector<Placement>> p = ParsePlacements("(S(0), Q(1))");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("'Q(1)'"));
  p = ParsePlacements("");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("no placements"));
}

}  // namespace
}  // namespace tessera
