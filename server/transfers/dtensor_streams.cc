#include "server/transfers/dtensor_streams.h"

#include "absl/strings/str_cat.h"
#include "core/checked_math.h"
#include "core/sharding/redistribute_planner.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "server/transfers/shard_streams.h"
#include "transfer/tensor_stream.h"

namespace tessera {
namespace {

// The spec of the block of `spec` at mesh `position`, on a mesh of that rank alone.
absl::StatusOr<DTensorSpec> BlockAt(const DTensorSpec& spec, int64_t position) {
  const Shape local = LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(position)).shape;
  ASSIGN_OR_RETURN(DeviceMesh single, DeviceMesh::Create(spec.mesh.device_type(), {1}, {},
                                                         {spec.mesh.ranks()[position]}));
  return DTensorSpec{std::move(single), {Placement::Replicate()}, local, spec.dtype};
}

// Writes `data`'s header with each window of a gathered tensor.
absl::Status StreamOut(DTensorTable& tensors, const DTensorSpec& spec,
                       const std::string& worker_tensor, const grpc::ServerContext& context,
                       IdleStreams::Watch& watch, v1::TensorData data,
                       grpc::ServerWriter<v1::TensorData>* writer) {
  return GatherStream(tensors.dispatcher(), spec, worker_tensor, TransferDeadline(context),
                      [&](std::string window) {
                        data.set_data(std::move(window));
                        const bool sent = watch.Write(*writer, data);
                        data.Clear();
                        return sent;
                      });
}

}  // namespace

absl::Status DTensorStreams::ReadFailure(const DTensorEntry& tensor, absl::Status download) const {
  // A read queued behind a write that then failed finds no shard; the write's error is the cause.
  if (tensor.write->done.WaitForNotificationWithTimeout(absl::Seconds(1)) &&
      !tensor.write->status.ok()) {
    return tensors_->Explain(tensor, WithContext(absl::StrCat("tensor '", tensor.name, "' failed"),
                                                 tensor.write->status));
  }
  return tensors_->Explain(tensor, download);
}

absl::Status DTensorStreams::Spread(const DTensorEntry& tensor, const std::vector<int64_t>& source,
                                    const std::vector<int>& broadcast_dims, bool partition) {
  if (broadcast_dims.empty() && !(partition && HasPartial(tensor.spec))) {
    return tensors_->FinishWrite(tensor);
  }
  v1::Command command;
  v1::SpreadTensor* s = command.mutable_spread_tensor();
  s->set_mesh_id(tensor.mesh->id);
  s->set_tensor(DTensorTable::WorkerName(tensor.name));
  *s->mutable_spec() = ToProto(tensor.spec);
  for (int64_t c : source) s->add_source_coordinate(c);
  for (int m : broadcast_dims) s->add_broadcast_dims(m);
  s->set_partition_partials(partition);
  // Not posted after a free: the source shards would be gone and the other ranks would keep the
  // broadcast's stand-in.
  return tensors_->PostWrite(tensor, command);
}

absl::StatusOr<v1::TensorInfo> DTensorStreams::Distribute(
    grpc::ServerContext& context, grpc::ServerReader<v1::DistributeChunk>* reader,
    const std::string& owner) {
  const std::unique_ptr<IdleStreams::Watch> watch = idle_.Start(context, "DistributeTensor");
  v1::DistributeChunk chunk;
  if (!watch->Read(*reader, &chunk)) {
    if (watch->expired()) return watch->ExpiredError();
    return absl::InvalidArgumentError("DistributeTensor stream had no chunks");
  }
  const v1::DistributeHeader& h = chunk.header();
  ASSIGN_OR_RETURN(std::shared_ptr<Mesh> mesh, tensors_->meshes().Ready(h.mesh()));
  ASSIGN_OR_RETURN(const DType dtype, FromProto(h.dtype()));
  ASSIGN_OR_RETURN(Shape shape, FromProto(h.shape()));
  ASSIGN_OR_RETURN(std::vector<Placement> placements, FromProto(h.placements()));
  ASSIGN_OR_RETURN(const DTensorSpec spec,
                   MakeDTensorSpec(mesh->mesh, std::move(placements), std::move(shape), dtype));
  if (h.src_data_rank() < 0 || h.src_data_rank() >= mesh->mesh.size()) {
    return absl::InvalidArgumentError(absl::StrCat("src_data_rank ", h.src_data_rank(),
                                                   " is not a rank of mesh '", mesh->name, "' of ",
                                                   mesh->mesh.size(), " ranks"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> t, tensors_->Add(h.name(), mesh, spec, owner));
  const std::vector<int64_t> source = mesh->mesh.CoordinateOfIndex(h.src_data_rank());
  absl::StatusOr<int64_t> received = ScatterStream(
      tensors_->dispatcher(), spec, BlockHolders(spec, source), DTensorTable::WorkerName(t->name),
      TransferDeadline(context), std::move(*chunk.mutable_data()), [&](std::string* data) {
        if (!watch->Read(*reader, &chunk)) return false;
        *data = std::move(*chunk.mutable_data());
        return true;
      });
  if (!received.ok()) {
    // Nothing of the new tensor is kept; shards that did arrive are freed.
    tensors_->Release(*t);
    return watch->expired() ? watch->ExpiredError() : received.status();
  }
  RETURN_IF_ERROR(Spread(*t, source, ReplicaDims(spec), /*partition=*/true));
  return tensors_->Describe(*t);
}

absl::StatusOr<Shape> DTensorStreams::FromLocalShape(const DeviceMesh& mesh,
                                                     const v1::FromLocalHeader& h,
                                                     const std::vector<Placement>& placements,
                                                     const Shape& first_local) {
  if (h.has_shape()) return FromProto(h.shape());
  Shape global = first_local;
  ASSIGN_OR_RETURN(const std::vector<Placement> normal,
                   NormalizePlacements(mesh, placements, static_cast<int>(global.size())));
  for (int m = 0; m < mesh.ndim(); ++m) {
    if (!normal[m].is_shard()) continue;
    const std::optional<int64_t> size = CheckedMul(global[normal[m].dim], mesh.size(m));
    if (!size.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "from_local: local shape ", ShapeToString(first_local), " sharded over mesh dim ", m,
          " of size ", mesh.size(m), " makes a global size past int64; pass the global shape"));
    }
    global[normal[m].dim] = *size;
  }
  RETURN_IF_ERROR(ValidateShape(global));
  return global;
}

absl::Status DTensorStreams::ReceiveRank(const grpc::ServerContext& context,
                                         const DTensorEntry& tensor,
                                         grpc::ServerReader<v1::FromLocalChunk>* reader,
                                         IdleStreams::Watch& watch, bool has_shape,
                                         std::vector<bool>& seen, v1::FromLocalChunk& chunk,
                                         bool& more) {
  const DTensorSpec& spec = tensor.spec;
  const int64_t rank = chunk.rank();
  if (rank < 0 || rank >= spec.mesh.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not in mesh '",
                                                   tensor.mesh->name, "' of ", spec.mesh.size(),
                                                   " ranks"));
  }
  if (seen[rank]) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, "'s shard was sent twice"));
  }
  seen[rank] = true;
  ASSIGN_OR_RETURN(const DTensorSpec block, BlockAt(spec, rank));
  absl::StatusOr<Shape> local = FromProto(chunk.local_shape());
  if (!local.ok() || *local != block.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, "'s local shape ", local.ok() ? ShapeToString(*local) : "(invalid)",
        " does not fit ", spec.ToString(), ", which gives it ", ShapeToString(block.shape),
        has_shape ? "" : "; pass the global shape for uneven shards"));
  }
  // The section is the whole of this rank's block: upload it as a tensor of its own.
  more = false;
  absl::StatusOr<int64_t> received = ScatterStream(
      tensors_->dispatcher(), block, {0}, DTensorTable::WorkerName(tensor.name),
      TransferDeadline(context), std::move(*chunk.mutable_data()), [&](std::string* data) {
        if (!watch.Read(*reader, &chunk)) return false;
        if (chunk.begins_rank()) {
          more = true;
          return false;
        }
        *data = std::move(*chunk.mutable_data());
        return true;
      });
  if (!received.ok()) {
    return WithContext(absl::StrCat("rank ", rank, "'s shard"), received.status());
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::TensorInfo> DTensorStreams::FromLocal(
    grpc::ServerContext& context, grpc::ServerReader<v1::FromLocalChunk>* reader,
    const std::string& owner) {
  const std::unique_ptr<IdleStreams::Watch> watch = idle_.Start(context, "FromLocal");
  v1::FromLocalChunk chunk;
  if (!watch->Read(*reader, &chunk)) {
    if (watch->expired()) return watch->ExpiredError();
    return absl::InvalidArgumentError("FromLocal stream had no chunks");
  }
  const v1::FromLocalHeader h = chunk.header();
  ASSIGN_OR_RETURN(std::shared_ptr<Mesh> mesh, tensors_->meshes().Ready(h.mesh()));
  const DeviceMesh& dm = mesh->mesh;
  ASSIGN_OR_RETURN(const DType dtype, FromProto(h.dtype()));
  ASSIGN_OR_RETURN(std::vector<Placement> placements, FromProto(h.placements()));
  if (!chunk.begins_rank()) {
    return absl::InvalidArgumentError("the first FromLocal chunk must begin a rank's shard");
  }
  ASSIGN_OR_RETURN(const Shape first_local, FromProto(chunk.local_shape()));
  ASSIGN_OR_RETURN(Shape global, FromLocalShape(dm, h, placements, first_local));
  ASSIGN_OR_RETURN(const DTensorSpec spec,
                   MakeDTensorSpec(dm, std::move(placements), std::move(global), dtype));
  ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> t, tensors_->Add(h.name(), mesh, spec, owner));

  std::vector<bool> seen(static_cast<size_t>(dm.size()), false);
  absl::Status status;
  for (bool more = true; status.ok() && more;) {
    status = ReceiveRank(context, *t, reader, *watch, h.has_shape(), seen, chunk, more);
  }
  for (int64_t r = 0; status.ok() && r < dm.size(); ++r) {
    if (!seen[r]) {
      status = absl::InvalidArgumentError(
          absl::StrCat("the stream ended without rank ", r, "'s shard; every rank needs one"));
    }
  }
  if (!status.ok() && watch->expired()) status = watch->ExpiredError();
  if (!status.ok()) {
    tensors_->Release(*t);
    return status;
  }
  std::vector<int> replicate_dims;
  if (h.run_check()) {
    for (int m = 0; m < dm.ndim(); ++m) {
      if (spec.placements[m].is_replicate() && dm.size(m) > 1) replicate_dims.push_back(m);
    }
  }
  RETURN_IF_ERROR(Spread(*t, std::vector<int64_t>(dm.ndim(), 0), replicate_dims,
                         /*partition=*/false));
  return tensors_->Describe(*t);
}

absl::Status DTensorStreams::ToLocal(const grpc::ServerContext& context,
                                     const v1::ToLocalRequest& request,
                                     grpc::ServerWriter<v1::TensorData>* writer) {
  ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> t, tensors_->Usable(request.name()));
  const DTensorSpec& spec = t->spec;
  if (request.rank() < 0 || request.rank() >= spec.mesh.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", request.rank(), " is not in mesh '",
                                                   t->mesh->name, "' of ", spec.mesh.size(),
                                                   " ranks"));
  }
  ASSIGN_OR_RETURN(const DTensorSpec block, BlockAt(spec, request.rank()));
  v1::TensorData data;
  data.set_dtype(ToProto(spec.dtype));
  *data.mutable_shape() = ToProto(block.shape);
  const std::unique_ptr<IdleStreams::Watch> watch = idle_.Start(context, "ToLocal");
  absl::Status status = StreamOut(*tensors_, block, DTensorTable::WorkerName(t->name), context,
                                  *watch, std::move(data), writer);
  if (watch->expired()) return watch->ExpiredError();
  if (status.ok()) status = DTensorTable::AwaitWrite(*t, TransferDeadline(context));
  return status.ok() || absl::IsCancelled(status) ? status : ReadFailure(*t, status);
}

absl::StatusOr<DTensorStreams::Readable> DTensorStreams::ReadableLayout(
    const DTensorEntry& tensor) {
  Readable r{tensor.spec, DTensorTable::WorkerName(tensor.name), false};
  if (!HasPartial(tensor.spec)) return r;
  // Partial values are reduced by the workers first (all_reduce into a temporary), so the bytes
  // that leave them are the tensor's values.
  std::vector<Placement> placements = tensor.spec.placements;
  for (Placement& p : placements) {
    if (p.is_partial()) p = Placement::Replicate();
  }
  ASSIGN_OR_RETURN(const RedistributePlan plan, PlanRedistribute(tensor.spec, placements));
  r.worker_tensor = tensors_->TemporaryName();
  r.spec.placements = placements;
  r.temporary = true;
  v1::Command command;
  v1::RedistributeTensor* rd = command.mutable_redistribute();
  rd->set_mesh_id(tensor.mesh->id);
  rd->set_input(DTensorTable::WorkerName(tensor.name));
  rd->set_output(r.worker_tensor);
  *rd->mutable_spec() = ToProto(tensor.spec);
  *rd->mutable_plan() = ToProto(plan);
  // Ordered before the downloads that follow.
  tensors_->Post(*tensor.mesh, command, std::make_shared<TensorWrite>());
  return r;
}

void DTensorStreams::DropReadable(const DTensorEntry& tensor, const Readable& r) {
  if (!r.temporary) return;
  v1::Command command;
  command.mutable_delete_tensors()->add_names(r.worker_tensor);
  tensors_->Post(*tensor.mesh, command, std::make_shared<TensorWrite>());
}

absl::Status DTensorStreams::ReadFull(const DTensorEntry& tensor, absl::Time deadline,
                                      absl::FunctionRef<bool(std::string)> write) {
  ASSIGN_OR_RETURN(const Readable readable, ReadableLayout(tensor));
  // The downloads are closed when GatherStream returns, before the temporary goes.
  absl::Status status =
      GatherStream(tensors_->dispatcher(), readable.spec, readable.worker_tensor, deadline, write);
  DropReadable(tensor, readable);
  if (status.ok()) status = DTensorTable::AwaitWrite(tensor, deadline);
  return status.ok() || absl::IsCancelled(status) ? status : ReadFailure(tensor, status);
}

absl::Status DTensorStreams::FullTensor(const grpc::ServerContext& context,
                                        const v1::FullTensorRequest& request,
                                        grpc::ServerWriter<v1::TensorData>* writer) {
  ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> t, tensors_->Usable(request.name()));
  v1::TensorData data;
  data.set_dtype(ToProto(t->spec.dtype));
  *data.mutable_shape() = ToProto(t->spec.shape);
  const std::unique_ptr<IdleStreams::Watch> watch = idle_.Start(context, "FullTensor");
  absl::Status status = ReadFull(*t, TransferDeadline(context), [&](std::string window) {
    data.set_data(std::move(window));
    const bool sent = watch->Write(*writer, data);
    data.Clear();
    return sent;
  });
  return watch->expired() ? watch->ExpiredError() : status;
}

absl::Status DTensorStreams::MoveAcrossMeshes(const grpc::ServerContext& context,
                                              const DTensorEntry& src,
                                              std::shared_ptr<Mesh> dst_mesh,
                                              std::vector<Placement> placements,
                                              const std::string& output, const std::string& owner,
                                              v1::RedistributeReply* reply) {
  if (dst_mesh->mesh.device_type() != src.mesh->mesh.device_type()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", src.name, "' is on a ", src.mesh->mesh.device_type(),
                     " mesh and mesh '", dst_mesh->name, "' is ", dst_mesh->mesh.device_type()));
  }
  ASSIGN_OR_RETURN(const DTensorSpec dst, MakeDTensorSpec(dst_mesh->mesh, std::move(placements),
                                                          src.spec.shape, src.spec.dtype));
  reply->set_cross_mesh(true);
  ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> out, tensors_->Add(output, dst_mesh, dst, owner));
  absl::StatusOr<Readable> readable = ReadableLayout(src);
  if (!readable.ok()) {
    tensors_->Release(*out);
    return readable.status();
  }
  const absl::Time deadline = TransferDeadline(context);
  absl::Status status;
  {
    // Downloads are opened first, so on a worker in both meshes they are ordered before uploads.
    absl::StatusOr<std::unique_ptr<ShardGather>> gather = ShardGather::Open(
        tensors_->dispatcher(), readable->spec, readable->worker_tensor, deadline);
    const std::vector<int64_t> origin(dst_mesh->mesh.ndim(), 0);
    absl::StatusOr<std::unique_ptr<ShardScatter>> scatter =
        gather.ok() ? ShardScatter::Open(tensors_->dispatcher(), dst, BlockHolders(dst, origin),
                                         DTensorTable::WorkerName(out->name), deadline)
                    : absl::StatusOr<std::unique_ptr<ShardScatter>>(gather.status());
    status = scatter.status();
    if (status.ok()) {
      std::string window;
      while (status.ok() && (*gather)->Next(&window)) status = (*scatter)->Write(std::move(window));
      if (status.ok()) status = (*gather)->status();
      status = status.ok() ? (*scatter)->Finish() : status;
      if (status.ok()) reply->set_relayed_bytes((*scatter)->received_bytes());
    }
  }
  DropReadable(src, *readable);
  if (!status.ok()) {
    tensors_->Release(*out);
    return status;
  }
  RETURN_IF_ERROR(Spread(*out, std::vector<int64_t>(dst_mesh->mesh.ndim(), 0), ReplicaDims(dst),
                         /*partition=*/true));
  *reply->mutable_output() = tensors_->Describe(*out);
  return absl::OkStatus();
}

}  // namespace tessera
