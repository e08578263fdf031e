#include "worker/shard_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessera {

absl::Status ShardStore::Reserve(int64_t bytes, const std::string& replacing) const {
  absl::MutexLock lock(&mu_);
  int64_t freed = 0;
  if (auto it = tensors_.find(replacing); !replacing.empty() && it != tensors_.end()) {
    freed = static_cast<int64_t>(it->second->nbytes());
  }
  const int64_t in_use = used_ + outside_->load();
  if (in_use - freed + bytes > budget_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("holding ", bytes, " more bytes would pass the worker's memory budget of ",
                     budget_, " bytes (", in_use, " in use)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShardStore::Charge>> ShardStore::ChargeOutside(
    int64_t bytes, absl::string_view what) {
  if (bytes < 0) {
    return absl::InternalError(absl::StrCat("a charge of ", bytes, " bytes for ", what));
  }
  absl::MutexLock lock(&mu_);
  const int64_t in_use = used_ + outside_->load();
  if (bytes > budget_ - in_use) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " of ", bytes, " bytes would pass the worker's memory budget of ",
                     budget_, " bytes (", in_use, " in use)"));
  }
  outside_->fetch_add(bytes);
  return std::unique_ptr<Charge>(new Charge(outside_, bytes));
}

absl::Status ShardStore::Put(const std::string& name, kernels::DeviceTensor tensor) {
  RETURN_IF_ERROR(Reserve(static_cast<int64_t>(tensor.nbytes()), name));
  auto shared = std::make_shared<kernels::DeviceTensor>(std::move(tensor));
  absl::MutexLock lock(&mu_);
  if (auto it = tensors_.find(name); it != tensors_.end()) {
    used_ -= static_cast<int64_t>(it->second->nbytes());
  }
  used_ += static_cast<int64_t>(shared->nbytes());
  tensors_[name] = std::move(shared);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const kernels::DeviceTensor>> ShardStore::Get(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    return absl::NotFoundError(absl::StrCat("no local tensor '", name, "'"));
  return it->second;
}

absl::Status ShardStore::PutHost(const std::string& name, const HostTensor& tensor) {
  RETURN_IF_ERROR(Reserve(static_cast<int64_t>(tensor.nbytes()), name));
  ASSIGN_OR_RETURN(kernels::DeviceTensor t, memory_.Upload(tensor));
  return Put(name, std::move(t));
}

absl::StatusOr<HostTensor> ShardStore::GetHost(const std::string& name) const {
  ASSIGN_OR_RETURN(std::shared_ptr<const kernels::DeviceTensor> t, Get(name));
  return memory_.Download(t->View());
}

absl::StatusOr<kernels::DeviceTensor> ShardStore::TakeOrCopy(const std::string& name) {
  std::shared_ptr<kernels::DeviceTensor> held;
  {
    absl::MutexLock lock(&mu_);
    auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      return absl::NotFoundError(absl::StrCat("no local tensor '", name, "'"));
    }
    if (it->second.use_count() > 1) {
      held = it->second;  // copied below, outside the lock
    } else {
      held = std::move(it->second);
      used_ -= static_cast<int64_t>(held->nbytes());
      tensors_.erase(it);
      return std::move(*held);
    }
  }
  return memory_.Clone(std::as_const(*held).View());
}

std::optional<kernels::DeviceTensor> ShardStore::TakeForReuse(const std::string& name, DType dtype,
                                                              size_t bytes) {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end() || it->second.use_count() > 1 || it->second->dtype() != dtype ||
      it->second->nbytes() != bytes) {
    return std::nullopt;
  }
  kernels::DeviceTensor t = std::move(*it->second);
  used_ -= static_cast<int64_t>(t.nbytes());
  tensors_.erase(it);
  return t;
}

void ShardStore::Erase(const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (auto it = tensors_.find(name); it != tensors_.end()) {
    used_ -= static_cast<int64_t>(it->second->nbytes());
    tensors_.erase(it);
  }
}

void ShardStore::Clear() {
  absl::MutexLock lock(&mu_);
  tensors_.clear();
  used_ = 0;
}

int64_t ShardStore::used_bytes() const {
  absl::MutexLock lock(&mu_);
  return used_ + outside_->load();
}

std::vector<std::string> ShardStore::Names() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [name, tensor] : tensors_) names.push_back(name);
  return names;
}

int64_t ShardStore::tensor_count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(tensors_.size());
}

}  // namespace tessera
