// The CPU backend's scaled dot-product attention, forward and backward: per (batch, head), the
// head's features are a strided slice of [B, S, H*D] (leading dimension H*D), multiplied with
// OpenBLAS; softmax rows in between.

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/float_dispatch.h"

namespace tessera::kernels {
namespace {

CBLAS_TRANSPOSE Op(bool transpose) { return transpose ? CblasTrans : CblasNoTrans; }

// Row-major C = alpha * op(A) op(B) + beta * C with op(A) [m, k] and op(B) [k, n].
void RowMajorGemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                  const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, Op(ta), Op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void RowMajorGemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda,
                  const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, Op(ta), Op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// The sizes of one call and where head (b, h) starts in q/k/v/out ([B, S, H*D]) and in probs
// ([B, H, S, S]).
struct HeadLayout {
  int seq, head_dim, features;
  int64_t batch, heads;

  int64_t Features(int64_t b, int64_t h) const { return (b * seq) * features + h * head_dim; }
  int64_t Probs(int64_t b, int64_t h) const { return (b * heads + h) * seq * seq; }
};

template <typename Args>
HeadLayout LayoutOf(const Args& a) {
  return HeadLayout{static_cast<int>(a.seq), static_cast<int>(a.head_dim),
                    static_cast<int>(a.heads * a.head_dim), a.batch, a.heads};
}

// Each row of the [s, s] scores becomes its softmax, stably (the row max subtracted first);
// with `causal`, entries j > i are masked out (probability 0).
template <typename T>
void SoftmaxRows(T* scores, int s, bool causal) {
  for (int i = 0; i < s; ++i) {
    T* row = scores + static_cast<int64_t>(i) * s;
    const int visible = causal ? i + 1 : s;
    const T max = *std::max_element(row, row + visible);
    double sum = 0;
    for (int j = 0; j < visible; ++j) {
      row[j] = std::exp(row[j] - max);
      sum += row[j];
    }
    const T inverse = static_cast<T>(1.0 / sum);
    for (int j = 0; j < visible; ++j) row[j] *= inverse;
    std::fill(row + visible, row + s, T(0));
  }
}

template <typename T, typename AttentionArgs>
void AttentionTyped(const AttentionArgs& a) {
  constexpr bool kFloat = std::is_same_v<T, float>;
  const HeadLayout l = LayoutOf(a);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  // float32 computes in probs itself; float64 in a scratch rounded into probs.
  std::vector<T> scratch(kFloat ? 0 : static_cast<size_t>(l.seq) * l.seq);
  for (int64_t b = 0; b < l.batch; ++b) {
    for (int64_t h = 0; h < l.heads; ++h) {
      const int64_t at = l.Features(b, h);
      const T* q = reinterpret_cast<const T*>(a.q) + at;
      const T* k = reinterpret_cast<const T*>(a.k) + at;
      const T* v = reinterpret_cast<const T*>(a.v) + at;
      T* out = reinterpret_cast<T*>(a.out) + at;
      float* probs = reinterpret_cast<float*>(a.probs) + l.Probs(b, h);
      T* p = nullptr;
      if constexpr (kFloat) {
        p = probs;
      } else {
        p = scratch.data();
      }
      RowMajorGemm(false, true, l.seq, l.seq, l.head_dim, scale, q, l.features, k, l.features, T(0),
                   p, l.seq);
      SoftmaxRows(p, l.seq, a.causal);
      if constexpr (!kFloat) {
        std::transform(p, p + scratch.size(), probs, [](T x) { return static_cast<float>(x); });
      }
      RowMajorGemm(false, false, l.seq, l.head_dim, l.seq, T(1), p, l.seq, v, l.features, T(0), out,
                   l.features);
    }
  }
}

// With P the probabilities and dO the output's gradient of a head: dV = P^T dO, dP = dO V^T,
// dS = P * (dP - rowsum(P * dP)), dQ = scale * dS K, dK = scale * dS^T Q.
template <typename T, typename AttentionBackwardArgs>
void AttentionBackwardTyped(const AttentionBackwardArgs& a) {
  constexpr bool kFloat = std::is_same_v<T, float>;
  const HeadLayout l = LayoutOf(a);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  const size_t square = static_cast<size_t>(l.seq) * l.seq;
  std::vector<T> ds(square), widened(kFloat ? 0 : square);
  for (int64_t b = 0; b < l.batch; ++b) {
    for (int64_t h = 0; h < l.heads; ++h) {
      const int64_t at = l.Features(b, h);
      const T* q = reinterpret_cast<const T*>(a.q) + at;
      const T* k = reinterpret_cast<const T*>(a.k) + at;
      const T* v = reinterpret_cast<const T*>(a.v) + at;
      const T* dout = reinterpret_cast<const T*>(a.dout) + at;
      T* dq = reinterpret_cast<T*>(a.dq) + at;
      T* dk = reinterpret_cast<T*>(a.dk) + at;
      T* dv = reinterpret_cast<T*>(a.dv) + at;
      const float* probs = reinterpret_cast<const float*>(a.probs) + l.Probs(b, h);
      const T* p = nullptr;
      if constexpr (kFloat) {
        p = probs;
      } else {
        std::copy(probs, probs + square, widened.begin());
        p = widened.data();
      }
      RowMajorGemm(true, false, l.seq, l.head_dim, l.seq, T(1), p, l.seq, dout, l.features, T(0),
                   dv, l.features);
      RowMajorGemm(false, true, l.seq, l.seq, l.head_dim, T(1), dout, l.features, v, l.features,
                   T(0), ds.data(), l.seq);
      for (int i = 0; i < l.seq; ++i) {
        const T* p_row = p + static_cast<int64_t>(i) * l.seq;
        T* ds_row = ds.data() + static_cast<int64_t>(i) * l.seq;
        double dot = 0;
        for (int j = 0; j < l.seq; ++j) dot += static_cast<double>(p_row[j]) * ds_row[j];
        const T row_dot = static_cast<T>(dot);
        for (int j = 0; j < l.seq; ++j) ds_row[j] = p_row[j] * (ds_row[j] - row_dot);
      }
      RowMajorGemm(false, false, l.seq, l.head_dim, l.seq, scale, ds.data(), l.seq, k, l.features,
                   T(0), dq, l.features);
      RowMajorGemm(true, false, l.seq, l.head_dim, l.seq, scale, ds.data(), l.seq, q, l.features,
                   T(0), dk, l.features);
    }
  }
}

}  // namespace

absl::Status CpuBackend::DoAttention(const AttentionArgs& args) {
  VisitFloat32Or64(args.dtype, [&](auto t) { AttentionTyped<decltype(t)>(args); });
  return absl::OkStatus();
}

absl::Status CpuBackend::DoAttentionBackward(const AttentionBackwardArgs& args) {
  VisitFloat32Or64(args.dtype, [&](auto t) { AttentionBackwardTyped<decltype(t)>(args); });
  return absl::OkStatus();
}

}  // namespace tessera::kernels
