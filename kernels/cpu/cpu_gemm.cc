#include <cblas.h>

#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/host_element.h"

namespace tessera::kernels {
namespace {

CBLAS_TRANSPOSE Op(bool transpose) { return transpose ? CblasTrans : CblasNoTrans; }

template <typename T>
std::vector<float> Widen(const std::byte* data, int64_t n) {
  const T* p = reinterpret_cast<const T*>(data);
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = Load(p[i]);
  return out;
}

// float16 / bfloat16: widen to float32, run sgemm, round C back to nearest even.
template <typename T, typename GemmArgs>
void Gemm16(const GemmArgs& g) {
  const int64_t mk = int64_t{g.m} * g.k, kn = int64_t{g.k} * g.n, mn = int64_t{g.m} * g.n;
  const std::vector<float> a = Widen<T>(g.a, mk);
  const std::vector<float> b = Widen<T>(g.b, kn);
  std::vector<float> c = g.beta != 0.0 ? Widen<T>(g.c, mn) : std::vector<float>(mn);
  cblas_sgemm(CblasRowMajor, Op(g.transpose_a), Op(g.transpose_b), g.m, g.n, g.k,
              static_cast<float>(g.alpha), a.data(), g.lda, b.data(), g.ldb,
              static_cast<float>(g.beta), c.data(), g.ldc);
  T* out = reinterpret_cast<T*>(g.c);
  for (int64_t i = 0; i < mn; ++i) out[i] = Store<T>(c[i]);
}

}  // namespace

absl::Status CpuBackend::DoGemm(const GemmArgs& g) {
  switch (g.dtype) {
    case DType::kFloat32:
      cblas_sgemm(CblasRowMajor, Op(g.transpose_a), Op(g.transpose_b), g.m, g.n, g.k,
                  static_cast<float>(g.alpha), reinterpret_cast<const float*>(g.a), g.lda,
                  reinterpret_cast<const float*>(g.b), g.ldb, static_cast<float>(g.beta),
                  reinterpret_cast<float*>(g.c), g.ldc);
      break;
    case DType::kFloat64:
      cblas_dgemm(CblasRowMajor, Op(g.transpose_a), Op(g.transpose_b), g.m, g.n, g.k, g.alpha,
                  reinterpret_cast<const double*>(g.a), g.lda, reinterpret_cast<const double*>(g.b),
                  g.ldb, g.beta, reinterpret_cast<double*>(g.c), g.ldc);
      break;
    case DType::kFloat16:
      Gemm16<Float16>(g);
      break;
    case DType::kBFloat16:
      Gemm16<BFloat16>(g);
      break;
    default:
      return absl::InternalError("cpu gemm reached with a non-floating dtype");
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::DoLinearProduct(const GemmArgs& g, const PreparedWeight* prepared) {
  if (g.dtype != DType::kFloat32 || g.k == 0) return DoGemm(g);
  return linear_.Product(reinterpret_cast<const float*>(g.a), reinterpret_cast<const float*>(g.b),
                         prepared, reinterpret_cast<float*>(g.c), g.m, g.n, g.k);
}

absl::StatusOr<std::shared_ptr<const PreparedWeight>> CpuBackend::DoPrepareLinearWeight(
    const ConstTensorView& w, int64_t rows) {
  if (w.dtype != DType::kFloat32) return nullptr;
  return OnednnLinear::Pack(reinterpret_cast<const float*>(w.data), static_cast<int>(rows),
                            static_cast<int>(w.shape[0]), static_cast<int>(w.shape[1]));
}

}  // namespace tessera::kernels
