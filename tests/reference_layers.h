// The per-layer forward and backward math of the single-process reference (module_reference.h):
// plain loops over row-major arrays of doubles, with PyTorch's semantics, independent of kernels/.
// Callers pass consistent shapes (module_reference.cc checks them); leading dims fold into rows.
#ifndef TESSERA_TESTS_REFERENCE_LAYERS_H_
#define TESSERA_TESTS_REFERENCE_LAYERS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/host_tensor.h"
#include "core/shape.h"

namespace tessera::reference {

// A row-major array of doubles with its shape.
struct Array {
  Shape shape;
  std::vector<double> values;
};

// A row-major array of int64 (Embedding ids) with its shape.
struct IdArray {
  Shape shape;
  std::vector<int64_t> values;
};

// A float32 or float64 tensor's values; INVALID_ARGUMENT naming `what` and the dtype otherwise.
absl::StatusOr<Array> ArrayFromTensor(const HostTensor& tensor, absl::string_view what);
// An int64 tensor's values; INVALID_ARGUMENT naming `what` and the dtype otherwise.
absl::StatusOr<IdArray> IdsFromTensor(const HostTensor& tensor, absl::string_view what);
// `array` rounded to `dtype` (float32 or float64).
HostTensor TensorFromArray(const Array& array, DType dtype);

// A zero-filled array of `shape`.
Array Zeros(Shape shape);

// a += b elementwise (same shapes).
void AddInto(Array& a, const Array& b);

// y = x weight^T + bias over the last dim: x [..., in], weight [out, in], bias [out] or null.
Array LinearForward(const Array& x, const Array& weight, const Array* bias);
// Returns dx = dy weight; dweight += dy^T x and dbias += the sum of dy over rows (dbias may be
// null).
Array LinearBackward(const Array& x, const Array& weight, const Array& dy, Array& dweight,
                     Array* dbias);

// y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim, var biased; weight and bias
// null without elementwise_affine.
Array LayerNormForward(const Array& x, const Array* weight, const Array* bias, double eps);
// Returns dx; dweight += sum over rows of dy * xhat, dbias += sum over rows of dy (when not null).
Array LayerNormBackward(const Array& x, const Array* weight, double eps, const Array& dy,
                        Array* dweight, Array* dbias);

// y = x / sqrt(mean(x^2) + eps) * weight over the last dim; weight null without
// elementwise_affine.
Array RmsNormForward(const Array& x, const Array* weight, double eps);
// Returns dx; dweight += sum over rows of dy * x * rstd (when not null).
Array RmsNormBackward(const Array& x, const Array* weight, double eps, const Array& dy,
                      Array* dweight);

// The elementwise activations.
enum class Pointwise { kRelu, kGeluErf, kGeluTanh, kSilu };
Array PointwiseForward(Pointwise f, const Array& x);
// dx = dy * f'(x) (relu'(0) = 0, as torch).
Array PointwiseBackward(Pointwise f, const Array& x, const Array& dy);

// out = weight[ids] with shape ids.shape + [dim]; INVALID_ARGUMENT naming the id and its position
// for an id outside [0, rows of weight).
absl::StatusOr<Array> EmbeddingForward(const IdArray& ids, const Array& weight);
// dweight[ids[i], :] += dy[i, :] (ids already checked by the forward).
void EmbeddingBackward(const IdArray& ids, const Array& dy, Array& dweight);

// Scaled dot-product attention per head: q, k, v and the result are [B, S, heads * D], head h is
// features [h*D, (h+1)*D); softmax(q k^T / sqrt(D)) v with positions j > i masked when `causal`.
Array AttentionForward(const Array& q, const Array& k, const Array& v, int64_t heads, bool causal);
// The gradients of AttentionForward's q, k and v for the result's gradient `dout`.
struct AttentionGradients {
  Array dq, dk, dv;
};
AttentionGradients AttentionBackward(const Array& q, const Array& k, const Array& v, int64_t heads,
                                     bool causal, const Array& dout);

}  // namespace tessera::reference

#endif  // TESSERA_TESTS_REFERENCE_LAYERS_H_
