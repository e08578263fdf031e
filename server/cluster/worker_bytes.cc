#include "server/cluster/worker_bytes.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/checked_math.h"

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
  const auto too_many = [&](int64_t worker) {
    return absl::ResourceExhaustedError(absl::StrCat(what, " needs more bytes on worker ", worker,
                                                     " than fit in int64 with what it holds"));
  };
  std::vector<Change> changes;
  for (const Holding& h : holdings) {
    if (h.bytes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " holds ", h.bytes, " bytes on worker ", h.worker));
    }
    auto c = std::find_if(changes.begin(), changes.end(),
                          [&](const Change& x) { return x.worker == h.worker; });
    if (c == changes.end()) c = changes.insert(changes.end(), Change{h.worker, h.budget, 0, 0});
    std::optional<int64_t> added = CheckedAdd(c->added, h.bytes);
    if (!added) return too_many(h.worker);
    c->added = *added;
    if (auto w = workers_.find(h.worker); w != workers_.end()) {
      if (auto k = w->second.keys.find(h.key); k != w->second.keys.end()) c->replaced += k->second;
    }
  }
  for (const Change& c : changes) {
    auto w = workers_.find(c.worker);
    // Both are within [0, total], so neither the difference nor the total can wrap.
    const int64_t others = (w == workers_.end() ? 0 : w->second.total) - c.replaced;
    const std::optional<int64_t> after = CheckedAdd(others, c.added);
    if (!after) return too_many(c.worker);
    if (c.budget > 0 && c.added > c.replaced && *after > c.budget) {
      return absl::ResourceExhaustedError(
          absl::StrCat(what, " needs ", c.added, " bytes on worker ", c.worker, ", which holds ",
                       others, " of its ", c.budget, "-byte budget"));
    }
  }
  for (const Holding& h : holdings) Enter(h);
  return absl::OkStatus();
}

void WorkerBytes::Enter(const Holding& holding) {
  Worker& w = workers_[holding.worker];
  int64_t& bytes = w.keys[holding.key];
  w.total -= bytes;
  // Bytes entered unchecked (Set) may pass int64 in sum: the key keeps what fits.
  bytes =
      std::min(std::max<int64_t>(holding.bytes, 0), std::numeric_limits<int64_t>::max() - w.total);
  w.total += bytes;
}

void WorkerBytes::Set(const Holding& holding) {
  absl::MutexLock lock(&mu_);
  Enter(holding);
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
