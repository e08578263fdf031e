#ifndef TESSERA_WORKER_SHARD_STORE_H_
#define TESSERA_WORKER_SHARD_STORE_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/host_tensor.h"

namespace tessera {

// The local tensors a worker holds, by name, within a memory budget. Thread-safe; tensors are
// shared so that a reader (a download) keeps one alive while a command replaces it.
class ShardStore {
 public:
  explicit ShardStore(int64_t budget_bytes) : budget_(budget_bytes) {}

  // RESOURCE_EXHAUSTED naming the sizes if holding `bytes` more (net of `replacing`, a tensor that
  // will be dropped) would pass the budget.
  absl::Status Reserve(int64_t bytes, const std::string& replacing = "") const;
  // Stores `tensor` as `name`, replacing any tensor of that name; checks the budget first.
  absl::Status Put(const std::string& name, HostTensor tensor);
  // NOT_FOUND naming the tensor if absent.
  absl::StatusOr<std::shared_ptr<const HostTensor>> Get(const std::string& name) const;
  // Removes `name` and hands its tensor over for an in-place update when no reader shares it
  // (the caller stores it again with Put); otherwise leaves it and returns a copy. NOT_FOUND if
  // absent.
  absl::StatusOr<HostTensor> TakeOrCopy(const std::string& name);
  // Removes `name` and hands its buffer over for reuse as a new output when it holds exactly
  // `bytes` bytes of `dtype` and no reader shares it; otherwise nullopt and nothing changes.
  std::optional<HostTensor> TakeForReuse(const std::string& name, DType dtype, size_t bytes);
  void Erase(const std::string& name);
  void Clear();
  int64_t used_bytes() const;
  int64_t budget_bytes() const { return budget_; }
  // How many tensors it holds.
  int64_t tensor_count() const;

 private:
  const int64_t budget_;
  mutable absl::Mutex mu_;
  // Mutable inside, so that TakeOrCopy can move a tensor out; readers get it as const.
  std::map<std::string, std::shared_ptr<HostTensor>> tensors_ ABSL_GUARDED_BY(mu_);
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_SHARD_STORE_H_
