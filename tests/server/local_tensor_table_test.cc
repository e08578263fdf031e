#include "server/tables/local_tensor_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tessera {
namespace {

using ::testing::HasSubstr;

const LocalLayout kF32x4{DType::kFloat32, {4}};
const LocalLayout kF32x8{DType::kFloat32, {8}};
const LocalLayout kI32x2{DType::kInt32, {2}};

LocalTensorTable::Reported Wrote(LocalLayout layout) { return {true, std::move(layout)}; }
LocalTensorTable::Reported WroteNothing() { return {false, std::nullopt}; }

// A table of a 2-rank mesh holding `name` as `layout` on both ranks.
void Upload(LocalTensorTable& table, const std::string& name, const LocalLayout& layout) {
  table.RecordUpload(name, 0, layout);
  table.RecordUpload(name, 1, layout);
}

TEST(LocalTensorTableTest, UploadsAreVisiblePerRank) {
  LocalTensorTable table("m", 2);
  table.RecordUpload("a", 1, kF32x4);
  EXPECT_EQ(table.LayoutOn("a", 1), kF32x4);
  EXPECT_EQ(table.LayoutOn("a", 0), std::nullopt);
  EXPECT_EQ(table.LayoutOn("a", 2), std::nullopt);
  EXPECT_EQ(table.LayoutOn("b", 0), std::nullopt);
  EXPECT_EQ(table.Names(), std::vector<std::string>{"a"});
}

TEST(LocalTensorTableTest, OnEveryRankNamesTheMissingRanks) {
  LocalTensorTable table("m", 3);
  EXPECT_EQ(table.OnEveryRank("a").status().code(), absl::StatusCode::kNotFound);
  table.RecordUpload("a", 1, kF32x4);
  absl::StatusOr<RankLayouts> partial = table.OnEveryRank("a");
  EXPECT_EQ(partial.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(partial.status().message(), HasSubstr("not on ranks 0, 2"));
  table.RecordUpload("a", 0, kF32x4);
  table.RecordUpload("a", 2, kF32x4);
  absl::StatusOr<RankLayouts> all = table.OnEveryRank("a");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, (RankLayouts{kF32x4, kF32x4, kF32x4}));
}

TEST(LocalTensorTableTest, ReservationIsVisibleAtOnceAndSettlesOnSuccess) {
  LocalTensorTable table("m", 2);
  Upload(table, "a", kF32x4);
  // An all_gather-like output: both ranks write 8 elements.
  LocalTensorTable::Reservation r = table.Reserve("b", {kF32x8, kF32x8}).value();
  EXPECT_EQ(table.LayoutOn("b", 0), kF32x8);
  EXPECT_FALSE(r.previous.has_value());
  bool erased = false;
  absl::Status s = table.Settle("b", false, r, absl::OkStatus(), {Wrote(kF32x8), Wrote(kF32x8)},
                                [&] { erased = true; });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_FALSE(erased);
  EXPECT_EQ(table.LayoutOn("b", 1), kF32x8);
}

TEST(LocalTensorTableTest, ARankReportingAnotherLayoutIsInternal) {
  LocalTensorTable table("m", 2);
  LocalTensorTable::Reservation r = table.Reserve("b", {kF32x8, kF32x8}).value();
  absl::Status s =
      table.Settle("b", false, r, absl::OkStatus(), {Wrote(kF32x8), Wrote(kI32x2)}, [] {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("mesh position 1 wrote 'b' as int32[2]"));
  // The failure is remembered for the next use of the name, which is gone.
  EXPECT_THAT(table.OnEveryRank("b").status().message(), HasSubstr("the last collective"));
}

TEST(LocalTensorTableTest, ARankWritingWhereNoneWasExpectedIsInternal) {
  LocalTensorTable table("m", 2);
  Upload(table, "b", kF32x4);
  // A reduce-like output: only rank 0 writes; rank 1 keeps what it held.
  LocalTensorTable::Reservation r = table.Reserve("b", {kF32x4, std::nullopt}).value();
  EXPECT_EQ(table.LayoutOn("b", 1), kF32x4);
  absl::Status s =
      table.Settle("b", false, r, absl::OkStatus(), {Wrote(kF32x4), Wrote(kF32x4)}, [] {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(),
              HasSubstr("mesh position 1 wrote 'b' where the coordinator expected none"));
}

TEST(LocalTensorTableTest, AFailedOutputLeavesTheTableAndTheWorkers) {
  LocalTensorTable table("m", 2);
  Upload(table, "a", kF32x4);
  LocalTensorTable::Reservation r = table.Reserve("b", {kF32x8, kF32x8}).value();
  int erased = 0;
  absl::Status s = table.Settle("b", false, r, absl::UnavailableError("worker 2 died"),
                                {WroteNothing(), WroteNothing()}, [&] { ++erased; });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(erased, 1);
  EXPECT_EQ(table.LayoutOn("b", 0), std::nullopt);
  EXPECT_THAT(table.OnEveryRank("b").status().message(), HasSubstr("worker 2 died"));
  EXPECT_EQ(table.LayoutOn("a", 0), kF32x4);  // others untouched
}

TEST(LocalTensorTableTest, AFailedInPlaceCollectiveThatKeptItsInputRestoresIt) {
  LocalTensorTable table("m", 2);
  Upload(table, "a", kF32x4);
  LocalTensorTable::Reservation r = table.Reserve("a", {kF32x8, kF32x8}).value();
  ASSERT_TRUE(r.previous.has_value());
  int erased = 0;
  absl::Status s = table.Settle("a", /*kept_input=*/true, r, absl::AbortedError("x"),
                                {WroteNothing(), WroteNothing()}, [&] { ++erased; });
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(erased, 0);
  EXPECT_EQ(table.LayoutOn("a", 1), kF32x4);
}

TEST(LocalTensorTableTest, OnlyTheLastWriterSettlesAName) {
  LocalTensorTable table("m", 2);
  LocalTensorTable::Reservation first = table.Reserve("b", {kF32x8, kF32x8}).value();
  LocalTensorTable::Reservation second = table.Reserve("b", {kF32x4, kF32x4}).value();
  int erased = 0;
  // The first fails after the second was accepted: the entry is the second's and stays.
  absl::Status s = table.Settle("b", false, first, absl::AbortedError("x"),
                                {WroteNothing(), WroteNothing()}, [&] { ++erased; });
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(erased, 0);
  EXPECT_EQ(table.LayoutOn("b", 0), kF32x4);
  EXPECT_TRUE(table
                  .Settle("b", false, second, absl::OkStatus(), {Wrote(kF32x4), Wrote(kF32x4)},
                          [&] { ++erased; })
                  .ok());
  // An upload after a reservation is the last writer: the collective no longer checks it.
  LocalTensorTable::Reservation third = table.Reserve("b", {kF32x8, kF32x8}).value();
  table.RecordUpload("b", 0, kI32x2);
  EXPECT_TRUE(table
                  .Settle("b", false, third, absl::OkStatus(), {Wrote(kF32x4), Wrote(kF32x4)},
                          [&] { ++erased; })
                  .ok());
  EXPECT_EQ(table.LayoutOn("b", 0), kI32x2);
}

TEST(LocalTensorTableTest, EraseForgetsTheNameAndItsWriters) {
  LocalTensorTable table("m", 2);
  EXPECT_EQ(table.Erase("a").code(), absl::StatusCode::kNotFound);
  LocalTensorTable::Reservation r = table.Reserve("a", {kF32x4, kF32x4}).value();
  EXPECT_TRUE(table.Erase("a").ok());
  int erased = 0;
  // A collective still writing it settles nothing: a delete came after it.
  EXPECT_EQ(table
                .Settle("a", false, r, absl::AbortedError("x"), {WroteNothing(), WroteNothing()},
                        [&] { ++erased; })
                .code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(erased, 0);
  EXPECT_TRUE(table.Names().empty());
}

// A 2-rank table on workers 5 and 6 whose bytes are counted in a ledger, 100 bytes each.
struct Counted {
  WorkerBytes ledger;
  LocalTensorTable table{"m", 2, {&ledger, {5, 6}, {100, 100}}};
};

const LocalLayout kF32x20{DType::kFloat32, {20}};  // 80 bytes
const LocalLayout kF32x25{DType::kFloat32, {25}};  // 100 bytes

TEST(LocalTensorTableTest, UploadsAreHeldAgainstTheBudgetBeforeTheyStart) {
  Counted c;
  ASSERT_TRUE(c.table.ReserveUpload("a", 0, kF32x20).ok());
  c.table.RecordUpload("a", 0, kF32x20);
  EXPECT_EQ(c.ledger.Held(5), 80);
  EXPECT_EQ(c.ledger.Held(6), 0);
  absl::Status over = c.table.ReserveUpload("b", 0, kF32x8);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr("'b' of mesh 'm' on rank 0 needs 32 bytes on worker 5, "
                                        "which holds 80 of its 100-byte budget"));
  EXPECT_EQ(c.ledger.Held(5), 80);
  // Replacing a tensor counts its bytes once; a failed upload gives the new bytes back.
  ASSERT_TRUE(c.table.ReserveUpload("a", 0, kF32x25).ok());
  EXPECT_EQ(c.ledger.Held(5), 100);
  c.table.CancelUpload("a", 0);
  EXPECT_EQ(c.ledger.Held(5), 80);
  ASSERT_TRUE(c.table.ReserveUpload("new", 1, kF32x20).ok());
  c.table.CancelUpload("new", 1);
  EXPECT_EQ(c.ledger.Held(6), 0);
}

TEST(LocalTensorTableTest, CollectiveOutputsAreHeldAgainstTheBudget) {
  Counted c;
  Upload(c.table, "a", kF32x4);  // 16 bytes on each
  // Both ranks would hold 16 + 100: refused, naming the first worker; nothing is entered.
  absl::StatusOr<LocalTensorTable::Reservation> over = c.table.Reserve("b", {kF32x25, kF32x25});
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(),
              HasSubstr("output 'b' of a collective on mesh 'm' needs 100 bytes on worker 5"));
  EXPECT_EQ(c.table.LayoutOn("b", 0), std::nullopt);
  EXPECT_EQ(c.ledger.Held(5), 16);
  // In place, the output replaces the input's bytes; only the ranks it writes are counted.
  absl::StatusOr<LocalTensorTable::Reservation> in_place =
      c.table.Reserve("a", {kF32x25, std::nullopt});
  ASSERT_TRUE(in_place.ok()) << in_place.status();
  EXPECT_EQ(c.ledger.Held(5), 100);
  EXPECT_EQ(c.ledger.Held(6), 16);
  // Failed, having kept its input: the input's bytes again.
  c.table
      .Settle("a", /*kept_input=*/true, *in_place, absl::AbortedError("x"),
              {WroteNothing(), WroteNothing()}, [] {})
      .IgnoreError();
  EXPECT_EQ(c.ledger.Held(5), 16);
  // Failed, with its output undefined: the name's bytes leave with it.
  absl::StatusOr<LocalTensorTable::Reservation> out = c.table.Reserve("c", {kF32x20, kF32x20});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(c.ledger.Held(6), 96);
  c.table.Settle("c", false, *out, absl::AbortedError("x"), {WroteNothing(), WroteNothing()}, [] {})
      .IgnoreError();
  EXPECT_EQ(c.ledger.Held(6), 16);
}

TEST(LocalTensorTableTest, EraseAndForgetGiveTheBytesBack) {
  Counted c;
  Upload(c.table, "a", kF32x4);
  Upload(c.table, "b", kF32x8);
  EXPECT_EQ(c.ledger.Held(5), 48);
  ASSERT_TRUE(c.table.Erase("a").ok());
  EXPECT_EQ(c.ledger.Held(5), 32);
  c.table.Forget();
  EXPECT_EQ(c.ledger.Held(5), 0);
  EXPECT_EQ(c.ledger.Held(6), 0);
  EXPECT_TRUE(c.table.Names().empty());
  // An upload that finishes after its mesh was deleted is not counted.
  c.table.RecordUpload("late", 0, kF32x20);
  EXPECT_EQ(c.ledger.Held(5), 0);
}

}  // namespace
}  // namespace tessera
