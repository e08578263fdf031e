#include "server/transfers/checkpoints.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/files/checkpoint.h"
#include "core/names.h"
#include "core/sharding/redistribute_planner.h"
#include "core/status_macros.h"
#include "proto/convert.h"

namespace tessera {
namespace {

// The workers resolve a checkpoint path inside their --checkpoint_root (ResolveCheckpointPath);
// here it need only name something.
absl::Status CheckPath(const std::string& path) {
  if (path.empty()) {
    return absl::InvalidArgumentError(
        "the checkpoint path is empty (it names a directory on the workers' filesystem, inside "
        "their --checkpoint_root)");
  }
  return absl::OkStatus();
}

// A data directory name no other save uses: the time and a counter.
std::string FreshDataDir() {
  static std::atomic<int64_t> counter{0};
  return absl::StrCat("data-", absl::ToUnixNanos(absl::Now()), "-", counter.fetch_add(1));
}

}  // namespace

absl::StatusOr<std::vector<v1::CommandReply>> Checkpoints::RunOn(
    const std::vector<WorkerHandle>& workers, const v1::Command& command, absl::Time deadline,
    const DTensorEntry* reads) {
  struct Outcome {
    absl::Notification done;
    absl::Status status;
    std::vector<v1::CommandReply> replies;
  };
  auto outcome = std::make_shared<Outcome>();
  // Posted under the read tensor's lock, so that it is posted before the tensor's free or not at
  // all (the workers would otherwise answer with their internal name of it).
  std::optional<absl::MutexLock> lock;
  if (reads != nullptr) {
    lock.emplace(&reads->post_mu);
    if (reads->released) {
      return absl::NotFoundError(absl::StrCat("tensor '", reads->name, "' was freed"));
    }
  }
  tensors_->dispatcher().Post(
      workers, command, std::clamp(deadline - absl::Now(), absl::Seconds(1), absl::Minutes(30)),
      [outcome](absl::Status status, std::vector<v1::CommandReply> replies) {
        outcome->status = std::move(status);
        outcome->replies = std::move(replies);
        outcome->done.Notify();
      });
  lock.reset();
  outcome->done.WaitForNotification();  // the dispatcher's deadline bounds the wait
  if (!outcome->status.ok()) return outcome->status;
  return std::move(outcome->replies);
}

absl::Status Checkpoints::Save(const v1::SaveTensorRequest& request, absl::Time deadline,
                               v1::SaveTensorReply* reply) {
  RETURN_IF_ERROR(CheckPath(request.path()));
  ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> src, tensors_->Usable(request.name()));
  return SaveAll(request.path(), {Saved{"", std::move(src)}}, deadline, reply);
}

absl::Status Checkpoints::SaveAll(const std::string& path, const std::vector<Saved>& tensors,
                                  absl::Time deadline, v1::SaveTensorReply* reply,
                                  const std::string& layout) {
  RETURN_IF_ERROR(CheckPath(path));
  if (tensors.empty()) return absl::InvalidArgumentError("a checkpoint needs a tensor to save");
  const std::string data_dir = FreshDataDir();
  CheckpointIndex index{data_dir, {}};
  std::vector<WorkerHandle> writers;
  int64_t files = 0;
  for (const Saved& t : tensors) {
    const DTensorEntry& src = *t.tensor;
    const DTensorSpec& spec = src.spec;
    DTensorSpec saved = spec;
    saved.placements = SavedPlacements(spec.placements);
    RedistributePlan plan;
    if (HasPartial(spec)) {
      ASSIGN_OR_RETURN(plan, PlanRedistribute(spec, saved.placements, PlannerKind::kMinCost));
    }
    ASSIGN_OR_RETURN(CheckpointTensor planned,
                     PlanCheckpointTensor(saved, data_dir, t.param, src.name));
    ASSIGN_OR_RETURN(std::vector<WorkerHandle> workers, tensors_->meshes().Workers(*src.mesh));
    v1::Command command;
    v1::SaveShard* save = command.mutable_save_shard();
    save->set_mesh_id(src.mesh->id);
    save->set_tensor(DTensorTable::WorkerName(src.name));
    *save->mutable_spec() = ToProto(spec);
    *save->mutable_plan() = ToProto(plan);
    save->set_directory(path);
    save->set_data_dir(data_dir);
    save->set_param(t.param);
    save->set_key(src.name);
    RETURN_IF_ERROR(RunOn(workers, command, deadline, &src).status());
    files += static_cast<int64_t>(planned.blocks.size());
    if (writers.empty()) writers = {workers[0]};
    index.tensors.push_back(std::move(planned));
  }

  v1::Command commit;
  commit.mutable_commit_checkpoint()->set_directory(path);
  ASSIGN_OR_RETURN(*commit.mutable_commit_checkpoint()->mutable_index_json(),
                   CheckpointIndexToJson(index));
  RETURN_IF_ERROR(RunOn(writers, commit, deadline).status());

  reply->set_path(path);
  reply->set_data_dir(data_dir);
  reply->set_files(files);
  reply->set_saved_layout(layout.empty() ? index.tensors[0].saved_layout : layout);
  return absl::OkStatus();
}

absl::StatusOr<Checkpoints::Index> Checkpoints::ReadIndex(const std::string& path, const Mesh& mesh,
                                                          absl::Time deadline) {
  RETURN_IF_ERROR(CheckPath(path));
  ASSIGN_OR_RETURN(std::vector<WorkerHandle> workers, tensors_->meshes().Workers(mesh));
  v1::Command read;
  read.mutable_read_checkpoint()->set_directory(path);
  ASSIGN_OR_RETURN(std::vector<v1::CommandReply> replies, RunOn({workers[0]}, read, deadline));
  Index index;
  index.json = std::move(*replies[0].mutable_checkpoint_index());
  ASSIGN_OR_RETURN(index.parsed, ParseCheckpointIndex(index.json));
  return index;
}

absl::Status Checkpoints::PostLoad(const DTensorEntry& out, const std::string& path,
                                   const Index& index, const std::string& name) {
  v1::Command command;
  v1::LoadShard* load = command.mutable_load_shard();
  load->set_mesh_id(out.mesh->id);
  load->set_output(DTensorTable::WorkerName(out.name));
  *load->mutable_spec() = ToProto(out.spec);
  load->set_directory(path);
  load->set_index_json(index.json);
  load->set_tensor(name);
  return tensors_->PostWrite(out, command);
}

absl::Status Checkpoints::Load(const v1::LoadTensorRequest& request, const std::string& client,
                               absl::Time deadline, v1::TensorInfo* reply) {
  RETURN_IF_ERROR(CheckPath(request.path()));
  ASSIGN_OR_RETURN(std::shared_ptr<Mesh> mesh, tensors_->meshes().Ready(request.mesh()));
  ASSIGN_OR_RETURN(std::vector<Placement> placements, FromProto(request.placements()));
  for (const Placement& p : placements) {
    if (p.is_partial()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot load into Partial placements ",
                                                     PlacementsToString(placements),
                                                     ": load as Replicate or Shard"));
    }
  }
  ASSIGN_OR_RETURN(const Index index, ReadIndex(request.path(), *mesh, deadline));
  const CheckpointTensor* tensor = nullptr;
  for (const CheckpointTensor& t : index.parsed.tensors) {
    if (request.tensor().empty() ? index.parsed.tensors.size() == 1 : t.name == request.tensor()) {
      tensor = &t;
    }
  }
  if (tensor == nullptr) {
    return request.tensor().empty()
               ? absl::InvalidArgumentError(absl::StrCat("checkpoint ", request.path(), " holds ",
                                                         index.parsed.tensors.size(),
                                                         " tensors: name the one to load"))
               : absl::NotFoundError(absl::StrCat("checkpoint ", QuotedName(request.path(), 200),
                                                  " has no tensor ", QuotedName(request.tensor())));
  }
  ASSIGN_OR_RETURN(DTensorSpec spec, MakeDTensorSpec(mesh->mesh, std::move(placements),
                                                     tensor->shape, tensor->dtype));
  ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> out,
                   tensors_->Add(request.output(), mesh, spec, client));
  RETURN_IF_ERROR(PostLoad(*out, request.path(), index, tensor->name));
  *reply = tensors_->Describe(*out);
  return absl::OkStatus();
}

}  // namespace tessera
