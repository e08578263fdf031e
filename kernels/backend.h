#ifndef TESSERA_KERNELS_BACKEND_H_
#define TESSERA_KERNELS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/host_tensor.h"
#include "core/shape.h"
#include "core/sharding/placement.h"
#include "kernels/broadcast.h"
#include "kernels/device_tensor.h"
#include "kernels/memory_space.h"
#include "kernels/ops.h"
#include "kernels/tensor_view.h"

namespace tessera::kernels {

// "add", "floor_divide", "relu", "gelu_tanh", "uniform", ... (torch's names). What each op takes
// and gives: GivesBool, NeedsFloating and UnaryOpOf (kernels/ops.h).
absl::string_view BinaryOpName(BinaryOp op);
absl::string_view UnaryOpName(UnaryOp op);
absl::string_view ActivationName(Activation f);
absl::string_view DistributionName(Distribution d);

// A Linear layer's weight prepared by a backend for repeated forwards (the CPU backend: a copy in
// oneDNN's packed layout); opaque and immutable. It stands for the values the weight had when it
// was made: whoever keeps one must drop it when the weight is written.
class PreparedWeight {
 public:
  virtual ~PreparedWeight() = default;
  // The memory the copy holds.
  virtual int64_t nbytes() const = 0;
};

// Local compute on tensors in its memory space, the same for every device.
//
// A backend is the MemorySpace its tensors live in (host memory for the CPU backend, one GPU's for
// a CUDA backend) together with the kernels that compute on them. Views passed in must lie in that
// space. Each public call checks its arguments and returns INVALID_ARGUMENT naming the bad dtype,
// shape or value before touching any memory, then runs the backend's implementation. float16 and
// bfloat16 are computed in float32 and rounded back to nearest even, integers wrap on overflow.
// Work may be queued asynchronously (CUDA): CopyToHost and Synchronize wait for it. Compute is
// thread-compatible: one thread at a time (see MemorySpace for what any thread may call).
class KernelBackend : public MemorySpace {
 public:
  // The stream this backend queues its work on, for a communicator to order its own work after
  // (a cudaStream_t); null where work runs as it is called (the CPU).
  virtual void* native_stream() const { return nullptr; }

  // --- Compute ---

  // C = alpha * op(A) * op(B) + beta * C on 2-D tensors (Reshaped() folds leading dims into
  // rows), op(X) = X^T when its flag is set:
  // op(A) is [M, K], op(B) is [K, N], C is [M, N]. float32 and float64 run the BLAS (OpenBLAS,
  // cuBLAS); float16 and bfloat16 are computed in float32 and rounded back. With beta == 0, C is
  // not read (NaN in C does not propagate), as in BLAS.
  absl::Status Gemm(bool transpose_a, bool transpose_b, double alpha, const ConstTensorView& a,
                    const ConstTensorView& b, double beta, const TensorView& c);

  // y = x W^T, the product of a Linear layer's forward: x [M, K], w [N, K], y [M, N], one
  // floating dtype (checked as Gemm(false, true, 1, x, w, 0, y), which it equals within rounding).
  // `prepared` is null or PrepareLinearWeight's result for w's current values (the caller keeps
  // that promise); it is read where the backend's product for x's rows reads its layout (one made
  // for another shape is not). The CPU backend runs float32 on oneDNN's matmul, every other dtype
  // as Gemm.
  absl::Status LinearProduct(const ConstTensorView& x, const ConstTensorView& w,
                             const PreparedWeight* prepared, const TensorView& y);

  // `w` [N, K] prepared for LinearProduct with x of `rows` rows (and any rows the layout serves:
  // on the CPU, every row count); null where the backend prepares nothing for w's dtype (the CPU
  // backend prepares float32; the CUDA backend nothing).
  absl::StatusOr<std::shared_ptr<const PreparedWeight>> PrepareLinearWeight(
      const ConstTensorView& w, int64_t rows);

  // x[..., n] += bias[n]: `bias` is 1-D with x's last size and dtype.
  absl::Status BiasAdd(const TensorView& x, const ConstTensorView& bias);

  // out = a op b with numpy broadcasting: a and b of one dtype, out of the broadcast shape and of
  // that dtype, or bool where GivesBool(op). `out` may be `a` or `b` when that input has out's
  // shape and dtype. div takes floating dtypes (callers promote integers first), sub, pow,
  // remainder and floor_divide non-bool ones, the bitwise ops integers and bool; the rest any.
  // pow on integers is integer power (a negative exponent gives 0 unless the base is 1 or -1, as
  // torch's kernel); maximum and minimum propagate NaN; remainder has the sign of the divisor
  // (Python's %), floor_divide is floor(a / b); on integers both give 0 for a zero divisor (a
  // device cannot report it cheaply; torch raises). Logical ops treat nonzero as true.
  absl::Status Binary(BinaryOp op, const ConstTensorView& a, const ConstTensorView& b,
                      const TensorView& out);

  // out = op(x): out has x's shape and dtype, or bool where GivesBool(op); `out` may be `x`.
  // NeedsFloating ops take floating dtypes only; neg, sign, relu, square, floor, ceil, round and
  // trunc any but bool; bitwise_not integers and bool; abs, logical_not, isnan, isinf and isfinite
  // any. floor, ceil, round and trunc are the identity on integers; round is half to even
  // (torch.round); sign(NaN) is 0, as torch.sign.
  absl::Status Unary(UnaryOp op, const ConstTensorView& x, const TensorView& out);

  // out = f(x), same dtype and shape; `out` may be `x`. Unary(UnaryOpOf(f), x, out).
  absl::Status Activate(Activation f, const ConstTensorView& x, const TensorView& out);

  // out = cond ? a : b elementwise, with numpy broadcasting of all three to out's shape: cond is
  // bool, a, b and out of one dtype (any). `out` may be `a` or `b` when that input has out's shape.
  absl::Status Where(const ConstTensorView& cond, const ConstTensorView& a,
                     const ConstTensorView& b, const TensorView& out);

  // out = reduction of x along `dim` (negative counts from the end): kSum, kAvg (mean, floating
  // dtypes only), kMax, kMin, kProduct. `out` has x's shape with `dim` removed or kept as size 1,
  // and x's dtype. Floating sums and products accumulate in float64, integer ones in 64 bits
  // (wrapping when stored); max and min propagate NaN as torch.amax does; on bool, sum and max are
  // logical or, product and min logical and. Over an empty dim, sum gives 0, product 1, mean NaN,
  // and max and min are INVALID_ARGUMENT.
  absl::Status ReduceAlongDim(ReduceOp op, const ConstTensorView& x, int64_t dim,
                              const TensorView& out);

  // out = the index (int64) of the first maximum (is_max) or minimum of x along `dim` (negative
  // counts from the end), NaN counting as the extreme, as torch.argmax / argmin; bool orders false
  // before true. `out` has x's shape with `dim` removed or kept as size 1. Any dtype; an empty dim
  // is INVALID_ARGUMENT.
  absl::Status ArgReduceAlongDim(bool is_max, const ConstTensorView& x, int64_t dim,
                                 const TensorView& out);

  // values, indices = torch.sort(x, dim, descending, stable=True) along `dim` (negative counts from
  // the end; a 0-dim x counts as 1-dim): each line ordered ascending (or descending), equal
  // elements kept in index order, NaN above every number (last ascending, first descending), as
  // torch.sort; bool orders false before true. values has x's shape and dtype, indices x's shape
  // and int64 (positions along dim). Any dtype; values and indices must not overlap x or each
  // other.
  absl::Status SortAlongDim(const ConstTensorView& x, int64_t dim, bool descending,
                            const TensorView& values, const TensorView& indices);

  // out = the inclusive cumulative sum (kSum, torch.cumsum) or product (kProduct, torch.cumprod)
  // of x along `dim`, same shape and dtype; `out` may be `x`. Floating values accumulate in
  // float64, integers in 64 bits (wrapping when stored); bool is INVALID_ARGUMENT (callers cast to
  // int64 first, as torch promotes).
  absl::Status ScanAlongDim(ReduceOp op, const ConstTensorView& x, int64_t dim,
                            const TensorView& out);

  // out = softmax, log_softmax or _safe_softmax of x along `dim`, same shape and floating dtype:
  // the max is subtracted, exp computed in float32 (float16, bfloat16, float32) or float64 and the
  // sum of exps accumulated in float64. A line that is all -inf gives NaN for softmax and
  // log_softmax (as torch) and 0 for kSafeSoftmax (torch's _safe_softmax); a NaN gives NaN along
  // its line.
  absl::Status SoftmaxAlongDim(SoftmaxKind kind, const ConstTensorView& x, int64_t dim,
                               const TensorView& out);

  // The gradient of SoftmaxAlongDim from its output y and dy: softmax (and _safe_softmax)
  // dx = y * (dy - sum(dy * y)), log_softmax dx = dy - exp(y) * sum(dy), the sums along `dim` in
  // float64. y, dy and dx of one floating dtype and shape.
  absl::Status SoftmaxBackward(SoftmaxKind kind, const ConstTensorView& y,
                               const ConstTensorView& dy, int64_t dim, const TensorView& dx);

  // acc[i] = op(acc[i], in[i]), the step of a reducing collective; kAvg accumulates a sum, finish
  // it with DivideInPlace. Same semantics as core's ReduceInto, which the CPU backend calls.
  absl::Status ReduceInto(ReduceOp op, const TensorView& acc, const ConstTensorView& in);
  // data[i] /= divisor, as core's DivideInPlace (integers truncate, bool is unchanged); the
  // divisor is a group size, >= 1.
  absl::Status DivideInPlace(const TensorView& data, int64_t divisor);

  // dst = src converted elementwise, for every pair of dtypes, same shape. Rule (convert_value.h):
  // to bool is != 0; floating to integer truncates and saturates, NaN gives 0; integer to integer
  // wraps; to floating rounds to nearest even.
  absl::Status Cast(const ConstTensorView& src, const TensorView& dst);

  // Sets every element to `value` converted to out's dtype by Cast's rule.
  absl::Status Fill(const TensorView& out, double value);

  // --- Indexing (torch's gather, scatter, index_select) of tensors of any dtype along `dim`
  // (negative counts from the end; a 0-dim tensor counts as 1-dim). Indices are int64 positions
  // along that dim, as torch takes them here: an index outside [0, size) is INVALID_ARGUMENT
  // naming it, its position in the index and the size, before anything is written (the CUDA
  // backend checks on the device and reads the first bad position back: one synchronization per
  // call). WrapIndices turns the negative indices of advanced indexing into positions. Outputs
  // must not overlap inputs. ---

  // out = torch.gather(x, dim, index): out[c] = x[c with c[dim] replaced by index[c]] for every
  // coordinate c of index, which has x's rank and no larger a size than x on any dim but `dim`;
  // out has index's shape and x's dtype.
  absl::Status Gather(const ConstTensorView& x, int64_t dim, const ConstTensorView& index,
                      const TensorView& out);

  // dst[c with c[dim] replaced by index[c]] = src[c] (kNone, torch's scatter_ of a src) or
  // += src[c] (kSum, scatter_add_) for every coordinate c of index, which has dst's rank, no
  // larger a size than src on any dim nor than dst on any dim but `dim`; src has dst's dtype and
  // rank. Where indices repeat, kNone leaves one of the values written (which one is unspecified,
  // as in torch; the CPU backend's is the last in index order) and kSum adds them all (in an
  // unspecified order on CUDA, so floating sums may round differently from run to run).
  absl::Status ScatterInto(const TensorView& dst, int64_t dim, const ConstTensorView& index,
                           const ConstTensorView& src, ScatterReduce reduce);

  // out = torch.index_select(x, dim, index): index 0-D or 1-D; out is x's shape with dim's size
  // the number of indices (x 0-dim: out 0-dim, one index), x's dtype.
  absl::Status IndexSelect(const ConstTensorView& x, int64_t dim, const ConstTensorView& index,
                           const TensorView& out);

  // index[i] += size where index[i] < 0, making the negative indices of torch's advanced indexing
  // (x[idx], index_put) positions: every index must be in [-size, size) (INVALID_ARGUMENT naming
  // the first outside and its position, before anything is written).
  absl::Status WrapIndices(const TensorView& index, int64_t size);

  // --- Neural-network kernels (module programs). float32 and float64; other dtypes are
  // INVALID_ARGUMENT naming the dtype. Leading dims fold into rows. A null optional view means
  // the module has no such parameter. Gradients of parameters (dweight, dbias) are accumulated
  // (+=); every other output is overwritten. ---

  // dx = dy * f'(x), same dtype and shape (relu'(0) = 0, as torch).
  absl::Status ActivateBackward(Activation f, const ConstTensorView& x, const ConstTensorView& dy,
                                const TensorView& dx);

  // y = (x - mean) * rstd * weight + bias over the last dim (n); mean and rstd are float32 [rows]
  // for the backward, rstd = 1 / sqrt(var + eps) with the biased variance, as torch.
  absl::Status LayerNorm(const ConstTensorView& x, const ConstTensorView* weight,
                         const ConstTensorView* bias, double eps, const TensorView& y,
                         const TensorView& mean, const TensorView& rstd);
  absl::Status LayerNormBackward(const ConstTensorView& dy, const ConstTensorView& x,
                                 const ConstTensorView* weight, const ConstTensorView& mean,
                                 const ConstTensorView& rstd, const TensorView& dx,
                                 const TensorView* dweight, const TensorView* dbias);

  // y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps) over the last dim; rstd float32
  // [rows].
  absl::Status RmsNorm(const ConstTensorView& x, const ConstTensorView* weight, double eps,
                       const TensorView& y, const TensorView& rstd);
  absl::Status RmsNormBackward(const ConstTensorView& dy, const ConstTensorView& x,
                               const ConstTensorView* weight, const ConstTensorView& rstd,
                               const TensorView& dx, const TensorView* dweight);

  // out[i, :] = weight[ids[i] - row_offset, :] when row_offset <= ids[i] < row_offset + rows of
  // weight, else zeros (a vocab-sharded embedding's part; an all-reduce sums the parts). ids are
  // int64 of any shape, out is ids' shape + [dim]. INVALID_ARGUMENT naming the id and position
  // for an id outside [0, num_embeddings).
  absl::Status Embedding(const ConstTensorView& ids, const ConstTensorView& weight,
                         int64_t row_offset, int64_t num_embeddings, const TensorView& out);
  // dweight[ids[i] - row_offset, :] += dy[i, :] for the ids within this shard's rows.
  absl::Status EmbeddingBackward(const ConstTensorView& ids, const ConstTensorView& dy,
                                 int64_t row_offset, const TensorView& dweight);

  // Scaled dot-product attention per head: q, k, v and out are [B, S, H*D] (head h is features
  // [h*D, (h+1)*D)), probs is float32 [B, H, S, S] = softmax(q k^T / sqrt(D)), with positions
  // j > i masked out when `causal`; out = probs v.
  absl::Status Attention(const ConstTensorView& q, const ConstTensorView& k,
                         const ConstTensorView& v, int64_t heads, bool causal,
                         const TensorView& out, const TensorView& probs);
  absl::Status AttentionBackward(const ConstTensorView& q, const ConstTensorView& k,
                                 const ConstTensorView& v, const ConstTensorView& probs,
                                 const ConstTensorView& dout, int64_t heads, const TensorView& dq,
                                 const TensorView& dk, const TensorView& dv);

  // One torch.optim.SGD step on one parameter (dampening 0, no Nesterov): g = grad +
  // weight_decay * param; with momentum, buf = g on the first step and momentum * buf + g after,
  // and g = buf; param -= lr * g. `momentum_buf` is required when momentum != 0.
  absl::Status SgdStep(const TensorView& param, const ConstTensorView& grad,
                       const TensorView* momentum_buf, double lr, double momentum,
                       double weight_decay, bool first_step);

  // Fills the shard of a random tensor of shape `global_shape` that starts at `offset` and has
  // out's shape, so that every shard equals the same slice of the full tensor filled with the same
  // seed. Element values are a function of (seed, global linear index) only: Philox4x32-10 keyed by
  // the seed with the index as counter (kernels/philox.h). kUniform draws from [0, 1) and is
  // bit-identical across backends; kNormal draws N(0, 1) by Box-Muller. Floating dtypes only.
  absl::Status RandomFill(Distribution dist, uint64_t seed, std::span<const int64_t> global_shape,
                          std::span<const int64_t> offset, const TensorView& out);
  // The same with the stream advanced by `counter`: element i draws Philox's block at counter + i
  // (wrapping), so calls on one seed at counters apart by what each drew never share a block.
  absl::Status RandomFill(Distribution dist, uint64_t seed, uint64_t counter,
                          std::span<const int64_t> global_shape, std::span<const int64_t> offset,
                          const TensorView& out);

 protected:
  KernelBackend() = default;

  // A checked GEMM in row-major terms; leading dimensions are at least 1.
  struct GemmArgs {
    bool transpose_a, transpose_b;
    int m, n, k, lda, ldb, ldc;
    double alpha, beta;
    const std::byte* a;
    const std::byte* b;
    std::byte* c;
    DType dtype;
  };
  // A checked reduction of x viewed as [outer, size, inner] into out viewed as [outer, inner] (an
  // arg-reduction's int64; a scan's out is [outer, size, inner] of x's dtype).
  struct ReduceDimArgs {
    ReduceOp op;
    DType dtype;
    int64_t outer, size, inner;
    const std::byte* x;
    std::byte* out;
  };
  // A checked sort of x viewed as [outer, size, inner] along the dim, size >= 1: values of x's
  // dtype and int64 indices, both [outer, size, inner].
  struct SortDimArgs {
    DType dtype;
    bool descending;
    int64_t outer, size, inner;
    const std::byte* x;
    std::byte* values;
    std::byte* indices;
  };
  // A checked softmax along a dim of tensors viewed as [outer, size, inner], size >= 1, floating:
  // the forward reads x (`in`) and writes y (`out`); the backward reads y (`in`) and dy and writes
  // dx (`out`).
  struct SoftmaxDimArgs {
    SoftmaxKind kind;
    DType dtype;
    int64_t outer, size, inner;
    const std::byte* in;
    const std::byte* dy;  // null in the forward
    std::byte* out;
  };
  // A checked random fill: `out` is the block at `offset` of a tensor with `global_strides`.
  struct RandomFillArgs {
    Distribution dist;
    uint64_t seed;
    std::vector<int64_t> global_strides;
    std::vector<int64_t> offset;
    TensorView out;
    uint64_t counter = 0;  // added to every element's global index
  };
  // A checked normalization of `rows` rows of `cols` >= 1 elements (float32 or float64); weight
  // and bias [cols] are null when absent, mean (LayerNorm only) and rstd are float32 [rows].
  struct NormArgs {
    DType dtype;
    int64_t rows, cols;
    double eps;
    const std::byte* x;
    const std::byte* weight;
    const std::byte* bias;
    std::byte* y;
    std::byte* mean;
    std::byte* rstd;
  };
  // A checked normalization backward: dx is overwritten; dweight and dbias, null when not wanted,
  // are accumulated into.
  struct NormBackwardArgs {
    DType dtype;
    int64_t rows, cols;
    const std::byte* dy;
    const std::byte* x;
    const std::byte* weight;
    const std::byte* mean;
    const std::byte* rstd;
    std::byte* dx;
    std::byte* dweight;
    std::byte* dbias;
  };
  // A checked embedding lookup of `count` int64 ids into the weight rows [row_offset, row_offset +
  // rows) of `num_embeddings`, each of `dim` elements; the ids are not range-checked yet.
  struct EmbeddingArgs {
    DType dtype;
    int64_t count, rows, dim, row_offset, num_embeddings;
    const std::byte* ids;
    const std::byte* weight;
    std::byte* out;
  };
  // A checked embedding backward: the rows of `dy` whose ids fall in the shard are added to
  // dweight.
  struct EmbeddingBackwardArgs {
    DType dtype;
    int64_t count, rows, dim, row_offset;
    const std::byte* ids;
    const std::byte* dy;
    std::byte* dweight;
  };
  // A checked attention on [batch, seq, heads * head_dim] tensors with float32 probs [batch,
  // heads, seq, seq]; every size is at least 1 and seq and heads * head_dim fit a BLAS int.
  struct AttentionArgs {
    DType dtype;
    int64_t batch, seq, heads, head_dim;
    bool causal;
    const std::byte* q;
    const std::byte* k;
    const std::byte* v;
    std::byte* out;
    std::byte* probs;
  };
  // A checked attention backward, shaped as AttentionArgs.
  struct AttentionBackwardArgs {
    DType dtype;
    int64_t batch, seq, heads, head_dim;
    const std::byte* q;
    const std::byte* k;
    const std::byte* v;
    const std::byte* probs;
    const std::byte* dout;
    std::byte* dq;
    std::byte* dk;
    std::byte* dv;
  };
  // A checked walk over a gather's or scatter's index (int64, contiguous, at least one element):
  // position p, at coordinate c of `shape` (the index's, with size-1 dims dropped and dims merged
  // where every operand allows), pairs the element of the indexed tensor (a gather's x, a
  // scatter's dst) at sum over d != dim of c[d] * indexed_strides[d], plus index[p] *
  // indexed_strides[dim], with the element of the other operand (a gather's out, a scatter's src)
  // at sum over d of c[d] * other_strides[d]. Strides are in elements; every index is checked to
  // be in [0, size of the indexed dim).
  struct IndexWalk {
    std::vector<int64_t> shape;
    int dim = 0;
    std::vector<int64_t> indexed_strides;
    std::vector<int64_t> other_strides;
  };
  struct GatherArgs {
    DType dtype;
    IndexWalk walk;
    const std::byte* x;
    const std::byte* index;
    std::byte* out;
  };
  struct ScatterArgs {
    DType dtype;
    ScatterReduce reduce;
    IndexWalk walk;
    std::byte* dst;
    const std::byte* index;
    const std::byte* src;
  };
  // A checked index_select of x viewed as [outer, size, inner] by `count` int64 indices, each
  // checked to be in [0, size), into out [outer, count, inner]; at least one element out.
  struct IndexSelectArgs {
    DType dtype;
    int64_t outer, size, inner, count;
    const std::byte* x;
    const std::byte* index;
    std::byte* out;
  };
  // A checked SGD step on `n` elements; momentum_buf is null when momentum == 0.
  struct SgdArgs {
    DType dtype;
    int64_t n;
    std::byte* param;
    const std::byte* grad;
    std::byte* momentum_buf;
    double lr, momentum, weight_decay;
    bool first_step;
  };

  // The implementations, called with checked arguments and at least one element to produce.
  virtual absl::Status DoGemm(const GemmArgs& args) = 0;
  // LinearProduct's `args` (transpose_b, alpha 1, beta 0); by default DoGemm.
  virtual absl::Status DoLinearProduct(const GemmArgs& args, const PreparedWeight* prepared) {
    (void)prepared;
    return DoGemm(args);
  }
  // PrepareLinearWeight of a checked 2-D floating `w` with rows >= 1; by default nothing (null).
  virtual absl::StatusOr<std::shared_ptr<const PreparedWeight>> DoPrepareLinearWeight(
      const ConstTensorView& w, int64_t rows) {
    (void)w;
    (void)rows;
    return nullptr;
  }
  // Both inputs have `dtype`, out has it or bool where GivesBool(op); `layout` walks them
  // (kernels/broadcast.h). The op takes the dtype.
  virtual absl::Status DoBinary(BinaryOp op, DType dtype, const std::byte* a, const std::byte* b,
                                std::byte* out, const BroadcastLayout& layout) = 0;
  // `n` elements of x (`dtype`, which the op takes) into out (x's dtype or bool, as Unary).
  virtual absl::Status DoUnary(UnaryOp op, DType dtype, const std::byte* x, std::byte* out,
                               int64_t n) = 0;
  // cond is bool, a, b and out have `dtype`; layout.strides are cond's, a's and b's.
  virtual absl::Status DoWhere(DType dtype, const std::byte* cond, const std::byte* a,
                               const std::byte* b, std::byte* out,
                               const BroadcastLayout3& layout) = 0;
  virtual absl::Status DoReduceAlongDim(const ReduceDimArgs& args) = 0;
  // args.op is kMax (argmax) or kMin (argmin); out is int64.
  virtual absl::Status DoArgReduceAlongDim(const ReduceDimArgs& args) = 0;
  // Each line stably sorted by SortsBefore (kernels/dim_ops.h).
  virtual absl::Status DoSortAlongDim(const SortDimArgs& args) = 0;
  // args.op is kSum or kProduct; the dtype is not bool.
  virtual absl::Status DoScanAlongDim(const ReduceDimArgs& args) = 0;
  virtual absl::Status DoSoftmaxAlongDim(const SoftmaxDimArgs& args) = 0;
  virtual absl::Status DoSoftmaxBackward(const SoftmaxDimArgs& args) = 0;
  virtual absl::Status DoReduceInto(ReduceOp op, DType dtype, std::byte* acc, const std::byte* in,
                                    int64_t n) = 0;
  virtual absl::Status DoDivideInPlace(DType dtype, std::byte* data, int64_t n,
                                       int64_t divisor) = 0;
  virtual absl::Status DoCast(DType from, const std::byte* src, DType to, std::byte* dst,
                              int64_t n) = 0;
  // Writes the `element_size`-byte pattern `value` into `n` consecutive elements.
  virtual absl::Status DoFill(std::byte* data, int64_t n, const std::byte* value,
                              size_t element_size) = 0;
  virtual absl::Status DoRandomFill(const RandomFillArgs& args) = 0;
  // The indexing kernels. DoFindIndexOutside gives the least position i < count (count >= 1) of
  // the int64 `index` with index[i] outside [lo, hi), or -1 when there is none.
  virtual absl::StatusOr<int64_t> DoFindIndexOutside(const std::byte* index, int64_t count,
                                                     int64_t lo, int64_t hi) = 0;
  // index[i] += size where index[i] < 0, every index checked to be in [-size, size).
  virtual absl::Status DoWrapIndices(std::byte* index, int64_t count, int64_t size) = 0;
  virtual absl::Status DoGather(const GatherArgs& args) = 0;
  virtual absl::Status DoScatter(const ScatterArgs& args) = 0;
  virtual absl::Status DoIndexSelect(const IndexSelectArgs& args) = 0;
  // The neural-network kernels: float32 or float64 operands.
  virtual absl::Status DoActivateBackward(Activation f, DType dtype, const std::byte* x,
                                          const std::byte* dy, std::byte* dx, int64_t n) = 0;
  virtual absl::Status DoLayerNorm(const NormArgs& args) = 0;
  virtual absl::Status DoLayerNormBackward(const NormBackwardArgs& args) = 0;
  virtual absl::Status DoRmsNorm(const NormArgs& args) = 0;
  virtual absl::Status DoRmsNormBackward(const NormBackwardArgs& args) = 0;
  // INVALID_ARGUMENT naming the first id outside [0, num_embeddings) and its position, before
  // writing anything; called whenever there are ids, even with dim 0.
  virtual absl::Status DoEmbedding(const EmbeddingArgs& args) = 0;
  virtual absl::Status DoEmbeddingBackward(const EmbeddingBackwardArgs& args) = 0;
  virtual absl::Status DoAttention(const AttentionArgs& args) = 0;
  virtual absl::Status DoAttentionBackward(const AttentionBackwardArgs& args) = 0;
  virtual absl::Status DoSgdStep(const SgdArgs& args) = 0;

 private:
  // The walk of a gather's or scatter's `index` (shapes as 1-dim at least, all of one rank) over
  // the contiguous tensor it indexes along `dim` and the other operand.
  static IndexWalk WalkOfIndex(const Shape& index, int dim, const Shape& indexed,
                               const Shape& other);
  // INVALID_ARGUMENT naming the first of the `index`'s values outside [lo, hi) and its
  // coordinate, for `op` indexing a dim of `size`; OK when all are inside.
  absl::Status CheckIndicesWithin(absl::string_view op, const ConstTensorView& index, int64_t lo,
                                  int64_t hi, int64_t size);
  // Gemm's argument checks: INVALID_ARGUMENT naming the bad operand, nullopt when C is empty.
  static absl::StatusOr<std::optional<GemmArgs>> CheckGemm(bool transpose_a, bool transpose_b,
                                                           double alpha, const ConstTensorView& a,
                                                           const ConstTensorView& b, double beta,
                                                           const TensorView& c);
};

// A device a worker could serve.
struct DeviceDescription {
  std::string device;  // "cuda:N"
  std::string name;    // the model, e.g. "NVIDIA H100 80GB HBM3"
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
};

// The CUDA devices visible to this process, in ordinal order (CUDA_VISIBLE_DEVICES applies); an
// empty list where there are none. FAILED_PRECONDITION, naming the reason, when CUDA support is
// not built or the driver cannot be used.
absl::StatusOr<std::vector<DeviceDescription>> ListCudaDevices();

// The backend for `device`: "cpu", "cuda" (= "cuda:0") or "cuda:N". INVALID_ARGUMENT for another
// name; FAILED_PRECONDITION when CUDA support is not built or the device is not usable (the message
// carries the CUDA error's name and number).
absl::StatusOr<std::unique_ptr<KernelBackend>> MakeBackend(absl::string_view device);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_BACKEND_H_
