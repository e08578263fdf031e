#ifndef TESSERA_KERNELS_TESTING_NN_REFERENCE_H_
#define TESSERA_KERNELS_TESTING_NN_REFERENCE_H_

// Naive float64 references of the neural-network kernels, forward and backward, written from the
// definitions independently of the kernels (Jacobians spelled out, no shared code), and central
// finite differences to check the backward references and kernels against the forward ones.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/host_tensor.h"
#include "kernels/ops.h"
#include "kernels/testing/reference.h"

namespace tessera::kernels::testing {

using Values = std::vector<double>;

// Every element of `t` as a double.
inline Values ToValues(const HostTensor& t) {
  Values out(static_cast<size_t>(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i) out[i] = GetDouble(t, i);
  return out;
}

inline double Dot(const Values& a, const Values& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// d/d input[i] of L(input) = Dot(f(input), upstream) by central differences with step h, for at
// most `max_checked` indices spread evenly over the input; unchecked entries are NaN.
template <typename F>
Values CentralDifferences(F f, Values input, const Values& upstream, double h = 1e-5,
                          size_t max_checked = 96) {
  Values grad(input.size(), std::nan(""));
  const size_t stride = std::max<size_t>(1, (input.size() + max_checked - 1) / max_checked);
  for (size_t i = 0; i < input.size(); i += stride) {
    const double saved = input[i];
    input[i] = saved + h;
    const double plus = Dot(f(input), upstream);
    input[i] = saved - h;
    const double minus = Dot(f(input), upstream);
    input[i] = saved;
    grad[i] = (plus - minus) / (2 * h);
  }
  return grad;
}

// ---------------------------------------------------------------------------------------------
// Activations

inline double NaiveActivation(Activation f, double x) {
  switch (f) {
    case Activation::kRelu:
      return x < 0 ? 0 : x;
    case Activation::kGelu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::kGeluTanh: {
      const double k = std::sqrt(2.0 / 3.14159265358979323846);
      return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
    }
    case Activation::kTanh:
      return std::tanh(x);
    case Activation::kSilu:
      return x / (1 + std::exp(-x));
  }
  return 0;
}

// f'(x), with relu'(0) = 0 as torch.
inline double NaiveActivationDerivative(Activation f, double x) {
  constexpr double kPi = 3.14159265358979323846;
  switch (f) {
    case Activation::kRelu:
      return x > 0 ? 1 : 0;
    case Activation::kGelu:
      return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
             x * std::exp(-x * x / 2) / std::sqrt(2 * kPi);
    case Activation::kGeluTanh: {
      const double k = std::sqrt(2.0 / kPi), u = k * (x + 0.044715 * x * x * x);
      const double sech2 = 1 / (std::cosh(u) * std::cosh(u));
      return 0.5 * (1 + std::tanh(u)) + 0.5 * x * sech2 * k * (1 + 3 * 0.044715 * x * x);
    }
    case Activation::kTanh:
      return 1 / (std::cosh(x) * std::cosh(x));
    case Activation::kSilu: {
      const double e = std::exp(-x);
      return 1 / (1 + e) + x * e / ((1 + e) * (1 + e));
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// LayerNorm (centered) and RMSNorm (not centered) over rows of `cols`; an empty weight is 1, an
// empty bias 0.

struct NormForward {
  Values y, mean, rstd;
};

inline NormForward NaiveNorm(const Values& x, int64_t cols, const Values& weight,
                             const Values& bias, double eps, bool centered) {
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  NormForward out{Values(x.size()), Values(rows), Values(rows)};
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, square = 0;
    for (int64_t j = 0; j < cols; ++j) mean += x[r * cols + j] / cols;
    if (!centered) mean = 0;
    for (int64_t j = 0; j < cols; ++j) {
      square += (x[r * cols + j] - mean) * (x[r * cols + j] - mean) / cols;
    }
    const double rstd = 1 / std::sqrt(square + eps);
    for (int64_t j = 0; j < cols; ++j) {
      const double w = weight.empty() ? 1 : weight[j], b = bias.empty() ? 0 : bias[j];
      out.y[r * cols + j] = (x[r * cols + j] - mean) * rstd * w + b;
    }
    out.mean[r] = mean;
    out.rstd[r] = rstd;
  }
  return out;
}

struct NormGrads {
  Values dx, dweight, dbias;
};

// Through the Jacobian of xhat = (x - mean) * rstd: d xhat_i / d x_j = rstd * (delta_ij - c / n
// - xhat_i * xhat_j / n), with c = 1 when centered and 0 otherwise.
inline NormGrads NaiveNormBackward(const Values& dy, const Values& x, int64_t cols,
                                   const Values& weight, double eps, bool centered) {
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  const NormForward f = NaiveNorm(x, cols, {}, {}, eps, centered);  // y = xhat
  NormGrads g{Values(x.size(), 0.0), Values(cols, 0.0), Values(cols, 0.0)};
  const double n = static_cast<double>(cols), c = centered ? 1 : 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double* xhat = &f.y[r * cols];
    for (int64_t j = 0; j < cols; ++j) {
      for (int64_t i = 0; i < cols; ++i) {
        const double jacobian = f.rstd[r] * ((i == j ? 1 : 0) - c / n - xhat[i] * xhat[j] / n);
        const double w = weight.empty() ? 1 : weight[i];
        g.dx[r * cols + j] += dy[r * cols + i] * w * jacobian;
      }
      g.dweight[j] += dy[r * cols + j] * xhat[j];
      g.dbias[j] += dy[r * cols + j];
    }
  }
  return g;
}

// ---------------------------------------------------------------------------------------------
// Embedding: row i of the output is weight row ids[i] - row_offset when inside the shard's `rows`,
// else zeros.

inline Values NaiveEmbedding(const std::vector<int64_t>& ids, const Values& weight, int64_t rows,
                             int64_t dim, int64_t row_offset) {
  Values out(ids.size() * dim, 0.0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t row = ids[i] - row_offset;
    if (row < 0 || row >= rows) continue;
    for (int64_t j = 0; j < dim; ++j) out[i * dim + j] = weight[row * dim + j];
  }
  return out;
}

inline Values NaiveEmbeddingBackward(const std::vector<int64_t>& ids, const Values& dy,
                                     int64_t rows, int64_t dim, int64_t row_offset) {
  Values dweight(rows * dim, 0.0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t row = ids[i] - row_offset;
    if (row < 0 || row >= rows) continue;
    for (int64_t j = 0; j < dim; ++j) dweight[row * dim + j] += dy[i * dim + j];
  }
  return dweight;
}

// ---------------------------------------------------------------------------------------------
// Attention on [B, S, H*D] tensors; probabilities [B, H, S, S].

struct AttentionShape {
  int64_t batch, seq, heads, head_dim;

  int64_t features() const { return heads * head_dim; }
  // Element d of head h at position s of batch b in a [B, S, H*D] tensor.
  int64_t At(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return (b * seq + s) * features() + h * head_dim + d;
  }
  int64_t ProbAt(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return ((b * heads + h) * seq + i) * seq + j;
  }
};

// softmax over j of q_i . k_j / sqrt(D), j <= i when causal.
inline Values NaiveAttentionProbs(const Values& q, const Values& k, const AttentionShape& s,
                                  bool causal) {
  Values probs(s.batch * s.heads * s.seq * s.seq, 0.0);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      for (int64_t i = 0; i < s.seq; ++i) {
        const int64_t visible = causal ? i + 1 : s.seq;
        Values scores(visible);
        for (int64_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < s.head_dim; ++d) dot += q[s.At(b, i, h, d)] * k[s.At(b, j, h, d)];
          scores[j] = dot / std::sqrt(static_cast<double>(s.head_dim));
        }
        const double max = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double score : scores) sum += std::exp(score - max);
        for (int64_t j = 0; j < visible; ++j) {
          probs[s.ProbAt(b, h, i, j)] = std::exp(scores[j] - max) / sum;
        }
      }
    }
  }
  return probs;
}

inline Values NaiveAttention(const Values& q, const Values& k, const Values& v,
                             const AttentionShape& s, bool causal) {
  const Values probs = NaiveAttentionProbs(q, k, s, causal);
  Values out(q.size(), 0.0);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      for (int64_t i = 0; i < s.seq; ++i) {
        for (int64_t j = 0; j < s.seq; ++j) {
          for (int64_t d = 0; d < s.head_dim; ++d) {
            out[s.At(b, i, h, d)] += probs[s.ProbAt(b, h, i, j)] * v[s.At(b, j, h, d)];
          }
        }
      }
    }
  }
  return out;
}

struct AttentionGrads {
  Values dq, dk, dv;
};

// Through the softmax Jacobian d p_ij / d score_il = p_ij * (delta_jl - p_il).
inline AttentionGrads NaiveAttentionBackward(const Values& q, const Values& k, const Values& v,
                                             const Values& dout, const AttentionShape& s,
                                             bool causal) {
  const Values probs = NaiveAttentionProbs(q, k, s, causal);
  AttentionGrads g{Values(q.size(), 0.0), Values(q.size(), 0.0), Values(q.size(), 0.0)};
  const double scale = 1 / std::sqrt(static_cast<double>(s.head_dim));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      for (int64_t i = 0; i < s.seq; ++i) {
        Values dprob(s.seq, 0.0);
        for (int64_t j = 0; j < s.seq; ++j) {
          const double p = probs[s.ProbAt(b, h, i, j)];
          for (int64_t d = 0; d < s.head_dim; ++d) {
            dprob[j] += dout[s.At(b, i, h, d)] * v[s.At(b, j, h, d)];
            g.dv[s.At(b, j, h, d)] += p * dout[s.At(b, i, h, d)];
          }
        }
        for (int64_t l = 0; l < s.seq; ++l) {
          double dscore = 0;
          for (int64_t j = 0; j < s.seq; ++j) {
            const double pj = probs[s.ProbAt(b, h, i, j)], pl = probs[s.ProbAt(b, h, i, l)];
            dscore += dprob[j] * pj * ((j == l ? 1 : 0) - pl);
          }
          for (int64_t d = 0; d < s.head_dim; ++d) {
            g.dq[s.At(b, i, h, d)] += dscore * scale * k[s.At(b, l, h, d)];
            g.dk[s.At(b, l, h, d)] += dscore * scale * q[s.At(b, i, h, d)];
          }
        }
      }
    }
  }
  return g;
}

// ---------------------------------------------------------------------------------------------
// torch.optim.SGD (dampening 0, no Nesterov) on one parameter.

inline void NaiveSgdStep(Values& param, const Values& grad, Values& momentum_buf, double lr,
                         double momentum, double weight_decay, bool first_step) {
  for (size_t i = 0; i < param.size(); ++i) {
    double g = grad[i] + weight_decay * param[i];
    if (momentum != 0) {
      momentum_buf[i] = first_step ? g : momentum * momentum_buf[i] + g;
      g = momentum_buf[i];
    }
    param[i] -= lr * g;
  }
}

}  // namespace tessera::kernels::testing

#endif  // TESSERA_KERNELS_TESTING_NN_REFERENCE_H_
