#include "worker/command_executor.h"

#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/chunk.h"
#include "proto/convert.h"

namespace tessera {
namespace {

// Elements of one row (dim 0 slice) of `shape`.
int64_t RowElements(const Shape& shape) {
  return NumElements(std::span<const int64_t>(shape).subspan(1));
}

Shape WithRows(Shape shape, int64_t rows) {
  shape[0] = rows;
  return shape;
}

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
    default:
      return 0;
  }
}

}  // namespace

CommandExecutor::CommandExecutor(int64_t worker_id, std::string device, ShardStore* store,
                                 gloo::rendezvous::Store* rendezvous, std::string collective_host)
    : worker_id_(worker_id),
      device_(std::move(device)),
      store_(store),
      rendezvous_(rendezvous),
      collective_host_(std::move(collective_host)),
      kernels_(kernels::MakeBackend("cpu").value()) {}

v1::LocalTensorInfo CommandExecutor::LocalInfo(const std::string& name, const HostTensor& t) {
  v1::LocalTensorInfo info;
  info.set_name(name);
  info.set_dtype(ToProto(t.dtype()));
  *info.mutable_shape() = ToProto(t.shape());
  return info;
}

absl::Status CommandExecutor::Execute(const v1::Command& command, v1::CommandReply* reply) {
  reply->set_sequence(command.sequence());
  const absl::Status status = Run(command, reply);
  reply->set_used_bytes(store_->used_bytes());
  ReportBroken(MeshOf(command), reply);
  return status;
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
      meshes_.erase(command.teardown_mesh().mesh_id());
      return absl::OkStatus();
    case v1::Command::kCollective: {
      absl::StatusOr<std::vector<v1::LocalTensorInfo>> written =
          RunCollective(command.collective());
      if (!written.ok()) return written.status();
      for (v1::LocalTensorInfo& t : *written) *reply->add_tensors() = std::move(t);
      return absl::OkStatus();
    }
    case v1::Command::kDeleteTensors:
      for (const std::string& name : command.delete_tensors().names()) store_->Erase(name);
      return absl::OkStatus();
    case v1::Command::kSpreadTensor:
    case v1::Command::kRedistribute:
    case v1::Command::kFillTensor:
    case v1::Command::kRunOp: {
      absl::StatusOr<v1::LocalTensorInfo> written =
          command.kind_case() == v1::Command::kSpreadTensor ? SpreadTensor(command.spread_tensor())
          : command.kind_case() == v1::Command::kRedistribute ? Redistribute(command.redistribute())
          : command.kind_case() == v1::Command::kFillTensor   ? FillTensor(command.fill_tensor())
                                                              : RunOp(command.run_op());
      if (!written.ok()) return written.status();
      *reply->add_tensors() = *std::move(written);
      return absl::OkStatus();
    }
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
  absl::StatusOr<std::unique_ptr<comm::Communicator>> comm =
      comm::MakeCommunicator(device_, *rendezvous_, prefix, rank, size, options);
  if (!comm.ok()) return comm.status();
  if (absl::Status s = (*comm)->set_timeout(timeout); !s.ok()) return s;
  return comm;
}

absl::Status CommandExecutor::SetupMesh(const v1::SetupMesh& setup) {
  absl::StatusOr<DeviceMesh> mesh = FromProto(setup.mesh());
  if (!mesh.ok()) return mesh.status();
  absl::StatusOr<std::vector<int64_t>> coord = mesh->CoordinateOf(worker_id_);
  if (!coord.ok()) return coord.status();
  const absl::Duration timeout = absl::Milliseconds(setup.timeout_ms());
  const absl::Duration connect_timeout =
      setup.connect_timeout_ms() > 0 ? absl::Milliseconds(setup.connect_timeout_ms()) : timeout;
  // A re-form: the broken communicators go first (their sockets close, their memory is freed).
  meshes_.erase(setup.mesh_id());
  auto comms =
      std::make_unique<MeshComms>(MeshComms{*mesh, *coord, setup.generation(), nullptr, {}});
  const int64_t position = [&] {
    int64_t p = 0;
    for (size_t i = 0; i < coord->size(); ++i) {
      p = p * mesh->size(static_cast<int>(i)) + (*coord)[i];
    }
    return p;
  }();
  absl::StatusOr<std::unique_ptr<comm::Communicator>> world =
      Connect(absl::StrCat(setup.store_prefix(), "all/"), static_cast<int>(position),
              static_cast<int>(mesh->size()), connect_timeout, timeout);
  if (!world.ok()) return world.status();
  comms->world = *std::move(world);
  for (int m = 0; m < mesh->ndim(); ++m) {
    // A group is named by its first rank, which every member computes the same way.
    const int64_t first = mesh->GroupAlong(m, *coord)[0];
    absl::StatusOr<std::unique_ptr<comm::Communicator>> group = Connect(
        absl::StrCat(setup.store_prefix(), "dim", m, "/g", first, "/"),
        static_cast<int>((*coord)[m]), static_cast<int>(mesh->size(m)), connect_timeout, timeout);
    if (!group.ok()) return group.status();
    comms->dims.push_back(*std::move(group));
  }
  meshes_[setup.mesh_id()] = std::move(comms);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::LocalTensorInfo>> CommandExecutor::RunCollective(
    const v1::RunCollective& c) {
  absl::StatusOr<MeshComms*> found = FindMesh(c.mesh_id());
  if (!found.ok()) return found.status();
  MeshComms& mc = **found;
  if (c.mesh_dim() < -1 || c.mesh_dim() >= mc.mesh.ndim()) {
    return absl::InvalidArgumentError(absl::StrCat("mesh dim ", c.mesh_dim(), " is out of range"));
  }
  comm::Communicator& group = c.mesh_dim() < 0 ? *mc.world : *mc.dims[c.mesh_dim()];
  if (c.op() == v1::BARRIER) {
    if (absl::Status s = group.Barrier(); !s.ok()) return s;
    return std::vector<v1::LocalTensorInfo>{};
  }
  if (c.input() == c.output() && (c.op() == v1::BROADCAST || c.op() == v1::ALL_REDUCE_OP)) {
    return RunInPlace(c, group);
  }
  absl::StatusOr<std::shared_ptr<const HostTensor>> input = store_->Get(c.input());
  if (!input.ok()) return input.status();
  const HostTensor& in = **input;
  const DType dtype = in.dtype();
  const int64_t k = group.size();
  const int me = group.rank();
  const int root = static_cast<int>(c.root());
  absl::StatusOr<ReduceOp> op = FromProto(c.reduce_op());
  const bool splits = c.op() == v1::ALL_GATHER_OP || c.op() == v1::GATHER ||
                      c.op() == v1::SCATTER || c.op() == v1::REDUCE_SCATTER_OP ||
                      c.op() == v1::ALL_TO_ALL_OP;
  if (splits && in.rank() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", c.input(), "' is a scalar; this collective works along dim 0"));
  }
  // The first budget refusal of this rank's buffers. A rank over budget still takes part in the
  // collective (one that left would strand its peers in it until the timeout, which breaks the
  // communicators) and reports the refusal afterwards instead of keeping its output.
  absl::Status failure;
  // A budget-checked buffer for the output; every use below overwrites all of it, so it is not
  // zeroed first (that pass costs as much as a copy at large sizes).
  auto output_of = [&](Shape shape) -> absl::StatusOr<HostTensor> {
    if (absl::Status s = store_->Reserve(
            NumElements(shape) * static_cast<int64_t>(DTypeSize(dtype)), c.output());
        !s.ok() && failure.ok()) {
      failure = s;
    }
    return HostTensor::Uninitialized(dtype, std::move(shape));
  };
  // What a rank that writes no output returns once the collective is over.
  auto no_output = [&]() -> absl::StatusOr<std::vector<v1::LocalTensorInfo>> {
    if (!failure.ok()) return failure;
    return std::vector<v1::LocalTensorInfo>{};
  };
  // The final output: the buffer of the tensor it replaces when that has the same size and no
  // reader (a repeated collective then writes into memory it already touched, instead of faulting
  // in fresh pages every time), else a new one. A failed collective loses the replaced tensor.
  auto final_output = [&](Shape shape) -> absl::StatusOr<HostTensor> {
    if (c.output() != c.input()) {
      std::optional<HostTensor> reused = store_->TakeForReuse(
          c.output(), dtype, static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype));
      if (reused.has_value() && reused->Reshape(shape).ok()) return *std::move(reused);
    }
    return output_of(std::move(shape));
  };
  auto keep = [&](HostTensor out) -> absl::StatusOr<std::vector<v1::LocalTensorInfo>> {
    if (!failure.ok()) return failure;
    v1::LocalTensorInfo info = LocalInfo(c.output(), out);
    if (absl::Status s = store_->Put(c.output(), std::move(out)); !s.ok()) return s;
    return std::vector<v1::LocalTensorInfo>{info};
  };
  const int64_t n0 = in.rank() > 0 ? in.shape()[0] : 1;
  const int64_t row = in.rank() > 0 ? RowElements(in.shape()) : 1;
  const int64_t c0 = ChunkSize(n0, k);
  // `in` as k chunks of c0 rows, the layout the equal-block collectives send: `in` itself when
  // its rows divide evenly, else a copy zero-padded to k * c0 rows, held in `padded`.
  std::optional<HostTensor> padded;
  auto equal_blocks = [&]() -> absl::StatusOr<const std::byte*> {
    if (k * c0 == n0) return in.data();
    absl::StatusOr<HostTensor> p = output_of(WithRows(in.shape(), k * c0));
    if (!p.ok()) return p.status();
    std::memcpy(p->data(), in.data(), in.nbytes());
    std::memset(p->data() + in.nbytes(), 0, p->nbytes() - in.nbytes());
    padded = *std::move(p);
    return padded->data();
  };

  absl::Status status;
  switch (c.op()) {
    case v1::BROADCAST: {
      absl::StatusOr<HostTensor> out = final_output(in.shape());
      if (!out.ok()) return out.status();
      std::memcpy(out->data(), in.data(), in.nbytes());
      status = group.Broadcast(out->data(), out->num_elements(), dtype, root);
      if (!status.ok()) return status;
      return keep(*std::move(out));
    }
    case v1::ALL_REDUCE_OP:
    case v1::REDUCE: {
      if (!op.ok()) return op.status();
      // A reduce's other ranks write no output: they work in a scratch buffer and leave any
      // tensor of the output's name alone.
      const bool writes = c.op() == v1::ALL_REDUCE_OP || me == root;
      absl::StatusOr<HostTensor> out = writes ? final_output(in.shape()) : output_of(in.shape());
      if (!out.ok()) return out.status();
      std::memcpy(out->data(), in.data(), in.nbytes());
      status = c.op() == v1::REDUCE
                   ? group.Reduce(out->data(), out->num_elements(), dtype, *op, root)
                   : group.AllReduce(out->data(), out->num_elements(), dtype, *op);
      if (!status.ok()) return status;
      if (c.op() == v1::REDUCE && me != root) return no_output();
      return keep(*std::move(out));
    }
    case v1::ALL_GATHER_OP:
    case v1::GATHER: {
      const bool writes = c.op() == v1::ALL_GATHER_OP || me == root;
      absl::StatusOr<HostTensor> out = writes ? final_output(WithRows(in.shape(), k * n0))
                                              : output_of(WithRows(in.shape(), k * n0));
      if (!out.ok()) return out.status();
      status = c.op() == v1::GATHER
                   ? group.Gather(in.data(), out->data(), in.num_elements(), dtype, root)
                   : group.AllGather(in.data(), out->data(), in.num_elements(), dtype);
      if (!status.ok()) return status;
      if (c.op() == v1::GATHER && me != root) return no_output();
      return keep(*std::move(out));
    }
    case v1::SCATTER:
    case v1::REDUCE_SCATTER_OP: {
      if (c.op() == v1::REDUCE_SCATTER_OP && !op.ok()) return op.status();
      absl::StatusOr<const std::byte*> send = equal_blocks();
      if (!send.ok()) return send.status();
      absl::StatusOr<HostTensor> recv = final_output(WithRows(in.shape(), c0));
      if (!recv.ok()) return recv.status();
      status = c.op() == v1::SCATTER
                   ? group.Scatter(*send, recv->data(), c0 * row, dtype, root)
                   : group.ReduceScatter(*send, recv->data(), c0 * row, dtype, *op);
      if (!status.ok()) return status;
      const ChunkRange mine = ChunkOf(n0, k, me);
      if (mine.size == c0) return keep(*std::move(recv));
      absl::StatusOr<HostTensor> out = HostTensor::FromBytes(
          dtype, WithRows(in.shape(), mine.size),
          {recv->data(), static_cast<size_t>(mine.size * row) * DTypeSize(dtype)});
      if (!out.ok()) return out.status();
      return keep(*std::move(out));
    }
    case v1::ALL_TO_ALL_OP: {
      absl::StatusOr<const std::byte*> send = equal_blocks();
      if (!send.ok()) return send.status();
      absl::StatusOr<HostTensor> recv = final_output(WithRows(in.shape(), k * c0));
      if (!recv.ok()) return recv.status();
      status = group.AllToAll(*send, recv->data(), c0 * row, dtype);
      if (!status.ok()) return status;
      // Every rank sent its chunk `me` of the same n0 rows: k blocks of ChunkOf(n0, k, me) rows,
      // received as blocks of c0 rows; when the two agree the received buffer is the output.
      const int64_t rows = ChunkOf(n0, k, me).size;
      if (rows == c0) return keep(*std::move(recv));
      absl::StatusOr<HostTensor> out = output_of(WithRows(in.shape(), k * rows));
      if (!out.ok()) return out.status();
      const size_t block = static_cast<size_t>(rows * row) * DTypeSize(dtype);
      for (int64_t p = 0; p < k; ++p) {
        std::memcpy(out->data() + p * block,
                    recv->data() + static_cast<size_t>(p * c0 * row) * DTypeSize(dtype), block);
      }
      return keep(*std::move(out));
    }
    case v1::SEND_RECV: {
      const int peer = static_cast<int>(c.peer());
      if (me == root) {
        status = group.Send(in.data(), in.num_elements(), dtype, peer, 0);
        if (!status.ok()) return status;
        return std::vector<v1::LocalTensorInfo>{};
      }
      if (me != peer) return std::vector<v1::LocalTensorInfo>{};
      absl::StatusOr<HostTensor> out = output_of(in.shape());
      if (!out.ok()) return out.status();
      status = group.Recv(out->data(), out->num_elements(), dtype, root, 0);
      if (!status.ok()) return status;
      return keep(*std::move(out));
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("collective op ", c.op(), " is not supported"));
  }
}

absl::StatusOr<std::vector<v1::LocalTensorInfo>> CommandExecutor::RunInPlace(
    const v1::RunCollective& c, comm::Communicator& group) {
  absl::StatusOr<ReduceOp> op = FromProto(c.reduce_op());
  if (c.op() == v1::ALL_REDUCE_OP && !op.ok()) return op.status();
  // The stored buffer itself is updated (no copy) unless a download is reading it.
  absl::StatusOr<HostTensor> t = store_->TakeOrCopy(c.input());
  if (!t.ok()) return t.status();
  // On failure the tensor is not stored again: the collective may have half-written it, and
  // the communicator is broken from then on.
  absl::Status status =
      c.op() == v1::BROADCAST
          ? group.Broadcast(t->data(), t->num_elements(), t->dtype(), static_cast<int>(c.root()))
          : group.AllReduce(t->data(), t->num_elements(), t->dtype(), *op);
  if (!status.ok()) return status;
  v1::LocalTensorInfo info = LocalInfo(c.output(), *t);
  if (absl::Status s = store_->Put(c.output(), *std::move(t)); !s.ok()) return s;
  return std::vector<v1::LocalTensorInfo>{info};
}

}  // namespace tessera
