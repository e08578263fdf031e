#include "tests/reference_layers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::reference {
namespace {

// The size of the last dim (the features) and the number of rows the leading dims fold into.
struct Rows {
  int64_t rows, width;
};

Rows RowsOf(const Shape& shape) {
  const int64_t width = shape.empty() ? 1 : shape.back();
  return {width == 0 ? 0 : NumElements(shape) / width, width};
}

Shape WithLastDim(Shape shape, int64_t size) {
  shape.back() = size;
  return shape;
}

// Mean and 1 / sqrt(var + eps) of one row, var biased (LayerNorm's statistics).
std::pair<double, double> MeanAndRstd(const double* row, int64_t n, double eps) {
  double mean = 0;
  for (int64_t i = 0; i < n; ++i) mean += row[i];
  mean /= static_cast<double>(n);
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += (row[i] - mean) * (row[i] - mean);
  var /= static_cast<double>(n);
  return {mean, 1.0 / std::sqrt(var + eps)};
}

// 1 / sqrt(mean(x^2) + eps) of one row (RMSNorm's statistic).
double RmsRstd(const double* row, int64_t n, double eps) {
  double sum_squares = 0;
  for (int64_t i = 0; i < n; ++i) sum_squares += row[i] * row[i];
  return 1.0 / std::sqrt(sum_squares / static_cast<double>(n) + eps);
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

constexpr double kSqrt2OverPi = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;  // sqrt(2 / pi)
constexpr double kGeluTanhCubic = 0.044715;

double Activate(Pointwise f, double x) {
  switch (f) {
    case Pointwise::kRelu:
      return x > 0 ? x : 0.0;
    case Pointwise::kGeluErf:
      return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2));
    case Pointwise::kGeluTanh:
      return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kGeluTanhCubic * x * x * x)));
    case Pointwise::kSilu:
      return x * Sigmoid(x);
  }
  return 0;
}

double ActivateDerivative(Pointwise f, double x) {
  switch (f) {
    case Pointwise::kRelu:
      return x > 0 ? 1.0 : 0.0;
    case Pointwise::kGeluErf: {
      const double density =
          std::exp(-0.5 * x * x) * std::numbers::inv_sqrtpi / std::numbers::sqrt2;
      return 0.5 * (1.0 + std::erf(x / std::numbers::sqrt2)) + x * density;
    }
    case Pointwise::kGeluTanh: {
      const double t = std::tanh(kSqrt2OverPi * (x + kGeluTanhCubic * x * x * x));
      return 0.5 * (1.0 + t) +
             0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kGeluTanhCubic * x * x);
    }
    case Pointwise::kSilu: {
      const double s = Sigmoid(x);
      return s * (1.0 + x * (1.0 - s));
    }
  }
  return 0;
}

// The dims of an attention operand [B, S, heads * D].
struct AttentionDims {
  int64_t batch, seq, heads, head_dim, width;
  // Offset of feature d of head h at position i of batch b.
  int64_t At(int64_t b, int64_t i, int64_t h, int64_t d) const {
    return (b * seq + i) * width + h * head_dim + d;
  }
};

AttentionDims DimsOf(const Array& q, int64_t heads) {
  return {q.shape[0], q.shape[1], heads, q.shape[2] / heads, q.shape[2]};
}

// softmax(q k^T / sqrt(D)) of head h of batch b, [S, S] row-major; masked entries are 0.
std::vector<double> Probabilities(const Array& q, const Array& k, const AttentionDims& a, int64_t b,
                                  int64_t h, bool causal) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.head_dim));
  std::vector<double> probs(a.seq * a.seq, 0.0);
  for (int64_t i = 0; i < a.seq; ++i) {
    double* row = &probs[i * a.seq];
    const int64_t visible = causal ? i + 1 : a.seq;
    double max_score = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < visible; ++j) {
      double score = 0;
      for (int64_t d = 0; d < a.head_dim; ++d) {
        score += q.values[a.At(b, i, h, d)] * k.values[a.At(b, j, h, d)];
      }
      row[j] = score * scale;
      max_score = std::max(max_score, row[j]);
    }
    double total = 0;
    for (int64_t j = 0; j < visible; ++j) {
      row[j] = std::exp(row[j] - max_score);
      total += row[j];
    }
    for (int64_t j = 0; j < visible; ++j) row[j] /= total;
  }
  return probs;
}

}  // namespace

absl::StatusOr<Array> ArrayFromTensor(const HostTensor& tensor, absl::string_view what) {
  Array array{tensor.shape(), std::vector<double>(tensor.num_elements())};
  if (tensor.dtype() == DType::kFloat32) {
    const float* data = tensor.data_as<float>();
    for (size_t i = 0; i < array.values.size(); ++i) array.values[i] = data[i];
  } else if (tensor.dtype() == DType::kFloat64) {
    const double* data = tensor.data_as<double>();
    for (size_t i = 0; i < array.values.size(); ++i) array.values[i] = data[i];
  } else {
    return absl::InvalidArgumentError(absl::StrCat(what, " has dtype ", DTypeName(tensor.dtype()),
                                                   "; the reference takes float32 or float64"));
  }
  return array;
}

absl::StatusOr<IdArray> IdsFromTensor(const HostTensor& tensor, absl::string_view what) {
  if (tensor.dtype() != DType::kInt64) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has dtype ", DTypeName(tensor.dtype()), "; ids must be int64"));
  }
  const int64_t* data = tensor.data_as<int64_t>();
  return IdArray{tensor.shape(), std::vector<int64_t>(data, data + tensor.num_elements())};
}

HostTensor TensorFromArray(const Array& array, DType dtype) {
  HostTensor tensor = HostTensor::ZerosOfValidShape(dtype, array.shape);
  if (dtype == DType::kFloat32) {
    float* data = tensor.data_as<float>();
    for (size_t i = 0; i < array.values.size(); ++i) data[i] = static_cast<float>(array.values[i]);
  } else {
    double* data = tensor.data_as<double>();
    for (size_t i = 0; i < array.values.size(); ++i) data[i] = array.values[i];
  }
  return tensor;
}

Array Zeros(Shape shape) {
  const int64_t n = NumElements(shape);
  return {std::move(shape), std::vector<double>(n, 0.0)};
}

void AddInto(Array& a, const Array& b) {
  for (size_t i = 0; i < a.values.size(); ++i) a.values[i] += b.values[i];
}

Array LinearForward(const Array& x, const Array& weight, const Array* bias) {
  const auto [rows, in] = RowsOf(x.shape);
  const int64_t out = weight.shape[0];
  Array y = Zeros(WithLastDim(x.shape, out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = bias != nullptr ? bias->values[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) sum += x.values[r * in + i] * weight.values[o * in + i];
      y.values[r * out + o] = sum;
    }
  }
  return y;
}

Array LinearBackward(const Array& x, const Array& weight, const Array& dy, Array& dweight,
                     Array* dbias) {
  const auto [rows, in] = RowsOf(x.shape);
  const int64_t out = weight.shape[0];
  Array dx = Zeros(x.shape);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      const double g = dy.values[r * out + o];
      for (int64_t i = 0; i < in; ++i) {
        dx.values[r * in + i] += g * weight.values[o * in + i];
        dweight.values[o * in + i] += g * x.values[r * in + i];
      }
      if (dbias != nullptr) dbias->values[o] += g;
    }
  }
  return dx;
}

Array LayerNormForward(const Array& x, const Array* weight, const Array* bias, double eps) {
  const auto [rows, n] = RowsOf(x.shape);
  Array y = Zeros(x.shape);
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = &x.values[r * n];
    const auto [mean, rstd] = MeanAndRstd(row, n, eps);
    for (int64_t i = 0; i < n; ++i) {
      double v = (row[i] - mean) * rstd;
      if (weight != nullptr) v *= weight->values[i];
      if (bias != nullptr) v += bias->values[i];
      y.values[r * n + i] = v;
    }
  }
  return y;
}

Array LayerNormBackward(const Array& x, const Array* weight, double eps, const Array& dy,
                        Array* dweight, Array* dbias) {
  const auto [rows, n] = RowsOf(x.shape);
  Array dx = Zeros(x.shape);
  std::vector<double> xhat(n), g(n);
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = &x.values[r * n];
    const double* dy_row = &dy.values[r * n];
    const auto [mean, rstd] = MeanAndRstd(row, n, eps);
    double mean_g = 0, mean_g_xhat = 0;
    for (int64_t i = 0; i < n; ++i) {
      xhat[i] = (row[i] - mean) * rstd;
      g[i] = dy_row[i] * (weight != nullptr ? weight->values[i] : 1.0);
      mean_g += g[i];
      mean_g_xhat += g[i] * xhat[i];
      if (dweight != nullptr) dweight->values[i] += dy_row[i] * xhat[i];
      if (dbias != nullptr) dbias->values[i] += dy_row[i];
    }
    mean_g /= static_cast<double>(n);
    mean_g_xhat /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) {
      dx.values[r * n + i] = rstd * (g[i] - mean_g - xhat[i] * mean_g_xhat);
    }
  }
  return dx;
}

Array RmsNormForward(const Array& x, const Array* weight, double eps) {
  const auto [rows, n] = RowsOf(x.shape);
  Array y = Zeros(x.shape);
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = &x.values[r * n];
    const double rstd = RmsRstd(row, n, eps);
    for (int64_t i = 0; i < n; ++i) {
      y.values[r * n + i] = row[i] * rstd * (weight != nullptr ? weight->values[i] : 1.0);
    }
  }
  return y;
}

Array RmsNormBackward(const Array& x, const Array* weight, double eps, const Array& dy,
                      Array* dweight) {
  const auto [rows, n] = RowsOf(x.shape);
  Array dx = Zeros(x.shape);
  std::vector<double> g(n);
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = &x.values[r * n];
    const double* dy_row = &dy.values[r * n];
    const double rstd = RmsRstd(row, n, eps);
    double mean_g_x = 0;
    for (int64_t i = 0; i < n; ++i) {
      g[i] = dy_row[i] * (weight != nullptr ? weight->values[i] : 1.0);
      mean_g_x += g[i] * row[i];
      if (dweight != nullptr) dweight->values[i] += dy_row[i] * row[i] * rstd;
    }
    mean_g_x /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) {
      dx.values[r * n + i] = rstd * g[i] - rstd * rstd * rstd * row[i] * mean_g_x;
    }
  }
  return dx;
}

Array PointwiseForward(Pointwise f, const Array& x) {
  Array y = Zeros(x.shape);
  for (size_t i = 0; i < x.values.size(); ++i) y.values[i] = Activate(f, x.values[i]);
  return y;
}

Array PointwiseBackward(Pointwise f, const Array& x, const Array& dy) {
  Array dx = Zeros(x.shape);
  for (size_t i = 0; i < x.values.size(); ++i) {
    dx.values[i] = dy.values[i] * ActivateDerivative(f, x.values[i]);
  }
  return dx;
}

absl::StatusOr<Array> EmbeddingForward(const IdArray& ids, const Array& weight) {
  const int64_t rows = weight.shape[0], dim = weight.shape[1];
  Shape out_shape = ids.shape;
  out_shape.push_back(dim);
  Array out = Zeros(std::move(out_shape));
  for (size_t p = 0; p < ids.values.size(); ++p) {
    const int64_t id = ids.values[p];
    if (id < 0 || id >= rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("embedding id ", id, " at position ", p, " is outside [0, ", rows, ")"));
    }
    for (int64_t d = 0; d < dim; ++d) out.values[p * dim + d] = weight.values[id * dim + d];
  }
  return out;
}

void EmbeddingBackward(const IdArray& ids, const Array& dy, Array& dweight) {
  const int64_t dim = dweight.shape[1];
  for (size_t p = 0; p < ids.values.size(); ++p) {
    for (int64_t d = 0; d < dim; ++d) {
      dweight.values[ids.values[p] * dim + d] += dy.values[p * dim + d];
    }
  }
}

Array AttentionForward(const Array& q, const Array& k, const Array& v, int64_t heads, bool causal) {
  const AttentionDims a = DimsOf(q, heads);
  Array out = Zeros(q.shape);
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const std::vector<double> probs = Probabilities(q, k, a, b, h, causal);
      for (int64_t i = 0; i < a.seq; ++i) {
        for (int64_t d = 0; d < a.head_dim; ++d) {
          double sum = 0;
          for (int64_t j = 0; j < a.seq; ++j) {
            sum += probs[i * a.seq + j] * v.values[a.At(b, j, h, d)];
          }
          out.values[a.At(b, i, h, d)] = sum;
        }
      }
    }
  }
  return out;
}

AttentionGradients AttentionBackward(const Array& q, const Array& k, const Array& v, int64_t heads,
                                     bool causal, const Array& dout) {
  const AttentionDims a = DimsOf(q, heads);
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.head_dim));
  AttentionGradients grads{Zeros(q.shape), Zeros(k.shape), Zeros(v.shape)};
  std::vector<double> dprobs(a.seq);
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const std::vector<double> probs = Probabilities(q, k, a, b, h, causal);
      for (int64_t i = 0; i < a.seq; ++i) {
        const double* p = &probs[i * a.seq];
        // dprobs[j] = dout_i . v_j; dv_j += p_ij dout_i.
        double p_dot_dprobs = 0;
        for (int64_t j = 0; j < a.seq; ++j) {
          double dp = 0;
          for (int64_t d = 0; d < a.head_dim; ++d) {
            dp += dout.values[a.At(b, i, h, d)] * v.values[a.At(b, j, h, d)];
            grads.dv.values[a.At(b, j, h, d)] += p[j] * dout.values[a.At(b, i, h, d)];
          }
          dprobs[j] = dp;
          p_dot_dprobs += p[j] * dp;
        }
        // The softmax's backward gives the scores' gradient; masked entries have p = 0.
        for (int64_t j = 0; j < a.seq; ++j) {
          const double dscore = p[j] * (dprobs[j] - p_dot_dprobs) * scale;
          for (int64_t d = 0; d < a.head_dim; ++d) {
            grads.dq.values[a.At(b, i, h, d)] += dscore * k.values[a.At(b, j, h, d)];
            grads.dk.values[a.At(b, j, h, d)] += dscore * q.values[a.At(b, i, h, d)];
          }
        }
      }
    }
  }
  return grads;
}

}  // namespace tessera::reference
