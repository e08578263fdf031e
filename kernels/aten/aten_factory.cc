// The factories and random ops on local shards: each rank makes its block of the output, at its
// global offset, from the call's arguments alone (and, for dropout and bernoulli, its block of
// the input). A random element is a function of the stream's seed and the element's global index
// (kernels/philox.h), so every layout holds the same tensor.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/aten/aten_context.h"
#include "kernels/philox.h"

namespace tessera::kernels::aten {
namespace {

const std::string& Name(const Context& ctx) { return ctx.call().op->schema.name; }
bool Has(const Context& ctx, absl::string_view arg) {
  return ctx.call().op->schema.ArgIndex(arg) >= 0;
}

// The rank's block of the output: its global offset, and the output's global shape.
std::vector<int64_t> OutputOffset(const Context& ctx) {
  return LocalShapeAndOffsetAt(*ctx.local.output, ctx.local.coordinate).offset;
}
const Shape& GlobalShape(const Context& ctx) { return ctx.local.output->shape; }

// The global linear index of each element of the rank's block, in row-major order.
std::vector<uint64_t> GlobalIndices(const Context& ctx) {
  const Shape& global = GlobalShape(ctx);
  const std::vector<int64_t> offset = OutputOffset(ctx);
  const std::vector<int64_t> strides = ContiguousStrides(global);
  const int rank = static_cast<int>(ctx.out_shape.size());
  std::vector<uint64_t> out(NumElements(ctx.out_shape));
  std::vector<int64_t> index(rank, 0);
  for (uint64_t& g : out) {
    int64_t at = 0;
    for (int d = 0; d < rank; ++d) at += (offset[d] + index[d]) * strides[d];
    g = static_cast<uint64_t>(at);
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[d] < ctx.out_shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

// `host` (the block's values in a wide type) uploaded and cast to the output's dtype.
absl::StatusOr<DeviceTensor> UploadAs(Context& ctx, const HostTensor& host) {
  ASSIGN_OR_RETURN(DeviceTensor wide, ctx.backend.Upload(host));
  if (wide.dtype() == ctx.out_dtype) return wide;
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Cast(std::as_const(wide).View(), out.View()));
  return out;
}

// zeros, ones, full, empty (zeros), scalar_tensor, new_* and *_like fills.
absl::StatusOr<DeviceTensor> FillKernel(Context& ctx) {
  const std::string& name = Name(ctx);
  double value = 0;
  if (Has(ctx, "fill_value")) {
    value = ctx.args().Float("fill_value");
  } else if (name == "scalar_tensor") {
    value = ctx.args().Float("s");
  } else if (name == "ones" || name == "new_ones" || name == "ones_like") {
    value = 1;
  }
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Fill(out.View(), value));
  return out;
}

// start + i * step for the block's indices i: in int64 on the values cast to int64 for an
// integer output, in double otherwise, as torch's kernel.
absl::StatusOr<DeviceTensor> ArangeKernel(Context& ctx) {
  const double start = Has(ctx, "start") ? ctx.args().Float("start") : 0.0;
  const double step = Has(ctx, "step") ? ctx.args().Float("step") : 1.0;
  const int64_t first = OutputOffset(ctx)[0];
  const int64_t n = ctx.out_shape[0];
  if (ops::IsIntegral(ctx.out_dtype)) {
    const int64_t s = static_cast<int64_t>(start), st = static_cast<int64_t>(step);
    std::vector<int64_t> v(n);
    for (int64_t j = 0; j < n; ++j) v[j] = s + (first + j) * st;
    return UploadAs(ctx, HostTensor::FromValues<int64_t>(DType::kInt64, {n}, v));
  }
  std::vector<double> v(n);
  for (int64_t j = 0; j < n; ++j) v[j] = start + static_cast<double>(first + j) * step;
  return UploadAs(ctx, HostTensor::FromValues<double>(DType::kFloat64, {n}, v));
}

// Ones where the global row equals the global column.
absl::StatusOr<DeviceTensor> EyeKernel(Context& ctx) {
  const std::vector<int64_t> offset = OutputOffset(ctx);
  const int64_t rows = ctx.out_shape[0], cols = ctx.out_shape[1];
  std::vector<double> v(rows * cols, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t j = offset[0] + i - offset[1];
    if (j >= 0 && j < cols) v[i * cols + j] = 1.0;
  }
  return UploadAs(ctx, HostTensor::FromValues<double>(DType::kFloat64, {rows, cols}, v));
}

// rand, randn, rand_like, randn_like: the backend's fill at the stream's counter.
absl::StatusOr<DeviceTensor> RandomKernel(Context& ctx) {
  const Distribution dist = Name(ctx) == "randn" || Name(ctx) == "randn_like"
                                ? Distribution::kNormal
                                : Distribution::kUniform;
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.RandomFill(dist, ctx.local.random.seed, ctx.local.random.offset,
                                         GlobalShape(ctx), OutputOffset(ctx), out.View()));
  return out;
}

// randint: low + floor(w * (high - low) / 2^64) for the element's 64-bit Philox word w (the
// multiply-shift map: every value in [low, high), biased by at most (high - low) / 2^64).
absl::StatusOr<DeviceTensor> RandintKernel(Context& ctx) {
  const int64_t low = Has(ctx, "low") ? ctx.args().Int("low") : 0;
  const uint64_t range = static_cast<uint64_t>(ctx.args().Int("high")) - static_cast<uint64_t>(low);
  const RandomStream& stream = ctx.local.random;
  const std::vector<uint64_t> indices = GlobalIndices(ctx);
  std::vector<int64_t> v(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    const Philox4x32 r = PhiloxForElement(stream.seed, stream.offset + indices[i]);
    const uint64_t word = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
    const auto scaled = static_cast<uint64_t>((static_cast<unsigned __int128>(word) * range) >> 64);
    v[i] = static_cast<int64_t>(static_cast<uint64_t>(low) + scaled);
  }
  return UploadAs(ctx, HostTensor::FromValues<int64_t>(DType::kInt64, ctx.out_shape, v));
}

// The block's uniform values in [0, 1), as float64.
absl::StatusOr<ConstTensorView> Uniform(Context& ctx) {
  ASSIGN_OR_RETURN(TensorView u, ctx.Temporary(DType::kFloat64, ctx.out_shape));
  RETURN_IF_ERROR(ctx.backend.RandomFill(Distribution::kUniform, ctx.local.random.seed,
                                         ctx.local.random.offset, GlobalShape(ctx),
                                         OutputOffset(ctx), u));
  return ConstTensorView(u);
}

// Where u < `p`, as a bool tensor.
absl::StatusOr<ConstTensorView> Below(Context& ctx, double p) {
  ASSIGN_OR_RETURN(const ConstTensorView u, Uniform(ctx));
  ASSIGN_OR_RETURN(const ConstTensorView bound, ctx.Number(p, DType::kFloat64));
  ASSIGN_OR_RETURN(TensorView mask, ctx.Temporary(DType::kBool, ctx.out_shape));
  RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kLt, u, bound, mask));
  return ConstTensorView(mask);
}

// dropout: x / (1 - p) where the element is kept (u < 1 - p), 0 elsewhere; a copy for p = 0 or
// train = False, zeros for p = 1.
// native_dropout gives the mask (True where kept) as its second output, and applies in training
// unless train is False (None trains, as torch).
absl::StatusOr<DeviceTensor> DropoutKernel(Context& ctx) {
  const ConstTensorView x = ctx.Input("input");
  const double p = ctx.args().Float("p");
  const bool native = ctx.num_outputs() == 2;
  const bool train =
      native ? ctx.args().IsNone("train") || ctx.args().Bool("train") : ctx.args().Bool("train");
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  if (native) {
    ASSIGN_OR_RETURN(DeviceTensor mask, ctx.OutputAt(1));
    ctx.more.push_back(std::move(mask));
  }
  if (!train || p == 0) {
    RETURN_IF_ERROR(ctx.backend.Cast(x, out.View()));
    if (native) RETURN_IF_ERROR(ctx.backend.Fill(ctx.more[0].View(), 1.0));
    return out;
  }
  if (p == 1) {
    RETURN_IF_ERROR(ctx.backend.Fill(out.View(), 0.0));
    if (native) RETURN_IF_ERROR(ctx.backend.Fill(ctx.more[0].View(), 0.0));
    return out;
  }
  ASSIGN_OR_RETURN(const ConstTensorView keep, Below(ctx, 1 - p));
  if (native) RETURN_IF_ERROR(ctx.backend.Copy(keep, ctx.more[0].View()));
  ASSIGN_OR_RETURN(const ConstTensorView scale, ctx.Number(1 / (1 - p), x.dtype));
  ASSIGN_OR_RETURN(TensorView scaled, ctx.Temporary(x.dtype, ctx.out_shape));
  RETURN_IF_ERROR(ctx.backend.Binary(BinaryOp::kMul, x, scale, scaled));
  ASSIGN_OR_RETURN(const ConstTensorView zero, ctx.Number(0.0, x.dtype));
  RETURN_IF_ERROR(ctx.backend.Where(keep, scaled, zero, out.View()));
  return out;
}

// bernoulli.p: 1 where u < p, else 0, in self's dtype.
absl::StatusOr<DeviceTensor> BernoulliKernel(Context& ctx) {
  ASSIGN_OR_RETURN(const ConstTensorView hit, Below(ctx, ctx.args().Float("p")));
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Cast(hit, out.View()));
  return out;
}

}  // namespace

void AddFactoryKernels(LocalTable& t) {
  for (const char* name : {"aten::full", "aten::zeros", "aten::ones", "aten::empty.memory_format",
                           "aten::scalar_tensor", "aten::new_zeros", "aten::new_ones",
                           "aten::new_full", "aten::new_empty", "aten::zeros_like",
                           "aten::ones_like", "aten::empty_like", "aten::full_like"}) {
    t[name] = FillKernel;
  }
  t["aten::arange"] = t["aten::arange.start"] = t["aten::arange.start_step"] = ArangeKernel;
  t["aten::eye"] = t["aten::eye.m"] = EyeKernel;
  t["aten::rand"] = t["aten::randn"] = t["aten::rand_like"] = t["aten::randn_like"] = RandomKernel;
  t["aten::randint"] = t["aten::randint.low"] = t["aten::randint_like"] =
      t["aten::randint_like.low_dtype"] = RandintKernel;
  t["aten::dropout"] = t["aten::native_dropout"] = DropoutKernel;
  t["aten::bernoulli.p"] = BernoulliKernel;
}

}  // namespace tessera::kernels::aten
