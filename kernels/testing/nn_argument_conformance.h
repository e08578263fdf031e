#ifndef TESSERA_KERNELS_TESTING_NN_ARGUMENT_CONFORMANCE_H_
#define TESSERA_KERNELS_TESTING_NN_ARGUMENT_CONFORMANCE_H_

// The argument checks of the neural-network kernels: one call per check, each with one bad
// argument, must be INVALID_ARGUMENT with a message naming the bad dtype, shape or value. The
// tensors are never initialized: the checks come before any memory is touched. Include once per
// test binary (see conformance_fixture.h).

#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/testing/conformance_fixture.h"

namespace tessera::kernels::testing {

// Uninitialized tensors of a backend, owned until the scratch goes away.
class ScratchTensors {
 public:
  explicit ScratchTensors(KernelBackend& backend) : backend_(backend) {}

  TensorView operator()(DType dtype, const Shape& shape) {
    owned_.push_back(backend_.Allocate(dtype, shape).value());
    return owned_.back().View();
  }

 private:
  KernelBackend& backend_;
  std::vector<DeviceTensor> owned_;
};

// A kernel call with one bad argument, and a piece of the message that names it.
struct BadNnCall {
  std::string name;
  std::function<absl::Status(KernelBackend&, ScratchTensors&)> call;
  std::string names;
};
inline void PrintTo(const BadNnCall& c, std::ostream* os) { *os << c.name; }

inline std::vector<BadNnCall> BadActivationBackwardCalls() {
  constexpr DType f32 = DType::kFloat32;
  return {
      {"activation_backward_int32",
       [](KernelBackend& b, ScratchTensors& t) {
         return b.ActivateBackward(Activation::kRelu, t(DType::kInt32, {3}), t(DType::kInt32, {3}),
                                   t(DType::kInt32, {3}));
       },
       "relu backward needs float32 or float64 tensors; got int32"},
      {"activation_backward_float16",
       [](KernelBackend& b, ScratchTensors& t) {
         return b.ActivateBackward(Activation::kSilu, t(DType::kFloat16, {3}),
                                   t(DType::kFloat16, {3}), t(DType::kFloat16, {3}));
       },
       "silu backward needs float32 or float64 tensors; got float16"},
      {"activation_backward_dy_shape",
       [](KernelBackend& b, ScratchTensors& t) {
         return b.ActivateBackward(Activation::kGelu, t(f32, {3, 4}), t(f32, {4, 3}),
                                   t(f32, {3, 4}));
       },
       "gelu backward dy must be float32 [3, 4]; got float32 [4, 3]"},
      {"activation_backward_dx_dtype",
       [](KernelBackend& b, ScratchTensors& t) {
         return b.ActivateBackward(Activation::kTanh, t(f32, {3, 4}), t(f32, {3, 4}),
                                   t(DType::kFloat64, {3, 4}));
       },
       "tanh backward dx must be float32 [3, 4]; got float64 [3, 4]"},
  };
}

// LayerNorm on x [3, 5] (or another x) with every other argument right unless overridden.
struct LayerNormCall {
  DType dtype = DType::kFloat32;
  Shape x = {3, 5}, weight = {5}, bias = {5}, y = {3, 5}, mean = {3}, rstd = {3};
  DType weight_dtype = DType::kFloat32, bias_dtype = DType::kFloat32, y_dtype = DType::kFloat32,
        mean_dtype = DType::kFloat32, rstd_dtype = DType::kFloat32;
  double eps = 1e-5;

  absl::Status operator()(KernelBackend& b, ScratchTensors& t) const {
    const ConstTensorView w = t(weight_dtype, weight), bi = t(bias_dtype, bias);
    return b.LayerNorm(t(dtype, x), &w, &bi, eps, t(y_dtype, y), t(mean_dtype, mean),
                       t(rstd_dtype, rstd));
  }
};

inline std::vector<BadNnCall> BadLayerNormCalls() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<BadNnCall> calls;
  auto add = [&](std::string name, LayerNormCall call, std::string names) {
    calls.push_back({std::move(name), call, std::move(names)});
  };
  add("layer_norm_bfloat16",
      {.dtype = DType::kBFloat16,
       .weight_dtype = DType::kBFloat16,
       .bias_dtype = DType::kBFloat16,
       .y_dtype = DType::kBFloat16},
      "layer_norm needs float32 or float64 tensors; got bfloat16");
  add("layer_norm_scalar", {.x = {}, .y = {}}, "x of shape [] does not have");
  add("layer_norm_empty_last_dim", {.x = {3, 0}, .y = {3, 0}}, "x of shape [3, 0] has empty");
  add("layer_norm_weight_shape", {.weight = {4}},
      "layer_norm weight must be float32 [5]; got "
      "float32 [4]");
  add("layer_norm_bias_dtype", {.bias_dtype = DType::kFloat64},
      "layer_norm bias must be float32 [5]; got float64 [5]");
  add("layer_norm_negative_eps", {.eps = -1e-5},
      "layer_norm eps must be finite and >= 0; got -1e-05");
  add("layer_norm_nan_eps", {.eps = nan}, "layer_norm eps must be finite and >= 0; got nan");
  add("layer_norm_y_shape", {.y = {5, 3}},
      "layer_norm y must be float32 [3, 5]; got float32 [5, 3]");
  add("layer_norm_y_dtype", {.y_dtype = DType::kFloat64},
      "layer_norm y must be float32 [3, 5]; got float64 [3, 5]");
  add("layer_norm_mean_dtype", {.mean_dtype = DType::kFloat64},
      "layer_norm mean must be float32 [3]; got float64 [3]");
  add("layer_norm_rstd_shape", {.rstd = {3, 1}},
      "layer_norm rstd must be float32 [3]; got float32 [3, 1]");
  add("layer_norm_statistics_of_folded_rows", {.x = {2, 3, 5}, .y = {2, 3, 5}, .mean = {2, 3}},
      "layer_norm mean must be float32 [6]; got float32 [2, 3]");
  return calls;
}

// LayerNormBackward on x [3, 5] with every other argument right unless overridden.
struct LayerNormBackwardCall {
  DType dtype = DType::kFloat32;
  Shape dy = {3, 5}, x = {3, 5}, weight = {5}, mean = {3}, rstd = {3}, dx = {3, 5}, dweight = {5},
        dbias = {5};
  DType dy_dtype = DType::kFloat32, rstd_dtype = DType::kFloat32, dbias_dtype = DType::kFloat32;

  absl::Status operator()(KernelBackend& b, ScratchTensors& t) const {
    const ConstTensorView w = t(dtype, weight);
    const TensorView dw = t(dtype, dweight), db = t(dbias_dtype, dbias);
    return b.LayerNormBackward(t(dy_dtype, dy), t(dtype, x), &w, t(DType::kFloat32, mean),
                               t(rstd_dtype, rstd), t(dtype, dx), &dw, &db);
  }
};

inline std::vector<BadNnCall> BadLayerNormBackwardCalls() {
  std::vector<BadNnCall> calls;
  auto add = [&](std::string name, LayerNormBackwardCall call, std::string names) {
    calls.push_back({std::move(name), call, std::move(names)});
  };
  add("layer_norm_backward_int8", {.dtype = DType::kInt8, .dy_dtype = DType::kInt8},
      "layer_norm backward needs float32 or float64 tensors; got int8");
  add("layer_norm_backward_dy_shape", {.dy = {3, 4}},
      "layer_norm backward dy must be float32 [3, 5]; got float32 [3, 4]");
  add("layer_norm_backward_dy_dtype", {.dy_dtype = DType::kFloat64},
      "layer_norm backward dy must be float32 [3, 5]; got float64 [3, 5]");
  add("layer_norm_backward_weight_shape", {.weight = {3}},
      "layer_norm backward weight must be float32 [5]; got float32 [3]");
  add("layer_norm_backward_mean_shape", {.mean = {5}},
      "layer_norm backward mean must be float32 [3]; got float32 [5]");
  add("layer_norm_backward_rstd_dtype", {.rstd_dtype = DType::kFloat16},
      "layer_norm backward rstd must be float32 [3]; got float16 [3]");
  add("layer_norm_backward_dx_shape", {.dx = {15}},
      "layer_norm backward dx must be float32 [3, 5]; got float32 [15]");
  add("layer_norm_backward_dweight_shape", {.dweight = {5, 1}},
      "layer_norm backward dweight must be float32 [5]; got float32 [5, 1]");
  add("layer_norm_backward_dbias_dtype", {.dbias_dtype = DType::kFloat64},
      "layer_norm backward dbias must be float32 [5]; got float64 [5]");
  return calls;
}

inline std::vector<BadNnCall> BadRmsNormCalls() {
  constexpr DType f32 = DType::kFloat32, f64 = DType::kFloat64;
  auto forward = [](DType dtype, Shape x, DType weight_dtype, Shape weight, double eps,
                    DType y_dtype, Shape rstd) {
    return [=](KernelBackend& b, ScratchTensors& t) {
      const ConstTensorView w = t(weight_dtype, weight);
      return b.RmsNorm(t(dtype, x), &w, eps, t(y_dtype, x), t(f32, rstd));
    };
  };
  auto backward = [](DType dy_dtype, Shape rstd, Shape dx, Shape dweight) {
    return [=](KernelBackend& b, ScratchTensors& t) {
      const ConstTensorView w = t(f64, {4});
      const TensorView dw = t(f64, dweight);
      return b.RmsNormBackward(t(dy_dtype, {2, 4}), t(f64, {2, 4}), &w, t(f32, rstd), t(f64, dx),
                               &dw);
    };
  };
  const double inf = std::numeric_limits<double>::infinity();
  return {
      {"rms_norm_int64",
       forward(DType::kInt64, {2, 4}, DType::kInt64, {4}, 1e-6, DType::kInt64, {2}),
       "rms_norm needs float32 or float64 tensors; got int64"},
      {"rms_norm_weight_dtype", forward(f64, {2, 4}, f32, {4}, 1e-6, f64, {2}),
       "rms_norm weight must be float64 [4]; got float32 [4]"},
      {"rms_norm_infinite_eps", forward(f64, {2, 4}, f64, {4}, inf, f64, {2}),
       "rms_norm eps must be finite and >= 0; got inf"},
      {"rms_norm_y_dtype", forward(f64, {2, 4}, f64, {4}, 1e-6, f32, {2}),
       "rms_norm y must be float64 [2, 4]; got float32 [2, 4]"},
      {"rms_norm_rstd_shape", forward(f64, {2, 4}, f64, {4}, 1e-6, f64, {4}),
       "rms_norm rstd must be float32 [2]; got float32 [4]"},
      {"rms_norm_backward_dy_dtype", backward(f32, {2}, {2, 4}, {4}),
       "rms_norm backward dy must be float64 [2, 4]; got float32 [2, 4]"},
      {"rms_norm_backward_rstd_shape", backward(f64, {2, 1}, {2, 4}, {4}),
       "rms_norm backward rstd must be float32 [2]; got float32 [2, 1]"},
      {"rms_norm_backward_dx_shape", backward(f64, {2}, {4, 2}, {4}),
       "rms_norm backward dx must be float64 [2, 4]; got float64 [4, 2]"},
      {"rms_norm_backward_dweight_shape", backward(f64, {2}, {2, 4}, {2}),
       "rms_norm backward dweight must be float64 [4]; got float64 [2]"},
  };
}

inline std::vector<BadNnCall> BadEmbeddingCalls() {
  constexpr DType f32 = DType::kFloat32, i64 = DType::kInt64;
  auto forward = [](DType ids_dtype, DType weight_dtype, Shape weight, int64_t row_offset,
                    int64_t num_embeddings, DType out_dtype, Shape out) {
    return [=](KernelBackend& b, ScratchTensors& t) {
      return b.Embedding(t(ids_dtype, {4}), t(weight_dtype, weight), row_offset, num_embeddings,
                         t(out_dtype, out));
    };
  };
  auto backward = [](DType ids_dtype, Shape dy, int64_t row_offset, DType dweight_dtype,
                     Shape dweight) {
    return [=](KernelBackend& b, ScratchTensors& t) {
      return b.EmbeddingBackward(t(ids_dtype, {4}), t(f32, dy), row_offset,
                                 t(dweight_dtype, dweight));
    };
  };
  return {
      {"embedding_ids_int32", forward(DType::kInt32, f32, {10, 3}, 0, 10, f32, {4, 3}),
       "embedding ids must be int64 [4]; got int32 [4]"},
      {"embedding_weight_float16",
       forward(i64, DType::kFloat16, {10, 3}, 0, 10, DType::kFloat16, {4, 3}),
       "embedding needs float32 or float64 tensors; got float16"},
      {"embedding_weight_1d", forward(i64, f32, {10}, 0, 10, f32, {4}),
       "embedding needs a 2-D weight [rows, dim]; got weight [10]"},
      {"embedding_negative_row_offset", forward(i64, f32, {5, 3}, -1, 10, f32, {4, 3}),
       "weight of 5 rows at row_offset -1 does not fit in num_embeddings 10"},
      {"embedding_shard_past_the_vocabulary", forward(i64, f32, {4, 3}, 8, 10, f32, {4, 3}),
       "weight of 4 rows at row_offset 8 does not fit in num_embeddings 10"},
      {"embedding_out_shape", forward(i64, f32, {10, 3}, 0, 10, f32, {4, 5}),
       "embedding out must be float32 [4, 3]; got float32 [4, 5]"},
      {"embedding_out_dtype", forward(i64, f32, {10, 3}, 0, 10, DType::kFloat64, {4, 3}),
       "embedding out must be float32 [4, 3]; got float64 [4, 3]"},
      {"embedding_backward_ids_float", backward(f32, {4, 3}, 0, f32, {10, 3}),
       "embedding backward ids must be int64 [4]; got float32 [4]"},
      {"embedding_backward_dweight_int32", backward(i64, {4, 3}, 0, DType::kInt32, {10, 3}),
       "embedding backward needs float32 or float64 tensors; got int32"},
      {"embedding_backward_dweight_3d", backward(i64, {4, 3}, 0, f32, {10, 3, 1}),
       "embedding backward needs a 2-D dweight [rows, dim]; got dweight [10, 3, 1]"},
      {"embedding_backward_negative_row_offset", backward(i64, {4, 3}, -2, f32, {10, 3}),
       "embedding backward row_offset must be >= 0; got -2"},
      {"embedding_backward_dy_shape", backward(i64, {4, 2}, 0, f32, {10, 3}),
       "embedding backward dy must be float32 [4, 3]; got float32 [4, 2]"},
  };
}

// Attention on q, k, v [2, 3, 8] with 2 heads, every argument right unless overridden.
struct AttentionCall {
  bool backward = false;
  DType dtype = DType::kFloat32;
  Shape q = {2, 3, 8}, k = {2, 3, 8}, out = {2, 3, 8}, probs = {2, 2, 3, 3}, dq = {2, 3, 8},
        dv = {2, 3, 8};
  DType v_dtype = DType::kFloat32, probs_dtype = DType::kFloat32, dout_dtype = DType::kFloat32,
        dk_dtype = DType::kFloat32;
  int64_t heads = 2;

  absl::Status operator()(KernelBackend& b, ScratchTensors& t) const {
    if (!backward) {
      return b.Attention(t(dtype, q), t(dtype, k), t(v_dtype, {2, 3, 8}), heads, true,
                         t(dtype, out), t(probs_dtype, probs));
    }
    return b.AttentionBackward(t(dtype, q), t(dtype, k), t(v_dtype, {2, 3, 8}),
                               t(probs_dtype, probs), t(dout_dtype, {2, 3, 8}), heads, t(dtype, dq),
                               t(dk_dtype, {2, 3, 8}), t(dtype, dv));
  }
};

inline std::vector<BadNnCall> BadAttentionCalls() {
  std::vector<BadNnCall> calls;
  auto add = [&](std::string name, AttentionCall call, std::string names) {
    calls.push_back({std::move(name), call, std::move(names)});
  };
  add("attention_q_2d", {.q = {6, 8}},
      "attention needs q of shape [batch, seq, heads * head_dim]; got [6, 8]");
  add("attention_int64", {.dtype = DType::kInt64, .v_dtype = DType::kInt64},
      "attention needs float32 or float64 tensors; got int64");
  add("attention_zero_heads", {.heads = 0}, "attention with 0 heads");
  add("attention_heads_not_dividing", {.heads = 3}, "attention with 3 heads needs q's last dim");
  add("attention_empty_head", {.q = {2, 3, 0}}, "q has shape [2, 3, 0]");
  add("attention_k_shape", {.k = {2, 4, 8}},
      "attention k must be float32 [2, 3, 8]; got float32 [2, 4, 8]");
  add("attention_v_dtype", {.v_dtype = DType::kFloat64},
      "attention v must be float32 [2, 3, 8]; got float64 [2, 3, 8]");
  add("attention_out_shape", {.out = {2, 3, 4}},
      "attention out must be float32 [2, 3, 8]; got float32 [2, 3, 4]");
  add("attention_probs_dtype", {.probs_dtype = DType::kFloat64},
      "attention probs must be float32 [2, 2, 3, 3]; got float64 [2, 2, 3, 3]");
  add("attention_probs_shape", {.probs = {2, 3, 3}},
      "attention probs must be float32 [2, 2, 3, 3]; got float32 [2, 3, 3]");
  add("attention_backward_negative_heads", {.backward = true, .heads = -1},
      "attention backward with -1 heads");
  add("attention_backward_probs_shape", {.backward = true, .probs = {2, 1, 3, 3}},
      "attention backward probs must be float32 [2, 2, 3, 3]; got float32 [2, 1, 3, 3]");
  add("attention_backward_dout_dtype", {.backward = true, .dout_dtype = DType::kFloat64},
      "attention backward dout must be float32 [2, 3, 8]; got float64 [2, 3, 8]");
  add("attention_backward_dq_shape", {.backward = true, .dq = {2, 8, 3}},
      "attention backward dq must be float32 [2, 3, 8]; got float32 [2, 8, 3]");
  add("attention_backward_dk_dtype", {.backward = true, .dk_dtype = DType::kBFloat16},
      "attention backward dk must be float32 [2, 3, 8]; got bfloat16 [2, 3, 8]");
  add("attention_backward_dv_shape", {.backward = true, .dv = {2, 3, 8, 1}},
      "attention backward dv must be float32 [2, 3, 8]; got float32 [2, 3, 8, 1]");
  return calls;
}

inline std::vector<BadNnCall> BadSgdCalls() {
  constexpr DType f32 = DType::kFloat32;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // An SGD step on param [4, 2] with `grad` and, when `buffer` is not empty, a momentum buffer.
  auto step = [](DType dtype, Shape grad, Shape buffer, double lr, double momentum,
                 double weight_decay) {
    return [=](KernelBackend& b, ScratchTensors& t) {
      const TensorView buf = t(dtype, buffer);
      return b.SgdStep(t(dtype, {4, 2}), t(dtype, grad), buffer.empty() ? nullptr : &buf, lr,
                       momentum, weight_decay, false);
    };
  };
  return {
      {"sgd_int32", step(DType::kInt32, {4, 2}, {}, 0.1, 0, 0),
       "sgd step needs float32 or float64 tensors; got int32"},
      {"sgd_grad_shape", step(f32, {8}, {}, 0.1, 0, 0),
       "sgd step grad must be float32 [4, 2]; got float32 [8]"},
      {"sgd_negative_lr", step(f32, {4, 2}, {}, -0.1, 0, 0),
       "sgd step lr must be finite and >= 0; got -0.1"},
      {"sgd_nan_lr", step(f32, {4, 2}, {}, nan, 0, 0),
       "sgd step lr must be finite and >= 0; got nan"},
      {"sgd_negative_momentum", step(f32, {4, 2}, {4, 2}, 0.1, -0.5, 0),
       "sgd step momentum must be finite and >= 0; got -0.5"},
      {"sgd_negative_weight_decay", step(f32, {4, 2}, {}, 0.1, 0, -1),
       "sgd step weight_decay must be finite and >= 0; got -1"},
      {"sgd_momentum_without_buffer", step(f32, {4, 2}, {}, 0.1, 0.9, 0),
       "sgd step with momentum 0.9 needs a momentum buffer"},
      {"sgd_momentum_buffer_shape", step(f32, {4, 2}, {2, 4}, 0.1, 0.9, 0),
       "sgd step momentum buffer must be float32 [4, 2]; got float32 [2, 4]"},
  };
}

inline std::vector<BadNnCall> BadNnCalls() {
  std::vector<BadNnCall> all;
  for (auto group : {BadActivationBackwardCalls(), BadLayerNormCalls(), BadLayerNormBackwardCalls(),
                     BadRmsNormCalls(), BadEmbeddingCalls(), BadAttentionCalls(), BadSgdCalls()}) {
    all.insert(all.end(), group.begin(), group.end());
  }
  return all;
}

class NnBadArgumentTest : public KernelParamTest<BadNnCall> {};

TEST_P(NnBadArgumentTest, IsInvalidArgumentNamingTheValue) {
  ScratchTensors tensors(backend());
  const absl::Status s = GetParam().call(backend(), tensors);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(GetParam().names), absl::string_view::npos)
      << s << "\nexpected it to contain: " << GetParam().names;
}

INSTANTIATE_TEST_SUITE_P(Kernels, NnBadArgumentTest, ::testing::ValuesIn(BadNnCalls()),
                         [](const ::testing::TestParamInfo<BadNnCall>& info) {
                           return info.param.name;
                         });

}  // namespace tessera::kernels::testing

#endif  // TESSERA_KERNELS_TESTING_NN_ARGUMENT_CONFORMANCE_H_
