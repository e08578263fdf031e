#include "server/recovery/state_recovery.h"

#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "server/cluster/worker_loss.h"
#include "server/recovery/replica_repair.h"
#include "spdlog/spdlog.h"

namespace tessera {

StateRecovery::~StateRecovery() { Join(); }

void StateRecovery::Join() {
  if (thread_.joinable()) thread_.join();
}

absl::Status StateRecovery::Load() {
  ASSIGN_OR_RETURN(auto workers, store_->Load("worker"));
  ASSIGN_OR_RETURN(auto meshes, store_->Load("mesh"));
  ASSIGN_OR_RETURN(auto tensors, store_->Load("tensor"));
  ASSIGN_OR_RETURN(auto relayouts, store_->Load("relayout"));
  std::map<std::string, int64_t> ids;
  for (const auto& [address, id] : workers) {
    int64_t parsed = 0;
    if (!absl::SimpleAtoi(id, &parsed) || parsed < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(store_->path(), ": worker record '", address, "' holds id '", id, "'"));
    }
    ids[address] = parsed;
  }
  for (const auto& [name, bytes] : meshes) {
    if (!meshes_recorded_[name].ParseFromString(bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(store_->path(), ": mesh record '", name, "' cannot be parsed"));
    }
  }
  for (const auto& [name, bytes] : tensors) {
    if (!tensors_recorded_[name].ParseFromString(bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(store_->path(), ": tensor record '", name, "' cannot be parsed"));
    }
  }
  // A relayout in place whose intent differs from the tensor's record was cut short: the workers
  // may hold either layout, or some of each. One whose record caught up finished; one whose tensor
  // was freed is over.
  for (const auto& [name, bytes] : relayouts) {
    v1::TensorInfo intent;
    if (!intent.ParseFromString(bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(store_->path(), ": relayout record '", name, "' cannot be parsed"));
    }
    auto recorded = tensors_recorded_.find(name);
    if (recorded != tensors_recorded_.end() &&
        recorded->second.meta().SerializeAsString() != intent.meta().SerializeAsString()) {
      absl::StatusOr<DTensorSpec> from = FromProto(recorded->second.meta());
      absl::StatusOr<DTensorSpec> to = FromProto(intent.meta());
      cut_short_[name] = absl::DataLossError(
          absl::StrCat("tensor '", name, "' was being relaid out from ",
                       from.ok() ? PlacementsToString(from->placements) : "?", " to ",
                       to.ok() ? PlacementsToString(to->placements) : "?",
                       " when the coordinator stopped; its shards may be in either layout"));
      continue;
    }
    RETURN_IF_ERROR(store_->Erase("relayout", name));
  }
  // The worker-side names the records place on each worker: all it keeps.
  std::map<int64_t, std::set<std::string>> expected;
  for (const auto& [name, tensor] : tensors_recorded_) {
    auto mesh = meshes_recorded_.find(tensor.mesh());
    if (mesh == meshes_recorded_.end()) continue;
    for (int64_t id : mesh->second.worker_ids()) {
      expected[id].insert(DTensorTable::WorkerName(name));
    }
  }
  registry_->Restore(ids, [expected = std::move(expected)](int64_t id) {
    auto it = expected.find(id);
    return it == expected.end() ? std::set<std::string>{} : it->second;
  });
  std::set<std::string> mesh_names, tensor_names;
  for (const auto& [name, m] : meshes_recorded_) mesh_names.insert(name);
  for (const auto& [name, t] : tensors_recorded_) tensor_names.insert(name);
  meshes_->SetRecovering(std::move(mesh_names));
  tensors_->SetRecovering(std::move(tensor_names));
  spdlog::info(
      "state store {}: {} workers, {} meshes, {} tensors to recover ({} relayouts cut "
      "short)",
      store_->path(), ids.size(), meshes_recorded_.size(), tensors_recorded_.size(),
      cut_short_.size());
  return absl::OkStatus();
}

void StateRecovery::Start() {
  thread_ = std::thread([this] { Run(); });
}

void StateRecovery::Run() {
  // Every worker of a recorded mesh registers again (a heartbeat refused, then Register) and began
  // its new incarnation (a heartbeat of it came), or the wait ends.
  std::set<int64_t> needed;
  for (const auto& [name, m] : meshes_recorded_)
    needed.insert(m.worker_ids().begin(), m.worker_ids().end());
  const absl::Time deadline = absl::Now() + wait_;
  while (absl::Now() < deadline) {
    bool all = true;
    for (int64_t id : needed) {
      all = all && registry_->HeldWhenRecovered(id).has_value() && registry_->BeganIncarnation(id);
    }
    if (all) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  for (const auto& [name, record] : meshes_recorded_) {
    if (absl::Status s = RestoreMesh(record); !s.ok()) {
      spdlog::error("mesh '{}' was not recovered: {}", name, s.ToString());
    }
    meshes_->DoneRecovering(name);
  }
  // Tensors whose mesh was not recorded (or not recovered) are gone.
  for (const auto& [name, t] : tensors_recorded_) tensors_->DoneRecovering(name);
  if (then_) then_();
  spdlog::info("recovery from {} done", store_->path());
}

absl::Status StateRecovery::RestoreMesh(const v1::CreateMeshRequest& record) {
  const Shape shape(record.shape().begin(), record.shape().end());
  const std::vector<std::string> names(record.dim_names().begin(), record.dim_names().end());
  const std::vector<int64_t> ids(record.worker_ids().begin(), record.worker_ids().end());
  ASSIGN_OR_RETURN(DeviceMesh dm, DeviceMesh::Create(record.device_type(), shape, names, ids));
  std::vector<int64_t> incarnations, budgets;
  bool all_back = true;
  for (int64_t id : ids) {
    absl::StatusOr<WorkerHandle> w = registry_->Get(id);
    all_back = all_back && w.ok();
    // A worker that did not come back: no incarnation it could ever have, so the mesh counts it
    // gone.
    incarnations.push_back(w.ok() ? w->incarnation : -1);
    budgets.push_back(w.ok() ? w->memory_budget_bytes : 0);
  }
  auto mesh =
      std::make_shared<Mesh>(record.name(), std::move(dm), std::move(incarnations),
                             absl::Milliseconds(record.timeout_ms()), std::move(budgets), ledger_);
  // A DeleteMesh of it, or a rejoin of a worker that comes back meanwhile (ReplicaRepair), waits
  // until its tensors are restored onto it.
  absl::MutexLock changing(&mesh->change_mu);
  RETURN_IF_ERROR(meshes_->Add(mesh));
  if (all_back) {
    if (absl::Status s = reformer_->SetUp(*mesh); !s.ok()) {
      spdlog::warn(
          "mesh '{}' recovered but its communicators did not form ({}); forming them again",
          record.name(), s.ToString());
      reformer_->FormAgain(mesh, s);
    }
  }
  for (const auto& [name, tensor] : tensors_recorded_) {
    if (tensor.mesh() != record.name()) continue;
    absl::StatusOr<DTensorSpec> spec = FromProto(tensor.meta());
    absl::Status lost = spec.status();
    std::optional<v1::Command> repair;
    if (spec.ok()) {
      // A worker that came back without its shard lost it (it restarted during the outage).
      const std::string held_name = DTensorTable::WorkerName(name);
      std::vector<int64_t> without;  // the positions whose worker came back without it
      lost = TensorLoss(name, *spec, ids, [&](int64_t p) -> absl::Status {
        std::optional<std::set<std::string>> held = registry_->HeldWhenRecovered(ids[p]);
        if (!held.has_value() || held->contains(held_name)) return absl::OkStatus();
        without.push_back(p);
        return absl::UnavailableError(absl::StrCat("worker ", ids[p],
                                                   " came back from the coordinator's restart "
                                                   "without its shard"));
      });
      if (lost.code() == absl::StatusCode::kUnavailable) {
        // Every block it lacks has a replica: copied back from one, as a rejoin repairs, once the
        // mesh runs (else its uses wait for the mesh and answer UNAVAILABLE).
        lost = absl::OkStatus();
        std::optional<v1::SpreadTensor> spread = ReplicaRepair::RepairCommand(*spec, without);
        if (!spread.has_value()) {
          lost = absl::DataLossError(absl::StrCat(
              "tensor '", name, "' could not be repaired from its replicas after worker ",
              ids[without.front()], " came back from the coordinator's restart without its shard"));
        } else if (all_back) {
          repair.emplace();
          *repair->mutable_spread_tensor() = *std::move(spread);
          repair->mutable_spread_tensor()->set_mesh_id(mesh->id);
          repair->mutable_spread_tensor()->set_tensor(held_name);
        }
      }
    }
    if (auto cut = cut_short_.find(name); cut != cut_short_.end() && lost.ok()) lost = cut->second;
    if (absl::Status s = tensors_->Restore(tensor, mesh, lost, repair); !s.ok()) {
      spdlog::error("tensor '{}' was not recovered: {}", name, s.ToString());
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera
