#include "server/rendezvous_store.h"

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
    store.Set("a", "1");
    store.Set("b", "2");
  });
  absl::StatusOr<std::vector<std::string>> values = store.Get({"a", "b"}, absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::string>{"1", "2"}));
}

TEST(RendezvousStore, MissingKeyTimesOutNamingIt) {
  RendezvousStore store;
  store.Set("a", "1");
  absl::StatusOr<std::vector<std::string>> values = store.Get({"a", "b"}, absl::Milliseconds(50));
  EXPECT_EQ(values.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(values.status().message(), ::testing::HasSubstr("'b'"));
}

TEST(RendezvousStore, ErasePrefixDropsOnlyThatPrefix) {
  RendezvousStore store;
  store.Set("mesh/1/x", "1");
  store.Set("mesh/1/y", "1");
  store.Set("mesh/10/x", "1");
  store.ErasePrefix("mesh/1/");
  EXPECT_EQ(store.size(), 1u);
}

}  // namespace
}  // namespace tessera
