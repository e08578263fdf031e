#include "server/tables/local_tensor_table.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/names.h"

namespace tessera {
namespace {

// Numbers the tables of the process, so that each keeps its own keys in a shared ledger.
std::atomic<int64_t> next_table{1};

}  // namespace

LocalTensorTable::LocalTensorTable(std::string mesh_name, size_t ranks, LocalTensorAccount account)
    : mesh_name_(std::move(mesh_name)),
      ranks_(ranks),
      account_(std::move(account)),
      key_prefix_(absl::StrCat("local/", next_table++, "/")) {}

void LocalTensorTable::Account(const std::string& name, size_t position,
                               const std::optional<LocalLayout>& layout) {
  if (account_.ledger == nullptr || forgotten_ || position >= account_.workers.size()) return;
  const int64_t worker = account_.workers[position];
  if (!layout.has_value()) {
    account_.ledger->Release(worker, Key(name));
    return;
  }
  const int64_t budget = position < account_.budgets.size() ? account_.budgets[position] : 0;
  account_.ledger->Set({worker, budget, Key(name), LayoutBytes(*layout)});
}

absl::StatusOr<RankLayouts> LocalTensorTable::OnEveryRank(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  std::string cause;
  if (auto failed = failed_writes_.find(name); failed != failed_writes_.end()) {
    cause =
        absl::StrCat(" (the last collective writing it failed: ", failed->second.message(), ")");
  }
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(
        absl::StrCat("mesh '", mesh_name_, "' has no tensor ", QuotedName(name), cause));
  }
  // Every rank takes part: one without the input would leave its peers in the collective until
  // the timeout, which breaks the mesh's communicators for good.
  std::vector<int64_t> missing;
  for (size_t r = 0; r < it->second.size(); ++r) {
    if (!it->second[r].has_value()) missing.push_back(static_cast<int64_t>(r));
  }
  if (!missing.empty()) {
    return absl::NotFoundError(absl::StrCat("tensor '", name, "' of mesh '", mesh_name_,
                                            "' is not on ranks ", absl::StrJoin(missing, ", "),
                                            "; a collective needs it on every rank", cause));
  }
  return it->second;
}

absl::StatusOr<LocalTensorTable::Reservation> LocalTensorTable::Reserve(const std::string& name,
                                                                        RankLayouts outputs) {
  Reservation reservation;
  absl::MutexLock lock(&mu_);
  if (account_.ledger != nullptr && !forgotten_) {
    std::vector<WorkerBytes::Holding> holdings;
    for (size_t r = 0; r < outputs.size() && r < account_.workers.size(); ++r) {
      if (!outputs[r].has_value()) continue;
      holdings.push_back({account_.workers[r],
                          r < account_.budgets.size() ? account_.budgets[r] : 0, Key(name),
                          LayoutBytes(*outputs[r])});
    }
    if (absl::Status s = account_.ledger->Hold(
            holdings,
            absl::StrCat("the output '", name, "' of a collective on mesh '", mesh_name_, "'"));
        !s.ok()) {
      return s;
    }
  }
  auto [entry, added] = tensors_.try_emplace(name, ranks_);
  if (!added) reservation.previous = entry->second;
  reservation.writes.resize(outputs.size());
  for (size_t r = 0; r < outputs.size(); ++r) {
    reservation.writes[r] = outputs[r].has_value();
    if (reservation.writes[r]) entry->second[r] = std::move(outputs[r]);
  }
  reservation.write = next_write_++;
  last_writer_[name] = reservation.write;
  return reservation;
}

absl::Status LocalTensorTable::Settle(const std::string& name, bool kept_input,
                                      const Reservation& reservation, absl::Status status,
                                      const std::vector<Reported>& reported,
                                      absl::FunctionRef<void()> erase_on_workers) {
  absl::MutexLock lock(&mu_);
  auto latest = last_writer_.find(name);
  const bool last = latest != last_writer_.end() && latest->second == reservation.write;
  if (last) last_writer_.erase(latest);
  // A later writer (or a delete) has the name's entry now; only the last one is checked.
  const RankLayouts* entered = nullptr;
  if (auto it = tensors_.find(name); it != tensors_.end()) entered = &it->second;
  for (size_t r = 0; last && status.ok() && r < reported.size(); ++r) {
    const bool wrote = reported[r].wrote;
    if (r < reservation.writes.size() && wrote != reservation.writes[r]) {
      status = absl::InternalError(absl::StrCat("mesh position ", r, wrote ? " wrote" : " wrote no",
                                                " '", name, "' where the coordinator expected ",
                                                wrote ? "none" : "it to"));
    } else if (wrote && (entered == nullptr || !reported[r].layout.has_value() ||
                         (*entered)[r] != reported[r].layout)) {
      status = absl::InternalError(absl::StrCat(
          "mesh position ", r, " wrote '", name, "' as ",
          reported[r].layout ? LayoutToString(*reported[r].layout) : "an unreadable layout",
          " where the coordinator expected ",
          entered && (*entered)[r] ? LayoutToString(*(*entered)[r]) : "none"));
    }
  }
  if (status.ok()) {
    failed_writes_.erase(name);
    return status;
  }
  failed_writes_[name] = status;
  if (!last) return status;
  if (kept_input) {
    if (reservation.previous.has_value()) tensors_[name] = *reservation.previous;
    for (size_t r = 0; r < ranks_; ++r) {
      Account(name, r, reservation.previous ? (*reservation.previous)[r] : std::nullopt);
    }
    return status;
  }
  // Its contents are undefined: the name leaves the table and every worker.
  tensors_.erase(name);
  for (size_t r = 0; r < ranks_; ++r) Account(name, r, std::nullopt);
  erase_on_workers();
  return status;
}

absl::Status LocalTensorTable::ReserveUpload(const std::string& name, int64_t rank,
                                             const LocalLayout& layout) {
  absl::MutexLock lock(&mu_);
  const size_t r = static_cast<size_t>(rank);
  if (account_.ledger == nullptr || forgotten_ || r >= account_.workers.size()) {
    return absl::OkStatus();
  }
  const WorkerBytes::Holding holding{account_.workers[r],
                                     r < account_.budgets.size() ? account_.budgets[r] : 0,
                                     Key(name), LayoutBytes(layout)};
  return account_.ledger->Hold({&holding, 1}, absl::StrCat("local tensor '", name, "' of mesh '",
                                                           mesh_name_, "' on rank ", rank));
}

void LocalTensorTable::CancelUpload(const std::string& name, int64_t rank) {
  absl::MutexLock lock(&mu_);
  std::optional<LocalLayout> held;
  if (auto it = tensors_.find(name); it != tensors_.end() && static_cast<size_t>(rank) < ranks_) {
    held = it->second[static_cast<size_t>(rank)];
  }
  Account(name, static_cast<size_t>(rank), held);
}

void LocalTensorTable::RecordUpload(const std::string& name, int64_t rank, LocalLayout layout) {
  absl::MutexLock lock(&mu_);
  Account(name, static_cast<size_t>(rank), layout);
  tensors_.try_emplace(name, ranks_).first->second[static_cast<size_t>(rank)] = std::move(layout);
  last_writer_[name] = next_write_++;
  failed_writes_.erase(name);
}

std::optional<LocalLayout> LocalTensorTable::LayoutOn(const std::string& name, int64_t rank) const {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end() || rank < 0 || static_cast<size_t>(rank) >= it->second.size()) {
    return std::nullopt;
  }
  return it->second[static_cast<size_t>(rank)];
}

absl::Status LocalTensorTable::Erase(const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (tensors_.erase(name) == 0) {
    return absl::NotFoundError(
        absl::StrCat("mesh '", mesh_name_, "' has no tensor ", QuotedName(name)));
  }
  last_writer_.erase(name);
  failed_writes_.erase(name);
  for (size_t r = 0; r < ranks_; ++r) Account(name, r, std::nullopt);
  return absl::OkStatus();
}

std::vector<std::string> LocalTensorTable::Names() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, layouts] : tensors_) names.push_back(name);
  return names;
}

void LocalTensorTable::Forget() {
  absl::MutexLock lock(&mu_);
  for (const auto& [name, layouts] : tensors_) {
    for (size_t r = 0; r < ranks_; ++r) Account(name, r, std::nullopt);
  }
  tensors_.clear();
  last_writer_.clear();
  failed_writes_.clear();
  forgotten_ = true;
}
}  // namespace tessera
