#ifndef TESSERA_CLIENT_WIRE_H_
#define TESSERA_CLIENT_WIRE_H_

// The client API's public structs to and from tessera.v1 messages (core types convert through
// proto/convert.h). FromWire validates what it reads and returns INVALID_ARGUMENT naming the bad
// value. Internal to the client library.

#include "absl/status/statusor.h"
#include "core/sharding/redistribute_planner.h"
#include "tessera/collectives.h"
#include "tessera/dtensor.h"
#include "tessera/mesh.h"
#include "tessera/v1/collective.pb.h"
#include "tessera/v1/mesh.pb.h"
#include "tessera/v1/tensor.pb.h"

namespace tessera::client {

v1::CollectiveRequest ToWire(const CollectiveRequest& request, bool async_op);
v1::Factory ToWire(Factory factory);
v1::Planner ToWire(PlannerKind planner);

WorkerInfo FromWire(const v1::WorkerInfo& worker);
absl::StatusOr<MeshInfo> FromWire(const v1::MeshInfo& mesh);
absl::StatusOr<CollectiveResult> FromWire(const v1::CollectiveReply& reply);
// A waited-on or streamed collective's outcome: its reply, or the error it failed with.
absl::StatusOr<CollectiveResult> FromWire(const v1::CollectiveResult& result);
absl::StatusOr<DTensorInfo> FromWire(const v1::TensorInfo& tensor);
absl::StatusOr<InputRedistribution> FromWire(const v1::InputRedistribution& redistribution,
                                             int mesh_ndim);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_WIRE_H_
