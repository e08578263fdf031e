#include "proto/convert.h"

#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/modules/program_check.h"
#include "core/status_context.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

// The enums are converted by value; these pin the numbers that make that correct.
static_assert(static_cast<int>(Collective::kLocalChunk) == v1::LOCAL_CHUNK);
static_assert(static_cast<int>(Collective::kLocalPartition) == v1::LOCAL_PARTITION);
static_assert(static_cast<int>(Collective::kAllGather) == v1::ALL_GATHER);
static_assert(static_cast<int>(Collective::kAllReduce) == v1::ALL_REDUCE);
static_assert(static_cast<int>(Collective::kReduceScatter) == v1::REDUCE_SCATTER);
static_assert(static_cast<int>(Collective::kAllToAll) == v1::ALL_TO_ALL);
static_assert(static_cast<int>(Collective::kLocalEmbed) == v1::LOCAL_EMBED);
static_assert(static_cast<int>(DType::kFloat32) == v1::FLOAT32);
static_assert(static_cast<int>(DType::kFloat64) == v1::FLOAT64);
static_assert(static_cast<int>(DType::kFloat16) == v1::FLOAT16);
static_assert(static_cast<int>(DType::kBFloat16) == v1::BFLOAT16);
static_assert(static_cast<int>(DType::kInt8) == v1::INT8);
static_assert(static_cast<int>(DType::kUInt8) == v1::UINT8);
static_assert(static_cast<int>(DType::kInt32) == v1::INT32);
static_assert(static_cast<int>(DType::kInt64) == v1::INT64);
static_assert(static_cast<int>(DType::kBool) == v1::BOOL);
static_assert(static_cast<int>(ReduceOp::kSum) == v1::SUM);
static_assert(static_cast<int>(OpKind::kMm) == v1::OP_MM);
static_assert(static_cast<int>(OpKind::kCast) == v1::OP_CAST);
static_assert(static_cast<int>(ReduceOp::kAvg) == v1::AVG);
static_assert(static_cast<int>(ReduceOp::kMax) == v1::MAX);
static_assert(static_cast<int>(ReduceOp::kMin) == v1::MIN);
static_assert(static_cast<int>(ReduceOp::kProduct) == v1::PRODUCT);

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

template <typename T>
std::vector<int64_t> ToVector(const google::protobuf::RepeatedField<T>& field) {
  return std::vector<int64_t>(field.begin(), field.end());
}

// "[2, 1]@[0, 3]".
std::string ShardToString(std::span<const int64_t> shape, std::span<const int64_t> offset) {
  return absl::StrCat(ShapeToString(shape), "@", ShapeToString(offset));
}

// Global size of the spec's tensor in bytes, saturating at int64's maximum.
int64_t GlobalBytes(const DTensorSpec& spec) {
  const int64_t elements = NumElements(spec.shape);
  const int64_t element_size = static_cast<int64_t>(DTypeSize(spec.dtype));
  if (elements > kInt64Max / element_size) return kInt64Max;
  return elements * element_size;
}

// OK iff the derived fields of `meta`, where set, agree with `spec`.
absl::Status CheckDerivedFields(const v1::DTensorMeta& meta, const DTensorSpec& spec) {
  if (meta.nbytes() != 0 && meta.nbytes() != GlobalBytes(spec)) {
    return absl::InvalidArgumentError(absl::StrCat("DTensorMeta.nbytes is ", meta.nbytes(), " but ",
                                                   spec.ToString(), " has ", GlobalBytes(spec),
                                                   " bytes"));
  }
  if (meta.shards().empty()) return absl::OkStatus();
  if (meta.shards_size() != spec.mesh.size()) {
    return absl::InvalidArgumentError(absl::StrCat("DTensorMeta has ", meta.shards_size(),
                                                   " shards but its mesh has ", spec.mesh.size(),
                                                   " ranks; give one shard per rank or none"));
  }
  for (int i = 0; i < meta.shards_size(); ++i) {
    const v1::LocalShard& got = meta.shards(i);
    const int64_t rank = spec.mesh.ranks()[i];
    const LocalShard want = LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(i));
    const std::vector<int64_t> got_shape = ToVector(got.local_shape());
    const std::vector<int64_t> got_offset = ToVector(got.global_offset());
    if (got.rank() != rank || got_shape != want.shape || got_offset != want.offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("DTensorMeta.shards[", i, "] is ", ShardToString(got_shape, got_offset),
                       " on rank ", got.rank(), " but ", spec.ToString(), " puts ",
                       ShardToString(want.shape, want.offset), " on rank ", rank));
    }
  }
  return absl::OkStatus();
}

}  // namespace

v1::DType ToProto(DType dtype) { return static_cast<v1::DType>(dtype); }

absl::StatusOr<DType> FromProto(v1::DType dtype) {
  const int value = static_cast<int>(dtype);
  if (value == v1::DTYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError("dtype is DTYPE_UNSPECIFIED; a dtype is required");
  }
  if (!IsValidDType(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype number ", value, "; expected 1 (FLOAT32) to 9 (BOOL)"));
  }
  return static_cast<DType>(value);
}

v1::ReduceOp ToProto(ReduceOp op) { return static_cast<v1::ReduceOp>(op); }

absl::StatusOr<ReduceOp> FromProto(v1::ReduceOp op) {
  const int value = static_cast<int>(op);
  if (value == v1::REDUCE_OP_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        "reduce op is REDUCE_OP_UNSPECIFIED; a reduce op is required");
  }
  for (ReduceOp known : kAllReduceOps) {
    if (static_cast<int>(known) == value) return known;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown reduce op number ", value, "; expected 1 (SUM) to 5 (PRODUCT)"));
}

v1::Shape ToProto(std::span<const int64_t> shape) {
  v1::Shape out;
  out.mutable_dims()->Add(shape.begin(), shape.end());
  return out;
}

absl::StatusOr<Shape> FromProto(const v1::Shape& shape) {
  // Checked before its sizes, so that a shape of a million dims is neither copied nor echoed.
  if (shape.dims_size() > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat("a shape of ", shape.dims_size(),
                                                   " dims has more than ", kMaxRank,
                                                   ", the most a tensor may have"));
  }
  Shape out = ToVector(shape.dims());
  RETURN_IF_ERROR(ValidateShape(out));
  return out;
}

v1::Placement ToProto(const Placement& placement) {
  v1::Placement out;
  switch (placement.kind) {
    case Placement::Kind::kShard:
      out.mutable_shard()->set_dim(placement.dim);
      break;
    case Placement::Kind::kReplicate:
      out.mutable_replicate();
      break;
    case Placement::Kind::kPartial:
      out.mutable_partial()->set_op(ToProto(placement.op));
      break;
  }
  return out;
}

absl::StatusOr<Placement> FromProto(const v1::Placement& placement) {
  switch (placement.kind_case()) {
    case v1::Placement::kShard:
      return Placement::Shard(placement.shard().dim());
    case v1::Placement::kReplicate:
      return Placement::Replicate();
    case v1::Placement::kPartial: {
      if (placement.partial().op() == v1::REDUCE_OP_UNSPECIFIED) return Placement::Partial();
      absl::StatusOr<ReduceOp> op = FromProto(placement.partial().op());
      if (!op.ok()) return WithContext("Partial placement", op.status());
      return Placement::Partial(*op);
    }
    case v1::Placement::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "placement has no kind set; set one of shard, replicate or partial");
}

google::protobuf::RepeatedPtrField<v1::Placement> ToProto(std::span<const Placement> placements) {
  google::protobuf::RepeatedPtrField<v1::Placement> out;
  out.Reserve(static_cast<int>(placements.size()));
  for (const Placement& p : placements) *out.Add() = ToProto(p);
  return out;
}

absl::StatusOr<std::vector<Placement>> FromProto(
    const google::protobuf::RepeatedPtrField<v1::Placement>& placements) {
  std::vector<Placement> out;
  out.reserve(placements.size());
  for (int i = 0; i < placements.size(); ++i) {
    absl::StatusOr<Placement> p = FromProto(placements[i]);
    if (!p.ok()) return WithContext(absl::StrCat("placements[", i, "]"), p.status());
    out.push_back(*p);
  }
  return out;
}

v1::MeshSpec ToProto(const DeviceMesh& mesh) {
  v1::MeshSpec out;
  out.set_device_type(mesh.device_type());
  out.mutable_shape()->Add(mesh.shape().begin(), mesh.shape().end());
  for (const std::string& name : mesh.dim_names()) out.add_dim_names(name);
  out.mutable_ranks()->Add(mesh.ranks().begin(), mesh.ranks().end());
  return out;
}

absl::StatusOr<DeviceMesh> FromProto(const v1::MeshSpec& mesh) {
  return DeviceMesh::Create(
      mesh.device_type(), ToVector(mesh.shape()),
      std::vector<std::string>(mesh.dim_names().begin(), mesh.dim_names().end()),
      ToVector(mesh.ranks()));
}

v1::DTensorMeta ToProto(const DTensorSpec& spec) {
  v1::DTensorMeta out;
  *out.mutable_shape() = ToProto(spec.shape);
  out.set_dtype(ToProto(spec.dtype));
  *out.mutable_mesh() = ToProto(spec.mesh);
  *out.mutable_placements() = ToProto(spec.placements);
  out.mutable_shards()->Reserve(static_cast<int>(spec.mesh.size()));
  for (int64_t i = 0; i < spec.mesh.size(); ++i) {
    const LocalShard shard = LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(i));
    v1::LocalShard* s = out.add_shards();
    s->set_rank(spec.mesh.ranks()[i]);
    s->mutable_local_shape()->Add(shard.shape.begin(), shard.shape.end());
    s->mutable_global_offset()->Add(shard.offset.begin(), shard.offset.end());
  }
  out.set_nbytes(GlobalBytes(spec));
  return out;
}

absl::StatusOr<DTensorSpec> FromProto(const v1::DTensorMeta& meta) {
  if (!meta.has_shape()) {
    return absl::InvalidArgumentError(
        "DTensorMeta has no shape; set one (an empty Shape is a scalar)");
  }
  if (!meta.has_mesh()) return absl::InvalidArgumentError("DTensorMeta has no mesh");
  absl::StatusOr<Shape> shape = FromProto(meta.shape());
  if (!shape.ok()) return WithContext("DTensorMeta.shape", shape.status());
  absl::StatusOr<DType> dtype = FromProto(meta.dtype());
  if (!dtype.ok()) return WithContext("DTensorMeta.dtype", dtype.status());
  RETURN_IF_ERROR(ValidateTensorShape(*dtype, *shape));
  absl::StatusOr<DeviceMesh> mesh = FromProto(meta.mesh());
  if (!mesh.ok()) return WithContext("DTensorMeta.mesh", mesh.status());
  absl::StatusOr<std::vector<Placement>> placements = FromProto(meta.placements());
  if (!placements.ok()) {
    return absl::Status(placements.status().code(),
                        absl::StrCat("DTensorMeta.", placements.status().message()));
  }
  ASSIGN_OR_RETURN(DTensorSpec spec, MakeDTensorSpec(*std::move(mesh), *std::move(placements),
                                                     *std::move(shape), *dtype));
  RETURN_IF_ERROR(CheckDerivedFields(meta, spec));
  return spec;
}

v1::RedistributePlan ToProto(const RedistributePlan& plan) {
  v1::RedistributePlan out;
  for (const RedistributeStep& step : plan.steps) {
    v1::RedistributeStep* s = out.add_steps();
    s->set_mesh_dim(step.mesh_dim);
    *s->mutable_from_placement() = ToProto(step.from);
    *s->mutable_to_placement() = ToProto(step.to);
    s->set_collective(static_cast<v1::Collective>(step.collective));
    if (step.collective == Collective::kAllReduce ||
        step.collective == Collective::kReduceScatter) {
      s->set_reduce_op(ToProto(step.from.op));
    }
    s->set_send_bytes(step.send_bytes);
    s->set_recv_bytes(step.recv_bytes);
  }
  out.set_total_send_bytes(plan.total_send_bytes());
  out.set_total_recv_bytes(plan.total_recv_bytes());
  return out;
}

absl::StatusOr<RedistributePlan> FromProto(const v1::RedistributePlan& plan, int mesh_ndim) {
  RedistributePlan out;
  for (const v1::RedistributeStep& s : plan.steps()) {
    if (s.mesh_dim() < 0 || s.mesh_dim() >= mesh_ndim) {
      return absl::InvalidArgumentError(absl::StrCat("plan step on mesh dim ", s.mesh_dim(),
                                                     " of a mesh of ", mesh_ndim, " dims"));
    }
    if (s.collective() < v1::LOCAL_CHUNK || s.collective() > v1::LOCAL_EMBED) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan step has no valid collective (", s.collective(), ")"));
    }
    ASSIGN_OR_RETURN(Placement from, FromProto(s.from_placement()));
    ASSIGN_OR_RETURN(Placement to, FromProto(s.to_placement()));
    out.steps.push_back(RedistributeStep{s.mesh_dim(), from, to,
                                         static_cast<Collective>(s.collective()), s.send_bytes(),
                                         s.recv_bytes()});
  }
  return out;
}

v1::OpCall ToProto(const OpCall& op) {
  v1::OpCall out;
  out.set_kind(static_cast<v1::OpKind>(op.kind));
  for (int d : op.dims) out.add_dims(d);
  out.set_keepdim(op.keepdim);
  out.set_dim0(op.dim0);
  out.set_dim1(op.dim1);
  out.set_dtype(ToProto(op.dtype));
  out.set_alpha(op.alpha);
  out.set_beta(op.beta);
  out.set_has_alpha_beta(true);
  return out;
}

absl::StatusOr<OpCall> FromProto(const v1::OpCall& op) {
  if (op.kind() < v1::OP_MM || op.kind() > v1::OP_CAST) {
    return absl::InvalidArgumentError(absl::StrCat("op kind ", op.kind(), " is not an op"));
  }
  OpCall out;
  out.kind = static_cast<OpKind>(op.kind());
  out.dims.assign(op.dims().begin(), op.dims().end());
  out.keepdim = op.keepdim();
  out.dim0 = op.dim0();
  out.dim1 = op.dim1();
  if (out.kind == OpKind::kCast) {
    ASSIGN_OR_RETURN(DType dtype, FromProto(op.dtype()));
    out.dtype = dtype;
  }
  if (op.has_alpha_beta()) {
    out.alpha = op.alpha();
    out.beta = op.beta();
  }
  return out;
}

v1::InlineTensor ToProto(const HostTensor& tensor) {
  v1::InlineTensor out;
  out.set_dtype(ToProto(tensor.dtype()));
  *out.mutable_shape() = ToProto(tensor.shape());
  if (tensor.nbytes() > 0) {
    out.set_data(reinterpret_cast<const char*>(tensor.data()), tensor.nbytes());
  }
  return out;
}

absl::StatusOr<HostTensor> FromProto(const v1::InlineTensor& tensor) {
  absl::StatusOr<DType> dtype = FromProto(tensor.dtype());
  if (!dtype.ok()) return WithContext("dtype", dtype.status());
  absl::StatusOr<Shape> shape = FromProto(tensor.shape());
  if (!shape.ok()) return WithContext("shape", shape.status());
  const std::string& data = tensor.data();
  return HostTensor::FromBytes(
      *dtype, *std::move(shape),
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(data.data()), data.size()));
}

namespace {

v1::ProgramStep StepToProto(const ProgramStep& step) {
  v1::ProgramStep out;
  out.set_kind(static_cast<int32_t>(step.kind));
  out.mutable_inputs()->Add(step.inputs.begin(), step.inputs.end());
  out.mutable_outputs()->Add(step.outputs.begin(), step.outputs.end());
  out.set_weight(step.weight);
  out.set_bias(step.bias);
  out.set_weight_buffer(step.weight_buffer);
  out.set_bias_buffer(step.bias_buffer);
  out.set_weight_grad_buffer(step.weight_grad_buffer);
  out.set_bias_grad_buffer(step.bias_grad_buffer);
  out.set_activation(static_cast<int32_t>(step.activation));
  out.set_eps(step.eps);
  out.set_heads(step.heads);
  out.set_causal(step.causal);
  out.set_size(step.size);
  out.set_mesh_dim(step.mesh_dim);
  out.set_dim(step.dim);
  out.set_dim2(step.dim2);
  out.set_reduce_op(ToProto(step.reduce_op));
  out.set_scale(step.scale);
  out.set_module(step.module);
  return out;
}

// Values are taken as they are; CheckProgram judges them against the step's kind.
ProgramStep StepFromProto(const v1::ProgramStep& step) {
  ProgramStep out;
  out.kind = static_cast<ProgramOpKind>(step.kind());
  out.inputs.assign(step.inputs().begin(), step.inputs().end());
  out.outputs.assign(step.outputs().begin(), step.outputs().end());
  out.weight = step.weight();
  out.bias = step.bias();
  out.weight_buffer = step.weight_buffer();
  out.bias_buffer = step.bias_buffer();
  out.weight_grad_buffer = step.weight_grad_buffer();
  out.bias_grad_buffer = step.bias_grad_buffer();
  out.activation = static_cast<ActivationKind>(step.activation());
  out.eps = step.eps();
  out.heads = step.heads();
  out.causal = step.causal();
  out.size = step.size();
  out.mesh_dim = step.mesh_dim();
  out.dim = step.dim();
  out.dim2 = step.dim2();
  out.reduce_op = static_cast<ReduceOp>(step.reduce_op());
  out.scale = step.scale();
  out.module = step.module();
  return out;
}

v1::EdgeLayout EdgeToProto(const EdgeLayout& layout) {
  v1::EdgeLayout out;
  *out.mutable_placement() = ToProto(layout.placement);
  out.set_is_dtensor(layout.is_dtensor);
  return out;
}

absl::StatusOr<EdgeLayout> EdgeFromProto(absl::string_view field, const v1::EdgeLayout& layout) {
  absl::StatusOr<Placement> placement = FromProto(layout.placement());
  if (!placement.ok()) return WithContext(absl::StrCat(field, ".placement"), placement.status());
  return EdgeLayout{*placement, layout.is_dtensor()};
}

// The parameter's fields, its tensor names apart.
absl::StatusOr<ProgramParameter> ParameterFromProto(int index, const v1::ProgramParameter& p) {
  const std::string field = absl::StrCat("parameters[", index, "] (\"", p.fqn(), "\")");
  absl::StatusOr<Shape> shape = FromProto(p.shape());
  if (!shape.ok()) return WithContext(absl::StrCat(field, ".shape"), shape.status());
  absl::StatusOr<std::vector<Placement>> placements = FromProto(p.placements());
  if (!placements.ok()) {
    return absl::Status(placements.status().code(),
                        absl::StrCat(field, ".", placements.status().message()));
  }
  return ProgramParameter{p.fqn(), *std::move(shape), *std::move(placements)};
}

}  // namespace

v1::Program ToProto(const Program& program, std::span<const ParameterTensors> tensors) {
  v1::Program out;
  out.set_tp_mesh_dim(program.tp_mesh_dim);
  for (int d : program.data_parallel_dims) out.add_data_parallel_dims(d);
  for (size_t i = 0; i < program.parameters.size(); ++i) {
    const ProgramParameter& p = program.parameters[i];
    v1::ProgramParameter* q = out.add_parameters();
    q->set_fqn(p.fqn);
    *q->mutable_shape() = ToProto(p.shape);
    *q->mutable_placements() = ToProto(p.placements);
    if (i < tensors.size()) {
      q->set_tensor(tensors[i].tensor);
      q->set_grad(tensors[i].grad);
      q->set_momentum(tensors[i].momentum);
    }
  }
  out.set_input_dtype(ToProto(program.input.dtype));
  *out.mutable_input_shape() = ToProto(program.input.shape);
  *out.mutable_input_layout() = EdgeToProto(program.input_layout);
  *out.mutable_output_layout() = EdgeToProto(program.output_layout);
  out.set_output_rank(program.output_rank);
  out.set_output_dtype(ToProto(program.output_dtype));
  out.set_output_features(program.output_features);
  out.set_num_buffers(program.num_buffers);
  out.set_output(program.output);
  for (const ProgramStep& step : program.forward) *out.add_forward() = StepToProto(step);
  out.set_grad_output(program.grad_output);
  for (const ProgramStep& step : program.backward) *out.add_backward() = StepToProto(step);
  return out;
}

absl::StatusOr<WorkerProgram> FromProto(const v1::Program& program) {
  WorkerProgram out;
  Program& p = out.program;
  p.tp_mesh_dim = program.tp_mesh_dim();
  p.data_parallel_dims.assign(program.data_parallel_dims().begin(),
                              program.data_parallel_dims().end());
  std::set<std::string> names;
  for (int i = 0; i < program.parameters_size(); ++i) {
    const v1::ProgramParameter& q = program.parameters(i);
    ASSIGN_OR_RETURN(ProgramParameter parameter, ParameterFromProto(i, q));
    p.parameters.push_back(std::move(parameter));
    ParameterTensors tensors{q.tensor(), q.grad(), q.momentum()};
    for (const auto& [field, name] :
         {std::pair<absl::string_view, const std::string&>{"tensor", tensors.tensor},
          {"grad", tensors.grad},
          {"momentum", tensors.momentum}}) {
      const std::string where = absl::StrCat("parameters[", i, "] (\"", q.fqn(), "\").", field);
      if (name.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " is empty; every parameter names its local tensors"));
      }
      if (!names.insert(name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " is '", name, "', a name another field already uses"));
      }
    }
    out.tensors.push_back(std::move(tensors));
  }
  absl::StatusOr<DType> input_dtype = FromProto(program.input_dtype());
  if (!input_dtype.ok()) return WithContext("input_dtype", input_dtype.status());
  p.input.dtype = *input_dtype;
  p.input.shape = ToVector(program.input_shape().dims());
  ASSIGN_OR_RETURN(p.input_layout, EdgeFromProto("input_layout", program.input_layout()));
  ASSIGN_OR_RETURN(p.output_layout, EdgeFromProto("output_layout", program.output_layout()));
  p.output_rank = program.output_rank();
  absl::StatusOr<DType> output_dtype = FromProto(program.output_dtype());
  if (!output_dtype.ok()) return WithContext("output_dtype", output_dtype.status());
  p.output_dtype = *output_dtype;
  p.output_features = program.output_features();
  p.num_buffers = program.num_buffers();
  p.output = program.output();
  for (const v1::ProgramStep& step : program.forward()) p.forward.push_back(StepFromProto(step));
  p.grad_output = program.grad_output();
  for (const v1::ProgramStep& step : program.backward()) p.backward.push_back(StepFromProto(step));
  RETURN_IF_ERROR(CheckProgram(p));
  return out;
}

absl::StatusOr<std::vector<ops::NamedValue>> ArgsFromProto(const v1::OpCall& op) {
  std::vector<ops::NamedValue> out;
  for (const v1::OpArgument& a : op.args()) {
    ops::NamedValue v{a.name(), ops::NoneValue{}};
    switch (a.value_case()) {
      case v1::OpArgument::kNone:
        break;
      case v1::OpArgument::kBoolValue:
        v.value = a.bool_value();
        break;
      case v1::OpArgument::kIntValue:
        v.value = a.int_value();
        break;
      case v1::OpArgument::kFloatValue:
        v.value = a.float_value();
        break;
      case v1::OpArgument::kInts:
        v.value = std::vector<int64_t>(a.ints().values().begin(), a.ints().values().end());
        break;
      case v1::OpArgument::kDtype: {
        ASSIGN_OR_RETURN(const DType d, FromProto(a.dtype()));
        v.value = d;
        break;
      }
      case v1::OpArgument::kStringValue:
        v.value = a.string_value();
        break;
      case v1::OpArgument::kTensor:
        v.value = ops::TensorRef{a.tensor()};
        break;
      case v1::OpArgument::kTensors:
        v.value = ops::TensorList{{a.tensors().indices().begin(), a.tensors().indices().end()}};
        break;
      case v1::OpArgument::VALUE_NOT_SET:
        return absl::InvalidArgumentError(
            absl::StrCat(op.name(), ": argument ", out.size(),
                         a.name().empty() ? "" : " '" + a.name() + "'", " has no value"));
    }
    out.push_back(std::move(v));
  }
  return out;
}

namespace {

// One argument value into `a`'s oneof.
void ValueToProto(const ops::OpValue& value, v1::OpArgument* a) {
  std::visit(
      [a](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, ops::NoneValue>) {
          a->set_none(true);
        } else if constexpr (std::is_same_v<T, bool>) {
          a->set_bool_value(v);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          a->set_int_value(v);
        } else if constexpr (std::is_same_v<T, double>) {
          a->set_float_value(v);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          a->mutable_ints()->mutable_values()->Add(v.begin(), v.end());
        } else if constexpr (std::is_same_v<T, DType>) {
          a->set_dtype(ToProto(v));
        } else if constexpr (std::is_same_v<T, std::string>) {
          a->set_string_value(v);
        } else if constexpr (std::is_same_v<T, ops::TensorRef>) {
          a->set_tensor(v.index);
        } else {
          a->mutable_tensors()->mutable_indices()->Add(v.indices.begin(), v.indices.end());
        }
      },
      value);
}

}  // namespace

void ArgsToProto(const ops::BoundArgs& args, v1::OpCall& op) {
  for (size_t i = 0; i < args.values().size(); ++i) {
    const ops::OpValue& value = args.values()[i];
    const ops::ArgSchema& arg = args.schema().args[i];
    // A keyword-only argument at its default is left out; the worker's binding fills it in.
    if (arg.kwarg_only && arg.default_value.has_value() && *arg.default_value == value) continue;
    v1::OpArgument* a = op.add_args();
    if (arg.kwarg_only) a->set_name(arg.name);
    ValueToProto(value, a);
  }
}

void ArgsToProto(std::span<const ops::NamedValue> args, v1::OpCall& op) {
  for (const ops::NamedValue& arg : args) {
    v1::OpArgument* a = op.add_args();
    a->set_name(arg.name);
    ValueToProto(arg.value, a);
  }
}

}  // namespace tessera
