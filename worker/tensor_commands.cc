// CommandExecutor's DTensor commands: spreading uploaded shards to their replicas, running
// redistribute plans, factories and ops. Every worker of the mesh runs the same command and works
// out its own part from its mesh coordinate.

#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/op_propagation.h"
#include "core/status_macros.h"
#include "kernels/aten/local_call.h"
#include "kernels/run_op.h"
#include "proto/convert.h"
#include "worker/command_executor.h"
#include "worker/redistribute_step.h"

namespace tessera {
namespace {

// Makes this rank's copy of the value its part on every Partial mesh dim (core's PartitionValue),
// the layout distribute_tensor gives (core's SimulatedMesh::Distribute).
absl::Status PartitionPartials(kernels::KernelBackend& kernels, const DTensorSpec& spec,
                               std::span<const int64_t> coordinate, kernels::DeviceTensor& shard) {
  for (int m = 0; m < spec.mesh.ndim(); ++m) {
    const Placement& p = spec.placements[m];
    if (p.is_partial()) RETURN_IF_ERROR(PartitionShard(kernels, p.op, coordinate[m], shard.View()));
  }
  return absl::OkStatus();
}

// x = low + (high - low) * x: uniform [0, 1) draws moved to [low, high), as torch's uniform_.
absl::Status ToRange(kernels::KernelBackend& kernels, const kernels::TensorView& x, double low,
                     double high) {
  ASSIGN_OR_RETURN(kernels::DeviceTensor scale, kernels.Allocate(x.dtype, {}));
  ASSIGN_OR_RETURN(kernels::DeviceTensor shift, kernels.Allocate(x.dtype, {}));
  RETURN_IF_ERROR(kernels.Fill(scale.View(), high - low));
  RETURN_IF_ERROR(kernels.Fill(shift.View(), low));
  RETURN_IF_ERROR(kernels.Binary(kernels::BinaryOp::kMul, x, std::as_const(scale).View(), x));
  return kernels.Binary(kernels::BinaryOp::kAdd, x, std::as_const(shift).View(), x);
}

int64_t Bytes(const Shape& shape, DType dtype) {
  return NumElements(shape) * static_cast<int64_t>(DTypeSize(dtype));
}

// This rank's shard of `name`, a tensor laid out as `spec`; when it is missing or not the shape
// the spec gives, a zero stand-in of that shape, with the reason kept in `failure` (the first one
// wins). A rank that left a command before its collectives would strand its peers in them until
// the timeout, which breaks the mesh's communicators for good; so it takes part with zeros and
// reports the failure afterwards. Fails itself only if the stand-in cannot be made (a local
// shape of more bytes than fit in int64).
absl::StatusOr<std::shared_ptr<const kernels::DeviceTensor>> InputOrStandIn(
    const ShardStore& store, const std::string& name, const DTensorSpec& spec,
    std::span<const int64_t> coordinate, absl::Status& failure) {
  const Shape local = LocalShapeAndOffsetAt(spec, coordinate).shape;
  absl::StatusOr<std::shared_ptr<const kernels::DeviceTensor>> t = store.Get(name);
  if (t.ok() && (*t)->shape() == local && (*t)->dtype() == spec.dtype) return *t;
  if (failure.ok()) {
    failure = t.ok() ? absl::InvalidArgumentError(absl::StrCat(
                           "local tensor '", name, "' is ", DTypeName((*t)->dtype()),
                           ShapeToString((*t)->shape()), " but ", spec.ToString(), " needs ",
                           DTypeName(spec.dtype), ShapeToString(local), " here"))
                     : t.status();
  }
  ASSIGN_OR_RETURN(kernels::DeviceTensor zeros, store.memory().Zeros(spec.dtype, local));
  return std::make_shared<const kernels::DeviceTensor>(std::move(zeros));
}

// A SpreadTensor's group_sources: the index along its one broadcast dim m that the group of the
// rank at `coord` broadcasts from, put into source[m]. INVALID_ARGUMENT unless there is one entry
// per rank, inside the dim, and the same for every rank of this group (a group whose ranks named
// different roots would wait in its broadcast).
absl::Status TakeGroupSource(const v1::SpreadTensor& s, const DeviceMesh& mesh,
                             const std::vector<int64_t>& coord, std::vector<int64_t>& source) {
  if (s.broadcast_dims_size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("group sources are for one broadcast dim; ",
                                                   s.broadcast_dims_size(), " were given"));
  }
  if (s.group_sources_size() != mesh.size()) {
    return absl::InvalidArgumentError(absl::StrCat("group sources have ", s.group_sources_size(),
                                                   " entries for a mesh of ", mesh.size(),
                                                   " ranks"));
  }
  const int m = s.broadcast_dims(0);
  if (m < 0 || m >= mesh.ndim()) return absl::OkStatus();  // reported with the broadcast dims
  std::vector<int64_t> c = coord;
  std::optional<int64_t> group_source;
  for (int64_t i = 0; i < mesh.size(m); ++i) {
    c[m] = i;
    const int64_t named = s.group_sources(static_cast<int>(mesh.IndexOfCoordinate(c)));
    if (group_source.has_value() && named != *group_source) {
      return absl::InvalidArgumentError(absl::StrCat("group sources name ", *group_source, " and ",
                                                     named, " for one group along mesh dim ", m));
    }
    group_source = named;
  }
  source[m] = *group_source;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CommandExecutor::MeshComms*> CommandExecutor::FindMesh(int64_t mesh_id) {
  auto it = meshes_.find(mesh_id);
  if (it == meshes_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker_id_, " has no communicators for mesh ", mesh_id));
  }
  return it->second.get();
}

absl::StatusOr<DTensorSpec> CommandExecutor::SpecOnMesh(const v1::DTensorMeta& meta,
                                                        const MeshComms& mc) {
  ASSIGN_OR_RETURN(DTensorSpec spec, FromProto(meta));
  if (spec.mesh.shape() != mc.mesh.shape() || spec.mesh.ranks() != mc.mesh.ranks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec ", spec.ToString(), " is not on the command's mesh"));
  }
  return spec;
}

std::vector<comm::Communicator*> CommandExecutor::DimGroups(MeshComms& mc) {
  std::vector<comm::Communicator*> groups;
  for (auto& g : mc.dims) groups.push_back(g.get());
  return groups;
}

absl::StatusOr<v1::LocalTensorInfo> CommandExecutor::SpreadTensor(const v1::SpreadTensor& s) {
  ASSIGN_OR_RETURN(MeshComms* const mc, FindMesh(s.mesh_id()));
  ASSIGN_OR_RETURN(DTensorSpec spec, SpecOnMesh(s.spec(), *mc));
  const std::vector<int64_t>& coord = mc->coordinate;
  std::vector<int64_t> source(s.source_coordinate().begin(), s.source_coordinate().end());
  const std::vector<int> dims(s.broadcast_dims().begin(), s.broadcast_dims().end());
  if (source.size() != coord.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "source coordinate has ", source.size(), " entries for a mesh of ", coord.size(), " dims"));
  }
  if (!s.group_sources().empty()) RETURN_IF_ERROR(TakeGroupSource(s, spec.mesh, coord, source));
  for (int m : dims) {
    if (m < 0 || m >= spec.mesh.ndim() || source[m] < 0 || source[m] >= spec.mesh.size(m)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "broadcast along mesh dim ", m, " from ",
          m >= 0 && m < static_cast<int>(source.size()) ? source[m] : -1, " is outside the mesh"));
    }
  }
  // Ranks at the source coordinate on dims[i..] hold the data before the broadcast along dims[i].
  auto holds_after = [&](size_t i) {
    for (size_t j = i; j < dims.size(); ++j) {
      if (coord[dims[j]] != source[dims[j]]) return false;
    }
    return true;
  };
  // A rank whose source is missing or whose shard is over budget still takes part in the
  // broadcasts (see InputOrStandIn) and reports the failure afterwards.
  absl::Status failure;
  kernels::DeviceTensor shard;
  if (holds_after(0)) {
    // A copy: the broadcasts write into it, and the stored tensor may have readers.
    ASSIGN_OR_RETURN(std::shared_ptr<const kernels::DeviceTensor> held,
                     InputOrStandIn(*store_, s.tensor(), spec, coord, failure));
    ASSIGN_OR_RETURN(shard, kernels_.Clone(held->View()));
  } else {
    const Shape local = LocalShapeAndOffsetAt(spec, coord).shape;
    failure = store_->Reserve(Bytes(local, spec.dtype), s.tensor());
    ASSIGN_OR_RETURN(shard, kernels_.Allocate(spec.dtype, local));
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    if (!holds_after(i + 1)) continue;  // this group has no copy yet: nothing to send
    const int m = dims[i];
    RETURN_IF_ERROR(mc->dims[m]->Broadcast(shard.data(), shard.num_elements(), spec.dtype,
                                           static_cast<int>(source[m])));
  }
  RETURN_IF_ERROR(failure);
  if (s.partition_partials()) RETURN_IF_ERROR(PartitionPartials(kernels_, spec, coord, shard));
  v1::LocalTensorInfo info = LocalInfo(s.tensor(), shard);
  RETURN_IF_ERROR(store_->Put(s.tensor(), std::move(shard)));
  return info;
}

absl::StatusOr<v1::LocalTensorInfo> CommandExecutor::Redistribute(const v1::RedistributeTensor& r) {
  ASSIGN_OR_RETURN(MeshComms* const mc, FindMesh(r.mesh_id()));
  ASSIGN_OR_RETURN(DTensorSpec spec, SpecOnMesh(r.spec(), *mc));
  ASSIGN_OR_RETURN(RedistributePlan plan, FromProto(r.plan(), spec.mesh.ndim()));
  absl::Status failure;  // reported after the collectives (see InputOrStandIn)
  ASSIGN_OR_RETURN(std::shared_ptr<const kernels::DeviceTensor> input,
                   InputOrStandIn(*store_, r.input(), spec, mc->coordinate, failure));
  DTensorSpec dst = spec;
  for (const RedistributeStep& step : plan.steps) dst.placements[step.mesh_dim] = step.to;
  const Shape out_shape = LocalShapeAndOffsetAt(dst, mc->coordinate).shape;
  if (absl::Status st = store_->Reserve(Bytes(out_shape, spec.dtype), r.output());
      !st.ok() && failure.ok()) {
    failure = st;
  }
  const std::vector<comm::Communicator*> groups = DimGroups(*mc);
  ASSIGN_OR_RETURN(kernels::DeviceTensor out,
                   RunRedistributePlan(kernels_, spec, plan, mc->coordinate, groups, input.get()));
  if (!failure.ok()) return failure;
  v1::LocalTensorInfo info = LocalInfo(r.output(), out);
  RETURN_IF_ERROR(store_->Put(r.output(), std::move(out)));
  return info;
}

absl::StatusOr<v1::LocalTensorInfo> CommandExecutor::FillTensor(const v1::FillTensor& f) {
  ASSIGN_OR_RETURN(MeshComms* const mc, FindMesh(f.mesh_id()));
  ASSIGN_OR_RETURN(DTensorSpec spec, SpecOnMesh(f.spec(), *mc));
  const LocalShard local = LocalShapeAndOffsetAt(spec, mc->coordinate);
  RETURN_IF_ERROR(store_->Reserve(Bytes(local.shape, spec.dtype), f.output()));
  ASSIGN_OR_RETURN(kernels::DeviceTensor shard, kernels_.Allocate(spec.dtype, local.shape));
  absl::Status st;
  if (shard.num_elements() > 0) {
    const kernels::TensorView view = shard.View();
    switch (f.factory()) {
      case v1::ZEROS:
        st = kernels_.Fill(view, 0.0);
        break;
      case v1::EMPTY:
        st = kernels_.Fill(view, 0.0);
        break;
      case v1::ONES:
        st = kernels_.Fill(view, 1.0);
        break;
      case v1::FULL:
        st = kernels_.Fill(view, f.value());
        break;
      case v1::RAND:
      case v1::RANDN:
        st = kernels_.RandomFill(f.factory() == v1::RAND ? kernels::Distribution::kUniform
                                                         : kernels::Distribution::kNormal,
                                 f.seed(), spec.shape, local.offset, view);
        if (st.ok() && f.factory() == v1::RAND && f.high() > f.low()) {
          st = ToRange(kernels_, view, f.low(), f.high());
        }
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat("factory ", f.factory(), " is not one"));
    }
  }
  if (!st.ok()) return st;
  RETURN_IF_ERROR(PartitionPartials(kernels_, spec, mc->coordinate, shard));
  v1::LocalTensorInfo info = LocalInfo(f.output(), shard);
  RETURN_IF_ERROR(store_->Put(f.output(), std::move(shard)));
  return info;
}

absl::StatusOr<std::vector<v1::LocalTensorInfo>> CommandExecutor::RunOp(const v1::RunOp& r) {
  ASSIGN_OR_RETURN(MeshComms* const mc, FindMesh(r.mesh_id()));
  const bool registry = !r.op().name().empty();
  OpCall op;
  if (!registry) {
    ASSIGN_OR_RETURN(op, FromProto(r.op()));
  }
  const std::vector<comm::Communicator*> groups = DimGroups(*mc);
  // Inputs that need a new layout are redistributed into temporaries; the others are read as held.
  std::vector<std::shared_ptr<const kernels::DeviceTensor>> held;
  std::vector<kernels::DeviceTensor> moved;
  moved.reserve(r.inputs_size());
  std::vector<kernels::ConstTensorView> inputs;
  std::vector<Shape> global_shapes;
  std::vector<DTensorSpec> laid_out;  // each input's spec in the strategy's layout
  absl::Status failure;               // reported after the collectives (see InputOrStandIn)
  for (const v1::OpInput& in : r.inputs()) {
    ASSIGN_OR_RETURN(DTensorSpec spec, SpecOnMesh(in.spec(), *mc));
    ASSIGN_OR_RETURN(RedistributePlan plan, FromProto(in.plan(), spec.mesh.ndim()));
    ASSIGN_OR_RETURN(std::shared_ptr<const kernels::DeviceTensor> t,
                     InputOrStandIn(*store_, in.tensor(), spec, mc->coordinate, failure));
    global_shapes.push_back(spec.shape);
    DTensorSpec after = spec;
    for (const RedistributeStep& step : plan.steps) after.placements[step.mesh_dim] = step.to;
    laid_out.push_back(std::move(after));
    if (plan.steps.empty()) {
      held.push_back(t);
      inputs.push_back(t->View());
      continue;
    }
    ASSIGN_OR_RETURN(kernels::DeviceTensor out,
                     RunRedistributePlan(kernels_, spec, plan, mc->coordinate, groups, t.get()));
    moved.push_back(std::move(out));
    inputs.push_back(std::as_const(moved.back()).View());
  }
  if (!failure.ok()) return failure;
  std::vector<kernels::DeviceTensor> results;
  if (registry) {
    ASSIGN_OR_RETURN(results, RunRegistryOp(r, *mc, laid_out, inputs));
  } else {
    ASSIGN_OR_RETURN(kernels::DeviceTensor result,
                     kernels::RunLocalOp(kernels_, op, inputs, global_shapes));
    results.push_back(std::move(result));
  }
  if (results.size() != 1 + static_cast<size_t>(r.more_outputs_size())) {
    return absl::InvalidArgumentError(absl::StrCat(r.op().name(), " gives ", results.size(),
                                                   " outputs; the command names ",
                                                   1 + r.more_outputs_size()));
  }
  std::vector<v1::LocalTensorInfo> infos;
  for (size_t k = 0; k < results.size(); ++k) {
    const std::string& name = k == 0 ? r.output() : r.more_outputs(static_cast<int>(k) - 1);
    infos.push_back(LocalInfo(name, results[k]));
    RETURN_IF_ERROR(store_->Put(name, std::move(results[k])));
  }
  return infos;
}

absl::StatusOr<std::vector<kernels::DeviceTensor>> CommandExecutor::RunRegistryOp(
    const v1::RunOp& r, const MeshComms& mc, std::span<const DTensorSpec> laid_out,
    std::span<const kernels::ConstTensorView> inputs) {
  ASSIGN_OR_RETURN(const ops::OpDef* op, ops::Registry().Find(r.op().name()));
  ASSIGN_OR_RETURN(const std::vector<ops::NamedValue> args, ArgsFromProto(r.op()));
  std::vector<ops::TensorMeta> metas;
  for (const DTensorSpec& s : laid_out) metas.push_back({s.shape, s.dtype});
  ASSIGN_OR_RETURN(const ops::PreparedCall prepared, ops::PrepareCall(*op, args, metas));
  ASSIGN_OR_RETURN(const DTensorSpec output, SpecOnMesh(r.output_spec(), mc));
  if (output.shape != prepared.call.output.shape || output.dtype != prepared.call.output.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        op->name(), ": the output spec ", output.ToString(), " is not the op's output, ",
        DTypeName(prepared.call.output.dtype), ShapeToString(prepared.call.output.shape)));
  }
  if (static_cast<size_t>(r.more_output_specs_size()) != prepared.call.more_outputs.size() ||
      r.more_outputs_size() != r.more_output_specs_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op->name(), " gives ", prepared.call.more_outputs.size() + 1, " outputs; the command has ",
        r.more_outputs_size() + 1, " names and ", r.more_output_specs_size() + 1, " specs"));
  }
  std::vector<DTensorSpec> more;
  for (int k = 0; k < r.more_output_specs_size(); ++k) {
    ASSIGN_OR_RETURN(DTensorSpec spec, SpecOnMesh(r.more_output_specs(k), mc));
    const ops::OutputMeta& meta = prepared.call.more_outputs[k];
    if (spec.shape != meta.shape || spec.dtype != meta.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat(op->name(), ": the spec ", spec.ToString(), " of output ", k + 1,
                       " is not the op's ", DTypeName(meta.dtype), ShapeToString(meta.shape)));
    }
    more.push_back(std::move(spec));
  }
  const kernels::LocalCall local{
      &prepared.call, laid_out, &output, mc.coordinate, {r.random_seed(), r.random_offset()}, more};
  return kernels::RunLocalCallOutputs(kernels_, local, inputs);
}

}  // namespace tessera
