#ifndef TESSERA_CORE_SHARDING_OP_CALL_H_
#define TESSERA_CORE_SHARDING_OP_CALL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace tessera {

// The tensor operations a DTensor can run, named as in PyTorch. Values are the wire values of
// tessera.v1.OpKind.
enum class OpKind : int {
  kMm = 1,          // mm(a[M,K], b[K,N]) -> [M,N]
  kMatmul = 2,      // matmul(a[...,M,K] or a[K], b[K,N]) -> [...,M,N] or [N]; b must be 2-D
                    // (torch.matmul's batched or 1-D second operand is not supported)
  kAddmm = 3,       // addmm(bias, a[M,K], b[K,N]) = beta*bias + alpha*(a @ b); bias broadcasts
                    // to [M,N] ([N], [M,N], [1,N], [M,1], ...)
  kAdd = 4,         // a + b, numpy broadcasting
  kSub = 5,         // a - b
  kMul = 6,         // a * b
  kDiv = 7,         // a / b (true division; floating dtypes)
  kRelu = 8,        // relu(x)
  kGelu = 9,        // gelu(x), exact erf form
  kTanh = 10,       // tanh(x)
  kSum = 11,        // sum(x, dims, keepdim); bool and integer sums give int64, as in PyTorch
  kMean = 12,       // mean(x, dims, keepdim); floating dtypes
  kMax = 13,        // amax(x, dims, keepdim)
  kTranspose = 14,  // transpose(x, dim0, dim1)
  kCast = 15,       // x.to(dtype)
};

// "mm", "addmm", "add", "relu", "sum", ...
absl::string_view OpKindName(OpKind kind);
absl::StatusOr<OpKind> ParseOpKind(absl::string_view name);

// One call of an op: its kind and attributes. Inputs are given separately (as specs or tensors).
struct OpCall {
  OpKind kind = OpKind::kAdd;
  // kSum, kMean, kMax: dims reduced (negative count from the end); empty means every dim.
  std::vector<int> dims;
  bool keepdim = false;           // kSum, kMean, kMax
  int dim0 = 0;                   // kTranspose
  int dim1 = 1;                   // kTranspose
  DType dtype = DType::kFloat32;  // kCast: the target dtype
  double alpha = 1.0;             // kAddmm
  double beta = 1.0;              // kAddmm

  // Number of tensor inputs the op takes: 3 for addmm, 2 for mm/matmul/binary ops, else 1.
  int num_inputs() const;
};

// The output shape and dtype of `op` on inputs of these shapes and dtypes, with PyTorch's rules;
// INVALID_ARGUMENT naming the shapes, dims or dtypes that do not fit (inputs of different dtypes
// are an error: there is no type promotion). mm, matmul and addmm need floating dtypes (the
// kernels' GEMM), as do div, gelu, tanh and mean; sub and relu reject bool.
struct OpOutput {
  Shape shape;
  DType dtype = DType::kFloat32;
};
absl::StatusOr<OpOutput> InferOpOutput(const OpCall& op, absl::Span<const Shape> shapes,
                                       absl::Span<const DType> dtypes);

// The dims a kSum, kMean or kMax call reduces on a tensor of `rank` dims: normalized, sorted, all
// dims when `op.dims` is empty. INVALID_ARGUMENT for a dim out of range or given twice.
absl::StatusOr<std::vector<int>> ReducedDims(const OpCall& op, int rank);

}  // namespace tessera

#endif  // TESSERA_CORE_SHARDING_OP_CALL_H_
