// The CPU backend's LayerNorm and RMSNorm, forward and backward: one row at a time, sums in
// float64. RMSNorm is LayerNorm without centering (mean 0) and without bias.

#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/float_dispatch.h"

namespace tessera::kernels {
namespace {

// `data` as `cols` elements of T, or `cols` copies of `missing` when it is null (an absent weight
// is 1, an absent bias 0), so that the row loops need no branch.
template <typename T>
class ParameterRow {
 public:
  ParameterRow(const std::byte* data, int64_t cols, T missing) {
    if (data != nullptr) {
      row_ = reinterpret_cast<const T*>(data);
    } else {
      filler_.assign(static_cast<size_t>(cols), missing);
      row_ = filler_.data();
    }
  }
  const T* get() const { return row_; }

 private:
  std::vector<T> filler_;
  const T* row_ = nullptr;
};

// The sum over j < n of term(j) in float64, in four interleaved partial sums so that the
// additions overlap (a single running sum is bound by the add's latency).
template <typename F>
double SumOf(int64_t n, F term) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    s0 += term(j);
    s1 += term(j + 1);
    s2 += term(j + 2);
    s3 += term(j + 3);
  }
  for (; j < n; ++j) s0 += term(j);
  return (s0 + s1) + (s2 + s3);
}

// y = (x - mean) * rstd * weight + bias per row; mean is 0 unless `centered`.
template <typename T, typename NormArgs>
void NormalizeRows(const NormArgs& a, bool centered) {
  const int64_t n = a.cols;
  const ParameterRow<T> weight(a.weight, n, T(1)), bias(a.bias, n, T(0));
  const T* w = weight.get();
  const T* b = bias.get();
  float* mean_out = reinterpret_cast<float*>(a.mean);
  float* rstd_out = reinterpret_cast<float*>(a.rstd);
  for (int64_t r = 0; r < a.rows; ++r) {
    const T* x = reinterpret_cast<const T*>(a.x) + r * n;
    T* y = reinterpret_cast<T*>(a.y) + r * n;
    const double mean =
        centered ? SumOf(n, [&](int64_t j) { return double{x[j]}; }) / static_cast<double>(n) : 0.0;
    const double var = SumOf(n,
                             [&](int64_t j) {
                               const double d = x[j] - mean;
                               return d * d;
                             }) /
                       static_cast<double>(n);
    const double rstd = 1.0 / std::sqrt(var + a.eps);
    for (int64_t j = 0; j < n; ++j) y[j] = static_cast<T>((x[j] - mean) * rstd * w[j] + b[j]);
    if (centered) mean_out[r] = static_cast<float>(mean);
    rstd_out[r] = static_cast<float>(rstd);
  }
}

// With xhat = (x - mean) * rstd and g = dy * weight per row:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (without mean(g) when not centered);
// dweight += sum over rows of dy * xhat, dbias += sum over rows of dy.
template <typename T, typename NormBackwardArgs>
void NormalizeRowsBackward(const NormBackwardArgs& a, bool centered) {
  const int64_t n = a.cols;
  const ParameterRow<T> weight(a.weight, n, T(1));
  const T* w = weight.get();
  const float* mean_in = reinterpret_cast<const float*>(a.mean);
  const float* rstd_in = reinterpret_cast<const float*>(a.rstd);
  std::vector<double> dweight(a.dweight != nullptr ? n : 0), dbias(a.dbias != nullptr ? n : 0);
  std::vector<double> xhat(static_cast<size_t>(n));
  for (int64_t r = 0; r < a.rows; ++r) {
    const T* x = reinterpret_cast<const T*>(a.x) + r * n;
    const T* dy = reinterpret_cast<const T*>(a.dy) + r * n;
    T* dx = reinterpret_cast<T*>(a.dx) + r * n;
    const double mean = centered ? mean_in[r] : 0.0, rstd = rstd_in[r];
    for (int64_t j = 0; j < n; ++j) xhat[j] = (x[j] - mean) * rstd;
    const double sum_g = SumOf(n, [&](int64_t j) { return static_cast<double>(dy[j]) * w[j]; });
    const double sum_g_xhat =
        SumOf(n, [&](int64_t j) { return static_cast<double>(dy[j]) * w[j] * xhat[j]; });
    if (!dweight.empty()) {
      for (int64_t j = 0; j < n; ++j) dweight[j] += dy[j] * xhat[j];
    }
    if (!dbias.empty()) {
      for (int64_t j = 0; j < n; ++j) dbias[j] += dy[j];
    }
    const double mean_g = centered ? sum_g / static_cast<double>(n) : 0.0;
    const double mean_g_xhat = sum_g_xhat / static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) {
      const double g = static_cast<double>(dy[j]) * w[j];
      dx[j] = static_cast<T>(rstd * (g - mean_g - xhat[j] * mean_g_xhat));
    }
  }
  T* dweight_out = reinterpret_cast<T*>(a.dweight);
  T* dbias_out = reinterpret_cast<T*>(a.dbias);
  for (size_t j = 0; j < dweight.size(); ++j) dweight_out[j] += static_cast<T>(dweight[j]);
  for (size_t j = 0; j < dbias.size(); ++j) dbias_out[j] += static_cast<T>(dbias[j]);
}

}  // namespace

absl::Status CpuBackend::DoLayerNorm(const NormArgs& args) {
  VisitFloat32Or64(args.dtype,
                   [&](auto t) { NormalizeRows<decltype(t)>(args, /*centered=*/true); });
  return absl::OkStatus();
}

absl::Status CpuBackend::DoRmsNorm(const NormArgs& args) {
  VisitFloat32Or64(args.dtype,
                   [&](auto t) { NormalizeRows<decltype(t)>(args, /*centered=*/false); });
  return absl::OkStatus();
}

absl::Status CpuBackend::DoLayerNormBackward(const NormBackwardArgs& args) {
  VisitFloat32Or64(args.dtype,
                   [&](auto t) { NormalizeRowsBackward<decltype(t)>(args, /*centered=*/true); });
  return absl::OkStatus();
}

absl::Status CpuBackend::DoRmsNormBackward(const NormBackwardArgs& args) {
  VisitFloat32Or64(args.dtype,
                   [&](auto t) { NormalizeRowsBackward<decltype(t)>(args, /*centered=*/false); });
  return absl::OkStatus();
}

}  // namespace tessera::kernels
