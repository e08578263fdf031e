// What the local implementations of the op families share: the call being computed, its inputs,
// and temporaries it owns.
#ifndef TESSERA_KERNELS_ATEN_ATEN_CONTEXT_H_
#define TESSERA_KERNELS_ATEN_ATEN_CONTEXT_H_

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/ops/op_meta.h"
#include "core/ops/op_propagation.h"
#include "kernels/aten/local_call.h"
#include "kernels/backend.h"

namespace tessera::kernels::aten {

// One rank's call in progress.
struct Context {
  KernelBackend& backend;
  const LocalCall& local;
  std::span<const ConstTensorView> inputs;
  Shape out_shape;  // the output's local shape
  DType out_dtype;
  std::deque<DeviceTensor> temporaries;
  // An op with several outputs: the local shapes and dtypes of those after the first, and the
  // tensors its implementation computed for them (it returns the first).
  std::vector<Shape> more_shapes = {};
  std::vector<DType> more_dtypes = {};
  std::vector<DeviceTensor> more = {};

  const ops::BoundCall& call() const { return *local.call; }
  const ops::BoundArgs& args() const { return local.call->args; }
  const std::string& name() const { return local.call->op->qualified_name; }
  // The local view of the Tensor argument `arg` (which holds a tensor).
  ConstTensorView Input(absl::string_view arg) const;
  // The global spec of the input behind `arg`.
  const DTensorSpec& InputSpec(absl::string_view arg) const;
  // The int argument `arg` as a dim of a tensor of `rank` dims, normalized (ops::CallDim).
  absl::StatusOr<int> Dim(absl::string_view arg, int rank) const;
  // A kernel's INVALID_ARGUMENT (an index out of range) with the op's name before it; any other
  // status as it is.
  absl::Status Named(absl::Status status) const;
  // A temporary kept until the call ends.
  absl::StatusOr<TensorView> Temporary(DType dtype, Shape shape);
  // `view` converted to `dtype` (itself where it has that dtype).
  absl::StatusOr<ConstTensorView> As(const ConstTensorView& view, DType dtype);
  // A 0-dim tensor holding `value` (a number) in `dtype`.
  absl::StatusOr<ConstTensorView> Number(double value, DType dtype);
  // The value of the Tensor or Scalar argument `arg` as a view in `dtype`: the tensor converted,
  // or the number as a 0-dim tensor.
  absl::StatusOr<ConstTensorView> Operand(absl::string_view arg, DType dtype);
  // `view` broadcast to `shape` (numpy's rule, checked by the meta function), as a new tensor
  // (itself where it has that shape).
  absl::StatusOr<ConstTensorView> Broadcast(const ConstTensorView& view, const Shape& shape);
  // The output, allocated.
  absl::StatusOr<DeviceTensor> Output() { return backend.Allocate(out_dtype, out_shape); }
  // Output k (0 the first), allocated.
  absl::StatusOr<DeviceTensor> OutputAt(size_t k) {
    return k == 0 ? Output() : backend.Allocate(more_dtypes[k - 1], more_shapes[k - 1]);
  }
  // The number of outputs.
  size_t num_outputs() const { return 1 + more_shapes.size(); }
};

// `view`'s elements from `elements` on, seen as `shape`.
inline ConstTensorView At(const ConstTensorView& view, int64_t elements, Shape shape) {
  return {view.data + elements * static_cast<int64_t>(DTypeSize(view.dtype)), view.dtype,
          std::move(shape)};
}
inline TensorView At(const TensorView& view, int64_t elements, Shape shape) {
  return {view.data + elements * static_cast<int64_t>(DTypeSize(view.dtype)), view.dtype,
          std::move(shape)};
}

// The int64 values of a small index tensor, on the host.
absl::StatusOr<std::vector<int64_t>> IndexValues(Context& ctx, const ConstTensorView& index);

// x reduced by `op` over `dims` (kept as size 1), in x's dtype; a max or min over a dim that is
// empty here is the op's identity (this rank's part of a Partial).
absl::StatusOr<ConstTensorView> ReduceKept(Context& ctx, ReduceOp op, const ConstTensorView& x,
                                           const std::vector<int>& dims);

using LocalFn = absl::StatusOr<DeviceTensor> (*)(Context& ctx);
using LocalTable = absl::flat_hash_map<std::string, LocalFn>;

void AddPointwiseKernels(LocalTable& table);
void AddReductionKernels(LocalTable& table);
void AddMatmulKernels(LocalTable& table);
void AddViewKernels(LocalTable& table);
void AddTensorKernels(LocalTable& table);
void AddNormKernels(LocalTable& table);
void AddIndexKernels(LocalTable& table);
void AddLossKernels(LocalTable& table);
void AddFactoryKernels(LocalTable& table);

}  // namespace tessera::kernels::aten

#endif  // TESSERA_KERNELS_ATEN_ATEN_CONTEXT_H_
