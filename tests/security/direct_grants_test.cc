// security/direct_grants: a signed grant checks out under its key for its worker incarnation until
// it expires; changing any one field, the key, the worker or the clock refuses it with
// PERMISSION_DENIED; receipts check only for their own grant and key.

#include "security/direct_grants.h"

#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

v1::DirectGrant Grant() {
  v1::DirectGrant g;
  g.set_worker_id(3);
  g.set_incarnation(1'048'577);
  g.set_sequence(42);
  g.set_tensor("dt/weights");
  g.set_dtype(v1::FLOAT32);
  g.mutable_shape()->add_dims(4);
  g.mutable_shape()->add_dims(5);
  g.set_expires_unix_ms(absl::ToUnixMillis(kNow + absl::Seconds(10)));
  return g;
}

TEST(DirectGrantsTest, ASignedGrantChecksOutUntilItExpires) {
  const std::string key = NewGrantKey();
  ASSERT_EQ(key.size(), 32u);
  EXPECT_NE(key, NewGrantKey());
  v1::DirectGrant g = Grant();
  SignGrant(key, g);
  EXPECT_EQ(g.mac().size(), 32u);
  EXPECT_TRUE(CheckGrant(key, g, 3, 1'048'577, kNow).ok());
  EXPECT_TRUE(CheckGrant(key, g, 3, 1'048'577, kNow + absl::Seconds(9)).ok());
  const absl::Status expired = CheckGrant(key, g, 3, 1'048'577, kNow + absl::Seconds(10));
  EXPECT_EQ(expired.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(expired.message().find("expired"), std::string::npos) << expired;
}

TEST(DirectGrantsTest, AnotherKeyWorkerOrIncarnationIsRefused) {
  const std::string key = NewGrantKey();
  v1::DirectGrant g = Grant();
  SignGrant(key, g);
  EXPECT_EQ(CheckGrant(NewGrantKey(), g, 3, 1'048'577, kNow).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckGrant("", g, 3, 1'048'577, kNow).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckGrant(key, g, 2, 1'048'577, kNow).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckGrant(key, g, 3, 1'048'578, kNow).code(), absl::StatusCode::kPermissionDenied);
}

struct Change {
  std::string name;
  std::function<void(v1::DirectGrant&)> apply;
};

class DirectGrantChangeTest : public ::testing::TestWithParam<Change> {};

TEST_P(DirectGrantChangeTest, ChangingOneFieldAfterSigningIsRefused) {
  const std::string key = NewGrantKey();
  v1::DirectGrant g = Grant();
  SignGrant(key, g);
  const std::string receipt = GrantReceipt(key, g);
  EXPECT_TRUE(CheckReceipt(key, g, receipt));
  v1::DirectGrant changed = g;
  GetParam().apply(changed);
  ASSERT_NE(changed.SerializeAsString(), g.SerializeAsString());
  const absl::Status s = CheckGrant(key, changed, changed.worker_id(), changed.incarnation(), kNow);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  if (GetParam().name != "mac") {
    EXPECT_FALSE(CheckReceipt(key, changed, receipt));
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryField, DirectGrantChangeTest,
    ::testing::Values(
        Change{"worker", [](v1::DirectGrant& g) { g.set_worker_id(4); }},
        Change{"incarnation", [](v1::DirectGrant& g) { g.set_incarnation(7); }},
        Change{"sequence", [](v1::DirectGrant& g) { g.set_sequence(43); }},
        Change{"tensor", [](v1::DirectGrant& g) { g.set_tensor("dt/weight"); }},
        Change{"tensor_suffix", [](v1::DirectGrant& g) { g.set_tensor("dt/weights2"); }},
        Change{"dtype", [](v1::DirectGrant& g) { g.set_dtype(v1::INT32); }},
        Change{"shape", [](v1::DirectGrant& g) { g.mutable_shape()->set_dims(0, 5); }},
        Change{"rank", [](v1::DirectGrant& g) { g.mutable_shape()->add_dims(1); }},
        Change{"expiry",
               [](v1::DirectGrant& g) { g.set_expires_unix_ms(g.expires_unix_ms() + 60'000); }},
        Change{"read", [](v1::DirectGrant& g) { g.set_read(!g.read()); }},
        Change{"mac", [](v1::DirectGrant& g) { (*g.mutable_mac())[31] ^= 1; }}),
    [](const auto& info) { return info.param.name; });

TEST(DirectGrantsTest, AReceiptIsNotAGrantAndChecksOnlyUnderItsKey) {
  const std::string key = NewGrantKey();
  v1::DirectGrant g = Grant();
  SignGrant(key, g);
  const std::string receipt = GrantReceipt(key, g);
  EXPECT_NE(receipt, g.mac());
  EXPECT_FALSE(CheckReceipt(NewGrantKey(), g, receipt));
  EXPECT_FALSE(CheckReceipt("", g, receipt));
  EXPECT_FALSE(CheckReceipt(key, g, ""));
  EXPECT_FALSE(CheckReceipt(key, g, g.mac()));
}

}  // namespace
}  // namespace tessera
