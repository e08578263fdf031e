// CommandExecutor's checkpoint commands: every rank of a mesh runs SaveShard (the first rank of
// each replica group writes its block) and LoadShard (each rank reads the byte ranges of the saved
// blocks its new shard needs); one rank commits or reads the index.

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/files/checkpoint_files.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "worker/command_executor.h"
#include "worker/redistribute_step.h"

namespace tessera {

absl::Status CommandExecutor::SaveShard(const v1::SaveShard& save) {
  ASSIGN_OR_RETURN(MeshComms* const mc, FindMesh(save.mesh_id()));
  ASSIGN_OR_RETURN(DTensorSpec spec, SpecOnMesh(save.spec(), *mc));
  ASSIGN_OR_RETURN(RedistributePlan plan, FromProto(save.plan(), spec.mesh.ndim()));
  // A rank whose tensor or directory is bad still takes part in the plan's collectives (with a
  // stand-in), so that its peers are not stranded in them; it reports the failure afterwards.
  const absl::StatusOr<std::string> directory =
      ResolveCheckpointPath(checkpoint_root_, save.directory());
  absl::Status failure = directory.ok() ? CheckSaveDirectory(*directory) : directory.status();
  absl::StatusOr<std::shared_ptr<const kernels::DeviceTensor>> held = store_->Get(save.tensor());
  const Shape local = LocalShapeAndOffsetAt(spec, mc->coordinate).shape;
  if (held.ok() && ((*held)->shape() != local || (*held)->dtype() != spec.dtype)) {
    held = absl::InvalidArgumentError(absl::StrCat(
        "local tensor '", save.tensor(), "' does not have the layout of ", spec.ToString()));
  }
  if (!held.ok()) {
    if (failure.ok()) failure = held.status();
    ASSIGN_OR_RETURN(const HostTensor zeros, HostTensor::Zeros(spec.dtype, local));
    ASSIGN_OR_RETURN(kernels::DeviceTensor stand_in, kernels_.Upload(zeros));
    held = std::make_shared<const kernels::DeviceTensor>(std::move(stand_in));
  }
  DTensorSpec saved = spec;
  for (const RedistributeStep& step : plan.steps) saved.placements[step.mesh_dim] = step.to;
  kernels::DeviceTensor reduced;
  const kernels::DeviceTensor* block = held->get();
  if (!plan.steps.empty()) {
    ASSIGN_OR_RETURN(reduced, RunRedistributePlan(kernels_, spec, plan, mc->coordinate,
                                                  DimGroups(*mc), held->get()));
    block = &reduced;
  }
  RETURN_IF_ERROR(failure);
  if (!WritesBlock(saved, mc->coordinate)) return absl::OkStatus();
  // The block goes to the file from host memory (a GPU's shard is copied down first).
  ASSIGN_OR_RETURN(const HostTensor host, kernels_.Download(block->View()));
  return WriteCheckpointBlock(*directory, save.data_dir(), save.param(), save.key(), saved,
                              worker_id_, host);
}

absl::Status CommandExecutor::CommitCheckpoint(const v1::CommitCheckpoint& commit) {
  ASSIGN_OR_RETURN(const std::string directory,
                   ResolveCheckpointPath(checkpoint_root_, commit.directory()));
  RETURN_IF_ERROR(CheckSaveDirectory(directory));
  ASSIGN_OR_RETURN(const CheckpointIndex index, ParseCheckpointIndex(commit.index_json()));
  return CommitCheckpointIndex(directory, index);
}

absl::Status CommandExecutor::ReadCheckpoint(const v1::ReadCheckpoint& read,
                                             v1::CommandReply* reply) {
  ASSIGN_OR_RETURN(const std::string directory,
                   ResolveCheckpointPath(checkpoint_root_, read.directory()));
  RETURN_IF_ERROR(CheckCheckpointDirectory(directory));
  ASSIGN_OR_RETURN(const CheckpointIndex index, ReadCheckpointIndex(directory));
  ASSIGN_OR_RETURN(std::string json, CheckpointIndexToJson(index));
  reply->set_checkpoint_index(std::move(json));
  return absl::OkStatus();
}

absl::StatusOr<v1::LocalTensorInfo> CommandExecutor::LoadShard(const v1::LoadShard& load) {
  ASSIGN_OR_RETURN(MeshComms* const mc, FindMesh(load.mesh_id()));
  ASSIGN_OR_RETURN(const DTensorSpec spec, SpecOnMesh(load.spec(), *mc));
  if (HasPartial(spec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load into ", spec.ToString(), ": a Partial layout"));
  }
  ASSIGN_OR_RETURN(const CheckpointIndex index, ParseCheckpointIndex(load.index_json()));
  const CheckpointTensor* tensor = nullptr;
  for (const CheckpointTensor& t : index.tensors) {
    if (t.name == load.tensor()) tensor = &t;
  }
  if (tensor == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", load.directory(), " has no tensor '", load.tensor(), "'"));
  }
  if (tensor->shape != spec.shape || tensor->dtype != spec.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint tensor '", tensor->name, "' is ", DTypeName(tensor->dtype),
        ShapeToString(tensor->shape), ", not ", DTypeName(spec.dtype), ShapeToString(spec.shape)));
  }
  const LocalShard local = LocalShapeAndOffsetAt(spec, mc->coordinate);
  RETURN_IF_ERROR(store_->Reserve(
      NumElements(local.shape) * static_cast<int64_t>(DTypeSize(spec.dtype)), load.output()));
  ASSIGN_OR_RETURN(const std::string directory,
                   ResolveCheckpointPath(checkpoint_root_, load.directory()));
  ASSIGN_OR_RETURN(const HostTensor read, LoadCheckpointShard(directory, *tensor, local));
  ASSIGN_OR_RETURN(kernels::DeviceTensor shard, kernels_.Upload(read));
  v1::LocalTensorInfo info = LocalInfo(load.output(), shard);
  RETURN_IF_ERROR(store_->Put(load.output(), std::move(shard)));
  return info;
}

}  // namespace tessera
