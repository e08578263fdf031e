#include "server/coordinator_service.h"

#include <algorithm>
#include <deque>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"

namespace tessera {
namespace {

constexpr absl::Duration kDefaultCollectiveTimeout = absl::Seconds(30);
// Set-up and transfers get this much beyond the mesh's collective timeout.
constexpr absl::Duration kRpcSlack = absl::Seconds(10);

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

bool IsReducing(v1::CollectiveOp op) {
  return op == v1::ALL_REDUCE_OP || op == v1::REDUCE || op == v1::REDUCE_SCATTER_OP;
}

}  // namespace

CoordinatorService::CoordinatorService(Dispatcher* dispatcher, RendezvousStore* store,
                                       absl::Duration client_grace)
    : dispatcher_(dispatcher), store_(store), leases_(client_grace) {
  reaper_ = std::thread([this] {
    const absl::Duration period =
        std::clamp(leases_.grace() / 4, absl::Milliseconds(50), absl::Seconds(5));
    while (!stopping_.WaitForNotificationWithTimeout(period)) ReclaimExpired();
  });
}

CoordinatorService::~CoordinatorService() {
  stopping_.Notify();
  reaper_.join();
}

std::string CoordinatorService::WorkerTensorName(const Mesh& mesh, const std::string& tensor) {
  return absl::StrCat(mesh.id, "/", tensor);
}

absl::StatusOr<std::vector<WorkerHandle>> CoordinatorService::MeshWorkers(const Mesh& mesh) const {
  std::vector<WorkerHandle> workers;
  workers.reserve(mesh.mesh.ranks().size());
  for (size_t i = 0; i < mesh.mesh.ranks().size(); ++i) {
    const int64_t id = mesh.mesh.ranks()[i];
    absl::StatusOr<WorkerHandle> w = dispatcher_->registry().Get(id);
    if (!w.ok()) {
      return absl::UnavailableError(
          absl::StrCat("mesh '", mesh.name, "' is broken: ", w.status().message()));
    }
    if (w->incarnation != mesh.incarnations[i]) {
      return absl::UnavailableError(
          absl::StrCat("mesh '", mesh.name, "' is broken: worker ", id, " at ", w->address,
                       " restarted since the mesh was created; delete and create the mesh again"));
    }
    workers.push_back(*std::move(w));
  }
  return workers;
}

absl::Status CoordinatorService::MeshHealth(const Mesh& mesh) const {
  return MeshWorkers(mesh).status();
}

absl::StatusOr<std::shared_ptr<CoordinatorService::Mesh>> CoordinatorService::FindMesh(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = meshes_.find(name);
  if (it == meshes_.end()) {
    return absl::NotFoundError(absl::StrCat("no mesh named '", name, "'"));
  }
  return it->second;
}

absl::StatusOr<std::shared_ptr<CoordinatorService::Mesh>> CoordinatorService::ReadyMesh(
    const std::string& name) const {
  absl::StatusOr<std::shared_ptr<Mesh>> mesh = FindMesh(name);
  if (!mesh.ok()) return mesh.status();
  if (absl::Status s = MeshHealth(**mesh); !s.ok()) return s;
  return mesh;
}

v1::MeshInfo CoordinatorService::Describe(Mesh& mesh) const {
  v1::MeshInfo info;
  info.set_name(mesh.name);
  *info.mutable_mesh() = ToProto(mesh.mesh);
  const absl::Status health = MeshHealth(mesh);
  info.set_ready(health.ok());
  info.set_broken_reason(std::string(health.message()));
  info.set_timeout_ms(absl::ToInt64Milliseconds(mesh.timeout));
  absl::MutexLock lock(&mesh.mu);
  for (const auto& entry : mesh.tensors) info.add_tensors(entry.first);
  return info;
}

grpc::Status CoordinatorService::ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                                             v1::ListWorkersReply* reply) {
  for (v1::WorkerInfo& w : dispatcher_->registry().List()) *reply->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CreateMesh(grpc::ServerContext*,
                                            const v1::CreateMeshRequest* request,
                                            v1::MeshInfo* reply) {
  if (request->name().empty()) return Invalid("a mesh needs a name");
  Shape shape(request->shape().begin(), request->shape().end());
  std::vector<std::string> names(request->dim_names().begin(), request->dim_names().end());
  // Validate device type, shape and names before looking for workers.
  absl::StatusOr<DeviceMesh> probe = DeviceMesh::Create(request->device_type(), shape, names);
  if (!probe.ok()) return ToGrpcStatus(probe.status());
  const int64_t needed = probe->size();

  WorkerRegistry& registry = dispatcher_->registry();
  std::vector<int64_t> ids(request->worker_ids().begin(), request->worker_ids().end());
  if (ids.empty()) {
    std::vector<int64_t> live = registry.LiveWorkers(request->device_type());
    if (static_cast<int64_t>(live.size()) < needed) {
      return Invalid(absl::StrCat("mesh shape ", ShapeToString(shape), " needs ", needed, " ",
                                  request->device_type(), " workers but ", live.size(),
                                  " are live"));
    }
    ids.assign(live.begin(), live.begin() + needed);
  } else if (static_cast<int64_t>(ids.size()) != needed) {
    return Invalid(absl::StrCat("mesh shape ", ShapeToString(shape), " needs ", needed,
                                " workers but worker_ids names ", ids.size()));
  }
  std::vector<int64_t> incarnations;
  for (int64_t id : ids) {
    absl::StatusOr<WorkerHandle> w = registry.Get(id);
    if (!w.ok()) return ToGrpcStatus(w.status());
    if (w->device.rfind(request->device_type(), 0) != 0) {
      return Invalid(absl::StrCat("worker ", id, " serves device '", w->device, "', not ",
                                  request->device_type()));
    }
    incarnations.push_back(w->incarnation);
  }
  absl::StatusOr<DeviceMesh> dm = DeviceMesh::Create(request->device_type(), shape, names, ids);
  if (!dm.ok()) return ToGrpcStatus(dm.status());

  auto mesh = std::make_shared<Mesh>(*std::move(dm));
  mesh->name = request->name();
  mesh->incarnations = std::move(incarnations);
  mesh->timeout = request->timeout_ms() > 0 ? absl::Milliseconds(request->timeout_ms())
                                            : kDefaultCollectiveTimeout;
  {
    absl::MutexLock lock(&mu_);
    if (meshes_.contains(request->name())) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                          absl::StrCat("a mesh named '", request->name(), "' exists"));
    }
    mesh->id = next_mesh_id_++;
    meshes_[mesh->name] = mesh;  // reserved; removed again if set-up fails
  }

  v1::Command command;
  v1::SetupMesh* setup = command.mutable_setup_mesh();
  setup->set_mesh_id(mesh->id);
  *setup->mutable_mesh() = ToProto(mesh->mesh);
  setup->set_store_prefix(absl::StrCat("mesh/", mesh->id, "/"));
  setup->set_timeout_ms(absl::ToInt64Milliseconds(mesh->timeout));
  absl::StatusOr<std::vector<v1::CommandReply>> replies =
      dispatcher_->Run(mesh->mesh.ranks(), command, mesh->timeout + kRpcSlack);
  if (!replies.ok()) {
    absl::MutexLock lock(&mu_);
    meshes_.erase(mesh->name);
    store_->ErasePrefix(setup->store_prefix());
    return ToGrpcStatus(absl::Status(
        replies.status().code(),
        absl::StrCat("setting up mesh '", mesh->name, "' failed: ", replies.status().message())));
  }
  *reply = Describe(*mesh);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetMesh(grpc::ServerContext*, const v1::GetMeshRequest* request,
                                         v1::MeshInfo* reply) {
  absl::StatusOr<std::shared_ptr<Mesh>> mesh = FindMesh(request->name());
  if (!mesh.ok()) return ToGrpcStatus(mesh.status());
  *reply = Describe(**mesh);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListMeshes(grpc::ServerContext*, const v1::ListMeshesRequest*,
                                            v1::ListMeshesReply* reply) {
  std::vector<std::shared_ptr<Mesh>> meshes;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, m] : meshes_) meshes.push_back(m);
  }
  for (const auto& m : meshes) *reply->add_meshes() = Describe(*m);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::DeleteMesh(grpc::ServerContext*,
                                            const v1::DeleteMeshRequest* request,
                                            v1::DeleteMeshReply*) {
  std::shared_ptr<Mesh> mesh;
  std::vector<std::string> dropped;  // its DTensors' worker-side names
  {
    absl::MutexLock lock(&mu_);
    auto it = meshes_.find(request->name());
    if (it == meshes_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("no mesh named '", request->name(), "'"));
    }
    mesh = it->second;
    meshes_.erase(it);
    for (auto t = tensors_.begin(); t != tensors_.end();) {
      if (t->second->mesh != mesh) {
        ++t;
        continue;
      }
      for (int64_t p = 0; p < mesh->mesh.size(); ++p) {
        held_bytes_[mesh->mesh.ranks()[p]] -= ShardBytes(t->second->spec, p);
      }
      dropped.push_back(WorkerName(t->first));
      t = tensors_.erase(t);
    }
  }
  // Tear down on the workers still serving this mesh's incarnation; the others lost it already.
  std::vector<int64_t> live;
  for (size_t i = 0; i < mesh->mesh.ranks().size(); ++i) {
    absl::StatusOr<WorkerHandle> w = dispatcher_->registry().Get(mesh->mesh.ranks()[i]);
    if (w.ok() && w->incarnation == mesh->incarnations[i]) live.push_back(w->id);
  }
  if (!dropped.empty()) {
    v1::Command free;
    for (const std::string& name : dropped) free.mutable_delete_tensors()->add_names(name);
    dispatcher_->Run(live, free, kRpcSlack).IgnoreError();  // the teardown below reports failures
  }
  v1::Command command;
  command.mutable_teardown_mesh()->set_mesh_id(mesh->id);
  absl::StatusOr<std::vector<v1::CommandReply>> replies =
      dispatcher_->Run(live, command, kRpcSlack);
  store_->ErasePrefix(absl::StrCat("mesh/", mesh->id, "/"));
  if (!replies.ok()) return ToGrpcStatus(replies.status());
  return grpc::Status::OK;
}

absl::StatusOr<CoordinatorService::Accepted> CoordinatorService::AcceptCollective(
    Mesh& mesh, const v1::CollectiveRequest& request) {
  Accepted accepted;
  auto invalid = [](std::string message) { return absl::InvalidArgumentError(message); };
  int mesh_dim = -1;
  if (!request.mesh_dim().empty()) {
    if (absl::SimpleAtoi(request.mesh_dim(), &mesh_dim)) {
      if (mesh_dim < 0 || mesh_dim >= mesh.mesh.ndim()) {
        return invalid(absl::StrCat("mesh dim ", mesh_dim, " is out of range for mesh '", mesh.name,
                                    "' of ", mesh.mesh.ndim(), " dims"));
      }
    } else {
      absl::StatusOr<int> d = mesh.mesh.DimIndex(request.mesh_dim());
      if (!d.ok()) return invalid(std::string(d.status().message()));
      mesh_dim = *d;
    }
  }
  const int64_t group_size = mesh_dim < 0 ? mesh.mesh.size() : mesh.mesh.size(mesh_dim);
  if (request.op() == v1::COLLECTIVE_OP_UNSPECIFIED || !v1::CollectiveOp_IsValid(request.op())) {
    return invalid(absl::StrCat("collective op ", request.op(), " is not a collective"));
  }
  if (IsReducing(request.op()) && request.reduce_op() != v1::REDUCE_OP_UNSPECIFIED) {
    if (absl::StatusOr<ReduceOp> op = FromProto(request.reduce_op()); !op.ok()) {
      return op.status();
    }
  }
  if (request.root() < 0 || request.root() >= group_size) {
    return invalid(
        absl::StrCat("root ", request.root(), " is not a rank of a group of ", group_size));
  }
  if (request.op() == v1::SEND_RECV &&
      (request.peer() < 0 || request.peer() >= group_size || request.peer() == request.root())) {
    return invalid(absl::StrCat("peer ", request.peer(), " must be a rank of a group of ",
                                group_size, " other than the sender ", request.root()));
  }
  const std::string output = request.output().empty() ? request.input() : request.output();
  if (request.op() != v1::BARRIER) {
    if (output.empty()) return invalid("a collective needs an output tensor name");
    if (output.find('/') != std::string::npos) {
      return invalid(absl::StrCat("tensor name '", output, "' must have no '/'"));
    }
    absl::MutexLock lock(&mesh.mu);
    auto it = mesh.tensors.find(request.input());
    std::string cause;
    if (auto failed = mesh.failed_writes.find(request.input());
        failed != mesh.failed_writes.end()) {
      cause =
          absl::StrCat(" (the last collective writing it failed: ", failed->second.message(), ")");
    }
    if (it == mesh.tensors.end()) {
      return absl::NotFoundError(
          absl::StrCat("mesh '", mesh.name, "' has no tensor '", request.input(), "'", cause));
    }
    // Every rank takes part: one without the input would leave its peers in the collective until
    // the timeout, which breaks the mesh's communicators for good.
    std::vector<int64_t> missing;
    for (size_t r = 0; r < it->second.size(); ++r) {
      if (!it->second[r].has_value()) missing.push_back(static_cast<int64_t>(r));
    }
    if (!missing.empty()) {
      return absl::NotFoundError(absl::StrCat("tensor '", request.input(), "' of mesh '", mesh.name,
                                              "' is not on ranks ", absl::StrJoin(missing, ", "),
                                              "; a collective needs it on every rank", cause));
    }
    // Checked here rather than found out by the workers: ranks whose byte counts disagree would
    // break the collective (and its communicator) instead of failing it.
    absl::StatusOr<RankLayouts> outputs =
        CollectiveOutputs(request.op(), request.input(), it->second,
                          PositionGroups(mesh.mesh, mesh_dim), request.root(), request.peer());
    if (!outputs.ok()) {
      return absl::Status(outputs.status().code(),
                          absl::StrCat("mesh '", mesh.name, "': ", outputs.status().message()));
    }
    // Ranks that write no output keep whatever they held under its name.
    auto [entry, added] = mesh.tensors.try_emplace(output, outputs->size());
    if (!added) accepted.previous = entry->second;
    accepted.writes.resize(outputs->size());
    for (size_t r = 0; r < outputs->size(); ++r) {
      accepted.writes[r] = (*outputs)[r].has_value();
      if (accepted.writes[r]) entry->second[r] = std::move((*outputs)[r]);
    }
    accepted.write = mesh.next_write++;
    mesh.last_writer[output] = accepted.write;
  }

  v1::Command& command = accepted.command;
  v1::RunCollective* c = command.mutable_collective();
  c->set_mesh_id(mesh.id);
  c->set_mesh_dim(mesh_dim);
  c->set_op(request.op());
  c->set_input(WorkerTensorName(mesh, request.input()));
  c->set_output(WorkerTensorName(mesh, output));
  c->set_reduce_op(request.reduce_op() == v1::REDUCE_OP_UNSPECIFIED ? v1::SUM
                                                                    : request.reduce_op());
  c->set_root(request.root());
  c->set_peer(request.peer());
  return accepted;
}

absl::Status CoordinatorService::FinishCollective(const std::shared_ptr<Mesh>& mesh,
                                                  const v1::CollectiveRequest& request,
                                                  const Accepted& accepted, absl::Status status,
                                                  std::vector<v1::CommandReply> replies,
                                                  v1::CollectiveReply* reply) {
  if (request.op() == v1::BARRIER) return status;
  const std::string output = request.output().empty() ? request.input() : request.output();
  // Only in-place all_reduce and broadcast work in the stored tensor itself; every other
  // collective writes a new buffer, so a failure leaves an in-place input as it was.
  const bool touches_input_in_place =
      output == request.input() &&
      (request.op() == v1::ALL_REDUCE_OP || request.op() == v1::BROADCAST);
  const std::string prefix = WorkerTensorName(*mesh, "");
  absl::MutexLock lock(&mesh->mu);
  auto latest = mesh->last_writer.find(output);
  const bool last = latest != mesh->last_writer.end() && latest->second == accepted.write;
  if (last) mesh->last_writer.erase(latest);
  const RankLayouts* entered = nullptr;
  if (auto it = mesh->tensors.find(output); it != mesh->tensors.end()) entered = &it->second;
  for (size_t r = 0; status.ok() && r < replies.size(); ++r) {
    const bool wrote = replies[r].tensors_size() > 0;
    if (last && r < accepted.writes.size() && wrote != accepted.writes[r]) {
      status = absl::InternalError(absl::StrCat("mesh position ", r, wrote ? " wrote" : " wrote no",
                                                " '", output, "' where the coordinator expected ",
                                                wrote ? "none" : "it to"));
      break;
    }
    for (const v1::LocalTensorInfo& t : replies[r].tensors()) {
      absl::StatusOr<DType> dtype = FromProto(t.dtype());
      absl::StatusOr<Shape> shape = FromProto(t.shape());
      const std::optional<LocalLayout> got =
          dtype.ok() && shape.ok() ? std::optional<LocalLayout>(LocalLayout{*dtype, *shape})
                                   : std::nullopt;
      // A later writer (or a delete) has the name's entry now; only the last one is checked.
      if (last && (entered == nullptr || !got.has_value() || (*entered)[r] != got)) {
        status = absl::InternalError(absl::StrCat(
            "mesh position ", r, " wrote '", output, "' as ",
            got ? LayoutToString(*got) : "an unreadable layout", " where the coordinator expected ",
            entered && (*entered)[r] ? LayoutToString(*(*entered)[r]) : "none"));
        break;
      }
      v1::LocalTensorInfo& out = *reply->add_outputs();
      out = t;
      out.set_name(t.name().substr(std::min(prefix.size(), t.name().size())));
    }
  }
  if (status.ok()) {
    mesh->failed_writes.erase(output);
    return status;
  }
  reply->clear_outputs();
  mesh->failed_writes[output] = status;
  if (!last) return status;
  if (output == request.input() && !touches_input_in_place) {
    if (accepted.previous.has_value()) mesh->tensors[output] = *accepted.previous;
    return status;
  }
  // Its contents are undefined: the name leaves the table and every worker. Posted under
  // mesh->mu, so no collective writing the name again can be accepted, and run, before it.
  mesh->tensors.erase(output);
  if (absl::StatusOr<std::vector<WorkerHandle>> workers = MeshWorkers(*mesh); workers.ok()) {
    v1::Command free;
    free.mutable_delete_tensors()->add_names(WorkerTensorName(*mesh, output));
    dispatcher_->Post(*workers, free, kRpcSlack,
                      [](absl::Status, std::vector<v1::CommandReply>) {});
  }
  return status;
}

absl::StatusOr<std::shared_ptr<CoordinatorService::CollectiveWork>>
CoordinatorService::StartCollective(const v1::CollectiveRequest& request, bool send_here,
                                    int64_t* work_id) {
  absl::StatusOr<std::shared_ptr<Mesh>> found = FindMesh(request.mesh());
  if (!found.ok()) return found.status();
  std::shared_ptr<Mesh> mesh = *std::move(found);
  absl::StatusOr<std::vector<WorkerHandle>> workers = MeshWorkers(*mesh);
  if (!workers.ok()) return workers.status();
  absl::MutexLock submit(&mesh->submit_mu);
  absl::StatusOr<Accepted> accepted = AcceptCollective(*mesh, request);
  if (!accepted.ok()) return accepted.status();
  auto work = std::make_shared<CollectiveWork>();
  if (work_id != nullptr) {
    absl::MutexLock lock(&mesh->mu);
    *work_id = mesh->next_work++;
    mesh->works.emplace(*work_id, work);
    // A client that never waits must not grow the table without bound: forget the oldest finished
    // works past the limit (a later wait on one is NOT_FOUND).
    for (auto it = mesh->works.begin();
         mesh->works.size() > kMaxUnwaitedWorks && it != mesh->works.end();) {
      it = it->second->done.HasBeenNotified() ? mesh->works.erase(it) : std::next(it);
    }
  }
  // The completion needs the bookkeeping, not the command.
  const v1::Command command = std::move(accepted->command);
  dispatcher_->Post(
      *workers, command, mesh->timeout + kRpcSlack,
      [this, mesh, work, request, accepted = *std::move(accepted)](
          absl::Status status, std::vector<v1::CommandReply> replies) {
        work->status = FinishCollective(mesh, request, accepted, std::move(status),
                                        std::move(replies), &work->reply);
        work->done.Notify();
      },
      send_here);
  return work;
}

grpc::Status CoordinatorService::RunCollective(grpc::ServerContext*,
                                               const v1::CollectiveRequest* request,
                                               v1::CollectiveReply* reply) {
  // A synchronous call waits anyway and saves the hand-off to the sender thread; an async one
  // answers its client first.
  int64_t work_id = 0;
  absl::StatusOr<std::shared_ptr<CollectiveWork>> work = StartCollective(
      *request, /*send_here=*/!request->async_op(), request->async_op() ? &work_id : nullptr);
  if (!work.ok()) return ToGrpcStatus(work.status());
  if (request->async_op()) {
    reply->set_work(work_id);
    return grpc::Status::OK;
  }
  (*work)->done.WaitForNotification();
  if (!(*work)->status.ok()) return ToGrpcStatus((*work)->status);
  *reply = std::move((*work)->reply);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CollectiveStream(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::CollectiveResult, v1::CollectiveRequest>* stream) {
  // This thread reads and starts each collective as it arrives; `writer` reports them in order as
  // they finish, so a slow collective never holds up the ones behind it from starting.
  absl::Mutex mu;
  std::deque<std::shared_ptr<CollectiveWork>> started;  // guarded by mu
  bool reading = true;                                  // guarded by mu
  auto ready = [&] { return !started.empty() || !reading; };
  auto room = [&] { return started.size() < kMaxUnreportedInStream; };
  std::thread writer([&] {
    int64_t position = 0;
    bool open = true;
    while (true) {
      std::shared_ptr<CollectiveWork> work;
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
  while (!context->IsCancelled() && stream->Read(&request)) {
    absl::StatusOr<std::shared_ptr<CollectiveWork>> work =
        StartCollective(request, /*send_here=*/false, /*work_id=*/nullptr);
    if (!work.ok()) {
      // Refused up front: reported in its place like any other outcome.
      auto refused = std::make_shared<CollectiveWork>();
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
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::WaitCollectives(grpc::ServerContext* context,
                                                 const v1::WaitCollectivesRequest* request,
                                                 v1::WaitCollectivesReply* reply) {
  // A broken mesh's works still report how they ended.
  absl::StatusOr<std::shared_ptr<Mesh>> found = FindMesh(request->mesh());
  if (!found.ok()) return ToGrpcStatus(found.status());
  Mesh& mesh = **found;
  std::vector<std::shared_ptr<CollectiveWork>> works;
  {
    absl::MutexLock lock(&mesh.mu);
    for (int64_t id : request->works()) {
      auto it = mesh.works.find(id);
      if (it == mesh.works.end()) {
        return grpc::Status(
            grpc::StatusCode::NOT_FOUND,
            absl::StrCat("mesh '", mesh.name, "' has no collective work ", id,
                         " to wait on (never started with async_op, already waited on, or "
                         "forgotten after ",
                         kMaxUnwaitedWorks, " newer ones)"));
      }
      if (it->second->claimed) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            absl::StrCat("collective work ", id, " of mesh '", mesh.name,
                                         "' is being waited on by another call"));
      }
      works.push_back(it->second);
    }
    for (const auto& w : works) w->claimed = true;
  }
  const absl::Time deadline = absl::FromChrono(context->deadline());
  for (size_t i = 0; i < works.size(); ++i) {
    if (!works[i]->done.WaitForNotificationWithDeadline(deadline)) {
      absl::MutexLock lock(&mesh.mu);
      for (const auto& w : works) w->claimed = false;
      return grpc::Status(
          grpc::StatusCode::DEADLINE_EXCEEDED,
          absl::StrCat("collective work ", request->works(static_cast<int>(i)), " of mesh '",
                       mesh.name, "' is still running; nothing was forgotten"));
    }
  }
  absl::MutexLock lock(&mesh.mu);
  for (size_t i = 0; i < works.size(); ++i) {
    const int64_t id = request->works(static_cast<int>(i));
    v1::CollectiveResult* result = reply->add_results();
    result->set_work(id);
    result->set_code(static_cast<int>(works[i]->status.code()));
    result->set_message(std::string(works[i]->status.message()));
    if (works[i]->status.ok()) *result->mutable_reply() = works[i]->reply;
    mesh.works.erase(id);
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::DeleteTensor(grpc::ServerContext*,
                                              const v1::DeleteTensorRequest* request,
                                              v1::DeleteTensorReply*) {
  absl::StatusOr<std::shared_ptr<Mesh>> found = FindMesh(request->mesh());
  if (!found.ok()) return ToGrpcStatus(found.status());
  Mesh& mesh = **found;
  absl::StatusOr<std::vector<WorkerHandle>> workers = MeshWorkers(mesh);
  if (!workers.ok()) return ToGrpcStatus(workers.status());
  const std::string& name = request->tensor();
  v1::Command command;
  command.mutable_delete_tensors()->add_names(WorkerTensorName(mesh, name));
  absl::Notification done;
  absl::Status status;
  {
    // Accepted like a collective: the workers delete it after every collective accepted before
    // and before any accepted after; collectives still writing it no longer settle its entry.
    absl::MutexLock submit(&mesh.submit_mu);
    {
      absl::MutexLock lock(&mesh.mu);
      if (mesh.tensors.erase(name) == 0) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND,
                            absl::StrCat("mesh '", mesh.name, "' has no tensor '", name, "'"));
      }
      mesh.last_writer.erase(name);
      mesh.failed_writes.erase(name);
    }
    dispatcher_->Post(
        *workers, command, kRpcSlack,
        [&](absl::Status s, std::vector<v1::CommandReply>) {
          status = std::move(s);
          done.Notify();
        },
        /*send_here=*/true);
  }
  done.WaitForNotification();
  return ToGrpcStatus(status);
}

}  // namespace tessera
