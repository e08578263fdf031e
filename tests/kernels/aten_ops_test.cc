// The op registry checked end to end on the simulated mesh: for every registered op × mesh ×
// input placements (Shard on each dim, Replicate, Partial) × even, uneven and empty shards ×
// dtypes, the chosen strategy's redistributions and each rank's local call must give the
// single-process result (the same call on one rank). The kernels run on TestDevice()'s backend:
// on cpu a StrictMemoryBackend (host memory used as a GPU's, so a kernel that touches device
// memory from the host fails), on cuda cuda:0 (scripts/run-gpu-checks.sh), where the tests that
// compare with formulas worked out by hand check the CUDA kernels' values too.

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ops/op_propagation.h"
#include "core/ops/op_registry.h"
#include "core/sharding/simulated_mesh.h"
#include "core/small_integer_tensor.h"
#include "core/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/aten/local_call.h"
#include "kernels/backend.h"
#include "kernels/testing/reference.h"
#include "tests/support/placement_product.h"
#include "tests/support/test_device.h"

namespace tessera {
namespace {

using ops::NamedValue;
using ops::NoneValue;
using ops::OpValue;
using ops::TensorList;
using ops::TensorRef;

// What an input holds: values, indices in [0, bound), or a bool mask.
enum class InputKind { kValues, kPositive, kIndex, kMask };

struct Input {
  InputKind kind = InputKind::kValues;
  int64_t bound = 0;  // kIndex
};

// One call of a registered op: its arguments (tensors by input index) and the inputs' shapes, an
// even set and an uneven one (dims smaller than the mesh, and an empty one).
struct OpCase {
  std::string name;  // a unique label
  std::string op;
  std::vector<NamedValue> args;
  std::vector<Shape> even;
  std::vector<Shape> uneven;
  std::vector<DType> dtypes;
  std::vector<Input> inputs = {};
};

NamedValue T(int i) { return {"", TensorRef{i}}; }
NamedValue A(std::string name, OpValue v) { return {std::move(name), std::move(v)}; }
NamedValue P(OpValue v) { return {"", std::move(v)}; }
std::vector<int64_t> L(std::initializer_list<int64_t> v) { return v; }

// The random stream every call here draws from.
constexpr kernels::RandomStream kStream{1234, 77};

constexpr DType f32 = DType::kFloat32, f64 = DType::kFloat64, i32 = DType::kInt32,
                i64 = DType::kInt64, b8 = DType::kBool;

const std::vector<OpCase>& OpCases() {
  const Shape m{4, 6}, u{5, 3}, e{0, 3};
  static auto* cases = new std::vector<OpCase>{
      // Pointwise, unary and binary, with broadcasting, numbers and promotion.
      {"neg", "neg", {T(0)}, {m}, {u}, {f32, i32}},
      {"abs", "abs", {T(0)}, {m}, {e}, {f32, i32}},
      {"exp", "exp", {T(0)}, {m}, {u}, {f32, i32}},
      {"log1p", "log1p", {T(0)}, {m}, {u}, {f64}, {{InputKind::kPositive}}},
      {"rsqrt", "rsqrt", {T(0)}, {m}, {u}, {f32}, {{InputKind::kPositive}}},
      {"sigmoid", "sigmoid", {T(0)}, {m}, {e}, {f32}},
      {"silu", "silu", {T(0)}, {m}, {u}, {f32}},
      {"gelu_tanh", "gelu", {T(0), A("approximate", std::string("tanh"))}, {m}, {u}, {f32}},
      {"round", "round", {T(0)}, {m}, {u}, {f32, i32}},
      {"isnan", "isnan", {T(0)}, {m}, {u}, {f32}},
      {"logical_not", "logical_not", {T(0)}, {m}, {u}, {i32, b8}},
      {"add", "add.Tensor", {T(0), T(1)}, {m, m}, {u, u}, {f32, i32}},
      {"add_alpha",
       "add.Tensor",
       {T(0), T(1), A("alpha", int64_t{3})},
       {m, {6}},
       {u, {1, 3}},
       {f32, i32}},
      {"add_number", "add.Tensor", {T(0), P(2.5)}, {m}, {e}, {i32, f32}},
      {"sub_bcast", "sub.Tensor", {T(0), T(1)}, {m, {4, 1}}, {u, {3}}, {f32, i32}},
      {"rsub", "rsub.Scalar", {T(0), P(int64_t{7})}, {m}, {u}, {f32, i32}},
      {"mul", "mul.Tensor", {T(0), T(1)}, {{6}, m}, {u, {5, 1}}, {f32, i32}},
      {"mul_scalar", "mul.Scalar", {T(0), P(-2.0)}, {m}, {u}, {f32, i32}},
      {"div",
       "div.Tensor",
       {T(0), T(1)},
       {m, m},
       {u, {3}},
       {f32, i32},
       {{}, {InputKind::kPositive}}},
      {"div_by_zero", "div.Tensor", {T(0), P(int64_t{0})}, {m}, {{1, 6}}, {f32, i32}},
      {"div_floor",
       "div.Tensor_mode",
       {T(0), T(1), A("rounding_mode", std::string("floor"))},
       {m, m},
       {u, u},
       {f32, i32},
       {{}, {InputKind::kPositive}}},
      {"pow", "pow.Tensor_Scalar", {T(0), P(int64_t{2})}, {m}, {u}, {f32, i32}},
      {"maximum", "maximum", {T(0), T(1)}, {m, m}, {u, {1, 3}}, {f32, i32}},
      {"eq", "eq.Tensor", {T(0), T(1)}, {m, m}, {u, u}, {f32, i32}},
      {"lt_scalar", "lt.Scalar", {T(0), P(1.5)}, {m}, {u}, {f32, i32}},
      {"logical_and", "logical_and", {T(0), T(1)}, {m, m}, {u, u}, {i32, b8}},
      {"bitwise_xor", "bitwise_xor.Tensor", {T(0), T(1)}, {m, m}, {u, u}, {i32, b8}},
      {"clamp", "clamp", {T(0), A("min", int64_t{-1}), A("max", 2.0)}, {m}, {u}, {f32, i32}},
      {"where",
       "where.self",
       {T(0), T(1), T(2)},
       {m, m, {6}},
       {u, u, {1}},
       {f32, i32},
       {{InputKind::kMask}, {}, {}}},
      {"masked_fill",
       "masked_fill.Scalar",
       {T(0), T(1), P(-5.0)},
       {m, {6}},
       {u, {5, 1}},
       {f32, i32},
       {{}, {InputKind::kMask}}},
      {"tanh_backward", "tanh_backward", {T(0), T(1)}, {m, m}, {u, u}, {f32}},
      {"threshold_backward",
       "threshold_backward",
       {T(0), T(1), P(int64_t{0})},
       {m, m},
       {u, u},
       {f32}},
      {"to_copy", "_to_copy", {T(0), A("dtype", f64)}, {m}, {u}, {f32, i32}},
      {"clone", "clone", {T(0)}, {m}, {e}, {f32, i32}},
      {"full_like", "full_like", {T(0), P(3.0)}, {m}, {u}, {f32}},
      // Reductions, scans and softmax.
      {"sum", "sum", {T(0)}, {m}, {u}, {f32, i32}},
      {"sum_dim", "sum.dim_IntList", {T(0), P(L({1})), P(true)}, {m}, {e}, {f32, i32}},
      {"mean_dim", "mean.dim", {T(0), P(L({0}))}, {{2, 4, 6}}, {{3, 5, 3}}, {f32, f64}},
      {"amax", "amax", {T(0), P(L({-1}))}, {m}, {u}, {f32, i32}},
      {"amin_all", "amin", {T(0)}, {m}, {u}, {f32, i32}},
      {"prod_dim", "prod.dim_int", {T(0), P(int64_t{0})}, {m}, {u}, {f32, i32}},
      {"any_dim", "any.dim", {T(0), P(int64_t{1})}, {m}, {u}, {i32, b8}},
      {"all", "all", {T(0)}, {m}, {u}, {b8}},
      {"argmax", "argmax", {T(0), A("dim", int64_t{1})}, {m}, {u}, {f32, i32}},
      {"argmin_flat", "argmin", {T(0)}, {m}, {u}, {f32}},
      {"var", "var.correction", {T(0), P(L({1}))}, {m}, {u}, {f32, f64}},
      {"std_all", "std.correction", {T(0), A("correction", int64_t{0})}, {m}, {u}, {f64}},
      {"logsumexp", "logsumexp", {T(0), P(L({1}))}, {m}, {u}, {f32}},
      {"cumsum", "cumsum", {T(0), P(int64_t{1})}, {m}, {e}, {f32, i32}},
      {"softmax", "softmax.int", {T(0), P(int64_t{-1})}, {m}, {u}, {f32, f64}},
      {"log_softmax", "_log_softmax", {T(0), P(int64_t{0}), P(false)}, {m}, {u}, {f32}},
      {"softmax_backward",
       "_softmax_backward_data",
       {T(0), T(1), P(int64_t{1}), P(f32)},
       {m, m},
       {u, u},
       {f32}},
      // Ops with several outputs: every output compared, all laid out alike.
      {"max_dim", "max.dim", {T(0), P(int64_t{1})}, {m}, {u}, {f32, i32}},
      {"min_dim_keep", "min.dim", {T(0), P(int64_t{0}), P(true)}, {m}, {u}, {f32, i32}},
      {"sort", "sort", {T(0)}, {m}, {e}, {f32, i32}},
      {"sort_desc", "sort", {T(0), P(int64_t{0}), P(true)}, {m}, {u}, {f32, i32}},
      {"sort_stable",
       "sort.stable",
       {T(0), A("stable", true), A("dim", int64_t{1})},
       {m},
       {u},
       {i32}},
      {"topk", "topk", {T(0), P(int64_t{2})}, {m}, {u}, {f32, i32}},
      {"topk_smallest", "topk", {T(0), P(int64_t{3}), P(int64_t{0}), P(false)}, {m}, {u}, {f32}},
      {"var_mean", "var_mean.correction", {T(0), P(L({1}))}, {m}, {u}, {f32, f64}},
      {"std_mean_all", "std_mean.correction", {T(0), A("correction", int64_t{0})}, {m}, {u}, {f64}},
      {"split", "split.Tensor", {T(0), P(int64_t{4}), P(int64_t{1})}, {m}, {u}, {f32, i32}},
      {"split_empty", "split.Tensor", {T(0), P(int64_t{2})}, {m}, {e}, {f32}},
      {"split_sizes", "split_with_sizes", {T(0), P(L({1, 0, 3}))}, {m}, {{4, 3}}, {f32}},
      {"chunk", "chunk", {T(0), P(int64_t{3}), P(int64_t{1})}, {m}, {u}, {f32, i32}},
      {"chunk_empty", "chunk", {T(0), P(int64_t{2})}, {m}, {e}, {f32}},
      {"unbind", "unbind.int", {T(0), P(int64_t{1})}, {m}, {u}, {f32, i32}},
      {"native_layer_norm",
       "native_layer_norm",
       {T(0), P(L({6})), T(1), T(2), P(1e-5)},
       {m, {6}, {6}},
       {{5, 6}, {6}, {6}},
       {f32, f64}},
      {"native_layer_norm_3d",
       "native_layer_norm",
       {T(0), P(L({3, 4})), P(NoneValue{}), P(NoneValue{}), P(1e-5)},
       {{2, 3, 4}},
       {{0, 3, 4}},
       {f32}},
      {"native_layer_norm_backward",
       "native_layer_norm_backward",
       {T(0), T(1), P(L({6})), T(2), T(3), T(4), T(5), P(L({1, 1, 1}))},
       {m, m, {4, 1}, {4, 1}, {6}, {6}},
       {{5, 6}, {5, 6}, {5, 1}, {5, 1}, {6}, {6}},
       {f32, f64},
       {{}, {}, {}, {InputKind::kPositive}, {}, {}}},
      {"native_layer_norm_backward_3d_no_parameters",
       "native_layer_norm_backward",
       {T(0), T(1), P(L({3, 4})), T(2), T(3), P(NoneValue{}), P(NoneValue{}), P(L({1, 1, 1}))},
       {{2, 3, 4}, {2, 3, 4}, {2, 1, 1}, {2, 1, 1}},
       {{0, 3, 4}, {0, 3, 4}, {0, 1, 1}, {0, 1, 1}},
       {f32},
       {{}, {}, {}, {InputKind::kPositive}}},
      {"native_layer_norm_backward_bias_only",
       "native_layer_norm_backward",
       {T(0), T(1), P(L({6})), T(2), T(3), T(4), T(5), P(L({1, 0, 1}))},
       {m, m, {4, 1}, {4, 1}, {6}, {6}},
       {{1, 6}, {1, 6}, {1, 1}, {1, 1}, {6}, {6}},
       {f64},
       {{}, {}, {}, {InputKind::kPositive}, {}, {}}},
      {"native_dropout", "native_dropout", {T(0), P(0.25), P(true)}, {m}, {u}, {f32}},
      {"native_dropout_eval", "native_dropout", {T(0), P(0.5), P(false)}, {m}, {e}, {f32}},
      // Matmul family.
      {"mm", "mm", {T(0), T(1)}, {{4, 6}, {6, 8}}, {{5, 3}, {3, 2}}, {f32, f64}},
      {"bmm", "bmm", {T(0), T(1)}, {{2, 4, 6}, {2, 6, 4}}, {{3, 5, 3}, {3, 3, 2}}, {f32}},
      {"matmul_batched",
       "matmul",
       {T(0), T(1)},
       {{2, 4, 6}, {6, 4}},
       {{3, 1, 5, 3}, {2, 3, 2}},
       {f32}},
      {"matmul_vec", "matmul", {T(0), T(1)}, {{6}, {2, 6, 4}}, {{3}, {3, 2}}, {f32}},
      {"addmm",
       "addmm",
       {T(0), T(1), T(2), A("beta", 0.5), A("alpha", int64_t{2})},
       {{8}, {4, 6}, {6, 8}},
       {{5, 1}, {5, 3}, {3, 2}},
       {f32}},
      {"linear",
       "linear",
       {T(0), T(1), T(2)},
       {{2, 4, 6}, {8, 6}, {8}},
       {{5, 3}, {2, 3}, {2}},
       {f32}},
      // Views.
      {"view_merge", "view", {T(0), P(L({24}))}, {m}, {{3, 8}}, {f32, i32}},
      {"view_split", "view", {T(0), P(L({2, -1, 3}))}, {m}, {{6, 5}}, {f32}},
      {"reshape", "reshape", {T(0), P(L({6, 4}))}, {m}, {{3, 8}}, {f32}},
      {"flatten", "flatten.using_ints", {T(0), P(int64_t{1})}, {{2, 4, 6}}, {{3, 5, 0}}, {f32}},
      {"unflatten", "unflatten.int", {T(0), P(int64_t{1}), P(L({2, 3}))}, {m}, {{5, 6}}, {f32}},
      {"unsqueeze", "unsqueeze", {T(0), P(int64_t{1})}, {m}, {u}, {f32, i32}},
      {"squeeze_dim", "squeeze.dim", {T(0), P(int64_t{1})}, {{4, 1, 6}}, {{5, 1, 3}}, {f32}},
      {"permute", "permute", {T(0), P(L({2, 0, 1}))}, {{2, 4, 6}}, {{3, 5, 1}}, {f32, i32}},
      {"transpose", "transpose.int", {T(0), P(int64_t{0}), P(int64_t{-1})}, {m}, {u}, {f32}},
      {"t", "t", {T(0)}, {m}, {e}, {f32}},
      {"expand", "expand", {T(0), P(L({3, -1, 6}))}, {{4, 1}}, {{5, 1}}, {f32, i32}},
      // Tensor ops.
      {"cat", "cat", {P(TensorList{{0, 1}}), P(int64_t{1})}, {m, {4, 2}}, {u, {5, 0}}, {f32, i32}},
      {"stack", "stack", {P(TensorList{{0, 1}}), P(int64_t{0})}, {m, m}, {u, u}, {f32}},
      {"slice",
       "slice.Tensor",
       {T(0), P(int64_t{1}), P(int64_t{1}), P(int64_t{6}), P(int64_t{2})},
       {m},
       {u},
       {f32, i32}},
      {"slice_neg", "slice.Tensor", {T(0), P(int64_t{0}), P(int64_t{-3})}, {m}, {u}, {f32}},
      {"select", "select.int", {T(0), P(int64_t{1}), P(int64_t{-1})}, {m}, {u}, {f32, i32}},
      {"narrow", "narrow", {T(0), P(int64_t{0}), P(int64_t{1}), P(int64_t{2})}, {m}, {u}, {f32}},
      {"index_select",
       "index_select",
       {T(0), P(int64_t{0}), T(1)},
       {m, {5}},
       {u, {2}},
       {f32, i32},
       {{}, {InputKind::kIndex, 4}}},
      {"tril", "tril", {T(0), P(int64_t{1})}, {{2, 4, 6}}, {{3, 5, 3}}, {f32}},
      {"triu", "triu", {T(0), P(int64_t{-1})}, {m}, {u}, {f32, i32}},
      {"embedding",
       "embedding",
       {T(0), T(1)},
       {{8, 6}, {4, 3}},
       {{5, 3}, {2}},
       {f32},
       {{}, {InputKind::kIndex, 5}}},
      // Norms, attention and backward ops.
      {"layer_norm",
       "layer_norm",
       {T(0), P(L({6})), T(1), T(2)},
       {m, {6}, {6}},
       {{5, 6}, {6}, {6}},
       {f32, f64, DType::kFloat16}},
      {"layer_norm_3d",
       "layer_norm",
       {T(0), P(L({3, 4})), A("eps", 1e-3)},
       {{2, 4, 3, 4}},
       {{3, 5, 3, 4}},
       {f32}},
      {"rms_norm", "rms_norm", {T(0), P(L({6})), T(1)}, {m, {6}}, {{0, 6}, {6}}, {f32, f64}},
      {"rms_norm_eps",
       "rms_norm",
       {T(0), P(L({2, 3})), A("eps", 1e-6)},
       {{4, 2, 3}},
       {{5, 2, 3}},
       {f32}},
      {"sdpa",
       "scaled_dot_product_attention",
       {T(0), T(1), T(2)},
       {{2, 4, 3, 4}, {2, 4, 5, 4}, {2, 4, 5, 2}},
       {{3, 5, 2, 3}, {3, 5, 0, 3}, {3, 5, 0, 1}},
       {f32, f64}},
      {"sdpa_float_mask",
       "scaled_dot_product_attention",
       {T(0), T(1), T(2), T(3), A("scale", 0.25)},
       {{2, 4, 3, 4}, {2, 4, 5, 4}, {2, 4, 5, 4}, {3, 5}},
       {{3, 5, 2, 3}, {3, 5, 4, 3}, {3, 5, 4, 1}, {5, 1, 4}},
       {f32}},
      {"sdpa_bool_mask",
       "scaled_dot_product_attention",
       {T(0), T(1), T(2), T(3)},
       {{2, 4, 3, 4}, {2, 4, 5, 4}, {2, 4, 5, 2}, {2, 1, 3, 5}},
       {{3, 5, 2, 3}, {3, 5, 4, 3}, {3, 5, 4, 1}, {4}},
       {f32},
       {{}, {}, {}, {InputKind::kMask}}},
      {"sdpa_causal_gqa",
       "scaled_dot_product_attention",
       {T(0), T(1), T(2), A("is_causal", true), A("enable_gqa", true)},
       {{2, 4, 3, 4}, {2, 2, 3, 4}, {2, 2, 3, 2}},
       {{3, 6, 4, 3}, {3, 3, 2, 3}, {3, 3, 2, 1}},
       {f32}},
      {"constant_pad", "constant_pad_nd", {T(0), P(L({1, 2}))}, {m}, {u}, {f32, i32}},
      {"constant_pad_crop_value",
       "constant_pad_nd",
       {T(0), P(L({-1, 1, 2, 0})), P(1.5)},
       {m},
       {u},
       {f32}},
      {"fused_rms_norm",
       "_fused_rms_norm",
       {T(0), P(L({6})), T(1), P(1e-5)},
       {m, {6}},
       {{5, 6}, {6}},
       {f32, f64}},
      {"fused_rms_norm_3d_eps_none",
       "_fused_rms_norm",
       {T(0), P(L({3, 4})), P(NoneValue{}), P(NoneValue{})},
       {{2, 3, 4}},
       {{0, 3, 4}},
       {f32}},
      {"fused_rms_norm_backward",
       "_fused_rms_norm_backward",
       {T(0), T(1), P(L({6})), T(2), T(3), P(L({1, 1}))},
       {m, m, {4, 1}, {6}},
       {{5, 6}, {5, 6}, {5, 1}, {6}},
       {f32, f64},
       {{}, {}, {InputKind::kPositive}, {}}},
      {"fused_rms_norm_backward_no_weight",
       "_fused_rms_norm_backward",
       {T(0), T(1), P(L({3, 4})), T(2), P(NoneValue{}), P(L({1, 0}))},
       {{2, 3, 4}, {2, 3, 4}, {2, 1, 1}},
       {{0, 3, 4}, {0, 3, 4}, {0, 1, 1}},
       {f32},
       {{}, {}, {InputKind::kPositive}}},
      {"flash_attention",
       "_scaled_dot_product_flash_attention_for_cpu",
       {T(0), T(1), T(2)},
       {{2, 4, 3, 4}, {2, 4, 5, 4}, {2, 4, 5, 4}},
       {{3, 5, 2, 3}, {3, 5, 0, 3}, {3, 5, 0, 3}},
       {f32, f64}},
      {"flash_attention_mask_causal",
       "_scaled_dot_product_flash_attention_for_cpu",
       {T(0), T(1), T(2), A("is_causal", true), A("attn_mask", TensorRef{3}), A("scale", 0.5)},
       {{2, 4, 3, 4}, {2, 4, 5, 4}, {2, 4, 5, 4}, {3, 5}},
       {{3, 5, 2, 3}, {3, 5, 4, 3}, {3, 5, 4, 3}, {1, 5, 2, 4}},
       {f32}},
      {"flash_attention_gqa",
       "_scaled_dot_product_flash_attention_for_cpu",
       {T(0), T(1), T(2)},
       {{2, 4, 3, 4}, {2, 2, 3, 4}, {2, 2, 3, 4}},
       {{3, 6, 4, 3}, {3, 3, 2, 3}, {3, 3, 2, 3}},
       {f32}},
      {"flash_attention_backward",
       "_scaled_dot_product_flash_attention_for_cpu_backward",
       {T(0), T(1), T(2), T(3), T(4), T(5), P(0.0), P(false)},
       {{2, 4, 3, 4}, {2, 4, 3, 4}, {2, 4, 5, 4}, {2, 4, 5, 4}, {2, 4, 3, 4}, {2, 4, 3}},
       {{3, 5, 2, 3}, {3, 5, 2, 3}, {3, 5, 4, 3}, {3, 5, 4, 3}, {3, 5, 2, 3}, {3, 5, 2}},
       {f32, f64}},
      {"flash_attention_backward_gqa_mask",
       "_scaled_dot_product_flash_attention_for_cpu_backward",
       {T(0), T(1), T(2), T(3), T(4), T(5), P(0.0), P(true), A("attn_mask", TensorRef{6})},
       {{2, 4, 3, 4}, {2, 4, 3, 4}, {2, 2, 3, 4}, {2, 2, 3, 4}, {2, 4, 3, 4}, {2, 4, 3}, {3, 3}},
       {{3, 6, 0, 3},
        {3, 6, 0, 3},
        {3, 3, 2, 3},
        {3, 3, 2, 3},
        {3, 6, 0, 3},
        {3, 6, 0},
        {1, 1, 0, 2}},
       {f32}},
      {"vector_norm", "linalg_vector_norm", {T(0)}, {m}, {e}, {f32, f64}},
      {"vector_norm_dim", "linalg_vector_norm", {T(0), P(int64_t{2}), P(L({1}))}, {m}, {u}, {f32}},
      {"vector_norm_inf",
       "linalg_vector_norm",
       {T(0), P(std::numeric_limits<double>::infinity()), P(L({0})), P(true)},
       {m},
       {u},
       {f32}},
      {"vector_norm_neg_inf",
       "linalg_vector_norm",
       {T(0), P(-std::numeric_limits<double>::infinity())},
       {m},
       {u},
       {f32}},
      {"vector_norm_1",
       "linalg_vector_norm",
       {T(0), P(int64_t{1}), P(L({0})), P(true)},
       {m},
       {e},
       {f32}},
      {"vector_norm_0", "linalg_vector_norm", {T(0), P(0.0), P(L({-1}))}, {m}, {u}, {f32}},
      {"vector_norm_3_f64",
       "linalg_vector_norm",
       {T(0), P(3.0), P(L({0, 1})), A("dtype", f64)},
       {m},
       {u},
       {f32}},
      {"vector_norm_half", "linalg_vector_norm", {T(0), P(0.5), P(L({1}))}, {m}, {u}, {f64}},
      {"slice_backward",
       "slice_backward",
       {T(0), P(L({4, 6})), P(int64_t{1}), P(int64_t{1}), P(int64_t{6}), P(int64_t{2})},
       {{4, 3}},
       {{4, 3}},
       {f32, i32}},
      {"slice_backward_clamped",
       "slice_backward",
       {T(0), P(L({5, 3, 2})), P(int64_t{0}), P(int64_t{-4}), P(int64_t{100}), P(int64_t{1})},
       {{4, 3, 2}},
       {{4, 3, 2}},
       {f32}},
      {"select_backward",
       "select_backward",
       {T(0), P(L({4, 6})), P(int64_t{1}), P(int64_t{-2})},
       {{4}},
       {{4}},
       {f32, i32}},
      {"select_backward_dim0",
       "select_backward",
       {T(0), P(L({5, 3})), P(int64_t{0}), P(int64_t{4})},
       {{3}},
       {{3}},
       {f32}},
      {"embedding_dense_backward",
       "embedding_dense_backward",
       {T(0), T(1), P(int64_t{8}), P(int64_t{2}), P(false)},
       {{4, 3, 6}, {4, 3}},
       {{5, 3}, {5}},
       {f32, f64},
       {{}, {InputKind::kIndex, 8}}},
      {"embedding_dense_backward_no_padding",
       "embedding_dense_backward",
       {T(0), T(1), P(int64_t{5}), P(int64_t{-1}), P(false)},
       {{4, 2}, {4}},
       {{3, 0, 4}, {3, 0}},
       {f32},
       {{}, {InputKind::kIndex, 5}}},
      // Indexing.
      {"gather",
       "gather",
       {T(0), P(int64_t{1}), T(1)},
       {m, {4, 3}},
       {u, {5, 2}},
       {f32, i32},
       {{}, {InputKind::kIndex, 3}}},
      {"gather_smaller",
       "gather",
       {T(0), P(int64_t{0}), T(1)},
       {m, {3, 6}},
       {u, {7, 2}},
       {f32},
       {{}, {InputKind::kIndex, 4}}},
      {"scatter_src",
       "scatter.src",
       {T(0), P(int64_t{0}), T(1), T(2)},
       {m, {3, 6}, {3, 6}},
       {u, {4, 3}, {5, 3}},
       {f32, i32},
       {{}, {InputKind::kIndex, 4}, {}}},
      {"scatter_value",
       "scatter.value",
       {T(0), P(int64_t{1}), T(1), P(2.5)},
       {m, {4, 2}},
       {u, {5, 2}},
       {f32, i32},
       {{}, {InputKind::kIndex, 3}}},
      {"scatter_add",
       "scatter_add",
       {T(0), P(int64_t{0}), T(1), T(2)},
       {m, {5, 6}, {5, 6}},
       {u, {2, 3}, {3, 3}},
       {f32, i32},
       {{}, {InputKind::kIndex, 4}, {}}},
      {"index",
       "index.Tensor",
       {T(0), P(TensorList{{1}})},
       {m, {5}},
       {u, {2, 2}},
       {f32, i32},
       {{}, {InputKind::kIndex, 4}}},
      {"index_after_none",
       "index.Tensor",
       {T(0), P(TensorList{{-1, 1}})},
       {m, {2, 3}},
       {u, {4}},
       {f32},
       {{}, {InputKind::kIndex, 3}}},
      {"index_apart",
       "index.Tensor",
       {T(0), P(TensorList{{1, -1, 2}})},
       {{2, 4, 6}, {3}, {3}},
       {{3, 5, 3}, {2, 1}, {4}},
       {f32, i32},
       {{}, {InputKind::kIndex, 2}, {InputKind::kIndex, 3}}},
      {"index_put",
       "index_put",
       {T(0), P(TensorList{{1}}), T(2)},
       {m, {3}, {3, 6}},
       {u, {2}, {3}},
       {f32, i32},
       {{}, {InputKind::kIndex, 4}, {}}},
      {"index_put_accumulate",
       "index_put",
       {T(0), P(TensorList{{1, -1, 2}}), T(3), P(true)},
       {{2, 4, 6}, {3}, {3}, {3, 4}},
       {{3, 5, 3}, {2, 1}, {4}, {5}},
       {f32, i32},
       {{}, {InputKind::kIndex, 2}, {InputKind::kIndex, 3}, {}}},
      // Losses (targets below the smaller class count; ignore_index 1 among them).
      {"nll_mean",
       "nll_loss",
       {T(0), T(1)},
       {m, {4}},
       {u, {5}},
       {f32, f64},
       {{}, {InputKind::kIndex, 3}}},
      {"nll_sum_weight_ignore",
       "nll_loss",
       {T(0), T(1), T(2), P(int64_t{2}), P(int64_t{1})},
       {m, {4}, {6}},
       {u, {5}, {3}},
       {f32},
       {{}, {InputKind::kIndex, 3}, {InputKind::kPositive}}},
      {"nll_mean_weight_ignore",
       "nll_loss",
       {T(0), T(1), T(2), A("ignore_index", int64_t{0})},
       {m, {4}, {6}},
       {u, {5}, {3}},
       {f64},
       {{}, {InputKind::kIndex, 3}, {InputKind::kPositive}}},
      {"nll_none_spatial",
       "nll_loss",
       {T(0), T(1), P(NoneValue{}), P(int64_t{0})},
       {{2, 4, 3}, {2, 3}},
       {{3, 2, 1}, {3, 1}},
       {f32},
       {{}, {InputKind::kIndex, 2}}},
      {"nll_one_sample",
       "nll_loss",
       {T(0), T(1)},
       {{6}, {}},
       {{3}, {}},
       {f64},
       {{}, {InputKind::kIndex, 3}}},
      // nll_loss's autograd records: the loss with its total_weight, and the gradient.
      {"nll_forward_mean",
       "nll_loss_forward",
       {T(0), T(1), P(NoneValue{}), P(int64_t{1}), P(int64_t{-100})},
       {m, {4}},
       {u, {5}},
       {f32, f64},
       {{}, {InputKind::kIndex, 3}}},
      {"nll_forward_sum_weight_ignore",
       "nll_loss_forward",
       {T(0), T(1), T(2), P(int64_t{2}), P(int64_t{1})},
       {m, {4}, {6}},
       {e, {0}, {3}},
       {f32},
       {{}, {InputKind::kIndex, 3}, {InputKind::kPositive}}},
      {"nll_forward_none",
       "nll_loss_forward",
       {T(0), T(1), P(NoneValue{}), P(int64_t{0}), P(int64_t{2})},
       {m, {4}},
       {u, {5}},
       {f32},
       {{}, {InputKind::kIndex, 3}}},
      {"nll_forward_one_sample",
       "nll_loss_forward",
       {T(0), T(1), T(2), P(int64_t{0}), P(int64_t{-100})},
       {{6}, {}, {6}},
       {{3}, {}, {3}},
       {f64},
       {{}, {InputKind::kIndex, 3}, {InputKind::kPositive}}},
      {"nll_backward_mean",
       "nll_loss_backward",
       {T(0), T(1), T(2), P(NoneValue{}), P(int64_t{1}), P(int64_t{-100}), T(3)},
       {{}, m, {4}, {}},
       {{}, u, {5}, {}},
       {f32, f64},
       {{}, {}, {InputKind::kIndex, 3}, {InputKind::kPositive}}},
      {"nll_backward_sum_weight_ignore",
       "nll_loss_backward",
       {T(0), T(1), T(2), T(3), P(int64_t{2}), P(int64_t{1}), T(4)},
       {{}, m, {4}, {6}, {}},
       {{}, u, {5}, {3}, {}},
       {f32},
       {{}, {}, {InputKind::kIndex, 3}, {InputKind::kPositive}, {InputKind::kPositive}}},
      {"nll_backward_none",
       "nll_loss_backward",
       {T(0), T(1), T(2), P(NoneValue{}), P(int64_t{0}), P(int64_t{0}), T(3)},
       {{4}, m, {4}, {}},
       {{0}, e, {0}, {}},
       {f32},
       {{}, {}, {InputKind::kIndex, 3}, {InputKind::kPositive}}},
      {"nll_backward_one_sample",
       "nll_loss_backward",
       {T(0), T(1), T(2), T(3), P(int64_t{1}), P(int64_t{-100}), T(4)},
       {{}, {6}, {}, {6}, {}},
       {{}, {3}, {}, {3}, {}},
       {f64},
       {{}, {}, {InputKind::kIndex, 3}, {InputKind::kPositive}, {InputKind::kPositive}}},
  };
  static const bool added = [] {
    const Shape m{4, 6}, u{5, 3}, e{0, 3};
    // The other unary ops, on one input.
    for (const char* op :
         {"sign",       "expm1",  "log",        "log2",         "sqrt",       "reciprocal",
          "sin",        "cos",    "tanh",       "relu",         "gelu",       "erf",
          "floor",      "ceil",   "trunc",      "isinf",        "isfinite",   "alias",
          "contiguous", "detach", "zeros_like", "ones_like",    "empty_like", "mean",
          "max",        "min",    "prod",       "_unsafe_view", "squeeze"}) {
      const bool floating = std::string(op) == "mean";
      const bool view = std::string(op) == "_unsafe_view";
      cases->push_back(
          {op,
           op,
           view ? std::vector<NamedValue>{T(0), P(L({3, 8}))} : std::vector<NamedValue>{T(0)},
           {m},
           {view ? Shape{6, 4} : u},
           {floating ? f64 : i32, f32}});
      if (view) cases->back().uneven = {{2, 12}};
    }
    cases->back().even = {{4, 1, 6}};
    cases->back().uneven = {{1, 3}};
    for (const char* op : {"bitwise_not", "any"}) {
      cases->push_back({op, op, {T(0)}, {m}, {u}, {i32, b8}});
    }
    // The other binary ops, on two inputs or an input and a number.
    for (const char* op :
         {"sub.Tensor", "rsub.Tensor", "minimum", "remainder.Tensor", "floor_divide", "logical_or",
          "logical_xor", "pow.Tensor_Tensor", "sigmoid_backward", "silu_backward", "gelu_backward",
          "_log_softmax_backward_data"}) {
      const bool positive = std::string(op) == "remainder.Tensor" ||
                            std::string(op) == "floor_divide" ||
                            std::string(op) == "pow.Tensor_Tensor";
      const bool softmax = std::string(op) == "_log_softmax_backward_data";
      std::vector<NamedValue> args = {T(0), T(1)};
      if (softmax) args = {T(0), T(1), P(int64_t{0}), P(f32)};
      const bool floating = std::string(op).find("backward") != std::string::npos;
      cases->push_back({op, op, args, {m, m}, {u, {1, 3}}, {f32}, {{}, {}}});
      if (!floating) cases->back().dtypes = {f32, i32};
      if (softmax) cases->back().uneven = {u, u};
      if (positive) cases->back().inputs = {{InputKind::kPositive}, {InputKind::kPositive}};
    }
    for (const char* op :
         {"add.Scalar", "sub.Scalar", "div.Scalar", "remainder.Scalar", "eq.Scalar", "ne.Scalar",
          "le.Scalar", "gt.Scalar", "ge.Scalar", "clamp_min", "clamp_max", "pow.Scalar"}) {
      const bool reversed = std::string(op) == "pow.Scalar";
      cases->push_back({op,
                        op,
                        reversed ? std::vector<NamedValue>{P(2.0), T(0)}
                                 : std::vector<NamedValue>{T(0), P(int64_t{3})},
                        {m},
                        {u},
                        {f32, i32}});
    }
    for (const char* op : {"ne.Tensor", "lt.Tensor", "le.Tensor", "gt.Tensor", "ge.Tensor",
                           "bitwise_and.Tensor", "bitwise_or.Tensor"}) {
      const bool bits = std::string(op).find("bitwise") != std::string::npos;
      cases->push_back({op, op, {T(0), T(1)}, {m, m}, {u, u}, {bits ? b8 : f32, i32}});
    }
    for (const char* op : {"bitwise_and.Scalar", "bitwise_or.Scalar", "bitwise_xor.Scalar"}) {
      cases->push_back({op, op, {T(0), P(int64_t{5})}, {m}, {u}, {i32}});
    }
    cases->push_back({"to_dtype", "to.dtype", {T(0), P(i32)}, {m}, {u}, {f32}});
    cases->push_back(
        {"to_dtype_layout", "to.dtype_layout", {T(0), A("dtype", f64)}, {m}, {u}, {f32, i32}});
    for (const char* op : {"__and__.Tensor", "__or__.Tensor"}) {
      cases->push_back({op, op, {T(0), T(1)}, {m, m}, {u, u}, {b8, i32}});
    }
    cases->push_back({"all_dim", "all.dim", {T(0), P(int64_t{0})}, {m}, {u}, {b8, i32}});
    cases->push_back({"cumprod", "cumprod", {T(0), P(int64_t{0})}, {m}, {u}, {f32, i32}});
    cases->push_back({"_softmax", "_softmax", {T(0), P(int64_t{1}), P(false)}, {m}, {u}, {f32}});
    cases->push_back(
        {"log_softmax_int", "log_softmax.int", {T(0), P(int64_t{1})}, {m}, {u}, {f64}});
    cases->push_back({"safe_softmax", "_safe_softmax", {T(0), P(int64_t{0})}, {m}, {u}, {f32}});
    // Factories of another tensor and the random ops on one: every layout of the input gives
    // the single process's values (the random ones drawn at each element's global index).
    cases->push_back({"new_zeros", "new_zeros", {T(0), P(L({3, 2}))}, {m}, {u}, {f32, i32}});
    cases->push_back({"new_ones", "new_ones", {T(0), P(L({5}))}, {m}, {u}, {f32}});
    cases->push_back({"new_full", "new_full", {T(0), P(L({2, 3})), P(1.5)}, {m}, {u}, {f32}});
    cases->push_back({"new_empty", "new_empty", {T(0), P(L({0, 2}))}, {m}, {u}, {f32}});
    cases->push_back({"ones_like_int64", "ones_like", {T(0), A("dtype", i64)}, {m}, {e}, {f32}});
    cases->push_back({"rand_like", "rand_like", {T(0)}, {m}, {u}, {f32, f64}});
    cases->push_back({"randn_like", "randn_like", {T(0)}, {m}, {e}, {f32}});
    cases->push_back({"randint_like", "randint_like", {T(0), P(int64_t{7})}, {m}, {u}, {f32, i32}});
    cases->push_back({"randint_like_low",
                      "randint_like.low_dtype",
                      {T(0), P(int64_t{-2}), P(int64_t{5}), A("dtype", i64)},
                      {m},
                      {u},
                      {f32}});
    cases->push_back({"dropout", "dropout", {T(0), P(0.5), P(true)}, {m}, {u}, {f32, f64}});
    cases->push_back({"dropout_eval", "dropout", {T(0), P(0.5), P(false)}, {m}, {e}, {f32}});
    cases->push_back({"bernoulli", "bernoulli.p", {T(0), P(0.3)}, {m}, {u}, {f32, i32}});
    return true;
  }();
  (void)added;
  return *cases;
}

struct Param {
  int op_case;
  Shape mesh;
  bool uneven;
  DType dtype;
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << OpCases()[p.op_case].name << " on mesh " << ShapeToString(p.mesh)
      << (p.uneven ? ", uneven " : ", even ") << DTypeName(p.dtype);
}

std::vector<Param> Params() {
  std::vector<Param> out;
  for (int i = 0; i < static_cast<int>(OpCases().size()); ++i) {
    for (const Shape& mesh : {Shape{2}, Shape{4}, Shape{2, 2}}) {
      for (bool uneven : {false, true}) {
        for (DType dtype : OpCases()[i].dtypes) out.push_back({i, mesh, uneven, dtype});
      }
    }
  }
  return out;
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const Param& p = info.param;
  std::string label = OpCases()[p.op_case].name;
  std::replace(label.begin(), label.end(), '.', '_');
  return absl::StrCat(label, "_mesh", absl::StrJoin(p.mesh, "x"), p.uneven ? "_uneven_" : "_even_",
                      DTypeName(p.dtype));
}

std::vector<std::vector<Placement>> AllPlacements(int ndim, int rank) {
  std::vector<Placement> options = {Placement::Replicate(), Placement::Partial()};
  for (int d = 0; d < rank; ++d) options.push_back(Placement::Shard(d));
  return testing::PlacementProduct(options, ndim);
}

HostTensor MakeInput(const Input& in, DType dtype, const Shape& shape, uint32_t seed) {
  switch (in.kind) {
    case InputKind::kMask: {
      HostTensor t = SmallIntegerTensor(DType::kInt32, shape, seed);
      HostTensor b = HostTensor::ZerosOfValidShape(DType::kBool, shape);
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        kernels::testing::SetFromDouble(b, i, kernels::testing::GetDouble(t, i) > 0);
      }
      return b;
    }
    case InputKind::kIndex: {
      HostTensor t = HostTensor::ZerosOfValidShape(DType::kInt64, shape);
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        kernels::testing::SetFromDouble(t, i, static_cast<double>((i * 7 + seed) % in.bound));
      }
      return t;
    }
    case InputKind::kPositive: {
      HostTensor t = SmallIntegerTensor(dtype, shape, seed);
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        const double v = std::abs(kernels::testing::GetDouble(t, i));
        kernels::testing::SetFromDouble(t, i, v == 0 ? 3 : v);
      }
      return t;
    }
    case InputKind::kValues:
      break;
  }
  return SmallIntegerTensor(dtype, shape, seed);
}

void ExpectClose(const HostTensor& got, const HostTensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const bool floating = IsFloatingPoint(want.dtype());
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double g = kernels::testing::GetDouble(got, i);
    const double w = kernels::testing::GetDouble(want, i);
    if (!floating || std::isnan(w) || std::isinf(w)) {
      ASSERT_TRUE(kernels::testing::SameElement(got, want, i))
          << what << ": element " << i << " is " << g << ", expected " << w;
    } else {
      ASSERT_NEAR(g, w, 1e-4 * std::max(1.0, std::abs(w))) << what << ": element " << i;
    }
  }
}

// The call bound on these inputs (shapes and dtypes from `fulls`).
absl::StatusOr<ops::PreparedCall> Prepare(const OpCase& c, const std::vector<HostTensor>& fulls) {
  const ops::OpDef* op = ops::Registry().Find(c.op).value();
  std::vector<ops::TensorMeta> metas;
  for (const HostTensor& t : fulls) metas.push_back({t.shape(), t.dtype()});
  return ops::PrepareCall(*op, c.args, metas);
}

// Each rank's local call on its shards (laid out as `specs`): every output's shards, by output
// then rank (the first output's spec `output`, then `more`).
absl::StatusOr<std::vector<std::vector<HostTensor>>> LocalCallOutputs(
    kernels::KernelBackend& backend, const ops::BoundCall& call, const DeviceMesh& mesh,
    const std::vector<DTensorSpec>& specs, const std::vector<std::vector<HostTensor>>& shards,
    const DTensorSpec& output, std::span<const DTensorSpec> more) {
  std::vector<std::vector<HostTensor>> out_shards(1 + more.size());
  for (int64_t pos = 0; pos < mesh.size(); ++pos) {
    const std::vector<int64_t> coordinate = mesh.CoordinateOfIndex(pos);
    std::vector<kernels::DeviceTensor> uploaded;
    std::vector<kernels::ConstTensorView> views;
    for (const auto& s : shards) {
      uploaded.push_back(backend.Upload(s[pos]).value());
      views.push_back(std::as_const(uploaded.back()).View());
    }
    const kernels::LocalCall local{&call, specs, &output, coordinate, kStream, more};
    absl::StatusOr<std::vector<kernels::DeviceTensor>> outs =
        kernels::RunLocalCallOutputs(backend, local, views);
    if (!outs.ok()) return outs.status();
    for (size_t k = 0; k < outs->size(); ++k) {
      out_shards[k].push_back(backend.Download(std::as_const((*outs)[k]).View()).value());
    }
  }
  return out_shards;
}

// The first output's shards.
absl::StatusOr<std::vector<HostTensor>> LocalCalls(
    kernels::KernelBackend& backend, const ops::BoundCall& call, const DeviceMesh& mesh,
    const std::vector<DTensorSpec>& specs, const std::vector<std::vector<HostTensor>>& shards,
    const DTensorSpec& output) {
  ASSIGN_OR_RETURN(std::vector<std::vector<HostTensor>> outs,
                   LocalCallOutputs(backend, call, mesh, specs, shards, output, {}));
  return std::move(outs[0]);
}

// The local calls' shards gathered into every full output.
absl::StatusOr<std::vector<HostTensor>> RunOnRanksOutputs(
    kernels::KernelBackend& backend, const ops::BoundCall& call, const DeviceMesh& mesh,
    const std::vector<DTensorSpec>& specs, const std::vector<std::vector<HostTensor>>& shards,
    const DTensorSpec& output, std::span<const DTensorSpec> more, SimulatedMesh& sim) {
  ASSIGN_OR_RETURN(std::vector<std::vector<HostTensor>> out_shards,
                   LocalCallOutputs(backend, call, mesh, specs, shards, output, more));
  std::vector<HostTensor> fulls;
  for (size_t k = 0; k < out_shards.size(); ++k) {
    ASSIGN_OR_RETURN(HostTensor full,
                     sim.FullTensor(k == 0 ? output : more[k - 1], std::move(out_shards[k])));
    fulls.push_back(std::move(full));
  }
  return fulls;
}

// The first output gathered.
absl::StatusOr<HostTensor> RunOnRanks(kernels::KernelBackend& backend, const ops::BoundCall& call,
                                      const DeviceMesh& mesh, const std::vector<DTensorSpec>& specs,
                                      const std::vector<std::vector<HostTensor>>& shards,
                                      const DTensorSpec& output, SimulatedMesh& sim) {
  ASSIGN_OR_RETURN(std::vector<HostTensor> outs,
                   RunOnRanksOutputs(backend, call, mesh, specs, shards, output, {}, sim));
  return std::move(outs[0]);
}

// The single-process result: the call on a mesh of one rank, every output.
absl::StatusOr<std::vector<HostTensor>> OneRankOutputs(kernels::KernelBackend& backend,
                                                       const ops::PreparedCall& p,
                                                       const std::vector<HostTensor>& fulls) {
  const DeviceMesh one = DeviceMesh::Create("cpu", {1}).value();
  std::vector<DTensorSpec> specs;
  std::vector<std::vector<HostTensor>> shards;
  for (int i : p.input_of) {
    specs.push_back(
        MakeDTensorSpec(one, {Placement::Replicate()}, fulls[i].shape(), fulls[i].dtype()).value());
    std::vector<HostTensor> s;
    s.push_back(fulls[i].Clone());
    shards.push_back(std::move(s));
  }
  const DTensorSpec out =
      MakeDTensorSpec(one, {Placement::Replicate()}, p.call.output.shape, p.call.output.dtype)
          .value();
  std::vector<DTensorSpec> more;
  for (const ops::OutputMeta& m : p.call.more_outputs) {
    more.push_back(MakeDTensorSpec(one, {Placement::Replicate()}, m.shape, m.dtype).value());
  }
  SimulatedMesh sim(one);
  return RunOnRanksOutputs(backend, p.call, one, specs, shards, out, more, sim);
}

absl::StatusOr<HostTensor> OneRank(kernels::KernelBackend& backend, const ops::PreparedCall& p,
                                   const std::vector<HostTensor>& fulls) {
  ASSIGN_OR_RETURN(std::vector<HostTensor> outs, OneRankOutputs(backend, p, fulls));
  return std::move(outs[0]);
}

HostTensor Reference(kernels::KernelBackend& backend, const ops::PreparedCall& p,
                     const std::vector<HostTensor>& fulls) {
  absl::StatusOr<HostTensor> r = OneRank(backend, p, fulls);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : HostTensor();
}

std::vector<HostTensor> References(kernels::KernelBackend& backend, const ops::PreparedCall& p,
                                   const std::vector<HostTensor>& fulls) {
  absl::StatusOr<std::vector<HostTensor>> r = OneRankOutputs(backend, p, fulls);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : std::vector<HostTensor>();
}

void CheckOneLayout(kernels::KernelBackend& backend, const OpCase& c, const ops::PreparedCall& p,
                    const DeviceMesh& mesh, const std::vector<HostTensor>& fulls,
                    const std::vector<std::vector<Placement>>& placements,
                    const std::vector<HostTensor>& want) {
  std::vector<DTensorSpec> specs;
  std::string what = absl::StrCat(c.name, " on");
  for (size_t k = 0; k < p.input_of.size(); ++k) {
    const HostTensor& full = fulls[p.input_of[k]];
    specs.push_back(MakeDTensorSpec(mesh, placements[k], full.shape(), full.dtype()).value());
    absl::StrAppend(&what, " ", specs.back().ToString());
  }
  absl::StatusOr<ops::OpPlan> plan = ops::PlanCall(p.call, specs);
  ASSERT_TRUE(plan.ok()) << what << ": " << plan.status();
  absl::StrAppend(&what, " -> ", PlacementsToString(plan->strategy.output));
  SimulatedMesh sim(mesh);
  std::vector<std::vector<HostTensor>> shards;
  std::vector<DTensorSpec> laid_out;
  for (size_t k = 0; k < specs.size(); ++k) {
    absl::StatusOr<std::vector<HostTensor>> moved = sim.Redistribute(
        specs[k], plan->input_plans[k], sim.Distribute(fulls[p.input_of[k]], specs[k]).value());
    ASSERT_TRUE(moved.ok()) << what << ": input " << k << ": " << moved.status();
    shards.push_back(*std::move(moved));
    DTensorSpec after = specs[k];
    after.placements = plan->strategy.inputs[k];
    laid_out.push_back(after);
  }
  for (const DTensorSpec& more : plan->more_outputs) {
    ASSERT_EQ(more.mesh, plan->output.mesh) << what << ": the outputs are on different meshes";
    absl::StrAppend(&what, " ", PlacementsToString(more.placements));
  }
  absl::StatusOr<std::vector<HostTensor>> got = RunOnRanksOutputs(
      backend, p.call, mesh, laid_out, shards, plan->output, plan->more_outputs, sim);
  ASSERT_TRUE(got.ok()) << what << ": " << got.status();
  ASSERT_EQ(got->size(), want.size()) << what;
  for (size_t k = 0; k < want.size(); ++k) {
    ExpectClose((*got)[k], want[k], absl::StrCat(what, ", output ", k));
  }
}

class AtenOpsTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { backend_ = testing::TestBackendForRank(0).value(); }
  std::unique_ptr<kernels::KernelBackend> backend_;
};

TEST_P(AtenOpsTest, ShardedResultMatchesSingleProcess) {
  const Param& param = GetParam();
  const OpCase& c = OpCases()[param.op_case];
  const DeviceMesh mesh = DeviceMesh::Create("cpu", param.mesh).value();
  const std::vector<Shape>& shapes = param.uneven ? c.uneven : c.even;
  std::vector<HostTensor> fulls;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Input in = i < c.inputs.size() ? c.inputs[i] : Input{};
    fulls.push_back(MakeInput(in, param.dtype, shapes[i], 17 + static_cast<uint32_t>(i)));
  }
  absl::StatusOr<ops::PreparedCall> prepared = Prepare(c, fulls);
  ASSERT_TRUE(prepared.ok()) << c.name << ": " << prepared.status();
  const ops::PreparedCall& p = *prepared;
  ASSERT_FALSE(p.input_of.empty());
  const std::vector<HostTensor> want = References(*backend_, p, fulls);
  ASSERT_EQ(want.size(), 1 + p.call.more_outputs.size());
  ASSERT_EQ(want[0].shape(), p.call.output.shape);

  std::vector<std::vector<std::vector<Placement>>> per_input;
  size_t total = 1;
  for (int i : p.input_of) {
    per_input.push_back(AllPlacements(mesh.ndim(), static_cast<int>(shapes[i].size())));
    total *= per_input.back().size();
  }
  const size_t stride = total > 120 ? total / 60 + 1 : 1;
  for (size_t index = 0; index < total; index += stride) {
    std::vector<std::vector<Placement>> placements;
    size_t rest = index;
    for (const auto& options : per_input) {
      placements.push_back(options[rest % options.size()]);
      rest /= options.size();
    }
    ASSERT_NO_FATAL_FAILURE(CheckOneLayout(*backend_, c, p, mesh, fulls, placements, want));
  }
}

INSTANTIATE_TEST_SUITE_P(Product, AtenOpsTest, ::testing::ValuesIn(Params()), ParamName);

// A factory without a tensor input: its arguments for an even output and an uneven one (dims
// smaller than the mesh, or empty).
struct FactoryCase {
  std::string name;
  std::string op;
  std::vector<NamedValue> even;
  std::vector<NamedValue> uneven;
};

const std::vector<FactoryCase>& FactoryCases() {
  static const auto* cases = new std::vector<FactoryCase>{
      {"arange", "arange", {P(int64_t{8})}, {P(int64_t{5})}},
      {"arange_empty", "arange", {P(int64_t{0})}, {P(2.5)}},
      {"arange_start", "arange.start", {P(int64_t{-3}), P(int64_t{5})}, {P(int64_t{1}), P(4.0)}},
      {"arange_step",
       "arange.start_step",
       {P(0.0), P(2.0), P(0.25)},
       {P(int64_t{10}), P(int64_t{0}), P(int64_t{-3})}},
      {"arange_f64",
       "arange.start_step",
       {P(int64_t{1}), P(int64_t{9}), P(int64_t{2}), A("dtype", f64)},
       {P(int64_t{1}), P(int64_t{4}), P(int64_t{1}), A("dtype", i32)}},
      {"full", "full", {P(L({4, 6})), P(2.5)}, {P(L({5, 3})), P(int64_t{7})}},
      {"zeros", "zeros", {P(L({4, 6}))}, {P(L({0, 3}))}},
      {"ones", "ones", {P(L({4, 6})), A("dtype", i32)}, {P(L({5, 3}))}},
      {"empty", "empty.memory_format", {P(L({4, 6}))}, {P(L({5, 3}))}},
      {"scalar_tensor", "scalar_tensor", {P(3.5)}, {P(int64_t{2}), A("dtype", i64)}},
      {"eye", "eye", {P(int64_t{4})}, {P(int64_t{5})}},
      {"eye_m", "eye.m", {P(int64_t{4}), P(int64_t{6})}, {P(int64_t{5}), P(int64_t{3})}},
      {"rand", "rand", {P(L({4, 6}))}, {P(L({5, 3})), A("dtype", f64)}},
      {"randn", "randn", {P(L({4, 6}))}, {P(L({0, 3}))}},
      {"randint", "randint", {P(int64_t{10}), P(L({4, 6}))}, {P(int64_t{3}), P(L({5, 3}))}},
      {"randint_low",
       "randint.low",
       {P(int64_t{-5}), P(int64_t{5}), P(L({4, 6}))},
       {P(int64_t{0}), P(int64_t{1000000007}), P(L({5, 3})), A("dtype", f32)}},
  };
  return *cases;
}

struct FactoryParam {
  int factory_case;
  Shape mesh;
  bool uneven;
};

void PrintTo(const FactoryParam& p, std::ostream* os) {
  *os << FactoryCases()[p.factory_case].name << " on mesh " << ShapeToString(p.mesh)
      << (p.uneven ? ", uneven" : ", even");
}

std::vector<FactoryParam> FactoryParams() {
  std::vector<FactoryParam> out;
  for (int i = 0; i < static_cast<int>(FactoryCases().size()); ++i) {
    for (const Shape& mesh : {Shape{2}, Shape{4}, Shape{2, 2}}) {
      for (bool uneven : {false, true}) out.push_back({i, mesh, uneven});
    }
  }
  return out;
}

std::string FactoryParamName(const ::testing::TestParamInfo<FactoryParam>& info) {
  const FactoryParam& p = info.param;
  return absl::StrCat(FactoryCases()[p.factory_case].name, "_mesh", absl::StrJoin(p.mesh, "x"),
                      p.uneven ? "_uneven" : "_even");
}

class AtenFactoryTest : public ::testing::TestWithParam<FactoryParam> {
 protected:
  std::unique_ptr<kernels::KernelBackend> backend_ = testing::TestBackendForRank(0).value();
};

// Each rank makes its block of the output in every Shard and Replicate layout; gathered, they
// are the tensor one rank makes.
TEST_P(AtenFactoryTest, EveryLayoutMakesTheSingleProcessTensor) {
  const FactoryParam& param = GetParam();
  const FactoryCase& c = FactoryCases()[param.factory_case];
  const OpCase as_op{c.name, c.op, param.uneven ? c.uneven : c.even, {}, {}, {}};
  absl::StatusOr<ops::PreparedCall> p = Prepare(as_op, {});
  ASSERT_TRUE(p.ok()) << c.name << ": " << p.status();
  ASSERT_TRUE(p->input_of.empty());
  const HostTensor want = Reference(*backend_, *p, {});
  ASSERT_EQ(want.shape(), p->call.output.shape);
  const DeviceMesh mesh = DeviceMesh::Create("cpu", param.mesh).value();
  const int rank = static_cast<int>(p->call.output.shape.size());
  std::vector<Placement> options = {Placement::Replicate()};
  for (int d = 0; d < rank; ++d) options.push_back(Placement::Shard(d));
  for (const std::vector<Placement>& placements : testing::PlacementProduct(options, mesh.ndim())) {
    const DTensorSpec out =
        MakeDTensorSpec(mesh, placements, p->call.output.shape, p->call.output.dtype).value();
    SimulatedMesh sim(mesh);
    absl::StatusOr<HostTensor> got = RunOnRanks(*backend_, p->call, mesh, {}, {}, out, sim);
    ASSERT_TRUE(got.ok()) << c.name << " on " << out.ToString() << ": " << got.status();
    ExpectClose(*got, want, absl::StrCat(c.name, " on ", out.ToString()));
  }
}

INSTANTIATE_TEST_SUITE_P(Product, AtenFactoryTest, ::testing::ValuesIn(FactoryParams()),
                         FactoryParamName);

// The factories' and random ops' values, worked out by hand or by their distributions.
class AtenRandomTest : public ::testing::Test {
 protected:
  // The op on one rank, drawing from `stream`.
  HostTensor Make(const std::string& op, std::vector<NamedValue> args,
                  std::vector<HostTensor> fulls = {}, kernels::RandomStream stream = kStream,
                  const std::vector<Placement>& placements = {}, Shape mesh_shape = {1}) {
    const OpCase c{op, op, std::move(args), {}, {}, {}};
    absl::StatusOr<ops::PreparedCall> p = Prepare(c, fulls);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return HostTensor();
    const DeviceMesh mesh = DeviceMesh::Create("cpu", mesh_shape).value();
    std::vector<DTensorSpec> specs;
    std::vector<std::vector<HostTensor>> shards;
    for (int i : p->input_of) {
      specs.push_back(MakeDTensorSpec(mesh,
                                      std::vector<Placement>(mesh.ndim(), Placement::Replicate()),
                                      fulls[i].shape(), fulls[i].dtype())
                          .value());
      std::vector<HostTensor> copies;
      for (int64_t r = 0; r < mesh.size(); ++r) copies.push_back(fulls[i].Clone());
      shards.push_back(std::move(copies));
    }
    const DTensorSpec out =
        MakeDTensorSpec(mesh,
                        placements.empty()
                            ? std::vector<Placement>(mesh.ndim(), Placement::Replicate())
                            : placements,
                        p->call.output.shape, p->call.output.dtype)
            .value();
    SimulatedMesh sim(mesh);
    std::vector<HostTensor> out_shards;
    for (int64_t pos = 0; pos < mesh.size(); ++pos) {
      const std::vector<int64_t> coordinate = mesh.CoordinateOfIndex(pos);
      std::vector<kernels::DeviceTensor> uploaded;
      std::vector<kernels::ConstTensorView> views;
      for (const auto& s : shards) {
        uploaded.push_back(backend_->Upload(s[pos]).value());
        views.push_back(std::as_const(uploaded.back()).View());
      }
      const kernels::LocalCall local{&p->call, specs, &out, coordinate, stream};
      absl::StatusOr<kernels::DeviceTensor> t = kernels::RunLocalCall(*backend_, local, views);
      EXPECT_TRUE(t.ok()) << t.status();
      if (!t.ok()) return HostTensor();
      out_shards.push_back(backend_->Download(std::as_const(*t).View()).value());
    }
    return sim.FullTensor(out, std::move(out_shards)).value();
  }
  static std::vector<HostTensor> Of(const HostTensor& t) {
    std::vector<HostTensor> out;
    out.push_back(t.Clone());
    return out;
  }
  static std::vector<double> Values(const HostTensor& t) {
    std::vector<double> out;
    for (int64_t i = 0; i < t.num_elements(); ++i) out.push_back(kernels::testing::GetDouble(t, i));
    return out;
  }
  std::unique_ptr<kernels::KernelBackend> backend_ = testing::TestBackendForRank(0).value();
};

TEST_F(AtenRandomTest, FactoriesAsTorch) {
  EXPECT_EQ(Values(Make("arange.start_step", {P(0.0), P(1.0), P(0.25)})),
            (std::vector<double>{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(Values(Make("arange.start_step", {P(int64_t{10}), P(int64_t{0}), P(int64_t{-3})})),
            (std::vector<double>{10, 7, 4, 1}));
  EXPECT_EQ(Values(Make("eye.m", {P(int64_t{2}), P(int64_t{3})})),
            (std::vector<double>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(Values(Make("full", {P(L({2})), P(int64_t{7})})), (std::vector<double>{7, 7}));
}

TEST_F(AtenRandomTest, RandIsOneTensorInEveryLayoutAndMovesWithTheOffset) {
  const std::vector<NamedValue> args = {P(L({6, 5}))};
  const HostTensor whole = Make("rand", args);
  for (const std::vector<Placement>& placements : std::vector<std::vector<Placement>>{
           {Placement::Shard(0)}, {Placement::Shard(1)}, {Placement::Replicate()}}) {
    const HostTensor sharded = Make("rand", args, {}, kStream, placements, {4});
    EXPECT_EQ(Values(sharded), Values(whole)) << PlacementsToString(placements);
  }
  const HostTensor two_d =
      Make("rand", args, {}, kStream, {Placement::Shard(1), Placement::Shard(0)}, {2, 2});
  EXPECT_EQ(Values(two_d), Values(whole));
  // The next call's offset draws other values; the same seed and offset the same ones.
  const HostTensor next = Make("rand", args, {}, {kStream.seed, kStream.offset + 30});
  EXPECT_NE(Values(next), Values(whole));
  EXPECT_EQ(Values(Make("rand", args, {}, kStream)), Values(whole));
  for (double v : Values(whole)) {
    EXPECT_GE(v, 0);
    EXPECT_LT(v, 1);
  }
}

TEST_F(AtenRandomTest, RandnHasUnitMomentsAndRandintItsRange) {
  const std::vector<double> v = Values(Make("randn", {P(L({100000}))}));
  double sum = 0, squares = 0;
  for (double x : v) {
    sum += x;
    squares += x * x;
  }
  const double mean = sum / v.size();
  const double std = std::sqrt(squares / v.size() - mean * mean);
  EXPECT_NEAR(mean, 0, 0.02);
  EXPECT_NEAR(std, 1, 0.02);
  const std::vector<double> ints =
      Values(Make("randint.low", {P(int64_t{-3}), P(int64_t{4}), P(L({7000}))}));
  std::vector<int> counts(7, 0);
  for (double x : ints) {
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 4);
    ++counts[static_cast<int>(x) + 3];
  }
  for (int n : counts) EXPECT_NEAR(n, 1000, 150);
}

TEST_F(AtenRandomTest, DropoutKeepsOneMinusPScaled) {
  std::vector<HostTensor> in;
  in.push_back(HostTensor::FromValues<float>(f32, {20000}, std::vector<float>(20000, 2.0f)));
  const std::vector<double> out = Values(Make("dropout", {T(0), P(0.25), P(true)}, Of(in[0])));
  int kept = 0;
  for (double x : out) {
    ASSERT_TRUE(x == 0 || std::abs(x - 2.0 / 0.75) < 1e-5) << x;
    kept += x != 0;
  }
  EXPECT_NEAR(kept / 20000.0, 0.75, 0.02);
  for (double x : Values(Make("dropout", {T(0), P(0.25), P(false)}, Of(in[0])))) {
    ASSERT_EQ(x, 2.0);
  }
  for (double x : Values(Make("dropout", {T(0), P(1.0), P(true)}, Of(in[0])))) {
    ASSERT_EQ(x, 0.0);
  }
  int ones = 0;
  for (double x : Values(Make("bernoulli.p", {T(0), P(0.1)}, Of(in[0])))) ones += x == 1;
  EXPECT_NEAR(ones / 20000.0, 0.1, 0.01);
}

// Every registered op has a local implementation, and every local implementation an op.
TEST(AtenOpsRegistryTest, EveryOpHasALocalImplementation) {
  std::set<std::string> local;
  for (const std::string& name : kernels::LocalImplementations()) local.insert(name);
  std::set<std::string> registered;
  for (const ops::OpDef* op : ops::Registry().ops()) {
    if (op->decompose == nullptr) registered.insert(op->name());  // the others run as their nodes
  }
  EXPECT_EQ(local, registered);
}

// An op that decomposes, run as EagerOps runs it: each node planned on the specs its inputs have
// by then, its inputs redistributed and its shards computed by the local calls on the simulated
// mesh; the graph's output gathered.
struct GraphCase {
  std::string name;
  std::string op;
  std::vector<NamedValue> args;
  std::vector<Shape> shapes;
  std::vector<Input> inputs;
  DType dtype = DType::kFloat32;
};

const std::vector<GraphCase>& GraphCases() {
  const Input index6{InputKind::kIndex, 6}, index3{InputKind::kIndex, 3};
  const Input positive{InputKind::kPositive};
  static const auto* cases = new std::vector<GraphCase>{
      {"cross_entropy", "cross_entropy_loss", {T(0), T(1)}, {{4, 6}, {4}}, {{}, index6}},
      {"cross_entropy_weight_sum_ignore",
       "cross_entropy_loss",
       {T(0), T(1), T(2), P(int64_t{2}), P(int64_t{1})},
       {{4, 6}, {4}, {6}},
       {{}, index6, positive}},
      {"cross_entropy_spatial_none",
       "cross_entropy_loss",
       {T(0), T(1), P(NoneValue{}), P(int64_t{0})},
       {{2, 5, 3}, {2, 3}},
       {{}, {InputKind::kIndex, 5}},
       DType::kFloat64},
      {"cross_entropy_uneven_smoothing",
       "cross_entropy_loss",
       {T(0), T(1), A("label_smoothing", 0.1)},
       {{5, 3}, {5}},
       {{}, index3}},
      {"cross_entropy_weight_smoothing",
       "cross_entropy_loss",
       {T(0), T(1), T(2), A("label_smoothing", 0.2), A("ignore_index", int64_t{2})},
       {{4, 6}, {4}, {6}},
       {{}, index6, positive}},
      {"cross_entropy_probabilities",
       "cross_entropy_loss",
       {T(0), T(1), A("label_smoothing", 0.1)},
       {{4, 6}, {4, 6}},
       {{}, positive}},
      {"mse", "mse_loss", {T(0), T(1)}, {{4, 6}, {4, 6}}, {}},
      {"mse_broadcast_none", "mse_loss", {T(0), T(1), P(int64_t{0})}, {{5, 3}, {3}}, {}},
      {"l1_sum", "l1_loss", {T(0), T(1), P(int64_t{2})}, {{5, 3}, {5, 3}}, {}},
      {"norm_scalar", "norm.Scalar", {T(0), P(int64_t{3})}, {{4, 6}}, {}},
      {"norm_dim_default_p", "norm.ScalarOpt_dim", {T(0), P(NoneValue{}), P(L({1}))}, {{5, 3}}, {}},
      {"norm_dim_keepdim_inf",
       "norm.ScalarOpt_dim",
       {T(0), P(std::numeric_limits<double>::infinity()), P(L({0})), P(true)},
       {{4, 6}},
       {},
       DType::kFloat64},
      {"diff", "diff", {T(0)}, {{4, 6}}, {}},
      {"diff_twice_dim0_prepend",
       "diff",
       {T(0), P(int64_t{2}), P(int64_t{0}), T(1)},
       {{5, 3}, {2, 3}},
       {}},
      {"diff_append_past_the_size",
       "diff",
       {T(0), P(int64_t{4}), P(int64_t{1}), P(NoneValue{}), T(1)},
       {{4, 2}, {4, 1}},
       {}},
      {"diff_n0", "diff", {T(0), P(int64_t{0})}, {{4, 6}}, {}},
      {"dropout_backward",
       "native_dropout_backward",
       {T(0), T(1), P(4.0 / 3.0)},
       {{4, 6}, {4, 6}},
       {{}, {InputKind::kMask}}},
  };
  return *cases;
}

struct GraphRun {
  HostTensor output;
  int64_t redistributed_bytes = 0;  // by the plans of every node
};

absl::StatusOr<GraphRun> RunGraph(kernels::KernelBackend& backend, const GraphCase& c,
                                  const std::vector<HostTensor>& fulls, const DeviceMesh& mesh,
                                  const std::vector<std::vector<Placement>>& placements) {
  const ops::OpDef* op = ops::Registry().Find(c.op).value();
  std::vector<ops::TensorMeta> metas;
  for (const HostTensor& t : fulls) metas.push_back({t.shape(), t.dtype()});
  ASSIGN_OR_RETURN(const ops::PreparedCall p, ops::PrepareCall(*op, c.args, metas));
  const ops::CallContext context{*op, p.call.args, p.call.inputs};
  ASSIGN_OR_RETURN(const ops::OpGraph graph, op->decompose(context));
  SimulatedMesh sim(mesh);
  std::vector<DTensorSpec> specs;
  std::vector<std::vector<HostTensor>> shards;
  for (size_t k = 0; k < p.input_of.size(); ++k) {
    const HostTensor& full = fulls[p.input_of[k]];
    ASSIGN_OR_RETURN(DTensorSpec spec,
                     MakeDTensorSpec(mesh, placements[k], full.shape(), full.dtype()));
    ASSIGN_OR_RETURN(std::vector<HostTensor> s, sim.Distribute(full, spec));
    specs.push_back(std::move(spec));
    shards.push_back(std::move(s));
  }
  ops::ShardingCache cache;
  GraphRun run;
  for (const ops::OpNode& node : graph.nodes) {
    const ops::OpDef* def = ops::Registry().Find(node.op).value();
    ASSIGN_OR_RETURN(const ops::PlannedCall planned,
                     ops::PlanOpCall(*def, node.args, specs, cache));
    std::vector<std::vector<HostTensor>> moved;
    std::vector<DTensorSpec> laid_out;
    for (size_t k = 0; k < planned.prepared.input_of.size(); ++k) {
      const int v = planned.prepared.input_of[k];
      std::vector<HostTensor> copies;
      for (const HostTensor& t : shards[v]) copies.push_back(t.Clone());
      ASSIGN_OR_RETURN(std::vector<HostTensor> m,
                       sim.Redistribute(specs[v], planned.plan->input_plans[k], std::move(copies)));
      moved.push_back(std::move(m));
      DTensorSpec after = specs[v];
      after.placements = planned.plan->strategy.inputs[k];
      laid_out.push_back(std::move(after));
    }
    run.redistributed_bytes += planned.plan->redistribute_bytes;
    ASSIGN_OR_RETURN(
        std::vector<HostTensor> out,
        LocalCalls(backend, planned.prepared.call, mesh, laid_out, moved, planned.plan->output));
    specs.push_back(planned.plan->output);
    shards.push_back(std::move(out));
  }
  ASSIGN_OR_RETURN(run.output, sim.FullTensor(specs.back(), std::move(shards.back())));
  if (run.output.shape() != p.call.output.shape || run.output.dtype() != p.call.output.dtype) {
    return absl::InternalError("the graph's output differs from the op's meta");
  }
  return run;
}

class AtenGraphTest : public ::testing::Test {
 protected:
  std::vector<HostTensor> Inputs(const GraphCase& c) {
    std::vector<HostTensor> fulls;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      const Input in = i < c.inputs.size() ? c.inputs[i] : Input{};
      fulls.push_back(MakeInput(in, c.dtype, c.shapes[i], 31 + static_cast<uint32_t>(i)));
    }
    return fulls;
  }
  std::unique_ptr<kernels::KernelBackend> backend_ = testing::TestBackendForRank(0).value();
};

// Every decomposing op over meshes x every placement of its inputs equals its graph on one rank.
TEST_F(AtenGraphTest, ShardedGraphMatchesOneRank) {
  const DeviceMesh one = DeviceMesh::Create("cpu", {1}).value();
  for (const GraphCase& c : GraphCases()) {
    const std::vector<HostTensor> fulls = Inputs(c);
    std::vector<std::vector<Placement>> whole(fulls.size(), {Placement::Replicate()});
    absl::StatusOr<GraphRun> want = RunGraph(*backend_, c, fulls, one, whole);
    ASSERT_TRUE(want.ok()) << c.name << ": " << want.status();
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{4}, {2, 2}}) {
      const DeviceMesh mesh = DeviceMesh::Create("cpu", shape).value();
      std::vector<std::vector<std::vector<Placement>>> per_input;
      size_t total = 1;
      for (const HostTensor& t : fulls) {
        per_input.push_back(AllPlacements(mesh.ndim(), t.rank()));
        total *= per_input.back().size();
      }
      const size_t stride = total > 200 ? total / 100 + 1 : 1;
      for (size_t index = 0; index < total; index += stride) {
        std::vector<std::vector<Placement>> placements;
        std::string what = absl::StrCat(c.name, " on mesh ", absl::StrJoin(shape, "x"));
        size_t rest = index;
        for (const auto& options : per_input) {
          placements.push_back(options[rest % options.size()]);
          rest /= options.size();
          absl::StrAppend(&what, " ", PlacementsToString(placements.back()));
        }
        absl::StatusOr<GraphRun> got = RunGraph(*backend_, c, fulls, mesh, placements);
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        ExpectClose(got->output, want->output, what);
      }
    }
  }
}

// torch.norm's overloads as the formulas: (sum |x|^3)^(1/3) over every element, the 2-norm of
// each row for p=None, the max |x| of each column kept as [1, 6] for p=inf.
TEST_F(AtenGraphTest, NormOverloadsAsTorch) {
  const DeviceMesh one = DeviceMesh::Create("cpu", {1}).value();
  const auto get = kernels::testing::GetDouble;
  for (int k : {0, 1, 2}) {
    const GraphCase c = *std::find_if(GraphCases().begin(), GraphCases().end(), [&](const auto& g) {
      return g.name == (k == 0   ? "norm_scalar"
                        : k == 1 ? "norm_dim_default_p"
                                 : "norm_dim_keepdim_inf");
    });
    const std::vector<HostTensor> fulls = Inputs(c);
    const HostTensor& x = fulls[0];
    std::vector<std::vector<Placement>> whole(fulls.size(), {Placement::Replicate()});
    absl::StatusOr<GraphRun> got = RunGraph(*backend_, c, fulls, one, whole);
    ASSERT_TRUE(got.ok()) << c.name << ": " << got.status();
    const int64_t rows = x.shape()[0], cols = x.shape()[1];
    if (k == 0) {
      double sum = 0;
      for (int64_t i = 0; i < x.num_elements(); ++i) sum += std::pow(std::abs(get(x, i)), 3);
      EXPECT_EQ(got->output.shape(), Shape{});
      EXPECT_NEAR(get(got->output, 0), std::cbrt(sum), 1e-5);
    } else if (k == 1) {
      ASSERT_EQ(got->output.shape(), Shape{rows});
      for (int64_t i = 0; i < rows; ++i) {
        double sum = 0;
        for (int64_t j = 0; j < cols; ++j) sum += get(x, i * cols + j) * get(x, i * cols + j);
        EXPECT_NEAR(get(got->output, i), std::sqrt(sum), 1e-5) << i;
      }
    } else {
      ASSERT_EQ(got->output.shape(), (Shape{1, cols}));
      for (int64_t j = 0; j < cols; ++j) {
        double max = 0;
        for (int64_t i = 0; i < rows; ++i) max = std::max(max, std::abs(get(x, i * cols + j)));
        EXPECT_EQ(get(got->output, j), max) << j;
      }
    }
  }
}

// cross_entropy against the formula, worked out in doubles: -log softmax(x)[t], weighted, averaged
// over the targets' weights, ignore_index left out.
TEST_F(AtenGraphTest, CrossEntropyAsTorch) {
  const GraphCase& c = GraphCases()[1];  // weight, sum, ignore_index 1
  const std::vector<HostTensor> fulls = Inputs(c);
  const DeviceMesh one = DeviceMesh::Create("cpu", {1}).value();
  std::vector<std::vector<Placement>> whole(fulls.size(), {Placement::Replicate()});
  for (int64_t reduction : {0, 1, 2}) {
    GraphCase r = c;
    r.args[3] = P(reduction);
    absl::StatusOr<GraphRun> got = RunGraph(*backend_, r, fulls, one, whole);
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<double> losses;
    double total = 0, weights = 0;
    for (int n = 0; n < 4; ++n) {
      double max = -1e300, sum = 0;
      for (int k = 0; k < 6; ++k)
        max = std::max(max, kernels::testing::GetDouble(fulls[0], n * 6 + k));
      for (int k = 0; k < 6; ++k)
        sum += std::exp(kernels::testing::GetDouble(fulls[0], n * 6 + k) - max);
      const int t = static_cast<int>(kernels::testing::GetDouble(fulls[1], n));
      const double w = kernels::testing::GetDouble(fulls[2], t);
      const double loss =
          t == 1 ? 0
                 : -w * (kernels::testing::GetDouble(fulls[0], n * 6 + t) - max - std::log(sum));
      losses.push_back(loss);
      total += loss;
      if (t != 1) weights += w;
    }
    if (reduction == 0) {
      for (int n = 0; n < 4; ++n) {
        EXPECT_NEAR(kernels::testing::GetDouble(got->output, n), losses[n], 1e-5) << n;
      }
    } else {
      EXPECT_NEAR(kernels::testing::GetDouble(got->output, 0),
                  reduction == 2 ? total : total / weights, 1e-5);
    }
  }
}

// DTensor's loss_parallel: logits sharded by class over 4 ranks are never gathered; what moves
// is a number per row (the row max and the sum of exps, each reduced across ranks).
TEST_F(AtenGraphTest, CrossEntropyOnClassShardedLogitsMovesRowsNotLogits) {
  GraphCase c{
      "big", "cross_entropy_loss", {T(0), T(1)}, {{8, 1000}, {8}}, {{}, {InputKind::kIndex, 1000}}};
  const std::vector<HostTensor> fulls = Inputs(c);
  const DeviceMesh mesh = DeviceMesh::Create("cpu", {4}).value();
  absl::StatusOr<GraphRun> sharded =
      RunGraph(*backend_, c, fulls, mesh, {{Placement::Shard(1)}, {Placement::Replicate()}});
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  const int64_t logits = 8 * 1000 * 4;
  EXPECT_LT(sharded->redistributed_bytes, logits / 20) << sharded->redistributed_bytes;
  const DeviceMesh one = DeviceMesh::Create("cpu", {1}).value();
  absl::StatusOr<GraphRun> want =
      RunGraph(*backend_, c, fulls, one, {{Placement::Replicate()}, {Placement::Replicate()}});
  ASSERT_TRUE(want.ok()) << want.status();
  ExpectClose(sharded->output, want->output, "class-sharded cross_entropy");
}

TEST_F(AtenGraphTest, NllLossNamesATargetOutOfBounds) {
  std::vector<HostTensor> in;
  in.push_back(HostTensor::FromValues<float>(f32, {2, 3}, {0, 1, 2, 3, 4, 5}));
  in.push_back(HostTensor::FromValues<int64_t>(i64, {2}, {0, 3}));
  const OpCase c{"nll", "nll_loss", {T(0), T(1)}, {}, {}, {}};
  absl::StatusOr<ops::PreparedCall> p = Prepare(c, in);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<HostTensor> bad = OneRank(*backend_, *p, in);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              ::testing::AllOf(::testing::HasSubstr("aten::nll_loss"),
                               ::testing::HasSubstr("target 3 at position 1"),
                               ::testing::HasSubstr("3 classes")));
}

// nll_loss_forward and nll_loss_backward against torch 2.15's values, worked out by hand on
// x = arange(12).view(4, 3), targets [0, 2, -100, 1] and weights [1, 2, 3]: the picked values are
// 0, 5 and 10, weighted 1, 3 and 2 (total 6).
TEST_F(AtenGraphTest, NllLossForwardAndBackwardAsTorch) {
  std::vector<float> arange(12);
  for (int i = 0; i < 12; ++i) arange[i] = static_cast<float>(i);
  std::vector<HostTensor> in;
  in.push_back(HostTensor::FromValues<float>(f32, {4, 3}, arange));
  in.push_back(HostTensor::FromValues<int64_t>(i64, {4}, {0, 2, -100, 1}));
  in.push_back(HostTensor::FromValues<float>(f32, {3}, {1, 2, 3}));
  auto run = [&](const OpCase& c,
                 const std::vector<HostTensor>& fulls) -> absl::StatusOr<std::vector<HostTensor>> {
    ASSIGN_OR_RETURN(const ops::PreparedCall p, Prepare(c, fulls));
    return OneRankOutputs(*backend_, p, fulls);
  };
  auto values = [](const HostTensor& t) {
    std::vector<double> out;
    for (int64_t i = 0; i < t.num_elements(); ++i) out.push_back(kernels::testing::GetDouble(t, i));
    return out;
  };
  using V = std::vector<double>;
  const struct {
    int64_t reduction;
    V loss;
    double total_weight;
  } forward[] = {{0, {0, -15, 0, -20}, 0}, {1, {-35.0 / 6}, 6}, {2, {-35}, 6}};
  for (const auto& f : forward) {
    const OpCase c{
        "f", "nll_loss_forward", {T(0), T(1), T(2), P(f.reduction), P(int64_t{-100})}, {}, {}, {}};
    absl::StatusOr<std::vector<HostTensor>> got = run(c, in);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), 2u);
    EXPECT_THAT(values((*got)[0]), ::testing::Pointwise(::testing::DoubleNear(1e-5), f.loss))
        << "reduction " << f.reduction;
    EXPECT_EQ((*got)[1].shape(), Shape{});
    EXPECT_EQ(values((*got)[1]), V{f.total_weight}) << "reduction " << f.reduction;
  }
  // A row at ignore_index, or whose target is in another rank's classes, is 0 exactly even where
  // the value its kernel stands in with is -inf (0 * -inf would be NaN): x[r, 0] = -inf, targets
  // [2, -100], classes sharded over 2 ranks and replicated.
  {
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<HostTensor> masked;
    masked.push_back(
        HostTensor::FromValues<float>(f32, {2, 4}, {-inf, -1, -2, -3, -inf, -1, -2, -3}));
    masked.push_back(HostTensor::FromValues<int64_t>(i64, {2}, {2, -100}));
    const OpCase c{"nll_inf",
                   "nll_loss_forward",
                   {T(0), T(1), P(NoneValue{}), P(int64_t{0}), P(int64_t{-100})},
                   {},
                   {},
                   {}};
    absl::StatusOr<ops::PreparedCall> p = Prepare(c, masked);
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<HostTensor> want;
    want.push_back(HostTensor::FromValues<float>(f32, {2}, {2, 0}));
    want.push_back(HostTensor::FromValues<float>(f32, {}, {0}));
    const DeviceMesh two = DeviceMesh::Create("cpu", {2}).value();
    for (const Placement& self : {Placement::Shard(1), Placement::Replicate()}) {
      ASSERT_NO_FATAL_FAILURE(
          CheckOneLayout(*backend_, c, *p, two, masked, {{self}, {Placement::Replicate()}}, want));
    }
  }
  // One sample (x[1] = [3, 4, 5], target 2): total_weight is its weight whatever the reduction.
  std::vector<HostTensor> one;
  one.push_back(HostTensor::FromValues<float>(f32, {3}, {3, 4, 5}));
  one.push_back(HostTensor::FromValues<int64_t>(i64, {}, {2}));
  one.push_back(in[2].Clone());
  for (int64_t reduction : {0, 1, 2}) {
    const OpCase c{
        "f1", "nll_loss_forward", {T(0), T(1), T(2), P(reduction), P(int64_t{-100})}, {}, {}, {}};
    absl::StatusOr<std::vector<HostTensor>> got = run(c, one);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(values((*got)[0]), V{reduction == 1 ? -5.0 : -15.0}) << reduction;
    EXPECT_EQ(values((*got)[1]), V{3}) << reduction;
  }
  // The gradient: mean with grad 2 over total_weight 5 (as given, not recomputed), and none with
  // grad ones.
  std::vector<HostTensor> back;
  back.push_back(HostTensor::FromValues<float>(f32, {}, {2}));
  for (const HostTensor& t : in) back.push_back(t.Clone());
  back.push_back(HostTensor::FromValues<float>(f32, {}, {5}));
  const OpCase mean{"b",
                    "nll_loss_backward",
                    {T(0), T(1), T(2), T(3), P(int64_t{1}), P(int64_t{-100}), T(4)},
                    {},
                    {},
                    {}};
  absl::StatusOr<std::vector<HostTensor>> got = run(mean, back);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(values((*got)[0]),
              ::testing::Pointwise(::testing::DoubleNear(1e-6),
                                   V{-0.4, 0, 0, 0, 0, -1.2, 0, 0, 0, 0, -0.8, 0}));
  back[0] = HostTensor::FromValues<float>(f32, {4}, {1, 1, 1, 1});
  const OpCase none{"b0",
                    "nll_loss_backward",
                    {T(0), T(1), T(2), T(3), P(int64_t{0}), P(int64_t{-100}), T(4)},
                    {},
                    {},
                    {}};
  got = run(none, back);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(values((*got)[0]), (V{-1, 0, 0, 0, 0, -3, 0, 0, 0, 0, -2, 0}));
  // One sample, mean over a total_weight of 0: -inf at the target, as torch.
  std::vector<HostTensor> zero;
  zero.push_back(HostTensor::FromValues<float>(f32, {}, {3}));
  for (const HostTensor& t : one) zero.push_back(t.Clone());
  zero.push_back(HostTensor::FromValues<float>(f32, {}, {0}));
  got = run(mean, zero);
  ASSERT_TRUE(got.ok()) << got.status();
  const V inf = values((*got)[0]);
  ASSERT_EQ(inf.size(), 3u);
  EXPECT_EQ(inf[0], 0);
  EXPECT_EQ(inf[2], -std::numeric_limits<double>::infinity());
}

// diff against torch 2.15's values, worked out by hand on x = [[0, 1, 3], [6, 10, 15]].
TEST_F(AtenGraphTest, DiffAsTorch) {
  auto run = [&](std::vector<NamedValue> args, std::vector<HostTensor> in) {
    const GraphCase c{"diff", "diff", std::move(args), {}, {}};
    const DeviceMesh one = DeviceMesh::Create("cpu", {1}).value();
    std::vector<std::vector<Placement>> replicate(in.size(), {Placement::Replicate()});
    absl::StatusOr<GraphRun> got = RunGraph(*backend_, c, in, one, replicate);
    EXPECT_TRUE(got.ok()) << got.status();
    std::vector<double> v;
    if (!got.ok()) return v;
    for (int64_t i = 0; i < got->output.num_elements(); ++i) {
      v.push_back(kernels::testing::GetDouble(got->output, i));
    }
    return v;
  };
  auto x = [] { return HostTensor::FromValues<float>(f32, {2, 3}, {0, 1, 3, 6, 10, 15}); };
  std::vector<HostTensor> in;
  in.push_back(x());
  using V = std::vector<double>;
  EXPECT_EQ(run({T(0)}, std::move(in)), (V{1, 2, 4, 5}));
  in.clear();
  in.push_back(x());
  EXPECT_EQ(run({T(0), P(int64_t{2})}, std::move(in)), (V{1, 1}));
  in.clear();
  in.push_back(x());
  EXPECT_EQ(run({T(0), P(int64_t{1}), P(int64_t{0})}, std::move(in)), (V{6, 9, 12}));
  // prepend [[-1], [-2]] and append [[20], [30]] along dim 1.
  in.clear();
  in.push_back(x());
  in.push_back(HostTensor::FromValues<float>(f32, {2, 1}, {-1, -2}));
  in.push_back(HostTensor::FromValues<float>(f32, {2, 1}, {20, 30}));
  EXPECT_EQ(run({T(0), P(int64_t{1}), P(int64_t{1}), T(1), T(2)}, std::move(in)),
            (V{1, 1, 2, 17, 8, 4, 5, 15}));
  // bool: logical_xor of neighbours.
  in.clear();
  in.push_back(HostTensor::FromValues<uint8_t>(b8, {4}, {1, 1, 0, 1}));
  EXPECT_EQ(run({T(0)}, std::move(in)), (V{0, 1, 1}));
  // n past the size: an empty dim.
  in.clear();
  in.push_back(x());
  EXPECT_TRUE(run({T(0), P(int64_t{5})}, std::move(in)).empty());
}

// Every registered op is exercised by a case here, but for those listed.
TEST(AtenOpsRegistryTest, EveryOpHasACase) {
  std::set<std::string> covered;
  for (const OpCase& c : OpCases()) covered.insert(ops::Registry().Find(c.op).value()->name());
  for (const GraphCase& c : GraphCases())
    covered.insert(ops::Registry().Find(c.op).value()->name());
  for (const FactoryCase& c : FactoryCases()) {
    covered.insert(ops::Registry().Find(c.op).value()->name());
  }
  std::vector<std::string> missing;
  for (const ops::OpDef* op : ops::Registry().ops()) {
    if (!covered.contains(op->name())) missing.push_back(op->name());
  }
  EXPECT_THAT(missing, ::testing::IsEmpty()) << absl::StrJoin(missing, ", ");
}

// The local implementations of advanced indexing against torch's values, worked out by hand on
// x = arange(24).view(2, 3, 4), where x[a][b][c] = 12a + 4b + c.
class AtenIndexingTest : public ::testing::Test {
 protected:
  absl::StatusOr<HostTensor> Run(const std::string& op, std::vector<NamedValue> args,
                                 const std::vector<HostTensor>& fulls) {
    const OpCase c{op, op, std::move(args), {}, {}, {}};
    absl::StatusOr<ops::PreparedCall> p = Prepare(c, fulls);
    if (!p.ok()) return p.status();
    return OneRank(*backend_, *p, fulls);
  }
  std::vector<double> Values(const absl::StatusOr<HostTensor>& t, const Shape& shape) {
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return {};
    EXPECT_EQ(t->shape(), shape);
    std::vector<double> out;
    for (int64_t i = 0; i < t->num_elements(); ++i) {
      out.push_back(kernels::testing::GetDouble(*t, i));
    }
    return out;
  }
  static HostTensor Ids(Shape shape, std::vector<int64_t> values) {
    return HostTensor::FromValues<int64_t>(i64, std::move(shape), values);
  }
  HostTensor Arange() {
    std::vector<float> v(24);
    for (int i = 0; i < 24; ++i) v[i] = static_cast<float>(i);
    return HostTensor::FromValues<float>(f32, {2, 3, 4}, v);
  }
  std::unique_ptr<kernels::KernelBackend> backend_ = testing::TestBackendForRank(0).value();
};

// native_layer_norm then native_layer_norm_backward on its mean and rstd, against torch's formulas
// in float64 on the same values: dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy w,
// dw = sum over rows of dy xhat, db = sum over rows of dy; a mask bit off gives an empty tensor.
TEST_F(AtenIndexingTest, NativeLayerNormBackwardAsTorchsFormulas) {
  constexpr int64_t kRows = 3, kCols = 5;
  const HostTensor x = kernels::testing::RandomTensor(f64, {kRows, kCols}, 5);
  const HostTensor w = kernels::testing::RandomTensor(f64, {kCols}, 6);
  const HostTensor b = kernels::testing::RandomTensor(f64, {kCols}, 7);
  const HostTensor dy = kernels::testing::RandomTensor(f64, {kRows, kCols}, 8);
  std::vector<HostTensor> fulls;
  for (const HostTensor* t : {&x, &w, &b}) fulls.push_back(t->Clone());
  const OpCase forward{"f", "native_layer_norm", {T(0), P(L({kCols})), T(1), T(2), P(1e-5)}, {}, {},
                       {}};
  absl::StatusOr<ops::PreparedCall> pf = Prepare(forward, fulls);
  ASSERT_TRUE(pf.ok()) << pf.status();
  absl::StatusOr<std::vector<HostTensor>> stats = OneRankOutputs(*backend_, *pf, fulls);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 3u);
  EXPECT_EQ((*stats)[1].shape(), (Shape{kRows, 1}));
  const auto get = kernels::testing::GetDouble;
  std::vector<double> dx(kRows * kCols), dw(kCols, 0), db(kCols, 0);
  for (int64_t i = 0; i < kRows; ++i) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < kCols; ++j) mean += get(x, i * kCols + j) / kCols;
    for (int64_t j = 0; j < kCols; ++j) {
      var += std::pow(get(x, i * kCols + j) - mean, 2) / kCols;
    }
    const double rstd = 1 / std::sqrt(var + 1e-5);
    EXPECT_NEAR(get((*stats)[1], i), mean, 1e-6);
    EXPECT_NEAR(get((*stats)[2], i), rstd, 1e-4 * rstd);
    double g_mean = 0, gx_mean = 0;
    for (int64_t j = 0; j < kCols; ++j) {
      const double xhat = (get(x, i * kCols + j) - mean) * rstd;
      const double g = get(dy, i * kCols + j) * get(w, j);
      g_mean += g / kCols;
      gx_mean += g * xhat / kCols;
      dw[j] += get(dy, i * kCols + j) * xhat;
      db[j] += get(dy, i * kCols + j);
    }
    for (int64_t j = 0; j < kCols; ++j) {
      const double xhat = (get(x, i * kCols + j) - mean) * rstd;
      dx[i * kCols + j] = rstd * (get(dy, i * kCols + j) * get(w, j) - g_mean - xhat * gx_mean);
    }
  }
  for (const std::vector<int64_t>& mask : {L({1, 1, 1}), L({1, 0, 1})}) {
    std::vector<HostTensor> in;
    const std::vector<const HostTensor*> inputs = {&dy, &x, &(*stats)[1], &(*stats)[2], &w, &b};
    for (const HostTensor* t : inputs) in.push_back(t->Clone());
    const OpCase backward{"b",
                          "native_layer_norm_backward",
                          {T(0), T(1), P(L({kCols})), T(2), T(3), T(4), T(5), P(mask)},
                          {},
                          {},
                          {}};
    absl::StatusOr<ops::PreparedCall> pb = Prepare(backward, in);
    ASSERT_TRUE(pb.ok()) << pb.status();
    absl::StatusOr<std::vector<HostTensor>> got = OneRankOutputs(*backend_, *pb, in);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), 3u);
    const std::vector<double> gx = Values(std::move((*got)[0]), {kRows, kCols});
    for (int64_t k = 0; k < kRows * kCols; ++k) EXPECT_NEAR(gx[k], dx[k], 1e-4) << k;
    if (mask[1] == 1) {
      const std::vector<double> gw = Values(std::move((*got)[1]), {kCols});
      for (int64_t j = 0; j < kCols; ++j) EXPECT_NEAR(gw[j], dw[j], 1e-4) << j;
    } else {
      EXPECT_EQ((*got)[1].shape(), (Shape{0}));
    }
    const std::vector<double> gb = Values(std::move((*got)[2]), {kCols});
    for (int64_t j = 0; j < kCols; ++j) EXPECT_NEAR(gb[j], db[j], 1e-12) << j;
  }
}

// _fused_rms_norm then _fused_rms_norm_backward on its rstd, against torch's formulas in float64:
// rstd = 1 / sqrt(mean(x^2) + eps) (float64 for a float64 input), y = x rstd w, dx = rstd (g -
// xhat mean(g xhat)) with g = dy w and xhat = x rstd, dw = sum over rows of dy xhat.
TEST_F(AtenIndexingTest, FusedRmsNormAndBackwardAsTorchsFormulas) {
  constexpr int64_t kRows = 3, kCols = 5;
  constexpr double kEps = 1e-5;
  const HostTensor x = kernels::testing::RandomTensor(f64, {kRows, kCols}, 15);
  const HostTensor w = kernels::testing::RandomTensor(f64, {kCols}, 16);
  const HostTensor dy = kernels::testing::RandomTensor(f64, {kRows, kCols}, 17);
  std::vector<HostTensor> fulls;
  for (const HostTensor* t : {&x, &w}) fulls.push_back(t->Clone());
  const OpCase forward{"f", "_fused_rms_norm", {T(0), P(L({kCols})), T(1), P(kEps)}, {}, {}, {}};
  absl::StatusOr<ops::PreparedCall> pf = Prepare(forward, fulls);
  ASSERT_TRUE(pf.ok()) << pf.status();
  absl::StatusOr<std::vector<HostTensor>> y = OneRankOutputs(*backend_, *pf, fulls);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->size(), 2u);
  EXPECT_EQ((*y)[1].shape(), (Shape{kRows, 1}));
  EXPECT_EQ((*y)[1].dtype(), f64);
  const auto get = kernels::testing::GetDouble;
  std::vector<double> dx(kRows * kCols), dw(kCols, 0);
  for (int64_t i = 0; i < kRows; ++i) {
    double squares = 0;
    for (int64_t j = 0; j < kCols; ++j) squares += std::pow(get(x, i * kCols + j), 2) / kCols;
    const double rstd = 1 / std::sqrt(squares + kEps);
    EXPECT_NEAR(get((*y)[1], i), rstd, 1e-12 * rstd) << i;
    double gx_mean = 0;
    for (int64_t j = 0; j < kCols; ++j) {
      const double xhat = get(x, i * kCols + j) * rstd;
      EXPECT_NEAR(get((*y)[0], i * kCols + j), xhat * get(w, j), 1e-9);
      gx_mean += get(dy, i * kCols + j) * get(w, j) * xhat / kCols;
      dw[j] += get(dy, i * kCols + j) * xhat;
    }
    for (int64_t j = 0; j < kCols; ++j) {
      const double xhat = get(x, i * kCols + j) * rstd;
      dx[i * kCols + j] = rstd * (get(dy, i * kCols + j) * get(w, j) - xhat * gx_mean);
    }
  }
  for (const std::vector<int64_t>& mask : {L({1, 1}), L({1, 0})}) {
    std::vector<HostTensor> in;
    for (const HostTensor* t : std::vector<const HostTensor*>{&dy, &x, &(*y)[1], &w}) {
      in.push_back(t->Clone());
    }
    const OpCase backward{
        "b", "_fused_rms_norm_backward", {T(0), T(1), P(L({kCols})), T(2), T(3), P(mask)}, {}, {},
        {}};
    absl::StatusOr<ops::PreparedCall> pb = Prepare(backward, in);
    ASSERT_TRUE(pb.ok()) << pb.status();
    absl::StatusOr<std::vector<HostTensor>> got = OneRankOutputs(*backend_, *pb, in);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), 2u);
    const std::vector<double> gx = Values(std::move((*got)[0]), {kRows, kCols});
    // The kernel reads rstd in float32.
    for (int64_t k = 0; k < kRows * kCols; ++k) EXPECT_NEAR(gx[k], dx[k], 1e-5) << k;
    if (mask[1] == 1) {
      const std::vector<double> gw = Values(std::move((*got)[1]), {kCols});
      for (int64_t j = 0; j < kCols; ++j) EXPECT_NEAR(gw[j], dw[j], 1e-5) << j;
    } else {
      EXPECT_EQ((*got)[1].shape(), (Shape{0}));
    }
  }
}

// _scaled_dot_product_flash_attention_for_cpu against scaled_dot_product_attention (the output)
// and the logsumexp worked out by hand, with a mask that leaves one row fully masked (torch gives
// that row 0 in both outputs); its backward against central differences of sum(out * dy) in
// float64, grouped heads included.
TEST_F(AtenIndexingTest, FlashAttentionAsSdpaAndItsBackwardAsDifferences) {
  constexpr int64_t kB = 1, kH = 2, kHkv = 1, kL = 3, kS = 4, kE = 2;
  constexpr double kScale = 0.7;
  const HostTensor q = kernels::testing::RandomTensor(f64, {kB, kH, kL, kE}, 21);
  const HostTensor k = kernels::testing::RandomTensor(f64, {kB, kHkv, kS, kE}, 22);
  const HostTensor v = kernels::testing::RandomTensor(f64, {kB, kHkv, kS, kE}, 23);
  std::vector<double> mask_values(kL * kS, 0.0);
  for (int64_t j = 0; j < kS; ++j) mask_values[1 * kS + j] = -INFINITY;  // row 1 fully masked
  mask_values[2 * kS + 0] = -1.5;
  const HostTensor mask = HostTensor::FromValues<double>(f64, {kL, kS}, mask_values);
  auto forward = [&](const HostTensor& qq, const HostTensor& kk,
                     const HostTensor& vv) -> absl::StatusOr<std::vector<HostTensor>> {
    std::vector<HostTensor> in;
    for (const HostTensor* t : {&qq, &kk, &vv, &mask}) in.push_back(t->Clone());
    const OpCase c{"f",
                   "_scaled_dot_product_flash_attention_for_cpu",
                   {T(0), T(1), T(2), A("attn_mask", TensorRef{3}), A("scale", kScale)},
                   {},
                   {},
                   {}};
    ASSIGN_OR_RETURN(ops::PreparedCall p, Prepare(c, in));
    return OneRankOutputs(*backend_, p, in);
  };
  absl::StatusOr<std::vector<HostTensor>> got = forward(q, k, v);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[1].shape(), (Shape{kB, kH, kL}));
  EXPECT_EQ((*got)[1].dtype(), f64);
  const auto get = kernels::testing::GetDouble;
  for (int64_t h = 0; h < kH; ++h) {
    for (int64_t i = 0; i < kL; ++i) {
      std::vector<double> score(kS);
      double max = -INFINITY;
      for (int64_t j = 0; j < kS; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < kE; ++e) dot += get(q, (h * kL + i) * kE + e) * get(k, j * kE + e);
        score[j] = kScale * dot + mask_values[i * kS + j];
        max = std::max(max, score[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < kS; ++j) sum += std::isinf(max) ? 0 : std::exp(score[j] - max);
      const double lse = std::isinf(max) ? 0 : std::log(sum) + max;
      EXPECT_NEAR(get((*got)[1], h * kL + i), lse, 1e-12) << h << " " << i;
      for (int64_t e = 0; e < kE; ++e) {
        double o = 0;
        for (int64_t j = 0; j < kS; ++j) {
          if (!std::isinf(max)) o += std::exp(score[j] - max) / sum * get(v, j * kE + e);
        }
        EXPECT_NEAR(get((*got)[0], (h * kL + i) * kE + e), o, 1e-12) << h << " " << i << " " << e;
      }
    }
  }
  // The backward.
  const HostTensor dy = kernels::testing::RandomTensor(f64, {kB, kH, kL, kE}, 24);
  std::vector<HostTensor> in;
  for (const HostTensor* t :
       std::vector<const HostTensor*>{&dy, &q, &k, &v, &(*got)[0], &(*got)[1], &mask}) {
    in.push_back(t->Clone());
  }
  const OpCase backward{"b",
                        "_scaled_dot_product_flash_attention_for_cpu_backward",
                        {T(0), T(1), T(2), T(3), T(4), T(5), P(0.0), P(false),
                         A("attn_mask", TensorRef{6}), A("scale", kScale)},
                        {},
                        {},
                        {}};
  absl::StatusOr<ops::PreparedCall> pb = Prepare(backward, in);
  ASSERT_TRUE(pb.ok()) << pb.status();
  absl::StatusOr<std::vector<HostTensor>> grads = OneRankOutputs(*backend_, *pb, in);
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_EQ(grads->size(), 3u);
  auto loss = [&](const HostTensor& qq, const HostTensor& kk, const HostTensor& vv) {
    absl::StatusOr<std::vector<HostTensor>> out = forward(qq, kk, vv);
    EXPECT_TRUE(out.ok()) << out.status();
    double l = 0;
    for (int64_t n = 0; n < dy.num_elements(); ++n) l += get((*out)[0], n) * get(dy, n);
    return l;
  };
  const HostTensor* inputs[3] = {&q, &k, &v};
  for (int g = 0; g < 3; ++g) {
    ASSERT_EQ((*grads)[g].shape(), inputs[g]->shape()) << g;
    for (int64_t n = 0; n < inputs[g]->num_elements(); ++n) {
      constexpr double kStep = 1e-6;
      HostTensor plus[3] = {q.Clone(), k.Clone(), v.Clone()};
      HostTensor minus[3] = {q.Clone(), k.Clone(), v.Clone()};
      kernels::testing::SetFromDouble(plus[g], n, get(*inputs[g], n) + kStep);
      kernels::testing::SetFromDouble(minus[g], n, get(*inputs[g], n) - kStep);
      const double numeric =
          (loss(plus[0], plus[1], plus[2]) - loss(minus[0], minus[1], minus[2])) / (2 * kStep);
      EXPECT_NEAR(get((*grads)[g], n), numeric, 1e-6) << "gradient " << g << " element " << n;
    }
  }
}

// constant_pad_nd as torch: pairs from the last dim back, a negative pad crops, the rest is value.
TEST_F(AtenIndexingTest, ConstantPadAsTorch) {
  std::vector<HostTensor> in;
  in.push_back(HostTensor::FromValues<float>(f32, {2, 3}, {1, 2, 3, 4, 5, 6}));
  // pad (1, 0) on the columns, (0, 1) on the rows, with 9.
  EXPECT_EQ(Values(Run("constant_pad_nd", {T(0), P(L({1, 0, 0, 1})), P(9.0)}, in), {3, 4}),
            (std::vector<double>{9, 1, 2, 3, 9, 4, 5, 6, 9, 9, 9, 9}));
  // Crop a column on the left, pad one on the right with 0.
  EXPECT_EQ(Values(Run("constant_pad_nd", {T(0), P(L({-1, 1}))}, in), {2, 3}),
            (std::vector<double>{2, 3, 0, 5, 6, 0}));
  EXPECT_THAT(Run("constant_pad_nd", {T(0), P(L({-4, 0}))}, in).status().message(),
              ::testing::AllOf(::testing::HasSubstr("'pad'"), ::testing::HasSubstr("size -1")));
  EXPECT_THAT(Run("constant_pad_nd", {T(0), P(L({1}))}, in).status().message(),
              ::testing::HasSubstr("pairs"));
}

TEST_F(AtenIndexingTest, IndexAsTorch) {
  std::vector<HostTensor> in;
  in.push_back(Arange());
  in.push_back(Ids({2}, {1, -1}));
  in.push_back(Ids({2}, {0, 3}));
  // x[[1, -1], :, [0, 3]]: dims apart, the index shape first.
  EXPECT_EQ(Values(Run("index.Tensor", {T(0), P(TensorList{{1, -1, 2}})}, in), {2, 3}),
            (std::vector<double>{12, 16, 20, 15, 19, 23}));
  // x[:, [2, 0]]: in place of dim 1.
  in[1] = Ids({2}, {2, 0});
  EXPECT_EQ(Values(Run("index.Tensor", {T(0), P(TensorList{{-1, 1}})}, in), {2, 2, 4}),
            (std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3, 20, 21, 22, 23, 12, 13, 14, 15}));
  // x[:, [[0], [2]], [1, -1]]: adjacent dims, index tensors broadcast to [2, 2].
  in[1] = Ids({2, 1}, {0, 2});
  in[2] = Ids({2}, {1, -1});
  EXPECT_EQ(Values(Run("index.Tensor", {T(0), P(TensorList{{-1, 1, 2}})}, in), {2, 2, 2}),
            (std::vector<double>{1, 3, 9, 11, 13, 15, 21, 23}));
  // An index out of range names the op, the entry and the index.
  in[1] = Ids({1}, {2});
  absl::StatusOr<HostTensor> bad = Run("index.Tensor", {T(0), P(TensorList{{1}})}, in);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              ::testing::AllOf(::testing::HasSubstr("aten::index.Tensor"),
                               ::testing::HasSubstr("entry 0"), ::testing::HasSubstr("index 2")));
}

TEST_F(AtenIndexingTest, IndexPutAsTorch) {
  std::vector<HostTensor> in;
  in.push_back(HostTensor::ZerosOfValidShape(f32, {3, 2}));
  in.push_back(Ids({3}, {0, 0, 2}));
  in.push_back(HostTensor::FromValues<float>(f32, {2}, {1, 10}));
  // index_put(zeros(3, 2), [[0, 0, 2]], [1, 10], accumulate=True): row 0 twice.
  EXPECT_EQ(Values(Run("index_put", {T(0), P(TensorList{{1}}), T(2), P(true)}, in), {3, 2}),
            (std::vector<double>{2, 20, 0, 0, 1, 10}));
  // x[:, 1, -1] = 100.
  in[0] = Arange();
  in[1] = Ids({1}, {1});
  in[2] = Ids({}, {-1});
  in.push_back(HostTensor::FromValues<float>(f32, {}, {100}));
  std::vector<double> want;
  for (int i = 0; i < 24; ++i) want.push_back(i == 7 || i == 19 ? 100 : i);
  EXPECT_EQ(Values(Run("index_put", {T(0), P(TensorList{{-1, 1, 2}}), T(3)}, in), {2, 3, 4}), want);
}

TEST_F(AtenIndexingTest, GatherAndScatterNameAnIndexOutOfRange) {
  std::vector<HostTensor> in;
  in.push_back(Arange());
  in.push_back(Ids({1, 1, 1}, {-1}));
  absl::StatusOr<HostTensor> bad = Run("gather", {T(0), P(int64_t{2}), T(1)}, in);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              ::testing::AllOf(::testing::HasSubstr("aten::gather"),
                               ::testing::HasSubstr("index -1 at [0, 0, 0]")));
  in[1] = Ids({1, 1, 1}, {3});
  bad = Run("scatter.value", {T(0), P(int64_t{1}), T(1), P(1.0)}, in);
  EXPECT_THAT(bad.status().message(), ::testing::AllOf(::testing::HasSubstr("aten::scatter.value"),
                                                       ::testing::HasSubstr("index 3")));
}

}  // namespace
}  // namespace tessera
