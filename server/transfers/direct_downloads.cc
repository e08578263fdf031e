#include "server/transfers/direct_downloads.h"

#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/names.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "security/direct_grants.h"
#include "server/transfers/shard_streams.h"

namespace tessera {

DirectDownloads::DirectDownloads(DTensorTable* tensors, DTensorStreams* streams,
                                 absl::Duration grant_lifetime)
    : tensors_(tensors), streams_(streams), grant_lifetime_(grant_lifetime) {
  expirer_ = std::thread([this] {
    while (!stopping_.WaitForNotificationWithTimeout(absl::Milliseconds(250))) {
      ExpireDue(absl::Now());
    }
  });
}

DirectDownloads::~DirectDownloads() {
  stopping_.Notify();
  expirer_.join();
  std::map<std::string, Planned> left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(planned_);
  }
  // The leases release their sequences as they go.
}

absl::StatusOr<v1::DownloadPlan> DirectDownloads::Plan(const v1::PlanDownloadRequest& request,
                                                       const std::string& owner,
                                                       absl::Time deadline) {
  ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> t, tensors_->Usable(request.name()));
  RETURN_IF_ERROR(tensors_->Explain(*t, DTensorTable::AwaitWrite(*t, deadline)));
  const DTensorSpec& spec = t->spec;
  if (!request.full() && (request.rank() < 0 || request.rank() >= spec.mesh.size())) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", request.rank(), " is not in mesh '",
                                                   t->mesh->name, "' of ", spec.mesh.size(),
                                                   " ranks"));
  }
  // to_local reads the rank's own block as it is (Partial values unreduced, as relayed).
  DTensorStreams::Readable readable{spec, DTensorTable::WorkerName(t->name), false};
  std::vector<int64_t> positions = {request.rank()};
  if (request.full()) {
    ASSIGN_OR_RETURN(readable, streams_->ReadableLayout(*t));
    positions = BlockHolders(readable.spec, std::vector<int64_t>(spec.mesh.ndim(), 0));
  }
  std::vector<WorkerHandle> workers;
  for (int64_t p : positions) {
    absl::StatusOr<WorkerHandle> w =
        tensors_->dispatcher().registry().Get(readable.spec.mesh.ranks()[p]);
    if (!w.ok()) {
      streams_->DropReadable(*t, readable);
      return w.status();
    }
    workers.push_back(*std::move(w));
  }
  const absl::Time now = absl::Now();
  const int64_t expires_ms = absl::ToUnixMillis(now + grant_lifetime_);
  Planned planned;
  planned.owner = owner;
  planned.release_at = now + grant_lifetime_ + kReleaseMargin;
  planned.leases = tensors_->dispatcher().Reserve(workers);
  // Posted after the reservations, so every worker deletes the temporary after its reads.
  streams_->DropReadable(*t, readable);

  v1::DownloadPlan plan;
  plan.set_dtype(ToProto(spec.dtype));
  for (size_t i = 0; i < positions.size(); ++i) {
    const LocalShard local =
        LocalShapeAndOffsetAt(readable.spec, readable.spec.mesh.CoordinateOfIndex(positions[i]));
    v1::UploadRoute* route = plan.add_routes();
    route->set_position(positions[i]);
    route->set_address(workers[i].address);
    if (request.full()) {
      for (int64_t o : local.offset) route->add_offset(o);
    } else {
      for (size_t d = 0; d < local.shape.size(); ++d) route->add_offset(0);
      *plan.mutable_shape() = ToProto(local.shape);
    }
    v1::DirectGrant& g = *route->mutable_grant();
    g.set_worker_id(workers[i].id);
    g.set_incarnation(workers[i].incarnation);
    g.set_sequence(planned.leases[i].sequence());
    g.set_tensor(readable.worker_tensor);
    g.set_dtype(ToProto(spec.dtype));
    *g.mutable_shape() = ToProto(local.shape);
    g.set_expires_unix_ms(expires_ms);
    g.set_read(true);
    SignGrant(workers[i].grant_key, g);
  }
  if (request.full()) *plan.mutable_shape() = ToProto(spec.shape);
  absl::BitGen gen;
  const std::string id =
      absl::StrFormat("d-%016x%016x", absl::Uniform<uint64_t>(gen), absl::Uniform<uint64_t>(gen));
  plan.set_download_id(id);
  absl::MutexLock lock(&mu_);
  planned_.emplace(id, std::move(planned));
  return plan;
}

absl::Status DirectDownloads::Release(const std::string& download_id, const std::string& owner) {
  Planned planned;
  {
    absl::MutexLock lock(&mu_);
    auto it = planned_.find(download_id);
    // Another client's plan is as unknown as an expired one: its id says nothing.
    if (it == planned_.end() || it->second.owner != owner) {
      return absl::NotFoundError(absl::StrCat("no planned download ", QuotedName(download_id),
                                              " of this client (expired?)"));
    }
    planned = std::move(it->second);
    planned_.erase(it);
  }
  for (SequenceLease& lease : planned.leases) lease.Release();
  return absl::OkStatus();
}

void DirectDownloads::ExpireDue(absl::Time now) {
  std::vector<Planned> due;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = planned_.begin(); it != planned_.end();) {
      if (it->second.release_at <= now) {
        due.push_back(std::move(it->second));
        it = planned_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Releasing sends to the workers: not under the lock (a number the worker used is ignored).
  for (Planned& p : due) {
    for (SequenceLease& lease : p.leases) lease.Release();
  }
}

}  // namespace tessera
