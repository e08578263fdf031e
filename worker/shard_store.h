#ifndef TESSERA_WORKER_SHARD_STORE_H_
#define TESSERA_WORKER_SHARD_STORE_H_

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/host_tensor.h"
#include "kernels/device_tensor.h"
#include "kernels/memory_space.h"

namespace tessera {

// The local tensors a worker holds, by name, within a memory budget, in its device's memory space
// (host memory on a cpu worker, the GPU's on a cuda worker). Thread-safe; tensors are shared so
// that a reader (a download) keeps one alive while a command replaces it. A stored tensor is never
// written in place: an update takes it out (TakeOrCopy) and stores it again as a new entry, which
// caches of a stored value (ProgramRunner's prepared weights) rely on.
class ShardStore {
 public:
  // Bytes held on behalf of stored tensors outside them (a prepared copy of a weight), counted
  // against the store's budget while the charge lives. It may outlive the store.
  class Charge {
   public:
    ~Charge() { outside_->fetch_sub(bytes_); }
    Charge(const Charge&) = delete;
    Charge& operator=(const Charge&) = delete;
    int64_t bytes() const { return bytes_; }

   private:
    friend class ShardStore;
    Charge(std::shared_ptr<std::atomic<int64_t>> outside, int64_t bytes)
        : outside_(std::move(outside)), bytes_(bytes) {}
    std::shared_ptr<std::atomic<int64_t>> outside_;
    int64_t bytes_;
  };

  // `memory` must outlive the store.
  ShardStore(int64_t budget_bytes, kernels::MemorySpace& memory)
      : budget_(budget_bytes), memory_(memory) {}

  kernels::MemorySpace& memory() const { return memory_; }

  // RESOURCE_EXHAUSTED naming the sizes if holding `bytes` more (net of `replacing`, a tensor that
  // will be dropped) would pass the budget.
  absl::Status Reserve(int64_t bytes, const std::string& replacing = "") const;
  // Stores `tensor` (of this store's memory space) as `name`, replacing any tensor of that name;
  // checks the budget first.
  absl::Status Put(const std::string& name, kernels::DeviceTensor tensor);
  // NOT_FOUND naming the tensor if absent.
  absl::StatusOr<std::shared_ptr<const kernels::DeviceTensor>> Get(const std::string& name) const;
  // Put and Get of a host tensor: a copy into and out of the memory space.
  absl::Status PutHost(const std::string& name, const HostTensor& tensor);
  absl::StatusOr<HostTensor> GetHost(const std::string& name) const;
  // Removes `name` and hands its tensor over for an in-place update when no reader shares it
  // (the caller stores it again with Put); otherwise leaves it and returns a copy. NOT_FOUND if
  // absent.
  absl::StatusOr<kernels::DeviceTensor> TakeOrCopy(const std::string& name);
  // Removes `name` and hands its buffer over for reuse as a new output when it holds exactly
  // `bytes` bytes of `dtype` and no reader shares it; otherwise nullopt and nothing changes.
  std::optional<kernels::DeviceTensor> TakeForReuse(const std::string& name, DType dtype,
                                                    size_t bytes);
  void Erase(const std::string& name);
  void Clear();
  // `bytes` (>= 0) held outside the tensors, for `what`, from now until the charge is dropped;
  // RESOURCE_EXHAUSTED naming `what` and the sizes, charging nothing, if the budget would pass.
  absl::StatusOr<std::unique_ptr<Charge>> ChargeOutside(int64_t bytes, absl::string_view what);
  // The bytes of the stored tensors and of the live charges.
  int64_t used_bytes() const;
  // The live charges' part of used_bytes().
  int64_t outside_bytes() const { return outside_->load(); }
  // The names of the tensors it holds, ordered.
  std::vector<std::string> Names() const;
  // How many tensors it holds.
  int64_t tensor_count() const;

 private:
  const int64_t budget_;
  kernels::MemorySpace& memory_;
  mutable absl::Mutex mu_;
  // Mutable inside, so that TakeOrCopy can move a tensor out; readers get it as const.
  std::map<std::string, std::shared_ptr<kernels::DeviceTensor>> tensors_ ABSL_GUARDED_BY(mu_);
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;  // the tensors' bytes
  // The live charges' bytes: added under mu_ (so that a check sees them), dropped by a charge
  // without it.
  const std::shared_ptr<std::atomic<int64_t>> outside_ = std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace tessera

#endif  // TESSERA_WORKER_SHARD_STORE_H_
