#include "server/tables/dtensor_table.h"

#include "absl/strings/str_cat.h"
#include "core/names.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "server/cluster/worker_loss.h"

namespace tessera {

int64_t DTensorTable::ShardBytes(const DTensorSpec& spec, int64_t position) {
  return NumElements(LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(position)).shape) *
         static_cast<int64_t>(DTypeSize(spec.dtype));
}

absl::StatusOr<std::shared_ptr<DTensorEntry>> DTensorTable::Add(
    const std::string& requested, std::shared_ptr<Mesh> mesh, DTensorSpec spec,
    const std::string& owner, bool hidden, std::shared_ptr<TensorWrite> write) {
  if (!requested.empty()) RETURN_IF_ERROR(CheckName(NameKind::kTensor, requested));
  auto tensor = std::make_shared<DTensorEntry>(std::move(mesh), std::move(spec), owner);
  if (write != nullptr) tensor->write = std::move(write);
  absl::MutexLock lock(&mu_);
  std::string name = requested;
  if (name.empty()) {
    do {
      name = absl::StrCat("t", next_id_++);
    } while (tensors_.contains(name));
  } else if (tensors_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrCat("a tensor named '", name, "' exists"));
  }
  RETURN_IF_ERROR(ledger_->Hold(Holdings(*tensor->mesh, name, tensor->spec),
                                absl::StrCat("tensor ", tensor->spec.ToString())));
  tensor->name = name;
  tensors_[name] = tensor;
  if (hidden) hidden_.insert(name);
  return tensor;
}

void DTensorTable::Reveal(const DTensorEntry& tensor) {
  absl::MutexLock lock(&mu_);
  hidden_.erase(tensor.name);
}

std::vector<WorkerBytes::Holding> DTensorTable::Holdings(const Mesh& mesh, const std::string& name,
                                                         const DTensorSpec& spec) {
  std::vector<WorkerBytes::Holding> holdings;
  for (int64_t p = 0; p < mesh.mesh.size(); ++p) {
    holdings.push_back({mesh.mesh.ranks()[p],
                        p < static_cast<int64_t>(mesh.budgets.size()) ? mesh.budgets[p] : 0,
                        WorkerName(name), ShardBytes(spec, p)});
  }
  return holdings;
}

absl::StatusOr<std::shared_ptr<DTensorEntry>> DTensorTable::Relayout(
    const DTensorEntry& tensor, DTensorSpec spec, std::shared_ptr<TensorWrite> write) {
  absl::MutexLock post(&tensor.post_mu);
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(tensor.name);
  if (tensor.released || it == tensors_.end() || it->second.get() != &tensor) {
    return absl::NotFoundError(absl::StrCat("tensor '", tensor.name, "' was freed"));
  }
  auto relaid = std::make_shared<DTensorEntry>(tensor.mesh, std::move(spec), tensor.owner);
  relaid->name = tensor.name;
  const bool undo = write != nullptr;
  if (!undo) {
    ASSIGN_OR_RETURN(relaid->relayout_recorded, records_.RecordRelayout(*relaid));
  }
  // Each holding replaces what the tensor's name held on its worker.
  absl::Status held = ledger_->Hold(Holdings(*tensor.mesh, tensor.name, relaid->spec),
                                    absl::StrCat("tensor ", relaid->spec.ToString()));
  if (!held.ok() || undo) records_.EraseRelayout(relaid->name, Durability::kBeforeReturn);
  RETURN_IF_ERROR(held);
  if (undo) relaid->write = std::move(write);
  it->second = relaid;
  tensor.released = true;
  return relaid;
}

absl::StatusOr<std::shared_ptr<DTensorEntry>> DTensorTable::Find(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end() || hidden_.contains(name)) {
    if (recovering_.contains(name)) {
      return absl::UnavailableError(absl::StrCat(
          "tensor '", name, "' is being recovered after a coordinator restart; try again shortly"));
    }
    return absl::NotFoundError(absl::StrCat("no tensor named ", QuotedName(name)));
  }
  return it->second;
}

std::shared_ptr<DTensorEntry> DTensorTable::Entry(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

absl::StatusOr<std::shared_ptr<DTensorEntry>> DTensorTable::Usable(const std::string& name) const {
  ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> t, Find(name));
  if (absl::Status health = meshes_->Health(*t->mesh); !health.ok()) return Explain(*t, health);
  if (t->write->done.HasBeenNotified() && !t->write->status.ok()) {
    const absl::Status& s = t->write->status;
    return Explain(*t, WithContext(absl::StrCat("tensor '", name, "' failed"), s));
  }
  return t;
}

absl::Status DTensorTable::Explain(const DTensorEntry& tensor, const absl::Status& failure) const {
  if (failure.ok()) return failure;
  const Mesh& mesh = *tensor.mesh;
  const std::vector<int64_t>& ranks = mesh.mesh.ranks();
  WorkerRegistry& registry = dispatcher_->registry();
  // Why the worker at mesh position `p` is gone (unreachable, or restarted since the mesh was made;
  // not one that registered again after a coordinator restart with the tensor's block kept), or
  // only silent: it missed its heartbeats, but may resume with its blocks intact.
  auto gone = [&](int64_t p) -> WorkerAbsence {
    if (std::optional<WorkerHandle> silent = registry.Silent(ranks[p]);
        silent.has_value() && silent->incarnation == mesh.incarnations[p]) {
      return {absl::UnavailableError(absl::StrCat(
                  "worker ", silent->id, " at ", silent->address,
                  " is not responding (it missed its heartbeats); its blocks are unavailable "
                  "until it responds again, or lost if it turns out dead")),
              /*blocks_lost=*/false};
    }
    absl::StatusOr<WorkerHandle> w = registry.Get(ranks[p]);
    if (!w.ok()) return {w.status()};
    if (w->incarnation != mesh.incarnations[p]) {
      const std::optional<std::set<std::string>> kept = registry.KeptBy(w->id, w->incarnation);
      if (kept.has_value() && kept->contains(WorkerName(tensor.name))) return {};
      return {absl::UnavailableError(absl::StrCat("worker ", w->id, " at ", w->address,
                                                  " restarted since mesh '", mesh.name,
                                                  "' was created"))};
    }
    return {};
  };
  // A user's mistake is answered as it is; a failure on the workers may be a gone worker's doing.
  const absl::StatusCode code = failure.code();
  const bool maybe_gone =
      code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kNotFound ||
      code == absl::StatusCode::kInternal || code == absl::StatusCode::kUnknown ||
      code == absl::StatusCode::kAborted || code == absl::StatusCode::kDataLoss;
  if (!maybe_gone) return absl::Status(code, WithoutInternalNames(failure.message()));
  absl::Status loss = TensorLoss(tensor.name, tensor.spec, ranks, gone);
  // Probed: the live workers when nothing explains the failure yet, and silent ones, whose
  // address refuses a dead process's probe (its blocks are then lost) but not a paused one's
  // (kept: it does not answer in time).
  std::vector<WorkerHandle> probed;
  bool silent_ones = false;
  for (int64_t id : ranks) {
    if (absl::StatusOr<WorkerHandle> w = registry.Get(id); w.ok()) {
      probed.push_back(*w);
    } else if (std::optional<WorkerHandle> silent = registry.Silent(id)) {
      probed.push_back(*silent);
      silent_ones = true;
    }
  }
  if (loss.ok() || silent_ones) {
    dispatcher_->Probe(probed);
    loss = TensorLoss(tensor.name, tensor.spec, ranks, gone);
  }
  if (loss.ok()) return absl::Status(code, WithoutInternalNames(failure.message()));
  return loss;
}

std::vector<std::shared_ptr<DTensorEntry>> DTensorTable::OnMesh(const std::string& mesh) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<DTensorEntry>> found;
  for (const auto& [name, t] : tensors_) {
    if ((mesh.empty() || t->mesh->name == mesh) && !hidden_.contains(name)) found.push_back(t);
  }
  return found;
}

std::vector<std::shared_ptr<DTensorEntry>> DTensorTable::OwnedBy(const std::string& client) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<DTensorEntry>> found;
  for (const auto& [name, t] : tensors_) {
    if (t->owner == client) found.push_back(t);
  }
  return found;
}

absl::Status DTensorTable::AwaitWrites(const std::vector<std::shared_ptr<DTensorEntry>>& tensors,
                                       absl::Time deadline) {
  for (const auto& t : tensors) RETURN_IF_ERROR(AwaitWrite(*t, deadline));
  return absl::OkStatus();
}

absl::Status DTensorTable::AwaitWrite(const DTensorEntry& tensor, absl::Time deadline) {
  if (!tensor.write->done.WaitForNotificationWithDeadline(deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat("tensor '", tensor.name, "' is still being written"));
  }
  if (!tensor.write->status.ok()) {
    return WithContext(absl::StrCat("tensor '", tensor.name, "' failed"), tensor.write->status);
  }
  return absl::OkStatus();
}

std::string DTensorTable::TemporaryName() {
  absl::MutexLock lock(&mu_);
  return absl::StrCat("dt/.read/", next_id_++);
}

void DTensorTable::ReleaseBytes(const DTensorEntry& tensor) {
  for (int64_t worker : tensor.mesh->mesh.ranks())
    ledger_->Release(worker, WorkerName(tensor.name));
}

void DTensorTable::Drop(const DTensorEntry& tensor, Durability durability) {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(tensor.name);
  if (it == tensors_.end() || it->second.get() != &tensor) return;
  ReleaseBytes(tensor);
  records_.Unrecord(tensor.name, durability);
  hidden_.erase(tensor.name);
  tensors_.erase(it);
}

void DTensorTable::SetRecovering(std::set<std::string> names) {
  absl::MutexLock lock(&mu_);
  recovering_ = std::move(names);
}

void DTensorTable::DoneRecovering(const std::string& name) {
  absl::MutexLock lock(&mu_);
  recovering_.erase(name);
}

absl::Status DTensorTable::Restore(const v1::TensorInfo& record, std::shared_ptr<Mesh> mesh,
                                   const absl::Status& lost,
                                   const std::optional<v1::Command>& repair) {
  ASSIGN_OR_RETURN(DTensorSpec spec, FromProto(record.meta()));
  auto tensor = std::make_shared<DTensorEntry>(std::move(mesh), std::move(spec), record.owner());
  tensor->name = record.name();
  const bool repairing = repair.has_value() && lost.ok();
  if (!repairing) {
    tensor->write->status = lost;
    tensor->write->done.Notify();
  }
  {
    absl::MutexLock lock(&mu_);
    if (tensors_.contains(tensor->name)) {
      return absl::AlreadyExistsError(absl::StrCat("a tensor named '", tensor->name, "' exists"));
    }
    // Shards the workers hold already: counted even past a budget lowered since.
    ledger_->Hold(Holdings(*tensor->mesh, tensor->name, tensor->spec), "a recovered tensor")
        .IgnoreError();
    tensors_[tensor->name] = tensor;
  }
  if (repairing) return PostWrite(*tensor, *repair);
  return absl::OkStatus();
}

std::vector<std::shared_ptr<DTensorEntry>> DTensorTable::Rehome(
    const Mesh& old, const std::shared_ptr<Mesh>& mesh,
    const std::function<std::optional<absl::Status>(const DTensorEntry&, const DTensorEntry&)>&
        repair) {
  std::vector<std::shared_ptr<DTensorEntry>> on_old, moved;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, t] : tensors_) {
      if (t->mesh.get() == &old) on_old.push_back(t);
    }
  }
  for (const std::shared_ptr<DTensorEntry>& t : on_old) {
    // post_mu before mu_, as Release takes them.
    absl::MutexLock post(&t->post_mu);
    if (t->released) continue;  // freed meanwhile
    auto entry = std::make_shared<DTensorEntry>(mesh, t->spec, t->owner);
    entry->name = t->name;
    if (std::optional<absl::Status> done = repair(*t, *entry); done.has_value()) {
      entry->write->status = *done;
      entry->write->done.Notify();
    }
    t->released = true;  // nothing more is posted for the old entry; its shards stay
    t->moved_to = entry;
    absl::MutexLock lock(&mu_);
    auto it = tensors_.find(t->name);
    if (it == tensors_.end() || it->second != t) continue;
    it->second = entry;  // same workers and names: the ledger's holdings stay as they are
    moved.push_back(entry);
  }
  return moved;
}

std::vector<std::string> DTensorTable::ForgetMesh(const Mesh& mesh) {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> dropped;
  for (auto t = tensors_.begin(); t != tensors_.end();) {
    if (t->second->mesh.get() != &mesh) {
      ++t;
      continue;
    }
    ReleaseBytes(*t->second);
    records_.Unrecord(t->first, Durability::kBeforeReturn);
    dropped.push_back(WorkerName(t->first));
    t = tensors_.erase(t);
  }
  return dropped;
}

void DTensorTable::Post(const Mesh& mesh, const v1::Command& command,
                        std::shared_ptr<TensorWrite> write,
                        std::vector<std::shared_ptr<DTensorEntry>> inputs, OnSuccess on_success) {
  absl::StatusOr<std::vector<WorkerHandle>> workers = meshes_->Workers(mesh);
  if (!workers.ok()) {
    write->status = workers.status();
    write->done.Notify();
    return;
  }
  dispatcher_->Post(*workers, command, mesh.command_timeout(),
                    [write, inputs = std::move(inputs), on_success = std::move(on_success)](
                        absl::Status status, std::vector<v1::CommandReply>) {
                      auto finish = [write, inputs](absl::Status status) {
                        for (const auto& in : inputs) {
                          if (status.ok()) break;
                          // Its replies came first; its own callback may still be on its way.
                          if (!in->write->done.WaitForNotificationWithTimeout(absl::Seconds(1)) ||
                              in->write->status.ok()) {
                            continue;
                          }
                          status = WithContext(absl::StrCat("input '", in->name, "' failed"),
                                               in->write->status);
                        }
                        write->status = std::move(status);
                        write->done.Notify();
                      };
                      if (status.ok() && on_success) {
                        on_success(std::move(finish));
                      } else {
                        finish(std::move(status));
                      }
                    });
}

absl::Status DTensorTable::Freed(const DTensorEntry& tensor) {
  absl::Status freed = absl::NotFoundError(
      absl::StrCat("tensor '", tensor.name, "' was freed before it was written"));
  if (!tensor.write->done.HasBeenNotified()) {
    tensor.write->status = freed;
    tensor.write->done.Notify();
  }
  return freed;
}

absl::Status DTensorTable::PostWrite(const DTensorEntry& tensor, const v1::Command& command,
                                     std::vector<std::shared_ptr<DTensorEntry>> inputs) {
  absl::MutexLock lock(&tensor.post_mu);
  if (tensor.released) return Freed(tensor);
  // Recorded once written, before anyone waiting for the write hears it is done; the record is
  // queued, and the write completes when it is durable (many writes share one commit).
  auto record = [this, name = tensor.name,
                 write = tensor.write](std::function<void(absl::Status)> done) {
    // A tensor still hidden (its direct upload waits for this write before revealing it) is
    // recorded too.
    std::shared_ptr<DTensorEntry> t = Entry(name);
    if (t != nullptr && t->write == write) {
      absl::MutexLock lock(&t->post_mu);
      if (records_.PersistAsync(*t, done)) return;
    }
    done(absl::OkStatus());  // freed or relaid since, or nothing to record
  };
  Post(*tensor.mesh, command, tensor.write, std::move(inputs), std::move(record));
  return absl::OkStatus();
}

absl::Status DTensorTable::PostWrites(const std::vector<std::shared_ptr<DTensorEntry>>& tensors,
                                      const v1::Command& command,
                                      std::vector<std::shared_ptr<DTensorEntry>> inputs) {
  const DTensorEntry& first = *tensors[0];
  absl::MutexLock lock(&first.post_mu);
  if (first.released) return Freed(first);
  std::vector<std::string> names;
  for (const auto& t : tensors) names.push_back(t->name);
  // Every tensor recorded (as PostWrite records one; their records share a commit), the write
  // done once the last is durable, with the first failure.
  auto record = [this, names = std::move(names),
                 write = first.write](std::function<void(absl::Status)> done) {
    struct Pending {
      absl::Mutex mu;
      int left ABSL_GUARDED_BY(mu) = 1;  // one for this loop, until it is through
      absl::Status status ABSL_GUARDED_BY(mu);
      std::function<void(absl::Status)> done;
    };
    auto pending = std::make_shared<Pending>();
    pending->done = std::move(done);
    auto finish = [pending](absl::Status s) {
      absl::Status status;
      {
        absl::MutexLock lock(&pending->mu);
        pending->status.Update(s);
        if (--pending->left > 0) return;
        status = pending->status;
      }
      pending->done(std::move(status));
    };
    for (const std::string& name : names) {
      std::shared_ptr<DTensorEntry> t = Entry(name);
      if (t == nullptr || t->write != write) continue;  // freed or relaid since
      {
        absl::MutexLock lock(&pending->mu);
        ++pending->left;
      }
      absl::MutexLock lock(&t->post_mu);
      if (!records_.PersistAsync(*t, finish)) finish(absl::OkStatus());
    }
    finish(absl::OkStatus());
  };
  Post(*first.mesh, command, first.write, std::move(inputs), std::move(record));
  return absl::OkStatus();
}

absl::Status DTensorTable::FinishWrite(const DTensorEntry& tensor) {
  absl::MutexLock lock(&tensor.post_mu);
  if (tensor.released) return Freed(tensor);
  absl::Status recorded = records_.Persist(tensor);
  tensor.write->status = recorded;
  tensor.write->done.Notify();
  return recorded;
}

std::shared_ptr<const TensorWrite> DTensorTable::Release(const DTensorEntry& tensor,
                                                         Durability durability) {
  std::shared_ptr<DTensorEntry> moved;
  {
    absl::MutexLock lock(&tensor.post_mu);
    moved = tensor.moved_to;
  }
  if (moved != nullptr) return Release(*moved, durability);
  absl::MutexLock lock(&tensor.post_mu);
  if (tensor.released) return nullptr;
  tensor.released = true;
  Drop(tensor, durability);
  v1::Command command;
  command.mutable_delete_tensors()->add_names(WorkerName(tensor.name));
  if (meshes_->Workers(*tensor.mesh).ok()) {
    auto freed = std::make_shared<TensorWrite>();
    Post(*tensor.mesh, command, freed);
    return freed;
  }
  // A mesh that lost a worker lost the shards on it; the workers still serving the mesh free
  // theirs, which nothing would name again (the table no longer lists the tensor).
  const std::vector<WorkerHandle> live = meshes_->LiveWorkers(*tensor.mesh);
  if (live.empty()) return nullptr;
  dispatcher_->Post(live, command, tensor.mesh->command_timeout(),
                    [](absl::Status, std::vector<v1::CommandReply>) {});
  return nullptr;
}

v1::TensorInfo DTensorTable::Describe(const DTensorEntry& tensor) const {
  v1::TensorInfo info;
  info.set_name(tensor.name);
  info.set_mesh(tensor.mesh->name);
  *info.mutable_meta() = ToProto(tensor.spec);
  info.set_owner(tensor.owner);
  if (!tensor.write->done.HasBeenNotified()) {
    info.set_state(v1::PENDING);
  } else if (tensor.write->status.ok()) {
    info.set_state(v1::READY);
  } else {
    info.set_state(v1::FAILED);
    info.set_error(WithoutInternalNames(tensor.write->status.message()));
  }
  return info;
}

}  // namespace tessera
