// CoordinatorService's DTensor streams: distribute_tensor and from_local in, to_local and
// full_tensor out, and moves across meshes. Bytes pass through as bounded windows (ShardScatter,
// ShardGather); replicas are made by the workers' broadcasts, never by sending the bytes twice.

#include "absl/strings/str_cat.h"
#include "core/redistribute_planner.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "server/coordinator_service.h"
#include "server/shard_streams.h"

namespace tessera {
namespace {

constexpr absl::Duration kTransferTimeout = absl::Minutes(10);
constexpr size_t kChunkBytes = 1 << 20;

absl::Time TransferDeadline(const grpc::ServerContext& context) {
  return std::min(absl::FromChrono(context.deadline()), absl::Now() + kTransferTimeout);
}

// Mesh dims that are not Shard: the dims along which one uploaded copy is broadcast.
std::vector<int> ReplicaDims(const DTensorSpec& spec) {
  std::vector<int> dims;
  for (int m = 0; m < spec.mesh.ndim(); ++m) {
    if (!spec.placements[m].is_shard() && spec.mesh.size(m) > 1) dims.push_back(m);
  }
  return dims;
}

bool HasPartitionedPartial(const DTensorSpec& spec) {
  for (const Placement& p : spec.placements) {
    if (p.is_partial()) return true;
  }
  return false;
}

}  // namespace

absl::Status CoordinatorService::ReadFailure(const Tensor& tensor, absl::Status download) {
  // A read queued behind a write that then failed finds no shard; the write's error is the cause.
  if (tensor.write->done.WaitForNotificationWithTimeout(absl::Seconds(1)) &&
      !tensor.write->status.ok()) {
    return absl::Status(
        tensor.write->status.code(),
        absl::StrCat("tensor '", tensor.name, "' failed: ", tensor.write->status.message()));
  }
  return download;
}

void CoordinatorService::Spread(const Tensor& tensor, const std::vector<int64_t>& source,
                                const std::vector<int>& broadcast_dims, bool partition,
                                std::shared_ptr<Work> work) {
  if (broadcast_dims.empty() && !(partition && HasPartitionedPartial(tensor.spec))) {
    work->done.Notify();
    return;
  }
  v1::Command command;
  v1::SpreadTensor* s = command.mutable_spread_tensor();
  s->set_mesh_id(tensor.mesh->id);
  s->set_tensor(WorkerName(tensor.name));
  *s->mutable_spec() = ToProto(tensor.spec);
  for (int64_t c : source) s->add_source_coordinate(c);
  for (int m : broadcast_dims) s->add_broadcast_dims(m);
  s->set_partition_partials(partition);
  PostWork(*tensor.mesh, command, std::move(work));
}

grpc::Status CoordinatorService::DistributeTensor(grpc::ServerContext* context,
                                                  grpc::ServerReader<v1::DistributeChunk>* reader,
                                                  v1::TensorInfo* reply) {
  const std::string client = ClientId(*context);
  leases_.Touch(client);
  v1::DistributeChunk chunk;
  if (!reader->Read(&chunk)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "DistributeTensor stream had no chunks");
  }
  const v1::DistributeHeader& h = chunk.header();
  absl::StatusOr<std::shared_ptr<Mesh>> mesh = ReadyMesh(h.mesh());
  if (!mesh.ok()) return ToGrpcStatus(mesh.status());
  absl::StatusOr<DType> dtype = FromProto(h.dtype());
  if (!dtype.ok()) return ToGrpcStatus(dtype.status());
  absl::StatusOr<Shape> shape = FromProto(h.shape());
  if (!shape.ok()) return ToGrpcStatus(shape.status());
  absl::StatusOr<std::vector<Placement>> placements = FromProto(h.placements());
  if (!placements.ok()) return ToGrpcStatus(placements.status());
  absl::StatusOr<DTensorSpec> spec =
      MakeDTensorSpec((*mesh)->mesh, *std::move(placements), *std::move(shape), *dtype);
  if (!spec.ok()) return ToGrpcStatus(spec.status());
  if (h.src_data_rank() < 0 || h.src_data_rank() >= (*mesh)->mesh.size()) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("src_data_rank ", h.src_data_rank(), " is not a rank of mesh '", (*mesh)->name,
                     "' of ", (*mesh)->mesh.size(), " ranks"));
  }
  absl::StatusOr<std::shared_ptr<Tensor>> t = AddTensor(h.name(), *mesh, *spec, client);
  if (!t.ok()) return ToGrpcStatus(t.status());
  const std::vector<int64_t> source = (*mesh)->mesh.CoordinateOfIndex(h.src_data_rank());
  absl::StatusOr<std::unique_ptr<ShardScatter>> scatter =
      ShardScatter::Open(*dispatcher_, *spec, BlockHolders(*spec, source), WorkerName((*t)->name),
                         TransferDeadline(*context));
  absl::Status status = scatter.status();
  if (status.ok()) {
    do {
      status = (*scatter)->Write(std::move(*chunk.mutable_data()));
    } while (status.ok() && reader->Read(&chunk));
    status = status.ok() ? (*scatter)->Finish() : status;
  }
  if (!status.ok()) {
    // Nothing of the new tensor is kept; shards that did arrive are freed.
    Release(**t);
    return ToGrpcStatus(status);
  }
  Spread(**t, source, ReplicaDims(*spec), /*partition=*/true, (*t)->write);
  *reply = Describe(**t);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::FromLocal(grpc::ServerContext* context,
                                           grpc::ServerReader<v1::FromLocalChunk>* reader,
                                           v1::TensorInfo* reply) {
  const std::string client = ClientId(*context);
  leases_.Touch(client);
  v1::FromLocalChunk chunk;
  if (!reader->Read(&chunk)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "FromLocal stream had no chunks");
  }
  const v1::FromLocalHeader h = chunk.header();
  absl::StatusOr<std::shared_ptr<Mesh>> mesh = ReadyMesh(h.mesh());
  if (!mesh.ok()) return ToGrpcStatus(mesh.status());
  const DeviceMesh& dm = (*mesh)->mesh;
  absl::StatusOr<DType> dtype = FromProto(h.dtype());
  if (!dtype.ok()) return ToGrpcStatus(dtype.status());
  absl::StatusOr<std::vector<Placement>> placements = FromProto(h.placements());
  if (!placements.ok()) return ToGrpcStatus(placements.status());
  if (!chunk.begins_rank()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first FromLocal chunk must begin a rank's shard");
  }
  absl::StatusOr<Shape> first_local = FromProto(chunk.local_shape());
  if (!first_local.ok()) return ToGrpcStatus(first_local.status());
  // Without a global shape, infer it as DTensor does: every rank's shard is as large as this one.
  Shape global;
  if (h.has_shape()) {
    absl::StatusOr<Shape> s = FromProto(h.shape());
    if (!s.ok()) return ToGrpcStatus(s.status());
    global = *s;
  } else {
    global = *first_local;
    absl::StatusOr<std::vector<Placement>> normal =
        NormalizePlacements(dm, *placements, static_cast<int>(global.size()));
    if (!normal.ok()) return ToGrpcStatus(normal.status());
    for (int m = 0; m < dm.ndim(); ++m) {
      if ((*normal)[m].is_shard()) global[(*normal)[m].dim] *= dm.size(m);
    }
  }
  absl::StatusOr<DTensorSpec> spec = MakeDTensorSpec(dm, *std::move(placements), global, *dtype);
  if (!spec.ok()) return ToGrpcStatus(spec.status());
  absl::StatusOr<std::shared_ptr<Tensor>> t = AddTensor(h.name(), *mesh, *spec, client);
  if (!t.ok()) return ToGrpcStatus(t.status());

  std::vector<bool> seen(static_cast<size_t>(dm.size()), false);
  absl::Status status;
  bool more = true;
  while (status.ok() && more) {
    // One rank's section: a header chunk, then its bytes.
    const int64_t rank = chunk.rank();
    if (rank < 0 || rank >= dm.size()) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "rank ", rank, " is not in mesh '", (*mesh)->name, "' of ", dm.size(), " ranks"));
      break;
    }
    if (seen[rank]) {
      status = absl::InvalidArgumentError(absl::StrCat("rank ", rank, "'s shard was sent twice"));
      break;
    }
    seen[rank] = true;
    absl::StatusOr<Shape> local = FromProto(chunk.local_shape());
    const Shape want = LocalShapeAndOffsetAt(*spec, dm.CoordinateOfIndex(rank)).shape;
    if (!local.ok() || *local != want) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "rank ", rank, "'s local shape ", local.ok() ? ShapeToString(*local) : "(invalid)",
          " does not fit ", spec->ToString(), ", which gives it ", ShapeToString(want),
          h.has_shape() ? "" : "; pass the global shape for uneven shards"));
      break;
    }
    // The section is the whole of this rank's block: upload it as a tensor of its own.
    absl::StatusOr<DeviceMesh> single =
        DeviceMesh::Create(dm.device_type(), {1}, {}, {dm.ranks()[rank]});
    if (!single.ok()) {
      status = single.status();
      break;
    }
    const DTensorSpec block{*single, {Placement::Replicate()}, want, *dtype};
    absl::StatusOr<std::unique_ptr<ShardScatter>> up = ShardScatter::Open(
        *dispatcher_, block, {0}, WorkerName((*t)->name), TransferDeadline(*context));
    if (!up.ok()) {
      status = up.status();
      break;
    }
    more = false;
    v1::FromLocalChunk next;
    status = (*up)->Write(std::move(*chunk.mutable_data()));
    while (status.ok() && reader->Read(&next)) {
      if (next.begins_rank()) {
        more = true;
        break;
      }
      status = (*up)->Write(std::move(*next.mutable_data()));
    }
    if (!status.ok()) {
      status =
          absl::Status(status.code(), absl::StrCat("rank ", rank, "'s shard: ", status.message()));
      break;
    }
    if (absl::Status s = (*up)->Finish(); !s.ok()) {
      status = absl::Status(s.code(), absl::StrCat("rank ", rank, "'s shard: ", s.message()));
      break;
    }
    chunk = std::move(next);
  }
  if (status.ok()) {
    for (int64_t r = 0; r < dm.size(); ++r) {
      if (!seen[r]) {
        status = absl::InvalidArgumentError(
            absl::StrCat("the stream ended without rank ", r, "'s shard; every rank needs one"));
        break;
      }
    }
  }
  if (!status.ok()) {
    Release(**t);
    return ToGrpcStatus(status);
  }
  std::vector<int> replicate_dims;
  if (h.run_check()) {
    for (int m = 0; m < dm.ndim(); ++m) {
      if (spec->placements[m].is_replicate() && dm.size(m) > 1) replicate_dims.push_back(m);
    }
  }
  Spread(**t, std::vector<int64_t>(dm.ndim(), 0), replicate_dims, /*partition=*/false, (*t)->write);
  *reply = Describe(**t);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ToLocal(grpc::ServerContext* context,
                                         const v1::ToLocalRequest* request,
                                         grpc::ServerWriter<v1::TensorData>* writer) {
  leases_.Touch(ClientId(*context));
  absl::StatusOr<std::shared_ptr<Tensor>> t = UsableTensor(request->name());
  if (!t.ok()) return ToGrpcStatus(t.status());
  const DTensorSpec& spec = (*t)->spec;
  if (request->rank() < 0 || request->rank() >= spec.mesh.size()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("rank ", request->rank(), " is not in mesh '",
                                     (*t)->mesh->name, "' of ", spec.mesh.size(), " ranks"));
  }
  const Shape local =
      LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(request->rank())).shape;
  absl::StatusOr<DeviceMesh> single =
      DeviceMesh::Create(spec.mesh.device_type(), {1}, {}, {spec.mesh.ranks()[request->rank()]});
  if (!single.ok()) return ToGrpcStatus(single.status());
  const DTensorSpec block{*single, {Placement::Replicate()}, local, spec.dtype};
  absl::StatusOr<std::unique_ptr<ShardGather>> gather =
      ShardGather::Open(*dispatcher_, block, WorkerName((*t)->name), TransferDeadline(*context));
  if (!gather.ok()) return ToGrpcStatus(gather.status());
  v1::TensorData data;
  data.set_dtype(ToProto(spec.dtype));
  *data.mutable_shape() = ToProto(local);
  std::string window;
  bool any = false;
  while ((*gather)->Next(&window)) {
    data.set_data(std::move(window));
    if (!writer->Write(data)) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    data.Clear();
    any = true;
  }
  if (!(*gather)->status().ok()) return ToGrpcStatus(ReadFailure(**t, (*gather)->status()));
  if (!any && !writer->Write(data)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  }
  return grpc::Status::OK;
}

absl::StatusOr<CoordinatorService::Readable> CoordinatorService::ReadableLayout(
    const Tensor& tensor) {
  Readable r{tensor.spec, WorkerName(tensor.name), false};
  if (!HasPartial(tensor.spec)) return r;
  // Partial values are reduced by the workers first (all_reduce into a temporary), so the bytes
  // that leave them are the tensor's values.
  std::vector<Placement> placements = tensor.spec.placements;
  for (Placement& p : placements) {
    if (p.is_partial()) p = Placement::Replicate();
  }
  absl::StatusOr<RedistributePlan> plan = PlanRedistribute(tensor.spec, placements);
  if (!plan.ok()) return plan.status();
  {
    absl::MutexLock lock(&mu_);
    r.worker_tensor = absl::StrCat("dt/.read/", next_tensor_id_++);
  }
  r.spec.placements = placements;
  r.temporary = true;
  v1::Command command;
  v1::RedistributeTensor* rd = command.mutable_redistribute();
  rd->set_mesh_id(tensor.mesh->id);
  rd->set_input(WorkerName(tensor.name));
  rd->set_output(r.worker_tensor);
  *rd->mutable_spec() = ToProto(tensor.spec);
  *rd->mutable_plan() = ToProto(*plan);
  auto work = std::make_shared<Work>();
  PostWork(*tensor.mesh, command, work);  // ordered before the downloads that follow
  return r;
}

void CoordinatorService::DropReadable(const Tensor& tensor, const Readable& r) {
  if (!r.temporary) return;
  v1::Command command;
  command.mutable_delete_tensors()->add_names(r.worker_tensor);
  PostWork(*tensor.mesh, command, std::make_shared<Work>());
}

grpc::Status CoordinatorService::FullTensor(grpc::ServerContext* context,
                                            const v1::FullTensorRequest* request,
                                            grpc::ServerWriter<v1::TensorData>* writer) {
  leases_.Touch(ClientId(*context));
  absl::StatusOr<std::shared_ptr<Tensor>> t = UsableTensor(request->name());
  if (!t.ok()) return ToGrpcStatus(t.status());
  absl::StatusOr<Readable> readable = ReadableLayout(**t);
  if (!readable.ok()) return ToGrpcStatus(readable.status());
  absl::StatusOr<std::unique_ptr<ShardGather>> gather = ShardGather::Open(
      *dispatcher_, readable->spec, readable->worker_tensor, TransferDeadline(*context));
  grpc::Status status = ToGrpcStatus(gather.status());
  if (gather.ok()) {
    v1::TensorData data;
    data.set_dtype(ToProto((*t)->spec.dtype));
    *data.mutable_shape() = ToProto((*t)->spec.shape);
    std::string window;
    bool any = false;
    while (status.ok() && (*gather)->Next(&window)) {
      data.set_data(std::move(window));
      if (!writer->Write(data))
        status = grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
      data.Clear();
      any = true;
    }
    if (status.ok() && !(*gather)->status().ok()) {
      status = ToGrpcStatus(ReadFailure(**t, (*gather)->status()));
    }
    if (status.ok() && !any && !writer->Write(data)) {
      status = grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    }
  }
  gather = absl::CancelledError();  // closes the downloads before the temporary goes
  DropReadable(**t, *readable);
  return status;
}

grpc::Status CoordinatorService::MoveAcrossMeshes(grpc::ServerContext* context, const Tensor& src,
                                                  std::shared_ptr<Mesh> dst_mesh,
                                                  std::vector<Placement> placements,
                                                  const std::string& output,
                                                  const std::string& owner,
                                                  v1::RedistributeReply* reply) {
  if (dst_mesh->mesh.device_type() != src.mesh->mesh.device_type()) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("tensor '", src.name, "' is on a ", src.mesh->mesh.device_type(),
                     " mesh and mesh '", dst_mesh->name, "' is ", dst_mesh->mesh.device_type()));
  }
  absl::StatusOr<DTensorSpec> dst =
      MakeDTensorSpec(dst_mesh->mesh, std::move(placements), src.spec.shape, src.spec.dtype);
  if (!dst.ok()) return ToGrpcStatus(dst.status());
  reply->set_cross_mesh(true);
  absl::StatusOr<std::shared_ptr<Tensor>> out = AddTensor(output, dst_mesh, *dst, owner);
  if (!out.ok()) return ToGrpcStatus(out.status());
  absl::StatusOr<Readable> readable = ReadableLayout(src);
  if (!readable.ok()) {
    Release(**out);
    return ToGrpcStatus(readable.status());
  }
  const absl::Time deadline = TransferDeadline(*context);
  absl::Status status;
  {
    // Downloads are opened first, so on a worker in both meshes they are ordered before uploads.
    absl::StatusOr<std::unique_ptr<ShardGather>> gather =
        ShardGather::Open(*dispatcher_, readable->spec, readable->worker_tensor, deadline);
    const std::vector<int64_t> origin(dst_mesh->mesh.ndim(), 0);
    absl::StatusOr<std::unique_ptr<ShardScatter>> scatter =
        gather.ok() ? ShardScatter::Open(*dispatcher_, *dst, BlockHolders(*dst, origin),
                                         WorkerName((*out)->name), deadline)
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
    Release(**out);
    return ToGrpcStatus(status);
  }
  Spread(**out, std::vector<int64_t>(dst_mesh->mesh.ndim(), 0), ReplicaDims(*dst),
         /*partition=*/true, (*out)->write);
  *reply->mutable_output() = Describe(**out);
  return grpc::Status::OK;
}

}  // namespace tessera
