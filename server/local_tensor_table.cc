#include "server/local_tensor_table.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera {

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
        absl::StrCat("mesh '", mesh_name_, "' has no tensor '", name, "'", cause));
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

LocalTensorTable::Reservation LocalTensorTable::Reserve(const std::string& name,
                                                        RankLayouts outputs) {
  Reservation reservation;
  absl::MutexLock lock(&mu_);
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
    return status;
  }
  // Its contents are undefined: the name leaves the table and every worker.
  tensors_.erase(name);
  erase_on_workers();
  return status;
}

void LocalTensorTable::RecordUpload(const std::string& name, int64_t rank, LocalLayout layout) {
  absl::MutexLock lock(&mu_);
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
    return absl::NotFoundError(absl::StrCat("mesh '", mesh_name_, "' has no tensor '", name, "'"));
  }
  last_writer_.erase(name);
  failed_writes_.erase(name);
  return absl::OkStatus();
}

std::vector<std::string> LocalTensorTable::Names() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, layouts] : tensors_) names.push_back(name);
  return names;
}

}  // namespace tessera
