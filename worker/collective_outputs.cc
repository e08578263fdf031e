#include "worker/collective_outputs.h"

#include <optional>
#include <utility>

namespace tessera {

CollectiveOutputs::CollectiveOutputs(ShardStore& store, std::string input, std::string output,
                                     DType dtype)
    : store_(store), input_(std::move(input)), output_(std::move(output)), dtype_(dtype) {}

void CollectiveOutputs::Charge(int64_t bytes) {
  if (absl::Status s = store_.Reserve(bytes, output_); !s.ok() && failure_.ok()) {
    failure_ = std::move(s);
  }
}

absl::StatusOr<kernels::DeviceTensor> CollectiveOutputs::Scratch(Shape shape) {
  Charge(NumElements(shape) * static_cast<int64_t>(DTypeSize(dtype_)));
  return store_.memory().Allocate(dtype_, std::move(shape));
}

absl::StatusOr<kernels::DeviceTensor> CollectiveOutputs::Final(Shape shape) {
  if (output_ != input_) {
    std::optional<kernels::DeviceTensor> reused = store_.TakeForReuse(
        output_, dtype_, static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype_));
    if (reused.has_value() && reused->Reshape(shape).ok()) return *std::move(reused);
  }
  return Scratch(std::move(shape));
}

}  // namespace tessera
