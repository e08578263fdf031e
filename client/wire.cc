#include "client/wire.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "proto/convert.h"

namespace tessera::client {

v1::CollectiveRequest ToWire(const CollectiveRequest& request, bool async_op) {
  v1::CollectiveRequest wire;
  wire.set_mesh(request.group.mesh);
  wire.set_mesh_dim(request.group.dim);
  wire.set_op(static_cast<v1::CollectiveOp>(request.op));  // the service validates the number
  wire.set_input(request.input);
  wire.set_output(request.output);
  wire.set_reduce_op(ToProto(request.reduce_op));
  wire.set_root(request.root);
  wire.set_peer(request.peer);
  wire.set_async_op(async_op);
  return wire;
}

v1::Factory ToWire(Factory factory) { return static_cast<v1::Factory>(factory); }

v1::Planner ToWire(PlannerKind planner) {
  return planner == PlannerKind::kGreedy ? v1::GREEDY : v1::MIN_COST;
}

WorkerInfo FromWire(const v1::WorkerInfo& worker) {
  return WorkerInfo{.worker_id = worker.worker_id(),
                    .address = worker.address(),
                    .device = worker.device(),
                    .alive = worker.alive(),
                    .memory_budget_bytes = worker.memory_budget_bytes(),
                    .used_bytes = worker.used_bytes(),
                    .incarnation = worker.incarnation(),
                    .last_heartbeat_age = absl::Milliseconds(worker.last_heartbeat_age_ms()),
                    .hostname = worker.hostname(),
                    .pid = worker.pid(),
                    .device_name = worker.device_name(),
                    .device_allocated_bytes = worker.device_allocated_bytes(),
                    .device_free_bytes = worker.device_free_bytes(),
                    .device_total_bytes = worker.device_total_bytes()};
}

absl::StatusOr<MeshInfo> FromWire(const v1::MeshInfo& mesh) {
  ASSIGN_OR_RETURN(DeviceMesh layout, FromProto(mesh.mesh()));
  return MeshInfo{Mesh{mesh.name(), std::move(layout)}, mesh.ready(), mesh.broken_reason(),
                  std::vector<std::string>(mesh.tensors().begin(), mesh.tensors().end()),
                  absl::Milliseconds(mesh.timeout_ms())};
}

absl::StatusOr<CollectiveResult> FromWire(const v1::CollectiveReply& reply) {
  CollectiveResult result;
  for (const v1::LocalTensorInfo& output : reply.outputs()) {
    ASSIGN_OR_RETURN(const DType dtype, FromProto(output.dtype()));
    ASSIGN_OR_RETURN(Shape shape, FromProto(output.shape()));
    result.outputs.push_back({output.name(), dtype, std::move(shape)});
  }
  return result;
}

absl::StatusOr<CollectiveResult> FromWire(const v1::CollectiveResult& result) {
  if (result.code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(result.code()), result.message());
  }
  return FromWire(result.reply());
}

absl::StatusOr<DTensorInfo> FromWire(const v1::TensorInfo& tensor) {
  ASSIGN_OR_RETURN(DTensorSpec spec, FromProto(tensor.meta()));
  const int state = tensor.state();
  if (state < static_cast<int>(TensorState::kReady) ||
      state > static_cast<int>(TensorState::kFailed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor.name(), "' has unknown state ", state));
  }
  std::vector<LocalShard> shards;
  for (const v1::LocalShard& s : tensor.meta().shards()) {
    shards.push_back({Shape(s.local_shape().begin(), s.local_shape().end()),
                      std::vector<int64_t>(s.global_offset().begin(), s.global_offset().end())});
  }
  return DTensorInfo{.name = tensor.name(),
                     .mesh = tensor.mesh(),
                     .spec = std::move(spec),
                     .shards = std::move(shards),
                     .nbytes = tensor.meta().nbytes(),
                     .owner = tensor.owner(),
                     .state = static_cast<TensorState>(state),
                     .error = tensor.error()};
}

absl::StatusOr<InputRedistribution> FromWire(const v1::InputRedistribution& redistribution,
                                             int mesh_ndim) {
  ASSIGN_OR_RETURN(std::vector<Placement> from, FromProto(redistribution.from_placements()));
  ASSIGN_OR_RETURN(std::vector<Placement> to, FromProto(redistribution.to_placements()));
  ASSIGN_OR_RETURN(RedistributePlan plan, FromProto(redistribution.plan(), mesh_ndim));
  return InputRedistribution{redistribution.input(), std::move(from), std::move(to),
                             std::move(plan)};
}

}  // namespace tessera::client
