#ifndef TESSERA_INCLUDE_TESSERA_OPS_H_
#define TESSERA_INCLUDE_TESSERA_OPS_H_

// The service's op registry (docs/ops.md) from C++: Call runs any registered op on DTensors by
// its ATen name with arguments as torch's schema names them, typed wrappers call the common ones,
// and OpInfo is one registry entry as Session::ListOps returns it. Ops take the same path as
// RunOp: on the session's op stream they return at once and a refusal only the coordinator can
// make shows on the output (docs/dtensors.md).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "tessera/dtensor.h"

namespace tessera::client {

// One argument of Call, as torch hands an IValue to an ATen op: a DTensor; a bool, an integer or
// a floating-point number (a wrapped number where the schema wants a Tensor); an int list
// (`{0, 1}`); a DType; a string; None (std::nullopt, or an empty std::optional); or a list of
// DTensors (`{a, b}`; a TensorList's std::nullopt elements are None, for a Tensor?[] argument).
// An empty braced list names no type: write std::vector<int64_t>{} for []. Positional unless
// Arg() names it.
class OpArg {
 public:
  using TensorList = std::vector<std::optional<DTensor>>;
  // The value; std::monostate is None.
  using Value = std::variant<std::monostate, bool, int64_t, double, std::vector<int64_t>, DType,
                             std::string, DTensor, TensorList>;

  OpArg(const DTensor& tensor) : value_(tensor) {}
  OpArg(std::nullopt_t) {}
  OpArg(bool value) : value_(value) {}
  template <std::integral T>  // bool takes the constructor above
  OpArg(T value) : value_(static_cast<int64_t>(value)) {}
  template <std::floating_point T>
  OpArg(T value) : value_(static_cast<double>(value)) {}
  OpArg(std::vector<int64_t> ints) : value_(std::move(ints)) {}
  OpArg(std::initializer_list<int64_t> ints) : value_(std::vector<int64_t>(ints)) {}
  OpArg(DType dtype) : value_(dtype) {}
  OpArg(std::string text) : value_(std::move(text)) {}
  OpArg(const char* text) : value_(std::string(text)) {}
  OpArg(std::nullptr_t) = delete;  // None is std::nullopt
  OpArg(std::string_view text) : value_(std::string(text)) {}
  OpArg(absl::Span<const DTensor> tensors) : value_(TensorList(tensors.begin(), tensors.end())) {}
  OpArg(const std::vector<DTensor>& tensors) : value_(TensorList(tensors.begin(), tensors.end())) {}
  OpArg(std::initializer_list<DTensor> tensors)
      : value_(TensorList(tensors.begin(), tensors.end())) {}
  OpArg(TensorList tensors) : value_(std::move(tensors)) {}
  template <typename T>
  OpArg(const std::optional<T>& value) : OpArg(value ? OpArg(*value) : OpArg(std::nullopt)) {}

  // The schema's argument name for a keyword argument; empty for a positional one.
  const std::string& name() const { return name_; }
  const Value& value() const { return value_; }

 private:
  friend OpArg Arg(std::string name, OpArg value);

  std::string name_;
  Value value_;
};

// The keyword argument `name`=`value`: Arg("dim", 1), Arg("dtype", DType::kFloat64).
inline OpArg Arg(std::string name, OpArg value) {
  value.name_ = std::move(name);
  return value;
}

// Runs op `op` of the registry ("aten::softmax.int", "softmax.int", or "softmax" for its default
// or only overload) on `args`, positional first, then keyword ones, as torch.ops.aten would:
// Call("softmax.int", {x, -1}), Call("sum.dim_IntList", {x, {1}, Arg("keepdim", true)}). Each
// DTensor is one input however often it appears; all are of one session and mesh, and at least
// one is given. Sharding propagation picks the strategy; the output's redistributions() list the
// implicit redistributions it needed. `output` names the result (empty: one is made). An op
// outside the registry is UNIMPLEMENTED naming it; an argument the schema does not take is
// INVALID_ARGUMENT naming the op, the argument and the value.
absl::StatusOr<DTensor> Call(std::string_view op, absl::Span<const OpArg> args,
                             const std::string& output = "");

// Call of an op with several outputs (a tuple return, such as topk's values and indices, or a
// Tensor[] such as split's pieces): every output, in order, laid out alike. On an op with one
// output, that one.
absl::StatusOr<std::vector<DTensor>> CallOutputs(std::string_view op, absl::Span<const OpArg> args);

// One registered op, as ListOps returns it.
struct OpInfo {
  std::string name;            // "aten::softmax.int".
  std::string schema;          // torch's schema text.
  std::string family;          // "pointwise", "reduction", "matmul", "view", "tensor", ...
  std::string strategies;      // The sharding strategies, in words.
  std::string implementation;  // "kernel <family entry>" or "decomposition: <ops>".
  std::string derivative;      // The derivative in registered ops; empty: not differentiable.
};

// Typed calls of common registry ops (the op each runs after it), torch's arguments in torch's
// order. Dims may be negative, as in torch.
// x.view(shape): aten::view; a -1 in `shape` is inferred.
absl::StatusOr<DTensor> View(const DTensor& x, std::vector<int64_t> shape);
// x.reshape(shape): aten::reshape.
absl::StatusOr<DTensor> Reshape(const DTensor& x, std::vector<int64_t> shape);
// x.permute(dims): aten::permute.
absl::StatusOr<DTensor> Permute(const DTensor& x, std::vector<int64_t> dims);
// x.unsqueeze(dim): aten::unsqueeze.
absl::StatusOr<DTensor> Unsqueeze(const DTensor& x, int64_t dim);
// torch.softmax(x, dim, dtype): aten::softmax.int.
absl::StatusOr<DTensor> Softmax(const DTensor& x, int64_t dim,
                                std::optional<DType> dtype = std::nullopt);
// torch.log_softmax(x, dim, dtype): aten::log_softmax.int.
absl::StatusOr<DTensor> LogSoftmax(const DTensor& x, int64_t dim,
                                   std::optional<DType> dtype = std::nullopt);
// torch.exp(x): aten::exp.
absl::StatusOr<DTensor> Exp(const DTensor& x);
// torch.cat(tensors, dim): aten::cat.
absl::StatusOr<DTensor> Cat(absl::Span<const DTensor> tensors, int64_t dim = 0);
// x[start:end:step] along `dim` (None: from the start, to the end): aten::slice.Tensor.
absl::StatusOr<DTensor> Slice(const DTensor& x, int64_t dim, std::optional<int64_t> start,
                              std::optional<int64_t> end, int64_t step = 1);
// x.select(dim, index): aten::select.int.
absl::StatusOr<DTensor> Select(const DTensor& x, int64_t dim, int64_t index);
// torch.where(condition, x, y): aten::where.self.
absl::StatusOr<DTensor> Where(const DTensor& condition, const DTensor& x, const DTensor& y);
// torch.nn.functional.linear(input, weight, bias): input @ weight^T + bias; aten::linear.
absl::StatusOr<DTensor> Linear(const DTensor& input, const DTensor& weight,
                               const std::optional<DTensor>& bias = std::nullopt);
// The rows of `weight` that `indices` (an integer tensor) name: aten::embedding, in its argument
// order (torch.nn.functional.embedding takes indices first).
absl::StatusOr<DTensor> Embedding(const DTensor& weight, const DTensor& indices);

// torch's (values, indices) returns.
struct ValuesAndIndices {
  DTensor values;
  DTensor indices;  // int64 positions along the dim
};
// torch.max(x, dim, keepdim) and torch.min: the first extreme's value and index; aten::max.dim,
// aten::min.dim.
absl::StatusOr<ValuesAndIndices> MaxAlong(const DTensor& x, int64_t dim, bool keepdim = false);
absl::StatusOr<ValuesAndIndices> MinAlong(const DTensor& x, int64_t dim, bool keepdim = false);
// torch.sort(x, dim, descending), stable (equal elements keep their order, NaN above every
// number): aten::sort.
absl::StatusOr<ValuesAndIndices> Sort(const DTensor& x, int64_t dim = -1, bool descending = false);
// torch.topk(x, k, dim, largest, sorted): aten::topk.
absl::StatusOr<ValuesAndIndices> TopK(const DTensor& x, int64_t k, int64_t dim = -1,
                                      bool largest = true, bool sorted = true);
// torch.split(x, split_size, dim), torch.split(x, sizes, dim), torch.chunk and torch.unbind: the
// pieces, each one output of one call (aten::split.Tensor, split_with_sizes, chunk, unbind.int).
absl::StatusOr<std::vector<DTensor>> Split(const DTensor& x, int64_t split_size, int64_t dim = 0);
absl::StatusOr<std::vector<DTensor>> SplitWithSizes(const DTensor& x,
                                                    std::vector<int64_t> split_sizes,
                                                    int64_t dim = 0);
absl::StatusOr<std::vector<DTensor>> Chunk(const DTensor& x, int64_t chunks, int64_t dim = 0);
absl::StatusOr<std::vector<DTensor>> Unbind(const DTensor& x, int64_t dim = 0);

// How a loss reduces its per-element losses, as torch's `reduction` ("none", "mean", "sum").
enum class LossReduction : int64_t { kNone = 0, kMean = 1, kSum = 2 };
struct CrossEntropyOptions {
  std::optional<DTensor> weight;  // per class
  LossReduction reduction = LossReduction::kMean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};
// torch.nn.functional.cross_entropy(logits, target, ...): target int64 class indices, or class
// probabilities of the logits' shape; aten::cross_entropy_loss. Logits sharded by class give a
// Partial(sum) loss without being gathered (DTensor's loss_parallel).
absl::StatusOr<DTensor> CrossEntropy(const DTensor& logits, const DTensor& target,
                                     const CrossEntropyOptions& options = {});
// torch.nn.functional.nll_loss(log_probs, target, ...) (label_smoothing unused): aten::nll_loss.
absl::StatusOr<DTensor> NllLoss(const DTensor& log_probs, const DTensor& target,
                                const CrossEntropyOptions& options = {});
// torch.nn.functional.mse_loss(x, target, reduction): aten::mse_loss.
absl::StatusOr<DTensor> MseLoss(const DTensor& x, const DTensor& target,
                                LossReduction reduction = LossReduction::kMean);

}  // namespace tessera::client

#endif  // TESSERA_INCLUDE_TESSERA_OPS_H_
