#ifndef TESSERA_PROTO_CONVERT_H_
#define TESSERA_PROTO_CONVERT_H_

// The one place where core types and tessera.v1 messages meet. ToProto never fails; FromProto
// validates everything read off the wire and returns INVALID_ARGUMENT naming the bad value.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/host_tensor.h"
#include "core/modules/module_program.h"
#include "core/ops/op_schema.h"
#include "core/shape.h"
#include "core/sharding/device_mesh.h"
#include "core/sharding/dtensor_spec.h"
#include "core/sharding/op_call.h"
#include "core/sharding/placement.h"
#include "core/sharding/redistribute_planner.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "tessera/v1/program.pb.h"
#include "tessera/v1/tensor.pb.h"
#include "tessera/v1/types.pb.h"
#include "tessera/v1/worker.pb.h"

namespace tessera {

v1::DType ToProto(DType dtype);
// INVALID_ARGUMENT for DTYPE_UNSPECIFIED and for numbers that are not a dtype.
absl::StatusOr<DType> FromProto(v1::DType dtype);

v1::ReduceOp ToProto(ReduceOp op);
// INVALID_ARGUMENT for REDUCE_OP_UNSPECIFIED and for numbers that are not a reduce op.
absl::StatusOr<ReduceOp> FromProto(v1::ReduceOp op);

v1::Shape ToProto(std::span<const int64_t> shape);
// INVALID_ARGUMENT for negative sizes and element counts past int64 (ValidateShape).
absl::StatusOr<Shape> FromProto(const v1::Shape& shape);

v1::Placement ToProto(const Placement& placement);
// INVALID_ARGUMENT if no kind is set or a Partial's op is unknown. An unset Partial op is SUM.
// Shard dims are checked against a tensor only where there is one (DTensorMeta).
absl::StatusOr<Placement> FromProto(const v1::Placement& placement);

google::protobuf::RepeatedPtrField<v1::Placement> ToProto(std::span<const Placement> placements);
// Converts each placement; an error names the index of the bad one.
absl::StatusOr<std::vector<Placement>> FromProto(
    const google::protobuf::RepeatedPtrField<v1::Placement>& placements);

// Always writes the ranks explicitly.
v1::MeshSpec ToProto(const DeviceMesh& mesh);
// Validates through DeviceMesh::Create (which bounds dims and slots: kMaxMeshDims, kMaxMeshSize).
absl::StatusOr<DeviceMesh> FromProto(const v1::MeshSpec& mesh);

// Fills the derived fields too: every rank's local shape and global offset (LocalShapeAndOffsetAt,
// in the mesh's row-major rank order) and the global size in bytes.
v1::DTensorMeta ToProto(const DTensorSpec& spec);
// Validates through MakeDTensorSpec (Shard dims normalized); shape, dtype and mesh are required.
// The derived fields may be left empty (0 nbytes, no shards); if set, they must match the spec.
absl::StatusOr<DTensorSpec> FromProto(const v1::DTensorMeta& meta);

// A redistribute plan as returned to callers (plans are produced, never read back, so there is
// no FromProto).
v1::RedistributePlan ToProto(const RedistributePlan& plan);
// A plan as sent to workers: validates each step's mesh dim against `mesh_ndim`, its placements
// and its collective.
absl::StatusOr<RedistributePlan> FromProto(const v1::RedistributePlan& plan, int mesh_ndim);

v1::OpCall ToProto(const OpCall& op);
// Validates the kind and the cast dtype; attribute values are checked by InferOpOutput.
absl::StatusOr<OpCall> FromProto(const v1::OpCall& op);

// The arguments of a registry op call (OpCall.name set): positional, then by keyword.
// INVALID_ARGUMENT naming the argument whose value is unset or of an unknown dtype.
absl::StatusOr<std::vector<ops::NamedValue>> ArgsFromProto(const v1::OpCall& op);
// A bound call's arguments for a worker: positional, keyword-only ones by name (left out at
// their defaults).
void ArgsToProto(const ops::BoundArgs& args, v1::OpCall& op);
// A call's arguments as a client gives them (the inverse of ArgsFromProto).
void ArgsToProto(std::span<const ops::NamedValue> args, v1::OpCall& op);

// A tensor's bytes inline (RunProgram's input and output).
v1::InlineTensor ToProto(const HostTensor& tensor);
// INVALID_ARGUMENT naming the dtype, the shape, or the data's size against the size they take.
absl::StatusOr<HostTensor> FromProto(const v1::InlineTensor& tensor);

// The local tensors a worker keeps for one parameter of a module program.
struct ParameterTensors {
  std::string tensor;    // this rank's shard of the value
  std::string grad;      // its gradient, written by training steps
  std::string momentum;  // SGD's momentum buffer
  friend bool operator==(const ParameterTensors&, const ParameterTensors&) = default;
};

// A module program as LoadProgram carries it: core's program and, per parameter, its local
// tensors on the worker.
struct WorkerProgram {
  Program program;
  std::vector<ParameterTensors> tensors;  // one per program.parameters entry
};

// `tensors` is empty (the names stay unset, for the caller to fill) or one per parameter.
// Program::unmatched is not sent.
v1::Program ToProto(const Program& program, std::span<const ParameterTensors> tensors = {});
// Converts and checks the program (core's CheckProgram: step kinds, buffer numbers, parameter
// indices, inputs and outputs per kind), and requires every parameter's three tensor names, all
// different across the program.
absl::StatusOr<WorkerProgram> FromProto(const v1::Program& program);

}  // namespace tessera

#endif  // TESSERA_PROTO_CONVERT_H_
