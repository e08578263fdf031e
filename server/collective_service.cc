#include "server/collective_service.h"

#include <algorithm>
#include <deque>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/names.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "server/transfers/shard_streams.h"
#include "transfer/tensor_stream.h"

namespace tessera {
namespace {

bool IsReducing(v1::CollectiveOp op) {
  return op == v1::ALL_REDUCE_OP || op == v1::REDUCE || op == v1::REDUCE_SCATTER_OP;
}

// The mesh dim a request names by index or name; -1 for none (the whole mesh).
absl::StatusOr<int> MeshDimOf(const Mesh& mesh, const std::string& dim) {
  if (dim.empty()) return -1;
  int index = -1;
  if (!absl::SimpleAtoi(dim, &index)) {
    absl::StatusOr<int> named = mesh.mesh.DimIndex(dim);
    if (!named.ok()) return absl::InvalidArgumentError(named.status().message());
    return *named;
  }
  if (index < 0 || index >= mesh.mesh.ndim()) {
    return absl::InvalidArgumentError(absl::StrCat("mesh dim ", index,
                                                   " is out of range for mesh '", mesh.name,
                                                   "' of ", mesh.mesh.ndim(), " dims"));
  }
  return index;
}

// What each rank reported writing under a collective's output, by mesh position.
std::vector<LocalTensorTable::Reported> ReportedLayouts(
    const std::vector<v1::CommandReply>& replies) {
  std::vector<LocalTensorTable::Reported> reported(replies.size());
  for (size_t r = 0; r < replies.size(); ++r) {
    if (replies[r].tensors().empty()) continue;
    const v1::LocalTensorInfo& t = replies[r].tensors(0);
    absl::StatusOr<DType> dtype = FromProto(t.dtype());
    absl::StatusOr<Shape> shape = FromProto(t.shape());
    reported[r].wrote = true;
    if (dtype.ok() && shape.ok()) reported[r].layout = LocalLayout{*dtype, *std::move(shape)};
  }
  return reported;
}

}  // namespace

std::string CollectiveService::WorkerTensorName(const Mesh& mesh, const std::string& tensor) {
  return absl::StrCat(mesh.id, "/", tensor);
}

absl::StatusOr<CollectiveService::Checked> CollectiveService::Check(
    const Mesh& mesh, const v1::CollectiveRequest& request) {
  Checked checked;
  ASSIGN_OR_RETURN(checked.mesh_dim, MeshDimOf(mesh, request.mesh_dim()));
  const int64_t group_size =
      checked.mesh_dim < 0 ? mesh.mesh.size() : mesh.mesh.size(checked.mesh_dim);
  if (request.op() == v1::COLLECTIVE_OP_UNSPECIFIED || !v1::CollectiveOp_IsValid(request.op())) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective op ", request.op(), " is not a collective"));
  }
  if (IsReducing(request.op()) && request.reduce_op() != v1::REDUCE_OP_UNSPECIFIED) {
    RETURN_IF_ERROR(FromProto(request.reduce_op()).status());
  }
  if (request.root() < 0 || request.root() >= group_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", request.root(), " is not a rank of a group of ", group_size));
  }
  if (request.op() == v1::SEND_RECV &&
      (request.peer() < 0 || request.peer() >= group_size || request.peer() == request.root())) {
    return absl::InvalidArgumentError(absl::StrCat("peer ", request.peer(),
                                                   " must be a rank of a group of ", group_size,
                                                   " other than the sender ", request.root()));
  }
  if (request.op() == v1::BARRIER) return checked;
  checked.output = request.output().empty() ? request.input() : request.output();
  if (checked.output.empty()) {
    return absl::InvalidArgumentError("a collective needs an output tensor name");
  }
  RETURN_IF_ERROR(CheckName(NameKind::kTensor, checked.output));
  return checked;
}

absl::StatusOr<LocalTensorTable::Reservation> CollectiveService::ReserveOutput(
    Mesh& mesh, const v1::CollectiveRequest& request, const Checked& checked) {
  if (request.op() == v1::BARRIER) return LocalTensorTable::Reservation{};
  ASSIGN_OR_RETURN(RankLayouts input, mesh.locals.OnEveryRank(request.input()));
  // Checked here rather than found out by the workers: ranks whose byte counts disagree would
  // break the collective (and its communicator) instead of failing it.
  absl::StatusOr<RankLayouts> outputs = CollectiveOutputs(
      request.op(), request.input(), input, PositionGroups(mesh.mesh, checked.mesh_dim),
      request.root(), request.peer());
  if (!outputs.ok()) {
    return WithContext(absl::StrCat("mesh '", mesh.name, "'"), outputs.status());
  }
  return mesh.locals.Reserve(checked.output, *std::move(outputs));
}

v1::Command CollectiveService::CommandFor(const Mesh& mesh, const v1::CollectiveRequest& request,
                                          const Checked& checked) {
  v1::Command command;
  v1::RunCollective* c = command.mutable_collective();
  c->set_mesh_id(mesh.id);
  c->set_mesh_dim(checked.mesh_dim);
  c->set_op(request.op());
  c->set_input(WorkerTensorName(mesh, request.input()));
  c->set_output(WorkerTensorName(mesh, checked.output));
  c->set_reduce_op(request.reduce_op() == v1::REDUCE_OP_UNSPECIFIED ? v1::SUM
                                                                    : request.reduce_op());
  c->set_root(request.root());
  c->set_peer(request.peer());
  return command;
}

absl::Status CollectiveService::Finish(const std::shared_ptr<Mesh>& mesh,
                                       const v1::CollectiveRequest& request,
                                       const LocalTensorTable::Reservation& reservation,
                                       absl::Status status,
                                       const std::vector<v1::CommandReply>& replies,
                                       v1::CollectiveReply* reply) {
  if (request.op() == v1::BARRIER) return status;
  const std::string output = request.output().empty() ? request.input() : request.output();
  // Only in-place all_reduce and broadcast work in the stored tensor itself; every other
  // collective writes a new buffer, so a failure leaves an in-place input as it was.
  const bool kept_input = output == request.input() && request.op() != v1::ALL_REDUCE_OP &&
                          request.op() != v1::BROADCAST;
  status = mesh->locals.Settle(
      output, kept_input, reservation, std::move(status), ReportedLayouts(replies), [&] {
        absl::StatusOr<std::vector<WorkerHandle>> workers = meshes_->Workers(*mesh);
        if (!workers.ok()) return;
        v1::Command free;
        free.mutable_delete_tensors()->add_names(WorkerTensorName(*mesh, output));
        dispatcher_->Post(*workers, free, Mesh::kRpcSlack,
                          [](absl::Status, std::vector<v1::CommandReply>) {});
      });
  if (!status.ok()) return status;
  const std::string prefix = WorkerTensorName(*mesh, "");
  for (const v1::CommandReply& r : replies) {
    for (const v1::LocalTensorInfo& t : r.tensors()) {
      v1::LocalTensorInfo& out = *reply->add_outputs();
      out = t;
      out.set_name(t.name().substr(std::min(prefix.size(), t.name().size())));
    }
  }
  return status;
}

int64_t CollectiveService::Keep(const Mesh& mesh, std::shared_ptr<Work> work) {
  absl::MutexLock lock(&works_mu_);
  MeshWorks& kept = works_[mesh.id];
  const int64_t id = kept.next++;
  kept.works.emplace(id, std::move(work));
  // A client that never waits must not grow the table without bound: forget the oldest finished
  // works past the limit (a later wait on one is NOT_FOUND).
  for (auto it = kept.works.begin();
       kept.works.size() > kMaxUnwaitedWorks && it != kept.works.end();) {
    it = it->second->done.HasBeenNotified() ? kept.works.erase(it) : std::next(it);
  }
  return id;
}

absl::StatusOr<std::shared_ptr<CollectiveService::Work>> CollectiveService::Start(
    const v1::CollectiveRequest& request, bool send_here, int64_t* work_id) {
  ASSIGN_OR_RETURN(std::shared_ptr<Mesh> mesh, meshes_->Find(request.mesh()));
  ASSIGN_OR_RETURN(std::vector<WorkerHandle> workers, meshes_->ReadyWorkers(*mesh));
  ASSIGN_OR_RETURN(const Checked checked, Check(*mesh, request));
  absl::MutexLock submit(&mesh->submit_mu);
  ASSIGN_OR_RETURN(LocalTensorTable::Reservation reservation,
                   ReserveOutput(*mesh, request, checked));
  auto work = std::make_shared<Work>();
  if (work_id != nullptr) *work_id = Keep(*mesh, work);
  dispatcher_->Post(
      workers, CommandFor(*mesh, request, checked), mesh->command_timeout(),
      [this, mesh, work, request, reservation = std::move(reservation)](
          absl::Status status, std::vector<v1::CommandReply> replies) {
        work->status = Finish(mesh, request, reservation, std::move(status), replies, &work->reply);
        work->done.Notify();
      },
      send_here);
  return work;
}

grpc::Status CollectiveService::RunCollective(grpc::ServerContext*,
                                              const v1::CollectiveRequest* request,
                                              v1::CollectiveReply* reply) {
  return ToGrpcStatus(RunCollectiveImpl(*request, *reply));
}

absl::Status CollectiveService::RunCollectiveImpl(const v1::CollectiveRequest& request,
                                                  v1::CollectiveReply& reply) {
  // A synchronous call waits anyway and saves the hand-off to the sender thread; an async one
  // answers its client first.
  int64_t work_id = 0;
  ASSIGN_OR_RETURN(
      const std::shared_ptr<Work> work,
      Start(request, /*send_here=*/!request.async_op(), request.async_op() ? &work_id : nullptr));
  if (request.async_op()) {
    reply.set_work(work_id);
    return absl::OkStatus();
  }
  work->done.WaitForNotification();
  RETURN_IF_ERROR(work->status);
  reply = std::move(work->reply);
  return absl::OkStatus();
}

grpc::Status CollectiveService::CollectiveStream(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::CollectiveResult, v1::CollectiveRequest>* stream) {
  return ToGrpcStatus(CollectiveStreamImpl(*context, stream));
}

absl::Status CollectiveService::CollectiveStreamImpl(
    const grpc::ServerContext& context,
    grpc::ServerReaderWriter<v1::CollectiveResult, v1::CollectiveRequest>* stream) {
  ASSIGN_OR_RETURN(const StreamLimits::Ticket admitted,
                   AdmitStream(limits_, context, "CollectiveStream"));
  // This thread reads and starts each collective as it arrives; `writer` reports them in order as
  // they finish, so a slow collective never holds up the ones behind it from starting.
  absl::Mutex mu;
  std::deque<std::shared_ptr<Work>> started;  // guarded by mu
  bool reading = true;                        // guarded by mu
  auto ready = [&] { return !started.empty() || !reading; };
  auto room = [&] { return started.size() < kMaxUnreportedInStream; };
  std::thread writer([&] {
    int64_t position = 0;
    bool open = true;
    while (true) {
      std::shared_ptr<Work> work;
      {
        absl::MutexLock lock(&mu);
        mu.Await(absl::Condition(&ready));
        if (started.empty()) return;
        work = started.front();
        started.pop_front();
      }
      work->done.WaitForNotification();
      v1::CollectiveResult result;
      result.set_work(++position);
      result.set_code(static_cast<int>(work->status.code()));
      result.set_message(std::string(work->status.message()));
      if (work->status.ok()) *result.mutable_reply() = std::move(work->reply);
      // A client gone away still has its collectives run to the end; they are just not reported.
      if (open) open = stream->Write(result);
    }
  });
  v1::CollectiveRequest request;
  const std::unique_ptr<IdleStreams::Watch> watch =
      session_idle_.Start(context, "CollectiveStream");
  while (!context.IsCancelled() && watch->Read(*stream, &request)) {
    absl::StatusOr<std::shared_ptr<Work>> work =
        Start(request, /*send_here=*/false, /*work_id=*/nullptr);
    if (!work.ok()) {
      // Refused up front: reported in its place like any other outcome.
      auto refused = std::make_shared<Work>();
      refused->status = work.status();
      refused->done.Notify();
      work = refused;
    }
    absl::MutexLock lock(&mu);
    started.push_back(*std::move(work));
    // A client that sends without reading stops being read (flow control holds it back) rather
    // than growing this queue.
    mu.Await(absl::Condition(&room));
  }
  {
    absl::MutexLock lock(&mu);
    reading = false;
  }
  writer.join();
  return watch->expired() ? watch->ExpiredError() : absl::OkStatus();
}

grpc::Status CollectiveService::WaitCollectives(grpc::ServerContext* context,
                                                const v1::WaitCollectivesRequest* request,
                                                v1::WaitCollectivesReply* reply) {
  return ToGrpcStatus(WaitCollectivesImpl(*context, *request, *reply));
}

absl::Status CollectiveService::WaitCollectivesImpl(const grpc::ServerContext& context,
                                                    const v1::WaitCollectivesRequest& request,
                                                    v1::WaitCollectivesReply& reply) {
  // A broken mesh's works still report how they ended.
  ASSIGN_OR_RETURN(const std::shared_ptr<Mesh> found, meshes_->Find(request.mesh()));
  const Mesh& mesh = *found;
  std::vector<std::shared_ptr<Work>> works;
  {
    absl::MutexLock lock(&works_mu_);
    MeshWorks& kept = works_[mesh.id];
    for (int64_t id : request.works()) {
      auto it = kept.works.find(id);
      if (it == kept.works.end()) {
        return absl::NotFoundError(
            absl::StrCat("mesh '", mesh.name, "' has no collective work ", id,
                         " to wait on (never started with async_op, already waited on, or "
                         "forgotten after ",
                         kMaxUnwaitedWorks, " newer ones)"));
      }
      if (it->second->claimed) {
        return absl::FailedPreconditionError(absl::StrCat("collective work ", id, " of mesh '",
                                                          mesh.name,
                                                          "' is being waited on by another call"));
      }
      works.push_back(it->second);
    }
    for (const auto& w : works) w->claimed = true;
  }
  const absl::Time deadline = absl::FromChrono(context.deadline());
  for (size_t i = 0; i < works.size(); ++i) {
    if (!works[i]->done.WaitForNotificationWithDeadline(deadline)) {
      absl::MutexLock lock(&works_mu_);
      for (const auto& w : works) w->claimed = false;
      return absl::DeadlineExceededError(
          absl::StrCat("collective work ", request.works(static_cast<int>(i)), " of mesh '",
                       mesh.name, "' is still running; nothing was forgotten"));
    }
  }
  absl::MutexLock lock(&works_mu_);
  MeshWorks& kept = works_[mesh.id];
  for (size_t i = 0; i < works.size(); ++i) {
    const int64_t id = request.works(static_cast<int>(i));
    v1::CollectiveResult* result = reply.add_results();
    result->set_work(id);
    result->set_code(static_cast<int>(works[i]->status.code()));
    result->set_message(std::string(works[i]->status.message()));
    if (works[i]->status.ok()) *result->mutable_reply() = works[i]->reply;
    kept.works.erase(id);
  }
  return absl::OkStatus();
}

grpc::Status CollectiveService::DeleteTensor(grpc::ServerContext*,
                                             const v1::DeleteTensorRequest* request,
                                             v1::DeleteTensorReply*) {
  return ToGrpcStatus(DeleteTensorImpl(*request));
}

absl::Status CollectiveService::DeleteTensorImpl(const v1::DeleteTensorRequest& request) {
  ASSIGN_OR_RETURN(const std::shared_ptr<Mesh> found, meshes_->Find(request.mesh()));
  Mesh& mesh = *found;
  ASSIGN_OR_RETURN(const std::vector<WorkerHandle> workers, meshes_->Workers(mesh));
  v1::Command command;
  command.mutable_delete_tensors()->add_names(WorkerTensorName(mesh, request.tensor()));
  absl::Notification done;
  absl::Status status;
  {
    // Accepted like a collective: the workers delete it after every collective accepted before
    // and before any accepted after; collectives still writing it no longer settle its entry.
    absl::MutexLock submit(&mesh.submit_mu);
    RETURN_IF_ERROR(mesh.locals.Erase(request.tensor()));
    dispatcher_->Post(
        workers, command, Mesh::kRpcSlack,
        [&](absl::Status s, std::vector<v1::CommandReply>) {
          status = std::move(s);
          done.Notify();
        },
        /*send_here=*/true);
  }
  done.WaitForNotification();
  return status;
}

absl::StatusOr<DTensorSpec> CollectiveService::RankBlock(const Mesh& mesh, int64_t rank,
                                                         const LocalLayout& layout) {
  if (rank < 0 || rank >= mesh.mesh.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not in mesh '", mesh.name,
                                                   "' of ", mesh.mesh.size(), " ranks"));
  }
  ASSIGN_OR_RETURN(DeviceMesh single,
                   DeviceMesh::Create(mesh.mesh.device_type(), {1}, {}, {mesh.mesh.ranks()[rank]}));
  return DTensorSpec{std::move(single), {Placement::Replicate()}, layout.shape, layout.dtype};
}

grpc::Status CollectiveService::PutLocal(grpc::ServerContext* context,
                                         grpc::ServerReader<v1::PutLocalChunk>* reader,
                                         v1::PutLocalReply* reply) {
  return ToGrpcStatus(PutLocalImpl(*context, reader, *reply));
}

absl::Status CollectiveService::PutLocalImpl(const grpc::ServerContext& context,
                                             grpc::ServerReader<v1::PutLocalChunk>* reader,
                                             v1::PutLocalReply& reply) {
  ASSIGN_OR_RETURN(const StreamLimits::Ticket admitted, AdmitStream(limits_, context, "PutLocal"));
  const std::unique_ptr<IdleStreams::Watch> watch = idle_.Start(context, "PutLocal");
  v1::PutLocalChunk chunk;
  if (!watch->Read(*reader, &chunk)) {
    if (watch->expired()) return watch->ExpiredError();
    return absl::InvalidArgumentError("PutLocal stream had no chunks");
  }
  ASSIGN_OR_RETURN(const std::shared_ptr<Mesh> mesh, meshes_->Reachable(chunk.mesh()));
  RETURN_IF_ERROR(CheckName(NameKind::kTensor, chunk.tensor()));
  ASSIGN_OR_RETURN(const DType dtype, FromProto(chunk.dtype()));
  ASSIGN_OR_RETURN(Shape shape, FromProto(chunk.shape()));
  RETURN_IF_ERROR(ValidateTensorShape(dtype, shape));
  LocalLayout layout{dtype, std::move(shape)};
  ASSIGN_OR_RETURN(const DTensorSpec block, RankBlock(*mesh, chunk.rank(), layout));
  const std::string name = chunk.tensor();
  const int64_t rank = chunk.rank();
  // Held against the worker's budget before a byte is sent; given back if the upload fails.
  RETURN_IF_ERROR(mesh->locals.ReserveUpload(name, rank, layout));
  absl::StatusOr<uint64_t> bytes =
      ScatterStream(*dispatcher_, block, {0}, WorkerTensorName(*mesh, name),
                    TransferDeadline(context), chunk.data(), [&](std::string* data) {
                      if (!watch->Read(*reader, &chunk)) return false;
                      *data = std::move(*chunk.mutable_data());
                      return true;
                    });
  if (!bytes.ok()) {
    mesh->locals.CancelUpload(name, rank);
    return watch->expired() ? watch->ExpiredError() : bytes.status();
  }
  reply.set_bytes(static_cast<int64_t>(*bytes));
  mesh->locals.RecordUpload(name, rank, std::move(layout));
  return absl::OkStatus();
}

grpc::Status CollectiveService::GetLocal(grpc::ServerContext* context,
                                         const v1::GetLocalRequest* request,
                                         grpc::ServerWriter<v1::TensorChunk>* writer) {
  return ToGrpcStatus(GetLocalImpl(*context, *request, writer));
}

absl::Status CollectiveService::GetLocalImpl(const grpc::ServerContext& context,
                                             const v1::GetLocalRequest& request,
                                             grpc::ServerWriter<v1::TensorChunk>* writer) {
  ASSIGN_OR_RETURN(const StreamLimits::Ticket admitted, AdmitStream(limits_, context, "GetLocal"));
  const std::unique_ptr<IdleStreams::Watch> watch = idle_.Start(context, "GetLocal");
  ASSIGN_OR_RETURN(const std::shared_ptr<Mesh> mesh, meshes_->Reachable(request.mesh()));
  const Mesh& m = *mesh;
  if (request.rank() < 0 || request.rank() >= m.mesh.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", request.rank(), " is not in mesh '",
                                                   m.name, "' of ", m.mesh.size(), " ranks"));
  }
  const std::optional<LocalLayout> layout = m.locals.LayoutOn(request.tensor(), request.rank());
  if (!layout.has_value()) {
    return absl::NotFoundError(absl::StrCat("mesh '", m.name, "' has no tensor '", request.tensor(),
                                            "' on rank ", request.rank()));
  }
  ASSIGN_OR_RETURN(const DTensorSpec block, RankBlock(m, request.rank(), *layout));
  v1::TensorChunk chunk;
  chunk.set_tensor(request.tensor());
  chunk.set_dtype(ToProto(layout->dtype));
  *chunk.mutable_shape() = ToProto(layout->shape);
  return GatherStream(*dispatcher_, block, WorkerTensorName(m, request.tensor()),
                      TransferDeadline(context), [&](std::string data) {
                        chunk.set_data(std::move(data));
                        const bool sent = watch->Write(*writer, chunk);
                        chunk.Clear();
                        return sent;
                      });
}

std::vector<std::string> CollectiveService::ForgetMesh(const Mesh& mesh) {
  {
    absl::MutexLock lock(&works_mu_);
    works_.erase(mesh.id);
  }
  std::vector<std::string> names = mesh.locals.Names();
  for (std::string& name : names) name = WorkerTensorName(mesh, name);
  return names;
}

}  // namespace tessera
