#include "core/shape.h"

#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(ShapeTest, NumElements) {
  EXPECT_EQ(NumElements(Shape{}), 1);  // a scalar
  EXPECT_EQ(NumElements(Shape{7}), 7);
  EXPECT_EQ(NumElements(Shape{2, 5}), 10);
  EXPECT_EQ(NumElements(Shape{2, 3, 4}), 24);
  EXPECT_EQ(NumElements(Shape{2, 0, 3}), 0);
  EXPECT_EQ(NumElements(Shape{1, 1, 1, 1}), 1);
}

TEST(ShapeTest, ShapeToString) {
  EXPECT_EQ(ShapeToString(Shape{}), "[]");
  EXPECT_EQ(ShapeToString(Shape{4}), "[4]");
  EXPECT_EQ(ShapeToString(Shape{2, 5}), "[2, 5]");
  EXPECT_EQ(ShapeToString(Shape{2, 0, 3}), "[2, 0, 3]");
}

TEST(ShapeTest, ContiguousStridesHandWorked) {
  EXPECT_THAT(ContiguousStrides(Shape{}), IsEmpty());
  EXPECT_THAT(ContiguousStrides(Shape{5}), ElementsAre(1));
  EXPECT_THAT(ContiguousStrides(Shape{2, 5}), ElementsAre(5, 1));
  EXPECT_THAT(ContiguousStrides(Shape{2, 3, 4}), ElementsAre(12, 4, 1));
  EXPECT_THAT(ContiguousStrides(Shape{3, 1, 2, 1}), ElementsAre(2, 2, 1, 1));
}

class ContiguousStridesTest
    : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, int64_t>> {};

// The stride of dim i is the product of the sizes after it, and the last element's offset is
// NumElements - 1.
TEST_P(ContiguousStridesTest, MatchesProductOfTrailingSizes) {
  const auto [a, b, c, d] = GetParam();
  const Shape shape{a, b, c, d};
  const std::vector<int64_t> strides = ContiguousStrides(shape);
  ASSERT_EQ(strides.size(), shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t product = 1;
    for (size_t j = i + 1; j < shape.size(); ++j) product *= shape[j];
    EXPECT_EQ(strides[i], product) << "dim " << i;
  }
  int64_t last = 0;
  for (size_t i = 0; i < shape.size(); ++i) last += (shape[i] - 1) * strides[i];
  EXPECT_EQ(last, NumElements(shape) - 1);
}

INSTANTIATE_TEST_SUITE_P(Sizes, ContiguousStridesTest,
                         ::testing::Combine(::testing::Values(1, 3), ::testing::Values(1, 2, 5),
                                            ::testing::Values(1, 4), ::testing::Values(1, 2, 7)));

TEST(ValidateShapeTest, AcceptsNonNegativeSizes) {
  EXPECT_TRUE(ValidateShape(Shape{}).ok());
  EXPECT_TRUE(ValidateShape(Shape{0}).ok());
  EXPECT_TRUE(ValidateShape(Shape{2, 0, 3}).ok());
  EXPECT_TRUE(ValidateShape(Shape{kMax}).ok());
  EXPECT_TRUE(ValidateShape(Shape{kMax, 1}).ok());
  EXPECT_TRUE(ValidateShape(Shape{0, kMax, kMax}).ok());  // zero elements never overflow
  EXPECT_TRUE(ValidateShape(Shape{int64_t{1} << 31, int64_t{1} << 31}).ok());
}

TEST(ValidateShapeTest, NegativeSizeNamesTheDimAndSize) {
  absl::Status s = ValidateShape(Shape{2, -3, 4});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("[2, -3, 4]"));
  EXPECT_THAT(s.message(), HasSubstr("-3"));
  EXPECT_THAT(s.message(), HasSubstr("dim 1"));
}

TEST(ValidateShapeTest, ElementCountOverflowIsRejected) {
  for (const Shape& shape : {Shape{kMax, 2}, Shape{int64_t{1} << 32, int64_t{1} << 32},
                             Shape{int64_t{1} << 21, int64_t{1} << 21, int64_t{1} << 21}}) {
    absl::Status s = ValidateShape(shape);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << ShapeToString(shape);
    EXPECT_THAT(s.message(), HasSubstr("int64"));
  }
}

class NormalizeDimTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

// Over dims -rank-2 .. rank+1: in range exactly for -rank..rank-1, which map to (dim + rank) %
// rank.
TEST_P(NormalizeDimTest, MatchesPythonIndexing) {
  const auto [rank, offset] = GetParam();
  const int64_t dim = offset - rank - 2;  // offset 0 .. 2*rank+3 covers -rank-2 .. rank+1
  absl::StatusOr<int> d = NormalizeDim(dim, rank);
  if (dim >= -rank && dim < rank) {
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, (dim + rank) % rank);
  } else {
    ASSERT_FALSE(d.ok()) << "dim " << dim << " rank " << rank;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(d.status().message(), HasSubstr(absl::StrCat("dim ", dim, " ")));
    EXPECT_THAT(d.status().message(), HasSubstr(absl::StrCat(rank, " dims")));
  }
}

INSTANTIATE_TEST_SUITE_P(RanksAndDims, NormalizeDimTest,
                         ::testing::Combine(::testing::Range(0, 5), ::testing::Range(0, 12)));

TEST(NormalizeDimTest, HandWorked) {
  EXPECT_EQ(NormalizeDim(-1, 2).value(), 1);
  EXPECT_EQ(NormalizeDim(-2, 2).value(), 0);
  EXPECT_EQ(NormalizeDim(1, 2).value(), 1);
  EXPECT_FALSE(NormalizeDim(2, 2).ok());
  EXPECT_FALSE(NormalizeDim(-3, 2).ok());
  EXPECT_FALSE(NormalizeDim(0, 0).ok());  // a scalar has no dims
  EXPECT_FALSE(NormalizeDim(std::numeric_limits<int64_t>::min(), 3).ok());
  EXPECT_FALSE(NormalizeDim(kMax, 3).ok());
}

struct ParseCase {
  const char* text;
  Shape want;
};

class ParseShapeTest : public ::testing::TestWithParam<ParseCase> {};

TEST_P(ParseShapeTest, Parses) {
  absl::StatusOr<Shape> shape = ParseShape(GetParam().text);
  ASSERT_TRUE(shape.ok()) << "'" << GetParam().text << "': " << shape.status();
  EXPECT_EQ(*shape, GetParam().want) << "'" << GetParam().text << "'";
}

INSTANTIATE_TEST_SUITE_P(Forms, ParseShapeTest,
                         ::testing::Values(ParseCase{"2,5", {2, 5}}, ParseCase{"[2, 5]", {2, 5}},
                                           ParseCase{"(2, 5)", {2, 5}}, ParseCase{"(4,)", {4}},
                                           ParseCase{"4,", {4}}, ParseCase{"[4]", {4}},
                                           ParseCase{"7", {7}}, ParseCase{"", {}},
                                           ParseCase{"[]", {}}, ParseCase{"()", {}},
                                           ParseCase{"  [ 3 , 0 , 1 ]  ", {3, 0, 1}},
                                           ParseCase{"1,2,3,4,5", {1, 2, 3, 4, 5}}));

class ParseShapeErrorTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ParseShapeErrorTest, IsInvalidArgumentQuotingTheText) {
  absl::StatusOr<Shape> shape = ParseShape(GetParam());
  ASSERT_FALSE(shape.ok()) << "'" << GetParam() << "' parsed as " << ShapeToString(*shape);
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shape.status().message(), HasSubstr(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(BadInput, ParseShapeErrorTest,
                         ::testing::Values("[2, 5", "2, 5]", "(2, 5", "[2, 5)", "(2, 5]", "2 5",
                                           "2;5", "a,b", "2.5", "[2, x]", "2,,5", ",", "[,]", ",4",
                                           "99999999999999999999"));

TEST(ParseShapeTest, NegativeSizeIsRejectedByValidation) {
  absl::StatusOr<Shape> shape = ParseShape("[2, -1]");
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shape.status().message(), HasSubstr("-1"));
}

TEST(ParseShapeTest, OverflowingElementCountIsRejected) {
  absl::StatusOr<Shape> shape = ParseShape("4294967296, 4294967296");
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseShapeTest, RoundTripsShapeToString) {
  for (const Shape& shape : {Shape{}, Shape{3}, Shape{2, 5}, Shape{1, 0, 7, 2}}) {
    absl::StatusOr<Shape> parsed = ParseShape(ShapeToString(shape));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, shape);
  }
}

}  // namespace
}  // namespace tessera
