#include "server/cluster/rendezvous_store.h"

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace tessera {

absl::StatusOr<int64_t> RendezvousStore::MeshOfKey(const std::string& key) {
  int64_t mesh = -1;
  const absl::string_view rest = absl::StripPrefix(key, "mesh/");
  const size_t slash = rest.find('/');
  if (rest.size() == key.size() || slash == absl::string_view::npos || slash + 1 == rest.size() ||
      !absl::SimpleAtoi(rest.substr(0, slash), &mesh) || mesh < 0) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous key '",
                                                   absl::CEscape(key.substr(0, 80)),
                                                   "' is not under a mesh's prefix 'mesh/<id>/'"));
  }
  return mesh;
}

absl::Status RendezvousStore::CheckEntry(const std::string& key, const std::string& value) const {
  if (static_cast<int64_t>(key.size()) > limits_.max_key_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("rendezvous key of ", key.size(),
                                                     " bytes is longer than the store's limit of ",
                                                     limits_.max_key_bytes));
  }
  if (absl::StatusOr<int64_t> mesh = MeshOfKey(key); !mesh.ok()) return mesh.status();
  if (static_cast<int64_t>(value.size()) > limits_.max_value_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rendezvous value of ", value.size(), " bytes for key '", key,
                     "' is larger than the store's limit of ", limits_.max_value_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::Set(const std::string& key, std::string value) {
  if (absl::Status s = CheckEntry(key, value); !s.ok()) return s;
  const int64_t mesh = *MeshOfKey(key);
  absl::MutexLock lock(&mu_);
  auto it = values_.find(key);
  if (it != values_.end()) {
    it->second = std::move(value);
    return absl::OkStatus();
  }
  int64_t& mesh_keys = keys_per_mesh_[mesh];
  if (mesh_keys >= limits_.max_keys_per_mesh) {
    return absl::ResourceExhaustedError(absl::StrCat("mesh ", mesh, " already holds ", mesh_keys,
                                                     " rendezvous keys, the store's limit"));
  }
  if (static_cast<int64_t>(values_.size()) >= limits_.max_keys) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the rendezvous store already holds ", values_.size(), " keys, its limit"));
  }
  ++mesh_keys;
  values_.emplace(key, std::move(value));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RendezvousStore::Get(const std::vector<std::string>& keys,
                                                              absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto all_present = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    for (const std::string& k : keys) {
      if (!values_.contains(k)) return false;
    }
    return true;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&all_present), timeout)) {
    for (const std::string& k : keys) {
      if (!values_.contains(k)) {
        return absl::DeadlineExceededError(absl::StrCat(
            "rendezvous key '", k, "' was not set within ", absl::FormatDuration(timeout)));
      }
    }
  }
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(values_.at(k));
  return out;
}

void RendezvousStore::ErasePrefix(const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  absl::erase_if(values_, [&](const auto& kv) {
    if (!absl::StartsWith(kv.first, prefix)) return false;
    absl::StatusOr<int64_t> mesh = MeshOfKey(kv.first);
    if (mesh.ok() && --keys_per_mesh_[*mesh] == 0) keys_per_mesh_.erase(*mesh);
    return true;
  });
}

size_t RendezvousStore::size() const {
  absl::MutexLock lock(&mu_);
  return values_.size();
}

}  // namespace tessera
