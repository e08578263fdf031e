// The calls a test makes after an abandoned or stalled call, to show that the workers it held serve
// others again: puts and gets of local tensors on every rank, or a distribute read back whole.

#ifndef TESSERA_TESTS_FOLLOW_UP_CALLS_H_
#define TESSERA_TESTS_FOLLOW_UP_CALLS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/testing/reference.h"
#include "tessera/dtensor.h"
#include "tessera/mesh.h"
#include "tessera/session.h"
#include "tests/cluster/cluster_fixture.h"

namespace tessera::testing {

enum class FollowUp { kPutThenGetLocal, kDistributeThenFullTensor };

inline std::string FollowUpName(FollowUp f) {
  return f == FollowUp::kPutThenGetLocal ? "PutThenGetLocal" : "DistributeThenFullTensor";
}

// Puts a tensor on each of `ranks` ranks of `mesh` and gets each back, comparing.
inline ::testing::AssertionResult PutThenGetLocal(client::Session& session, const std::string& mesh,
                                                  int64_t ranks, uint32_t seed) {
  for (int64_t r = 0; r < ranks; ++r) {
    const HostTensor t =
        kernels::testing::RandomTensor(DType::kFloat32, {33, 5}, seed + static_cast<uint32_t>(r));
    if (absl::Status put = session.PutLocal(mesh, r, "followup", t); !put.ok()) {
      return ::testing::AssertionFailure() << "put to rank " << r << ": " << put;
    }
    absl::StatusOr<HostTensor> got = session.GetLocal(mesh, r, "followup");
    if (!got.ok()) {
      return ::testing::AssertionFailure() << "get of rank " << r << ": " << got.status();
    }
    if (::testing::AssertionResult m = TensorsMatch(*got, t); !m) return m;
  }
  return ::testing::AssertionSuccess();
}

// Distributes a tensor over `mesh`, reads it back whole, compares and frees it.
inline ::testing::AssertionResult DistributeThenFullTensor(client::Session& session,
                                                           const client::Mesh& mesh,
                                                           uint32_t seed) {
  const HostTensor t = kernels::testing::RandomTensor(DType::kFloat32, {8, 6}, seed);
  absl::StatusOr<client::DTensor> d =
      client::DistributeTensor(session, t, mesh, {Placement::Shard(1)});
  if (!d.ok()) return ::testing::AssertionFailure() << "distribute: " << d.status();
  absl::StatusOr<HostTensor> got = d->FullTensor();
  if (!got.ok()) return ::testing::AssertionFailure() << "full_tensor: " << got.status();
  ::testing::AssertionResult m = TensorsMatch(*got, t);
  d->Free().IgnoreError();
  return m;
}

// The follow-up `f` on the one-dimensional mesh `mesh` of `ranks` ranks.
inline ::testing::AssertionResult RunFollowUp(FollowUp f, client::Session& session,
                                              const client::Mesh& mesh, int64_t ranks,
                                              uint32_t seed) {
  return f == FollowUp::kPutThenGetLocal ? PutThenGetLocal(session, mesh.name, ranks, seed)
                                         : DistributeThenFullTensor(session, mesh, seed);
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_FOLLOW_UP_CALLS_H_
