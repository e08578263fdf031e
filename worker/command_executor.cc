#include "worker/command_executor.h"

#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/sharding/chunk.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "worker/collective_ops.h"
#include "worker/collective_outputs.h"

namespace tessera {
namespace {

// The mesh a command runs on; 0 for none (set-up, teardown and deletes use no communicator).
int64_t MeshOf(const v1::Command& command) {
  switch (command.kind_case()) {
    case v1::Command::kCollective:
      return command.collective().mesh_id();
    case v1::Command::kSpreadTensor:
      return command.spread_tensor().mesh_id();
    case v1::Command::kRedistribute:
      return command.redistribute().mesh_id();
    case v1::Command::kFillTensor:
      return command.fill_tensor().mesh_id();
    case v1::Command::kRunOp:
      return command.run_op().mesh_id();
    case v1::Command::kLoadProgram:
      return command.load_program().mesh_id();
    case v1::Command::kRunProgram:
      return command.run_program().mesh_id();
    case v1::Command::kSaveShard:
      return command.save_shard().mesh_id();
    case v1::Command::kLoadShard:
      return command.load_shard().mesh_id();
    case v1::Command::kLoadGraph:
      return command.load_graph().mesh_id();
    case v1::Command::kRunGraph:
      return command.run_graph().mesh_id();
    default:
      return 0;
  }
}

}  // namespace

CommandExecutor::CommandExecutor(int64_t worker_id, kernels::KernelBackend* kernels,
                                 ShardStore* store, gloo::rendezvous::Store* rendezvous,
                                 std::string collective_host, std::string checkpoint_root)
    : worker_id_(worker_id),
      kernels_(*kernels),
      device_(kernels->device()),
      store_(store),
      rendezvous_(rendezvous),
      collective_host_(std::move(collective_host)),
      checkpoint_root_(std::move(checkpoint_root)) {}

v1::LocalTensorInfo CommandExecutor::LocalInfo(const std::string& name,
                                               const kernels::DeviceTensor& t) {
  v1::LocalTensorInfo info;
  info.set_name(name);
  info.set_dtype(ToProto(t.dtype()));
  *info.mutable_shape() = ToProto(t.shape());
  return info;
}

absl::Status CommandExecutor::Execute(const v1::Command& command, v1::CommandReply* reply) {
  reply->set_sequence(command.sequence());
  absl::Status status = Run(command, reply);
  // Work the command queued on the device (CUDA) has finished, or its failure is this command's.
  if (absl::Status done = kernels_.Synchronize(); status.ok() && !done.ok()) status = done;
  reply->set_used_bytes(store_->used_bytes());
  BreakWholeMesh(MeshOf(command));
  ReportBroken(MeshOf(command), reply);
  return status;
}

void CommandExecutor::BreakWholeMesh(int64_t mesh_id) {
  auto it = meshes_.find(mesh_id);
  if (mesh_id == 0 || it == meshes_.end()) return;
  MeshComms& mc = *it->second;
  absl::Status health = mc.world->Health();
  for (size_t m = 0; health.ok() && m < mc.dims.size(); ++m) health = mc.dims[m]->Health();
  if (health.ok()) return;
  const absl::Status cause = absl::UnavailableError(absl::StrCat(
      "another communicator of mesh ", mesh_id, " on this worker broke: ", health.message()));
  mc.world->Break(cause);
  for (const std::unique_ptr<comm::Communicator>& dim : mc.dims) dim->Break(cause);
}

void CommandExecutor::ReportBroken(int64_t mesh_id, v1::CommandReply* reply) const {
  auto it = meshes_.find(mesh_id);
  if (mesh_id == 0 || it == meshes_.end()) return;
  const MeshComms& mc = *it->second;
  absl::Status health = mc.world->Health();
  for (size_t m = 0; health.ok() && m < mc.dims.size(); ++m) health = mc.dims[m]->Health();
  if (health.ok()) return;
  v1::BrokenCommunicator* broken = reply->mutable_broken();
  broken->set_mesh_id(mesh_id);
  broken->set_generation(mc.generation);
  broken->set_reason(std::string(health.message()));
}

absl::Status CommandExecutor::Run(const v1::Command& command, v1::CommandReply* reply) {
  switch (command.kind_case()) {
    case v1::Command::kSetupMesh:
      return SetupMesh(command.setup_mesh());
    case v1::Command::kTeardownMesh:
      // The mesh's programs go with it (their prepared weight copies too).
      std::erase_if(programs_, [&](const auto& entry) {
        return entry.second.mesh_id == command.teardown_mesh().mesh_id();
      });
      std::erase_if(graphs_, [&](const auto& entry) {
        return entry.second.mesh_id == command.teardown_mesh().mesh_id();
      });
      meshes_.erase(command.teardown_mesh().mesh_id());
      return absl::OkStatus();
    case v1::Command::kCollective: {
      ASSIGN_OR_RETURN(std::vector<v1::LocalTensorInfo> written,
                       RunCollective(command.collective()));
      for (v1::LocalTensorInfo& t : written) *reply->add_tensors() = std::move(t);
      return absl::OkStatus();
    }
    case v1::Command::kDeleteTensors:
      for (const std::string& name : command.delete_tensors().names()) store_->Erase(name);
      return absl::OkStatus();
    case v1::Command::kSpreadTensor:
    case v1::Command::kRedistribute:
    case v1::Command::kFillTensor: {
      ASSIGN_OR_RETURN(
          v1::LocalTensorInfo written,
          command.kind_case() == v1::Command::kSpreadTensor ? SpreadTensor(command.spread_tensor())
          : command.kind_case() == v1::Command::kRedistribute ? Redistribute(command.redistribute())
                                                              : FillTensor(command.fill_tensor()));
      *reply->add_tensors() = std::move(written);
      return absl::OkStatus();
    }
    case v1::Command::kRunOp: {
      ASSIGN_OR_RETURN(std::vector<v1::LocalTensorInfo> written, RunOp(command.run_op()));
      for (v1::LocalTensorInfo& info : written) *reply->add_tensors() = std::move(info);
      return absl::OkStatus();
    }
    case v1::Command::kLoadProgram:
      return LoadProgram(command.load_program());
    case v1::Command::kDropProgram:
      programs_.erase(command.drop_program().program_id());
      graphs_.erase(command.drop_program().program_id());
      return absl::OkStatus();
    case v1::Command::kRunProgram:
      return RunProgram(command.run_program(), reply);
    case v1::Command::kSaveShard:
      return SaveShard(command.save_shard());
    case v1::Command::kCommitCheckpoint:
      return CommitCheckpoint(command.commit_checkpoint());
    case v1::Command::kReadCheckpoint:
      return ReadCheckpoint(command.read_checkpoint(), reply);
    case v1::Command::kLoadShard: {
      ASSIGN_OR_RETURN(v1::LocalTensorInfo written, LoadShard(command.load_shard()));
      *reply->add_tensors() = std::move(written);
      return absl::OkStatus();
    }
    case v1::Command::kLoadGraph:
      return LoadGraph(command.load_graph());
    case v1::Command::kRunGraph:
      return RunGraph(command.run_graph(), reply);
    case v1::Command::kPing:
      return absl::OkStatus();
    case v1::Command::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("command has no kind");
}

absl::StatusOr<std::unique_ptr<comm::Communicator>> CommandExecutor::Connect(
    const std::string& prefix, int rank, int size, absl::Duration connect_timeout,
    absl::Duration timeout) {
  comm::CommunicatorOptions options;
  options.timeout = connect_timeout;
  options.hostname = collective_host_;
  options.compute_stream = kernels_.native_stream();
  absl::StatusOr<std::unique_ptr<comm::Communicator>> comm =
      comm::MakeCommunicator(device_, *rendezvous_, prefix, rank, size, options);
  if (!comm.ok()) return comm.status();
  if (absl::Status s = (*comm)->set_timeout(timeout); !s.ok()) return s;
  return comm;
}

absl::Status CommandExecutor::SetupMesh(const v1::SetupMesh& setup) {
  ASSIGN_OR_RETURN(DeviceMesh mesh, FromProto(setup.mesh()));
  ASSIGN_OR_RETURN(std::vector<int64_t> coord, mesh.CoordinateOf(worker_id_));
  const absl::Duration timeout = absl::Milliseconds(setup.timeout_ms());
  const absl::Duration connect_timeout =
      setup.connect_timeout_ms() > 0 ? absl::Milliseconds(setup.connect_timeout_ms()) : timeout;
  // A re-form: the broken communicators go first (their sockets close, their memory is freed).
  meshes_.erase(setup.mesh_id());
  auto comms = std::make_unique<MeshComms>(MeshComms{mesh, coord, setup.generation(), nullptr, {}});
  const int64_t position = [&] {
    int64_t p = 0;
    for (size_t i = 0; i < coord.size(); ++i) {
      p = p * mesh.size(static_cast<int>(i)) + coord[i];
    }
    return p;
  }();
  ASSIGN_OR_RETURN(comms->world,
                   Connect(absl::StrCat(setup.store_prefix(), "all/"), static_cast<int>(position),
                           static_cast<int>(mesh.size()), connect_timeout, timeout));
  for (int m = 0; m < mesh.ndim(); ++m) {
    // A group is named by its first rank, which every member computes the same way.
    const int64_t first = mesh.GroupAlong(m, coord)[0];
    ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> group,
                     Connect(absl::StrCat(setup.store_prefix(), "dim", m, "/g", first, "/"),
                             static_cast<int>(coord[m]), static_cast<int>(mesh.size(m)),
                             connect_timeout, timeout));
    comms->dims.push_back(std::move(group));
  }
  meshes_[setup.mesh_id()] = std::move(comms);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::LocalTensorInfo>> CommandExecutor::RunCollective(
    const v1::RunCollective& c) {
  ASSIGN_OR_RETURN(MeshComms* const found, FindMesh(c.mesh_id()));
  MeshComms& mc = *found;
  if (c.mesh_dim() < -1 || c.mesh_dim() >= mc.mesh.ndim()) {
    return absl::InvalidArgumentError(absl::StrCat("mesh dim ", c.mesh_dim(), " is out of range"));
  }
  comm::Communicator& group = c.mesh_dim() < 0 ? *mc.world : *mc.dims[c.mesh_dim()];
  if (c.op() == v1::BARRIER) {
    RETURN_IF_ERROR(group.Barrier());
    return std::vector<v1::LocalTensorInfo>{};
  }
  if (c.input() == c.output() && (c.op() == v1::BROADCAST || c.op() == v1::ALL_REDUCE_OP)) {
    return RunInPlace(c, group);
  }
  absl::StatusOr<std::shared_ptr<const kernels::DeviceTensor>> input = store_->Get(c.input());
  if (!input.ok()) return input.status();
  CollectiveOutputs outputs(*store_, c.input(), c.output(), (*input)->dtype());
  absl::StatusOr<CollectiveResult> out = RunCollectiveOp(c, group, **input, outputs);
  if (!out.ok()) return out.status();
  // A rank over budget took part all the same (see CollectiveOutputs) and reports it now.
  RETURN_IF_ERROR(outputs.failure());
  if (!out->has_value()) return std::vector<v1::LocalTensorInfo>{};
  v1::LocalTensorInfo info = LocalInfo(c.output(), **out);
  if (absl::Status s = store_->Put(c.output(), *std::move(*out)); !s.ok()) return s;
  return std::vector<v1::LocalTensorInfo>{info};
}

absl::StatusOr<std::vector<v1::LocalTensorInfo>> CommandExecutor::RunInPlace(
    const v1::RunCollective& c, comm::Communicator& group) {
  absl::StatusOr<ReduceOp> op = FromProto(c.reduce_op());
  if (c.op() == v1::ALL_REDUCE_OP && !op.ok()) return op.status();
  // The stored buffer itself is updated (no copy) unless a download is reading it.
  ASSIGN_OR_RETURN(kernels::DeviceTensor t, store_->TakeOrCopy(c.input()));
  // On failure the tensor is not stored again: the collective may have half-written it, and
  // the communicator is broken from then on.
  RETURN_IF_ERROR(
      c.op() == v1::BROADCAST
          ? group.Broadcast(t.data(), t.num_elements(), t.dtype(), static_cast<int>(c.root()))
          : group.AllReduce(t.data(), t.num_elements(), t.dtype(), *op));
  v1::LocalTensorInfo info = LocalInfo(c.output(), t);
  RETURN_IF_ERROR(store_->Put(c.output(), std::move(t)));
  return std::vector<v1::LocalTensorInfo>{info};
}

}  // namespace tessera
