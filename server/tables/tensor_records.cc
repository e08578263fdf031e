#include "server/tables/tensor_records.h"

#include <utility>

#include "core/status_macros.h"
#include "proto/convert.h"
#include "spdlog/spdlog.h"
#include "tessera/v1/tensor.pb.h"

namespace tessera {

std::string TensorRecords::Encode(const DTensorEntry& tensor) {
  v1::TensorInfo record;
  record.set_name(tensor.name);
  record.set_mesh(tensor.mesh->name);
  *record.mutable_meta() = ToProto(tensor.spec);
  record.set_owner(tensor.owner);
  return record.SerializeAsString();
}

absl::StatusOr<bool> TensorRecords::RecordRelayout(const DTensorEntry& relaid) const {
  if (store_ == nullptr) return false;
  RETURN_IF_ERROR(store_->Put("relayout", relaid.name, Encode(relaid)));
  return true;
}

std::optional<std::string> TensorRecords::RecordOf(const DTensorEntry& tensor) const {
  if (store_ == nullptr || tensor.released) return std::nullopt;
  return Encode(tensor);
}

absl::Status TensorRecords::Persist(const DTensorEntry& tensor) const {
  std::optional<std::string> record = RecordOf(tensor);
  if (!record.has_value()) return absl::OkStatus();
  RETURN_IF_ERROR(store_->Put("tensor", tensor.name, *record));
  if (tensor.relayout_recorded) EraseRelayout(tensor.name, Durability::kBeforeReturn);
  return absl::OkStatus();
}

bool TensorRecords::PersistAsync(const DTensorEntry& tensor, StateStore::Done done) const {
  std::optional<std::string> record = RecordOf(tensor);
  if (!record.has_value()) return false;
  store_->PutAsync("tensor", tensor.name, *std::move(record), std::move(done));
  // Queued after the record, so an intent is never gone while the record is not there.
  if (tensor.relayout_recorded) EraseRelayout(tensor.name, Durability::kQueued);
  return true;
}

absl::Status TensorRecords::Flush() const {
  return store_ == nullptr ? absl::OkStatus() : store_->Flush();
}

void TensorRecords::EraseRelayout(const std::string& name, Durability durability) const {
  // An intent left behind marks the tensor lost at the next restart if its record then differs.
  EraseRecord("relayout", name, durability, "its relayout intent stays recorded");
}

void TensorRecords::Unrecord(const std::string& name, Durability durability) const {
  EraseRecord("tensor", name, durability, "freed, but its record stays");
}

void TensorRecords::EraseRecord(const char* kind, const std::string& name, Durability durability,
                                const char* what_stays) const {
  if (store_ == nullptr) return;
  auto log = [name, what_stays](const absl::Status& s) {
    if (!s.ok()) spdlog::error("tensor '{}': {}: {}", name, what_stays, s.ToString());
  };
  if (durability == Durability::kQueued) {
    store_->EraseAsync(kind, name, log);
  } else {
    log(store_->Erase(kind, name));
  }
}

}  // namespace tessera
