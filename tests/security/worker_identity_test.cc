// AcceptedIdentity, AddressHost and NamesCoverHost (security/worker_identity.h) against answers
// worked out by hand.

#include "security/worker_identity.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

struct IdentityCase {
  std::string name;
  std::vector<std::string> names;     // the certificate's
  std::vector<std::string> accepted;  // --worker_identity
  std::optional<std::string> want;
};

class AcceptedIdentities : public ::testing::TestWithParam<IdentityCase> {};

TEST_P(AcceptedIdentities, AreTheFirstAdmittedName) {
  const IdentityCase& c = GetParam();
  EXPECT_EQ(AcceptedIdentity(c.names, c.accepted), c.want);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AcceptedIdentities,
    ::testing::Values(
        IdentityCase{"Exact", {"tessera-worker"}, {"tessera-worker"}, "tessera-worker"},
        IdentityCase{"ExactIsNotAPrefix", {"tessera-worker-0"}, {"tessera-worker"}, std::nullopt},
        IdentityCase{"Pattern", {"tessera-worker-3"}, {"tessera-worker-*"}, "tessera-worker-3"},
        IdentityCase{"PatternNeedsItsPrefix", {"tessera-work"}, {"tessera-worker-*"}, std::nullopt},
        IdentityCase{"OneOfSeveral", {"b"}, {"a", "b"}, "b"},
        IdentityCase{"SanAfterCommonName", {"alice", "10.0.0.1", "w-1"}, {"w-*"}, "w-1"},
        IdentityCase{"NothingAccepted", {"tessera-worker"}, {}, std::nullopt},
        IdentityCase{"EmptyEntryAdmitsNothing", {"x"}, {""}, std::nullopt},
        IdentityCase{"NoNames", {}, {"*"}, std::nullopt},
        IdentityCase{"StarAlone", {"anything"}, {"*"}, "anything"}),
    [](const ::testing::TestParamInfo<IdentityCase>& info) { return info.param.name; });

struct HostCase {
  std::string name;
  std::string address;
  std::string host;  // AddressHost
  std::vector<std::string> names;
  bool covered;
};

class Hosts : public ::testing::TestWithParam<HostCase> {};

TEST_P(Hosts, AreCoveredByTheNamesThatNameThem) {
  const HostCase& c = GetParam();
  EXPECT_EQ(AddressHost(c.address), c.host);
  EXPECT_EQ(NamesCoverHost(c.names, AddressHost(c.address)), c.covered);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Hosts,
    ::testing::Values(
        HostCase{"Ip", "127.0.0.1:5000", "127.0.0.1", {"tessera-worker-0", "127.0.0.1"}, true},
        HostCase{"OtherIp", "10.0.0.2:5000", "10.0.0.2", {"10.0.0.1"}, false},
        HostCase{"Dns", "w-0.workers:7000", "w-0.workers", {"W-0.Workers"}, true},
        HostCase{"Wildcard", "w-0.workers.ns:7000", "w-0.workers.ns", {"*.workers.ns"}, true},
        HostCase{"WildcardIsOneLabel",
                 "a.w-0.workers.ns:1",
                 "a.w-0.workers.ns",
                 {"*.workers.ns"},
                 false},
        HostCase{"WildcardNeedsALabel", ".workers.ns:1", ".workers.ns", {"*.workers.ns"}, false},
        HostCase{"Ipv6", "[::1]:80", "::1", {"::1"}, true},
        HostCase{"NoPort", "localhost", "", {"localhost"}, false}),
    [](const ::testing::TestParamInfo<HostCase>& info) { return info.param.name; });

}  // namespace
}  // namespace tessera
