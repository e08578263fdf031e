#include "bench/single_process_modules.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessera::bench {
namespace {

using kernels::Activation;
using kernels::KernelBackend;
using kernels::Reshaped;
using kernels::ViewOf;

// `t` as a 2-D [rows, last] view: leading dims folded into rows.
template <typename T>
auto Rows(T& t) {
  const int64_t last = t.shape().back();
  return Reshaped(ViewOf(t), {t.num_elements() / last, last});
}

absl::StatusOr<const DeviceTensor*> Find(const Parameters& p, const std::string& name) {
  auto it = p.find(name);
  if (it == p.end()) return absl::NotFoundError(absl::StrCat("no parameter '", name, "'"));
  return &it->second;
}

// LayerNorm over the last dim with the weight and bias at `prefix`.
absl::StatusOr<DeviceTensor> LayerNormForward(KernelBackend& k, const Parameters& p,
                                              const std::string& prefix, const DeviceTensor& x) {
  ASSIGN_OR_RETURN(const DeviceTensor* w, Find(p, prefix + ".weight"));
  ASSIGN_OR_RETURN(const DeviceTensor* b, Find(p, prefix + ".bias"));
  const int64_t rows = x.num_elements() / x.shape().back();
  ASSIGN_OR_RETURN(DeviceTensor y, k.Allocate(x.dtype(), x.shape()));
  ASSIGN_OR_RETURN(DeviceTensor mean, k.Allocate(DType::kFloat32, {rows}));
  ASSIGN_OR_RETURN(DeviceTensor rstd, k.Allocate(DType::kFloat32, {rows}));
  const kernels::ConstTensorView wv = ViewOf(*w), bv = ViewOf(*b);
  RETURN_IF_ERROR(k.LayerNorm(ViewOf(x), &wv, &bv, 1e-5, ViewOf(y), ViewOf(mean), ViewOf(rstd)));
  return y;
}

// grad[W] = dy^T x, grad[b] = dy summed over rows, then W -= lr grad[W], b -= lr grad[b].
absl::Status LinearBackwardAndSgd(KernelBackend& k, Parameters& p, const std::string& prefix,
                                  const DeviceTensor& x, const DeviceTensor& dy, double lr) {
  DeviceTensor& w = p.at(prefix + ".weight");
  DeviceTensor& b = p.at(prefix + ".bias");
  ASSIGN_OR_RETURN(DeviceTensor dw, k.Allocate(w.dtype(), w.shape()));
  ASSIGN_OR_RETURN(DeviceTensor db, k.Allocate(b.dtype(), b.shape()));
  RETURN_IF_ERROR(k.Gemm(true, false, 1.0, Rows(dy), Rows(x), 0.0, ViewOf(dw)));
  RETURN_IF_ERROR(k.ReduceAlongDim(ReduceOp::kSum, Rows(dy), 0, ViewOf(db)));
  RETURN_IF_ERROR(k.SgdStep(ViewOf(w), ViewOf(dw), nullptr, lr, 0, 0, false));
  return k.SgdStep(ViewOf(b), ViewOf(db), nullptr, lr, 0, 0, false);
}

}  // namespace

absl::StatusOr<Parameters> UploadParameters(KernelBackend& k,
                                            const std::map<std::string, HostTensor>& host) {
  Parameters p;
  for (const auto& [name, t] : host) {
    ASSIGN_OR_RETURN(DeviceTensor d, k.Upload(t));
    p.emplace(name, std::move(d));
  }
  return p;
}

absl::StatusOr<DeviceTensor> LinearForward(KernelBackend& k, const Parameters& p,
                                           const std::string& prefix, const DeviceTensor& x) {
  ASSIGN_OR_RETURN(const DeviceTensor* w, Find(p, prefix + ".weight"));
  ASSIGN_OR_RETURN(const DeviceTensor* b, Find(p, prefix + ".bias"));
  ASSIGN_OR_RETURN(DeviceTensor y,
                   k.Allocate(x.dtype(), WithDimSize(x.shape(), x.rank() - 1, w->shape()[0])));
  RETURN_IF_ERROR(k.LinearProduct(Rows(x), ViewOf(*w), nullptr, Rows(y)));
  RETURN_IF_ERROR(k.BiasAdd(Rows(y), ViewOf(*b)));
  return y;
}

absl::StatusOr<DeviceTensor> MlpForward(KernelBackend& k, const Parameters& p,
                                        const DeviceTensor& x) {
  ASSIGN_OR_RETURN(DeviceTensor h, LinearForward(k, p, "net1", x));
  RETURN_IF_ERROR(k.Activate(Activation::kRelu, ViewOf(h), ViewOf(h)));
  return LinearForward(k, p, "net2", h);
}

absl::StatusOr<DeviceTensor> MlpStep(KernelBackend& k, Parameters& p, const DeviceTensor& x,
                                     double lr) {
  ASSIGN_OR_RETURN(DeviceTensor z, LinearForward(k, p, "net1", x));
  ASSIGN_OR_RETURN(DeviceTensor h, k.Allocate(z.dtype(), z.shape()));
  RETURN_IF_ERROR(k.Activate(Activation::kRelu, ViewOf(z), ViewOf(h)));
  ASSIGN_OR_RETURN(DeviceTensor y, LinearForward(k, p, "net2", h));
  ASSIGN_OR_RETURN(DeviceTensor dy, k.Allocate(y.dtype(), y.shape()));
  RETURN_IF_ERROR(k.Fill(ViewOf(dy), 1.0));
  // dh = dy W2 (with W2 before its update), then relu's backward in place.
  ASSIGN_OR_RETURN(DeviceTensor dh, k.Allocate(h.dtype(), h.shape()));
  RETURN_IF_ERROR(k.Gemm(false, false, 1.0, Rows(dy), ViewOf(p.at("net2.weight")), 0.0, Rows(dh)));
  RETURN_IF_ERROR(k.ActivateBackward(Activation::kRelu, ViewOf(z), ViewOf(dh), ViewOf(dh)));
  RETURN_IF_ERROR(LinearBackwardAndSgd(k, p, "net2", h, dy, lr));
  RETURN_IF_ERROR(LinearBackwardAndSgd(k, p, "net1", x, dh, lr));
  return y;
}

absl::StatusOr<DeviceTensor> BlockForward(KernelBackend& k, const Parameters& p,
                                          const DeviceTensor& x, int64_t heads, bool causal) {
  const int64_t batch = x.shape()[0], seq = x.shape()[1];
  ASSIGN_OR_RETURN(DeviceTensor h, LayerNormForward(k, p, "attn.norm", x));
  ASSIGN_OR_RETURN(DeviceTensor q, LinearForward(k, p, "attn.attention.q", h));
  ASSIGN_OR_RETURN(DeviceTensor kk, LinearForward(k, p, "attn.attention.k", h));
  ASSIGN_OR_RETURN(DeviceTensor v, LinearForward(k, p, "attn.attention.v", h));
  ASSIGN_OR_RETURN(DeviceTensor a, k.Allocate(q.dtype(), q.shape()));
  ASSIGN_OR_RETURN(DeviceTensor probs, k.Allocate(DType::kFloat32, {batch, heads, seq, seq}));
  RETURN_IF_ERROR(
      k.Attention(ViewOf(q), ViewOf(kk), ViewOf(v), heads, causal, ViewOf(a), ViewOf(probs)));
  ASSIGN_OR_RETURN(DeviceTensor o, LinearForward(k, p, "attn.attention.o", a));
  RETURN_IF_ERROR(k.Binary(kernels::BinaryOp::kAdd, ViewOf(x), ViewOf(o), ViewOf(o)));
  ASSIGN_OR_RETURN(DeviceTensor n, LayerNormForward(k, p, "mlp.norm", o));
  ASSIGN_OR_RETURN(DeviceTensor z, LinearForward(k, p, "mlp.net1", n));
  RETURN_IF_ERROR(k.Activate(Activation::kGeluTanh, ViewOf(z), ViewOf(z)));
  ASSIGN_OR_RETURN(DeviceTensor y, LinearForward(k, p, "mlp.net2", z));
  RETURN_IF_ERROR(k.Binary(kernels::BinaryOp::kAdd, ViewOf(o), ViewOf(y), ViewOf(y)));
  return y;
}

double MaxRelativeDifference(const HostTensor& a, const HostTensor& reference) {
  if (a.shape() != reference.shape() || a.dtype() != DType::kFloat32 ||
      reference.dtype() != DType::kFloat32) {
    return std::numeric_limits<double>::infinity();
  }
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    const double r = reference.data_as<float>()[i];
    const double d = std::abs(a.data_as<float>()[i] - r);
    if (!(d <= worst)) worst = d;  // NaN wins
    scale = std::max(scale, std::abs(r));
  }
  return worst / std::max(scale, 1e-30);
}

}  // namespace tessera::bench
