#include "server/transfers/direct_uploads.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/names.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "security/direct_grants.h"
#include "server/transfers/shard_streams.h"
#include "spdlog/spdlog.h"

namespace tessera {

DirectUploads::DirectUploads(DTensorTable* tensors, DTensorStreams* streams,
                             absl::Duration grant_lifetime)
    : tensors_(tensors), streams_(streams), grant_lifetime_(grant_lifetime) {
  expirer_ = std::thread([this] {
    while (!stopping_.WaitForNotificationWithTimeout(absl::Milliseconds(250))) {
      ExpireDue(absl::Now());
    }
  });
}

DirectUploads::~DirectUploads() {
  stopping_.Notify();
  expirer_.join();
  std::map<std::string, std::unique_ptr<Planned>> left;
  {
    absl::MutexLock lock(&mu_);
    // The release calls' callbacks use this object.
    mu_.Await(absl::Condition(
        +[](int* n) { return *n == 0; }, &releasing_));
    left.swap(planned_);
  }
  for (auto& [id, planned] : left) Drop(*planned);
}

void DirectUploads::Drop(Planned& planned) {
  for (Block& b : planned.blocks) b.lease.Release();
  tensors_->Release(*planned.tensor);
}

absl::StatusOr<DirectUploads::Layout> DirectUploads::DistributeLayout(
    const v1::DistributeHeader& h) {
  ASSIGN_OR_RETURN(std::shared_ptr<Mesh> mesh, tensors_->meshes().Ready(h.mesh()));
  ASSIGN_OR_RETURN(const DType dtype, FromProto(h.dtype()));
  ASSIGN_OR_RETURN(Shape shape, FromProto(h.shape()));
  ASSIGN_OR_RETURN(std::vector<Placement> placements, FromProto(h.placements()));
  ASSIGN_OR_RETURN(DTensorSpec spec,
                   MakeDTensorSpec(mesh->mesh, std::move(placements), std::move(shape), dtype));
  if (h.src_data_rank() < 0 || h.src_data_rank() >= mesh->mesh.size()) {
    return absl::InvalidArgumentError(absl::StrCat("src_data_rank ", h.src_data_rank(),
                                                   " is not a rank of mesh '", mesh->name, "' of ",
                                                   mesh->mesh.size(), " ranks"));
  }
  Layout layout{mesh, spec, h.name(), mesh->mesh.CoordinateOfIndex(h.src_data_rank()),
                {},   {},   true,     false};
  layout.positions = BlockHolders(layout.spec, layout.source);
  layout.broadcast_dims = ReplicaDims(layout.spec);
  return layout;
}

absl::StatusOr<DirectUploads::Layout> DirectUploads::FromLocalLayout(
    const v1::PlanUploadRequest& request) {
  const v1::FromLocalHeader& h = request.from_local();
  ASSIGN_OR_RETURN(std::shared_ptr<Mesh> mesh, tensors_->meshes().Ready(h.mesh()));
  const DeviceMesh& dm = mesh->mesh;
  ASSIGN_OR_RETURN(const DType dtype, FromProto(h.dtype()));
  ASSIGN_OR_RETURN(std::vector<Placement> placements, FromProto(h.placements()));
  const int64_t given = request.local_shapes_size();
  if (given < dm.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "from_local got no shard of rank ", given, " (", given, " local tensors for mesh '",
        mesh->name, "' of ", dm.size(), " ranks); every rank needs one"));
  }
  if (given > dm.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", dm.size(), " is not in mesh '",
                                                   mesh->name, "' of ", dm.size(), " ranks"));
  }
  ASSIGN_OR_RETURN(const Shape first_local, FromProto(request.local_shapes(0)));
  ASSIGN_OR_RETURN(Shape global, DTensorStreams::FromLocalShape(dm, h, placements, first_local));
  ASSIGN_OR_RETURN(DTensorSpec spec,
                   MakeDTensorSpec(dm, std::move(placements), std::move(global), dtype));
  for (int64_t r = 0; r < dm.size(); ++r) {
    const Shape want = LocalShapeAndOffsetAt(spec, dm.CoordinateOfIndex(r)).shape;
    absl::StatusOr<Shape> local = FromProto(request.local_shapes(static_cast<int>(r)));
    if (!local.ok() || *local != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", r, "'s local shape ", local.ok() ? ShapeToString(*local) : "(invalid)",
          " does not fit ", spec.ToString(), ", which gives it ", ShapeToString(want),
          h.has_shape() ? "" : "; pass the global shape for uneven shards"));
    }
  }
  Layout layout{mesh, spec, h.name(), std::vector<int64_t>(dm.ndim(), 0), {}, {}, false, true};
  for (int64_t r = 0; r < dm.size(); ++r) layout.positions.push_back(r);
  if (h.run_check()) {
    for (int m = 0; m < dm.ndim(); ++m) {
      if (spec.placements[m].is_replicate() && dm.size(m) > 1) layout.broadcast_dims.push_back(m);
    }
  }
  return layout;
}

absl::StatusOr<v1::UploadPlan> DirectUploads::Plan(const v1::PlanUploadRequest& request,
                                                   const std::string& owner) {
  ASSIGN_OR_RETURN(const Layout layout, request.has_from_local()
                                            ? FromLocalLayout(request)
                                            : DistributeLayout(request.header()));
  const std::shared_ptr<Mesh>& mesh = layout.mesh;
  const DTensorSpec& spec = layout.spec;
  const std::vector<int64_t>& positions = layout.positions;
  if (request.transfer_timeout_ms() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer_timeout_ms ", request.transfer_timeout_ms(), " is negative"));
  }
  // Every worker of a block is looked up before anything is held.
  std::vector<WorkerHandle> workers;
  for (int64_t p : positions) {
    ASSIGN_OR_RETURN(WorkerHandle w, tensors_->dispatcher().registry().Get(spec.mesh.ranks()[p]));
    workers.push_back(std::move(w));
  }
  {
    absl::MutexLock lock(&mu_);
    const int64_t mine = std::count_if(planned_.begin(), planned_.end(),
                                       [&](const auto& p) { return p.second->owner == owner; });
    if (mine >= kMaxPlansPerClient) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "client '", owner, "' has ", mine, " direct uploads planned and not committed (at most ",
          kMaxPlansPerClient, "); commit or abort one first"));
    }
  }
  ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> t,
                   tensors_->Add(layout.name, mesh, spec, owner, /*hidden=*/true));

  const absl::Time now = absl::Now();
  const absl::Duration transfer =
      request.transfer_timeout_ms() == 0
          ? kDefaultTransfer
          : std::min(absl::Milliseconds(request.transfer_timeout_ms()), kMaxTransfer);
  auto planned = std::make_unique<Planned>();
  planned->owner = owner;
  planned->tensor = t;
  planned->source = layout.source;
  planned->broadcast_dims = layout.broadcast_dims;
  planned->partition = layout.partition;
  planned->release_at = now + grant_lifetime_ + kReleaseMargin;
  planned->commit_by = std::max(now + transfer, planned->release_at);
  v1::UploadPlan plan;
  plan.set_commit_by_unix_ms(absl::ToUnixMillis(planned->commit_by));
  const int64_t expires_ms = absl::ToUnixMillis(now + grant_lifetime_);
  std::vector<SequenceLease> leases = tensors_->dispatcher().Reserve(workers);
  for (size_t i = 0; i < positions.size(); ++i) {
    LocalShard local = LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(positions[i]));
    // from_local: each rank's own tensor goes whole.
    if (layout.whole_locals) local.offset.assign(local.shape.size(), 0);
    Block b;
    b.lease = std::move(leases[i]);
    b.key = workers[i].grant_key;
    v1::DirectGrant& g = b.grant;
    g.set_worker_id(workers[i].id);
    g.set_incarnation(workers[i].incarnation);
    g.set_sequence(b.lease.sequence());
    g.set_tensor(DTensorTable::WorkerName(t->name));
    g.set_dtype(ToProto(spec.dtype));
    *g.mutable_shape() = ToProto(local.shape);
    g.set_expires_unix_ms(expires_ms);
    SignGrant(b.key, g);
    v1::UploadRoute* route = plan.add_routes();
    route->set_position(positions[i]);
    route->set_address(workers[i].address);
    for (int64_t o : local.offset) route->add_offset(o);
    *route->mutable_grant() = g;
    planned->blocks.push_back(std::move(b));
  }
  absl::BitGen gen;
  const std::string id =
      absl::StrFormat("u-%016x%016x", absl::Uniform<uint64_t>(gen), absl::Uniform<uint64_t>(gen));
  plan.set_upload_id(id);
  absl::MutexLock lock(&mu_);
  planned_[id] = std::move(planned);
  return plan;
}

absl::StatusOr<v1::TensorInfo> DirectUploads::Commit(const v1::CommitUploadRequest& request,
                                                     const std::string& owner) {
  std::unique_ptr<Planned> planned;
  {
    absl::MutexLock lock(&mu_);
    auto it = planned_.find(request.upload_id());
    // Another client's plan is as unknown as an expired one: its id says nothing.
    if (it == planned_.end() || it->second->owner != owner) {
      return absl::NotFoundError(absl::StrCat("no planned upload ", QuotedName(request.upload_id()),
                                              " of this client (expired, committed or aborted)"));
    }
    planned = std::move(it->second);
    planned_.erase(it);
  }
  if (request.abort()) {
    Drop(*planned);
    return v1::TensorInfo();
  }
  absl::Status status;
  if (request.receipts_size() != static_cast<int>(planned->blocks.size())) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "the commit of upload '", request.upload_id(), "' has ", request.receipts_size(),
        " receipts for ", planned->blocks.size(), " blocks; the upload is dropped"));
  }
  for (size_t i = 0; status.ok() && i < planned->blocks.size(); ++i) {
    const Block& b = planned->blocks[i];
    if (!CheckReceipt(b.key, b.grant, request.receipts(static_cast<int>(i)))) {
      status = absl::FailedPreconditionError(
          absl::StrCat("worker ", b.grant.worker_id(), " gave no receipt for block ", i,
                       " of tensor '", planned->tensor->name, "' (sequence ", b.grant.sequence(),
                       "): it was not stored; the upload is dropped"));
    }
  }
  if (!status.ok()) {
    Drop(*planned);
    return status;
  }
  for (Block& b : planned->blocks) b.lease.MarkUsed();
  const DTensorEntry& t = *planned->tensor;
  RETURN_IF_ERROR(
      streams_->Spread(t, planned->source, planned->broadcast_dims, planned->partition));
  tensors_->Reveal(t);
  return tensors_->Describe(t);
}

void DirectUploads::ExpireDue(absl::Time now) {
  std::vector<std::pair<std::string, std::unique_ptr<Planned>>> overdue;
  struct Round {
    std::string id;
    std::vector<std::pair<WorkerHandle, int64_t>> blocks;
    bool first;
  };
  std::vector<Round> rounds;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = planned_.begin(); it != planned_.end();) {
      Planned& p = *it->second;
      if (now >= p.release_at && !p.released) {
        p.released = true;
        std::vector<std::pair<WorkerHandle, int64_t>> blocks;
        for (Block& b : p.blocks) {
          if (!b.lease.held()) continue;
          WorkerHandle worker = b.lease.worker();
          blocks.emplace_back(std::move(worker), b.lease.TakeForRelease());
        }
        p.asking = true;
        releasing_ += static_cast<int>(blocks.size());
        rounds.push_back({it->first, std::move(blocks), true});
      } else if (p.released && !p.asking && !p.watched.empty() && now >= p.recheck_at) {
        p.asking = true;
        releasing_ += static_cast<int>(p.watched.size());
        rounds.push_back({it->first, p.watched, false});
      }
      if (now >= p.commit_by) {
        overdue.emplace_back(it->first, std::move(it->second));
        it = planned_.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::vector<std::pair<std::string, std::string>> failed;
  {
    absl::MutexLock lock(&mu_);
    failed.swap(failed_);
  }
  // Releasing and freeing post calls and commands, which may wait for room: not under the lock.
  for (const auto& [id, why] : failed) DropPlanned(id, why);
  for (Round& r : rounds) ReleaseExpired(r.id, std::move(r.blocks), r.first);
  for (auto& [id, p] : overdue) {
    spdlog::warn(
        "direct upload {} of tensor '{}' by client '{}' was not committed in time; "
        "dropped",
        id, p->tensor->name, p->owner);
    Drop(*p);
  }
}

void DirectUploads::ReleaseExpired(const std::string& id,
                                   std::vector<std::pair<WorkerHandle, int64_t>> blocks,
                                   bool first) {
  struct Outcome {
    absl::Mutex mu;
    size_t remaining ABSL_GUARDED_BY(mu);
    std::vector<std::pair<WorkerHandle, int64_t>> held ABSL_GUARDED_BY(mu);
    std::string failure ABSL_GUARDED_BY(mu);  // why the plan is dropped; empty to keep it
  };
  auto outcome = std::make_shared<Outcome>();
  {
    absl::MutexLock lock(&outcome->mu);
    outcome->remaining = blocks.size();
  }
  if (blocks.empty()) {
    absl::MutexLock lock(&mu_);
    if (auto it = planned_.find(id); it != planned_.end()) it->second->asking = false;
    return;
  }
  for (auto& [worker, sequence] : blocks) {
    tensors_->dispatcher().Release(
        worker, {sequence},
        [this, id, first, outcome, worker = worker, sequence = sequence](
            absl::Status s, const v1::ReleaseReply& reply) {
          std::string failure;
          bool held = false;
          if (!reply.failed().empty()) {
            failure = absl::StrCat("its upload to worker ", worker.id, " (sequence ", sequence,
                                   ") failed after it started");
          } else if (absl::IsFailedPrecondition(s)) {
            failure = absl::StrCat("worker ", worker.id, " restarted during its upload");
          } else if (first && !s.ok()) {
            failure = absl::StrCat("worker ", worker.id,
                                   " could not be asked about its upload: ", s.message());
          } else if (first && reply.held().empty()) {
            failure = "an upload of it had not started when its grants expired";
          } else {
            held = true;  // held, stored and forgotten, or a worker briefly unreachable
          }
          bool last = false;
          std::vector<std::pair<WorkerHandle, int64_t>> watched;
          {
            absl::MutexLock lock(&outcome->mu);
            if (held) outcome->held.emplace_back(worker, sequence);
            if (!failure.empty() && outcome->failure.empty()) outcome->failure = failure;
            last = --outcome->remaining == 0;
            if (last) {
              failure = outcome->failure;
              watched = std::move(outcome->held);
            }
          }
          absl::MutexLock lock(&mu_);
          --releasing_;
          if (!last) return;
          // Dropped by the expirer: freeing posts commands, which must not wait on this thread.
          if (!failure.empty()) {
            failed_.emplace_back(id, std::move(failure));
            return;
          }
          if (auto it = planned_.find(id); it != planned_.end()) {
            it->second->watched = std::move(watched);
            it->second->recheck_at = absl::Now() + grant_lifetime_;
            it->second->asking = false;
          }
        });
  }
}

void DirectUploads::DropPlanned(const std::string& id, const std::string& why) {
  std::unique_ptr<Planned> planned;
  {
    absl::MutexLock lock(&mu_);
    auto it = planned_.find(id);
    if (it == planned_.end()) return;  // committed or aborted meanwhile
    planned = std::move(it->second);
    planned_.erase(it);
  }
  spdlog::warn("direct upload {} of tensor '{}' by client '{}' dropped: {}", id,
               planned->tensor->name, planned->owner, why);
  Drop(*planned);
}

}  // namespace tessera
