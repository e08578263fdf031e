#include "server/recovery/replica_repair.h"

#include <algorithm>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "server/cluster/worker_loss.h"
#include "spdlog/spdlog.h"

namespace tessera {

ReplicaRepair::~ReplicaRepair() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void ReplicaRepair::Start() {
  thread_ = std::thread([this] { Run(); });
}

void ReplicaRepair::Run() {
  while (!stop_.WaitForNotificationWithTimeout(interval_)) {
    const std::vector<std::shared_ptr<Mesh>> meshes = meshes_->List();
    {
      // The Pings of meshes replaced or deleted since are of no use.
      absl::MutexLock lock(&pings_->mu);
      std::erase_if(pings_->by_mesh, [&](const auto& ping) {
        return std::none_of(meshes.begin(), meshes.end(),
                            [&](const auto& mesh) { return mesh->id == ping.first; });
      });
    }
    for (const std::shared_ptr<Mesh>& mesh : meshes) {
      // Local tensors of the collectives API cannot be repaired: such a mesh stays broken, as it
      // says, until deleted.
      if (!mesh->locals.Names().empty() || !ReadyToRejoin(*mesh) || !Reached(*mesh)) continue;
      absl::StatusOr<std::shared_ptr<Mesh>> now = Rejoin(*mesh);
      if (!now.ok() || *now == nullptr) {
        // Not taken back: the next try Pings again, since work may have been queued meanwhile.
        absl::MutexLock lock(&pings_->mu);
        pings_->by_mesh.erase(mesh->id);
      }
      if (absl::IsNotFound(now.status())) {
        spdlog::debug("mesh '{}' was deleted before it took its workers back", mesh->name);
      } else if (!now.ok()) {
        spdlog::error("mesh '{}' could not take its restarted workers back: {}", mesh->name,
                      now.status().ToString());
      } else if (*now != nullptr && rejoined_) {
        // Outside the meshes' locks: what moves onto the new mesh posts commands to it.
        rejoined_(*mesh, *now);
      }
    }
  }
}

bool ReplicaRepair::ReadyToRejoin(const Mesh& mesh) const {
  const std::vector<int64_t>& ranks = mesh.mesh.ranks();
  absl::Time latest = absl::InfinitePast();
  bool changed = false;
  for (size_t p = 0; p < ranks.size(); ++p) {
    absl::StatusOr<WorkerHandle> w = registry_->Get(ranks[p]);
    if (!w.ok()) return false;
    if (w->incarnation == mesh.incarnations[p]) continue;
    changed = true;
    latest = std::max(latest, registry_->RegisteredAt(ranks[p]));
  }
  if (!changed) return false;
  for (int64_t id : ranks) {
    if (!registry_->HeardFromSince(id, latest)) return false;
  }
  return true;
}

bool ReplicaRepair::Reached(const Mesh& mesh) {
  std::vector<WorkerHandle> workers;
  std::vector<int64_t> incarnations;
  for (int64_t id : mesh.mesh.ranks()) {
    absl::StatusOr<WorkerHandle> w = registry_->Get(id);
    if (!w.ok()) return false;
    incarnations.push_back(w->incarnation);
    workers.push_back(*std::move(w));
  }
  {
    absl::MutexLock lock(&pings_->mu);
    auto it = pings_->by_mesh.find(mesh.id);
    if (it != pings_->by_mesh.end() && it->second.incarnations == incarnations) {
      return it->second.answered;  // answered, or in flight
    }
    pings_->by_mesh[mesh.id] = Pings::Ping{incarnations, false};
  }
  v1::Command ping;
  ping.mutable_ping();
  dispatcher_->Post(workers, ping, kPingTimeout,
                    [pings = pings_, id = mesh.id, incarnations](absl::Status status,
                                                                 std::vector<v1::CommandReply>) {
                      absl::MutexLock lock(&pings->mu);
                      auto it = pings->by_mesh.find(id);
                      if (it == pings->by_mesh.end() || it->second.incarnations != incarnations) {
                        return;  // replaced meanwhile
                      }
                      // One that failed (a worker died, or stayed busy past the timeout) is posted
                      // again at the next look.
                      if (status.ok()) {
                        it->second.answered = true;
                      } else {
                        pings->by_mesh.erase(it);
                      }
                    });
  return false;
}

std::optional<v1::SpreadTensor> ReplicaRepair::RepairCommand(
    const DTensorSpec& spec, const std::vector<int64_t>& restarted) {
  if (HasPartial(spec)) return std::nullopt;
  const DeviceMesh& mesh = spec.mesh;
  std::vector<bool> is_restarted(static_cast<size_t>(mesh.size()), false);
  for (int64_t p : restarted) is_restarted[static_cast<size_t>(p)] = true;
  for (int m = 0; m < mesh.ndim(); ++m) {
    if (!spec.placements[m].is_replicate()) continue;
    // Each group along m (the positions that differ only in m) broadcasts from its first rank that
    // was not restarted: every rank of a group along a Replicate dim holds the same block.
    std::vector<int64_t> sources(static_cast<size_t>(mesh.size()), -1);
    bool fits = true;
    for (int64_t p = 0; p < mesh.size() && fits; ++p) {
      if (sources[static_cast<size_t>(p)] >= 0) continue;
      std::vector<int64_t> c = mesh.CoordinateOfIndex(p);
      std::vector<int64_t> members;
      int64_t source = -1;
      for (int64_t i = 0; i < mesh.size(m); ++i) {
        c[m] = i;
        members.push_back(mesh.IndexOfCoordinate(c));
        if (source < 0 && !is_restarted[static_cast<size_t>(members.back())]) source = i;
      }
      fits = source >= 0;
      for (int64_t q : members) sources[static_cast<size_t>(q)] = source;
    }
    if (!fits) continue;
    v1::SpreadTensor s;
    *s.mutable_spec() = ToProto(spec);
    const bool one_source = std::all_of(sources.begin(), sources.end(),
                                        [&](int64_t i) { return i == sources.front(); });
    for (int d = 0; d < mesh.ndim(); ++d) {
      s.add_source_coordinate(d == m && one_source ? sources.front() : 0);
    }
    if (!one_source) s.mutable_group_sources()->Assign(sources.begin(), sources.end());
    s.add_broadcast_dims(m);
    return s;
  }
  return std::nullopt;
}

// The workers of a mesh to set up again as they came back, by mesh position.
struct ReplicaRepair::Returned {
  std::vector<int64_t> incarnations, budgets, restarted;
  std::vector<WorkerHandle> handles;
  // What each worker that registered again kept: a worker that came back from a coordinator
  // restart after its recovery wait holds its shards still (nullopt: it restarted empty).
  std::vector<std::optional<std::set<std::string>>> kept_tensors;

  // How the worker at position `p` came back, naming it.
  std::string CameBack(int64_t p) const {
    return absl::StrCat("worker ", handles[p].id, " at ", handles[p].address,
                        kept_tensors[p].has_value()
                            ? " registered again after the coordinator restarted"
                            : " restarted and came back without its shards");
  }
};

absl::StatusOr<ReplicaRepair::Returned> ReplicaRepair::GatherReturned(const Mesh& old) const {
  const std::vector<int64_t>& ranks = old.mesh.ranks();
  Returned back;
  for (size_t p = 0; p < ranks.size(); ++p) {
    ASSIGN_OR_RETURN(WorkerHandle w, registry_->Get(ranks[p]));
    if (w.incarnation != old.incarnations[p]) back.restarted.push_back(static_cast<int64_t>(p));
    back.kept_tensors.push_back(registry_->KeptBy(w.id, w.incarnation));
    back.incarnations.push_back(w.incarnation);
    back.budgets.push_back(w.memory_budget_bytes);
    back.handles.push_back(std::move(w));
  }
  return back;
}

std::optional<absl::Status> ReplicaRepair::RepairMoved(const Returned& back,
                                                       const std::vector<int64_t>& ranks,
                                                       const Mesh& mesh, const absl::Status& formed,
                                                       const DTensorEntry& t,
                                                       const DTensorEntry& entry) {
  // A write in flight on the old mesh cannot succeed; one that failed stays failed.
  if (!t.write->done.HasBeenNotified()) {
    return absl::UnavailableError(absl::StrCat("tensor '", t.name, "' was being written when ",
                                               back.CameBack(back.restarted.front())));
  }
  if (!t.write->status.ok()) return t.write->status;
  // The positions whose worker came back without this tensor's block.
  const std::string held_name = DTensorTable::WorkerName(t.name);
  std::vector<int64_t> lost_at;
  for (int64_t p : back.restarted) {
    if (!back.kept_tensors[p].has_value() || !back.kept_tensors[p]->contains(held_name)) {
      lost_at.push_back(p);
    }
  }
  if (lost_at.empty()) return absl::OkStatus();  // every block is where it was
  auto gone = [&](int64_t p) -> absl::Status {
    if (std::find(lost_at.begin(), lost_at.end(), p) == lost_at.end()) {
      return absl::OkStatus();
    }
    return absl::UnavailableError(back.CameBack(p));
  };
  absl::Status loss = TensorLoss(t.name, t.spec, ranks, gone);
  if (loss.code() == absl::StatusCode::kDataLoss) return loss;
  std::optional<v1::SpreadTensor> spread = RepairCommand(t.spec, lost_at);
  if (!spread.has_value()) {
    return absl::DataLossError(absl::StrCat("tensor '", t.name,
                                            "' could not be repaired from its replicas after ",
                                            back.CameBack(lost_at.front())));
  }
  // Its replicas are alive, but the mesh has no communicators to broadcast them over (it stays
  // broken, as its Health says).
  if (!formed.ok()) {
    return absl::UnavailableError(absl::StrCat("tensor '", t.name, "' was not repaired after ",
                                               back.CameBack(lost_at.front()), ": ",
                                               formed.message()));
  }
  v1::Command command;
  *command.mutable_spread_tensor() = *std::move(spread);
  command.mutable_spread_tensor()->set_mesh_id(mesh.id);
  command.mutable_spread_tensor()->set_tensor(held_name);
  if (absl::Status st = tensors_->PostWrite(entry, command); !st.ok()) return st;
  spdlog::info("tensor '{}': repairing worker {}'s block from a replica", t.name,
               back.handles[lost_at.front()].id);
  return std::nullopt;
}

void ReplicaRepair::TearDownOld(const Mesh& old, const Returned& back) {
  std::vector<WorkerHandle> kept;
  for (size_t p = 0; p < back.handles.size(); ++p) {
    if (std::find(back.restarted.begin(), back.restarted.end(), static_cast<int64_t>(p)) ==
        back.restarted.end()) {
      kept.push_back(back.handles[p]);
    }
  }
  v1::Command teardown;
  teardown.mutable_teardown_mesh()->set_mesh_id(old.id);
  dispatcher_->Post(kept, teardown, Mesh::kRpcSlack,
                    [](absl::Status, std::vector<v1::CommandReply>) {});
  store_->ErasePrefix(MeshReformer::StorePrefix(old));
}

absl::StatusOr<std::shared_ptr<Mesh>> ReplicaRepair::Rejoin(Mesh& old) {
  // A DeleteMesh of `old` that came first took it out of the table (Replace fails below); one that
  // comes later waits for both locks, and deletes the new mesh with the tensors moved onto it.
  absl::MutexLock old_changing(&old.change_mu);
  // A state recovery that held the lock may have changed what is to do; the next look decides.
  if (!ReadyToRejoin(old)) return nullptr;
  const std::vector<int64_t>& ranks = old.mesh.ranks();
  ASSIGN_OR_RETURN(Returned back, GatherReturned(old));
  auto mesh = std::make_shared<Mesh>(old.name, old.mesh, std::move(back.incarnations), old.timeout,
                                     std::move(back.budgets), ledger_);
  absl::MutexLock changing(&mesh->change_mu);
  // Nothing is posted on the new mesh until its tensors' repairs are: they come first.
  absl::MutexLock submit(&mesh->submit_mu);
  RETURN_IF_ERROR(meshes_->Replace(old, mesh));
  spdlog::info("mesh '{}': worker(s) at position(s) {} came back; set up again as mesh id {}",
               old.name, absl::StrJoin(back.restarted, ", "), mesh->id);
  // Communicators first: the repairs posted below broadcast over them. A set-up that fails with
  // every worker alive (one busy past the connect timeout) is tried again, each attempt waited for
  // before the next and all before the repairs: a repair that ran after a failed attempt would
  // find no communicators and fail a tensor whose replica is alive.
  absl::Status formed = reformer_->SetUp(*mesh);
  if (!formed.ok()) {
    spdlog::warn("mesh '{}': communicators did not form again ({}); forming them again", mesh->name,
                 formed.ToString());
    formed = reformer_->FormAgainNow(*mesh, formed);
    if (!formed.ok()) {
      spdlog::error("mesh '{}': communicators could not be formed again: {}", mesh->name,
                    formed.ToString());
    }
  }
  tensors_->Rehome(
      old, mesh,
      [&](const DTensorEntry& t, const DTensorEntry& entry) -> std::optional<absl::Status> {
        return RepairMoved(back, ranks, *mesh, formed, t, entry);
      });
  // The old mesh's communicators on the workers that kept them are of no use any more.
  TearDownOld(old, back);
  return mesh;
}

}  // namespace tessera
