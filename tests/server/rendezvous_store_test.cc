#include "server/cluster/rendezvous_store.h"

#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(RendezvousStore, GetWaitsForKeysSetLater) {
  RendezvousStore store;
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(store.Set("mesh/0/a", "1").ok());
    ASSERT_TRUE(store.Set("mesh/0/b", "2").ok());
  });
  absl::StatusOr<std::vector<std::string>> values =
      store.Get({"mesh/0/a", "mesh/0/b"}, absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::string>{"1", "2"}));
}

TEST(RendezvousStore, MissingKeyTimesOutNamingIt) {
  RendezvousStore store;
  ASSERT_TRUE(store.Set("mesh/0/a", "1").ok());
  absl::StatusOr<std::vector<std::string>> values =
      store.Get({"mesh/0/a", "mesh/0/b"}, absl::Milliseconds(50));
  EXPECT_EQ(values.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(values.status().message(), ::testing::HasSubstr("'mesh/0/b'"));
}

TEST(RendezvousStore, ErasePrefixDropsOnlyThatPrefix) {
  RendezvousStore store;
  ASSERT_TRUE(store.Set("mesh/1/x", "1").ok());
  ASSERT_TRUE(store.Set("mesh/1/y", "1").ok());
  ASSERT_TRUE(store.Set("mesh/10/x", "1").ok());
  store.ErasePrefix("mesh/1/");
  EXPECT_EQ(store.size(), 1u);
}

struct RefusedSet {
  std::string name;
  std::string key;
  int64_t value_bytes;
  absl::StatusCode code;
  std::string message_part;
};

class RendezvousStoreRefuses : public ::testing::TestWithParam<RefusedSet> {};

// A store of limits small enough to reach, holding one key of mesh 3 already.
TEST_P(RendezvousStoreRefuses, WhatBreaksItsBoundsOrScope) {
  RendezvousStore store(
      {.max_value_bytes = 16, .max_key_bytes = 32, .max_keys_per_mesh = 2, .max_keys = 3});
  ASSERT_TRUE(store.Set("mesh/3/a", "1").ok());
  ASSERT_TRUE(store.Set("mesh/3/b", "1").ok());
  ASSERT_TRUE(store.Set("mesh/4/a", "1").ok());
  const RefusedSet& c = GetParam();
  const absl::Status s = store.Set(c.key, std::string(c.value_bytes, 'v'));
  EXPECT_EQ(s.code(), c.code) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr(c.message_part));
  EXPECT_EQ(store.size(), 3u);  // nothing stored
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RendezvousStoreRefuses,
    ::testing::Values(RefusedSet{"ValueTooLarge", "mesh/3/a", 17,
                                 absl::StatusCode::kResourceExhausted, "limit of 16 bytes"},
                      RefusedSet{"KeyTooLong", "mesh/3/" + std::string(40, 'k'), 1,
                                 absl::StatusCode::kResourceExhausted, "limit of 32"},
                      RefusedSet{"TooManyKeysInMesh", "mesh/3/c", 1,
                                 absl::StatusCode::kResourceExhausted, "mesh 3 already holds 2"},
                      RefusedSet{"TooManyKeys", "mesh/5/a", 1, absl::StatusCode::kResourceExhausted,
                                 "already holds 3 keys"},
                      RefusedSet{"KeyOutsideMeshes", "gloo/x", 1,
                                 absl::StatusCode::kInvalidArgument, "not under a mesh's prefix"},
                      RefusedSet{"EmptyRest", "mesh/3/", 1, absl::StatusCode::kInvalidArgument,
                                 "not under a mesh's prefix"}),
    [](const ::testing::TestParamInfo<RefusedSet>& info) { return info.param.name; });

TEST(RendezvousStore, ErasingAMeshFreesItsKeyCount) {
  RendezvousStore store({.max_keys_per_mesh = 1});
  ASSERT_TRUE(store.Set("mesh/3/a", "1").ok());
  EXPECT_EQ(store.Set("mesh/3/b", "1").code(), absl::StatusCode::kResourceExhausted);
  store.ErasePrefix("mesh/3/");
  EXPECT_TRUE(store.Set("mesh/3/b", "1").ok());
}

}  // namespace
}  // namespace tessera
