#include "server/worker_bytes.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tessera {

absl::Status WorkerBytes::Hold(std::span<const Holding> holdings, absl::string_view what) {
  absl::MutexLock lock(&mu_);
  // Per worker, in the order they first appear: the bytes entered and the bytes they replace.
  struct Change {
    int64_t worker = 0;
    int64_t budget = 0;
    int64_t added = 0;
    int64_t replaced = 0;
  };
  std::vector<Change> changes;
  for (const Holding& h : holdings) {
    auto c = std::find_if(changes.begin(), changes.end(),
                          [&](const Change& x) { return x.worker == h.worker; });
    if (c == changes.end()) c = changes.insert(changes.end(), Change{h.worker, h.budget, 0, 0});
    c->added += h.bytes;
    if (auto w = workers_.find(h.worker); w != workers_.end()) {
      if (auto k = w->second.keys.find(h.key); k != w->second.keys.end()) c->replaced += k->second;
    }
  }
  for (const Change& c : changes) {
    auto w = workers_.find(c.worker);
    const int64_t others = (w == workers_.end() ? 0 : w->second.total) - c.replaced;
    if (c.budget > 0 && c.added > c.replaced && others + c.added > c.budget) {
      return absl::ResourceExhaustedError(
          absl::StrCat(what, " needs ", c.added, " bytes on worker ", c.worker, ", which holds ",
                       others, " of its ", c.budget, "-byte budget"));
    }
  }
  for (const Holding& h : holdings) {
    Worker& w = workers_[h.worker];
    int64_t& bytes = w.keys[h.key];
    w.total += h.bytes - bytes;
    bytes = h.bytes;
  }
  return absl::OkStatus();
}

void WorkerBytes::Set(const Holding& holding) {
  absl::MutexLock lock(&mu_);
  Worker& w = workers_[holding.worker];
  int64_t& bytes = w.keys[holding.key];
  w.total += holding.bytes - bytes;
  bytes = holding.bytes;
}

void WorkerBytes::Release(int64_t worker, const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto w = workers_.find(worker);
  if (w == workers_.end()) return;
  if (auto k = w->second.keys.find(key); k != w->second.keys.end()) {
    w->second.total -= k->second;
    w->second.keys.erase(k);
  }
}

int64_t WorkerBytes::Held(int64_t worker) const {
  absl::MutexLock lock(&mu_);
  auto w = workers_.find(worker);
  return w == workers_.end() ? 0 : w->second.total;
}

}  // namespace tessera
