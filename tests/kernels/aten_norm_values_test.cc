// The local implementations of the norm, attention, vector norm and backward ops on one rank,
// checked against plain loops written from torch's definitions (aten_ops_test checks the sharded
// calls against this single-rank one).

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/ops/op_propagation.h"
#include "core/ops/op_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/aten/local_call.h"
#include "kernels/backend.h"
#include "kernels/testing/reference.h"

namespace tessera {
namespace {

using kernels::testing::GetDouble;
using kernels::testing::RandomTensor;
using ops::NamedValue;
using ::testing::HasSubstr;

NamedValue T(int i) { return {"", ops::TensorRef{i}}; }
NamedValue P(ops::OpValue v) { return {"", std::move(v)}; }
NamedValue A(std::string name, ops::OpValue v) { return {std::move(name), std::move(v)}; }
std::vector<int64_t> L(std::initializer_list<int64_t> v) { return v; }
constexpr double kInf = std::numeric_limits<double>::infinity();

// The op called on whole tensors on a mesh of one rank.
absl::StatusOr<HostTensor> RunWhole(const std::string& name, const std::vector<NamedValue>& args,
                                    const std::vector<const HostTensor*>& inputs) {
  std::unique_ptr<kernels::KernelBackend> backend = kernels::MakeBackend("cpu").value();
  const ops::OpDef* op = ops::Registry().Find(name).value();
  std::vector<ops::TensorMeta> metas;
  for (const HostTensor* t : inputs) metas.push_back({t->shape(), t->dtype()});
  absl::StatusOr<ops::PreparedCall> p = ops::PrepareCall(*op, args, metas);
  if (!p.ok()) return p.status();
  const DeviceMesh one = DeviceMesh::Create("cpu", {1}).value();
  std::vector<DTensorSpec> specs;
  std::vector<kernels::DeviceTensor> uploaded;
  std::vector<kernels::ConstTensorView> views;
  for (int i : p->input_of) {
    specs.push_back(
        MakeDTensorSpec(one, {Placement::Replicate()}, inputs[i]->shape(), inputs[i]->dtype())
            .value());
    uploaded.push_back(backend->Upload(*inputs[i]).value());
  }
  for (const kernels::DeviceTensor& t : uploaded) views.push_back(t.View());
  const DTensorSpec out =
      MakeDTensorSpec(one, {Placement::Replicate()}, p->call.output.shape, p->call.output.dtype)
          .value();
  const std::vector<int64_t> coordinate = {0};
  const kernels::LocalCall local{&p->call, specs, &out, coordinate};
  absl::StatusOr<kernels::DeviceTensor> result = kernels::RunLocalCall(*backend, local, views);
  if (!result.ok()) return result.status();
  return backend->Download(std::as_const(*result).View());
}

void ExpectValues(const absl::StatusOr<HostTensor>& got, const Shape& shape,
                  const std::vector<double>& want, double tolerance) {
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->shape(), shape);
  ASSERT_EQ(got->num_elements(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(GetDouble(*got, i), want[i], tolerance * std::max(1.0, std::abs(want[i])))
        << "element " << i;
  }
}

std::vector<double> Values(const HostTensor& t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.num_elements(); ++i) out.push_back(GetDouble(t, i));
  return out;
}

TEST(AtenNormValuesTest, LayerNormIsTorchsFormula) {
  const HostTensor x = RandomTensor(DType::kFloat64, {3, 2, 4}, 1);
  const HostTensor w = RandomTensor(DType::kFloat64, {2, 4}, 2);
  const HostTensor b = RandomTensor(DType::kFloat64, {2, 4}, 3);
  const double eps = 1e-3;
  std::vector<double> want;
  const std::vector<double> xv = Values(x), wv = Values(w), bv = Values(b);
  for (int r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (int j = 0; j < 8; ++j) mean += xv[r * 8 + j] / 8;
    for (int j = 0; j < 8; ++j) var += (xv[r * 8 + j] - mean) * (xv[r * 8 + j] - mean) / 8;
    for (int j = 0; j < 8; ++j) {
      want.push_back((xv[r * 8 + j] - mean) / std::sqrt(var + eps) * wv[j] + bv[j]);
    }
  }
  ExpectValues(
      RunWhole("layer_norm", {T(0), P(L({2, 4})), T(1), T(2), A("eps", eps)}, {&x, &w, &b}),
      {3, 2, 4}, want, 1e-6);
}

TEST(AtenNormValuesTest, RmsNormDefaultEpsIsTheComputeDtypesEpsilon) {
  // Rows of zeros show eps: x / sqrt(0 + eps) * w is 0, and a tiny row shows it against eps.
  const std::vector<float> xv = {1e-4f, -2e-4f, 3e-4f, 1.0f, 2.0f, -2.0f};
  const HostTensor x = HostTensor::FromValues(DType::kFloat32, {2, 3}, xv);
  const HostTensor w = HostTensor::FromValues(DType::kFloat32, {3}, std::vector<float>{1, 2, 3});
  const double eps = std::numeric_limits<float>::epsilon();
  std::vector<double> want;
  for (int r = 0; r < 2; ++r) {
    double ms = 0;
    for (int j = 0; j < 3; ++j) ms += double{xv[r * 3 + j]} * xv[r * 3 + j] / 3;
    for (int j = 0; j < 3; ++j) want.push_back(xv[r * 3 + j] / std::sqrt(ms + eps) * (j + 1));
  }
  ExpectValues(RunWhole("rms_norm", {T(0), P(L({3})), T(1)}, {&x, &w}), {2, 3}, want, 1e-5);
}

// softmax(scale q k^T + mask) v, written out for [B, H, L, E] tensors with key heads `hk`.
std::vector<double> AttentionLoops(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                                   double scale,
                                   const std::function<double(int64_t, int64_t, int64_t)>& bias) {
  const int64_t batch = q.shape()[0], heads = q.shape()[1], length = q.shape()[2];
  const int64_t features = q.shape()[3], hk = k.shape()[1], source = k.shape()[2];
  const int64_t values = v.shape()[3];
  std::vector<double> out;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kh = h / (heads / hk);
      for (int64_t i = 0; i < length; ++i) {
        std::vector<double> s(source);
        double top = -kInf;
        for (int64_t j = 0; j < source; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < features; ++e) {
            dot += GetDouble(q, ((b * heads + h) * length + i) * features + e) *
                   GetDouble(k, ((b * hk + kh) * source + j) * features + e);
          }
          s[j] = dot * scale + bias(b * heads + h, i, j);
          top = std::max(top, s[j]);
        }
        double total = 0;
        for (double& x : s) total += (x = top == -kInf ? 0.0 : std::exp(x - top));
        for (int64_t c = 0; c < values; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < source; ++j) {
            if (total > 0) {
              acc += s[j] / total * GetDouble(v, ((b * hk + kh) * source + j) * values + c);
            }
          }
          out.push_back(acc);
        }
      }
    }
  }
  return out;
}

TEST(AtenNormValuesTest, AttentionIsSoftmaxOfScaledScoresTimesValue) {
  const HostTensor q = RandomTensor(DType::kFloat64, {2, 2, 3, 4}, 4);
  const HostTensor k = RandomTensor(DType::kFloat64, {2, 2, 5, 4}, 5);
  const HostTensor v = RandomTensor(DType::kFloat64, {2, 2, 5, 3}, 6);
  const HostTensor mask = RandomTensor(DType::kFloat64, {3, 5}, 7);
  auto none = [](int64_t, int64_t, int64_t) { return 0.0; };
  ExpectValues(RunWhole("scaled_dot_product_attention", {T(0), T(1), T(2)}, {&q, &k, &v}),
               {2, 2, 3, 3}, AttentionLoops(q, k, v, 0.5, none), 1e-9);
  auto additive = [&](int64_t, int64_t i, int64_t j) { return GetDouble(mask, i * 5 + j); };
  ExpectValues(RunWhole("scaled_dot_product_attention", {T(0), T(1), T(2), T(3), A("scale", 0.3)},
                        {&q, &k, &v, &mask}),
               {2, 2, 3, 3}, AttentionLoops(q, k, v, 0.3, additive), 1e-9);
}

TEST(AtenNormValuesTest, AttentionMasksCausallyByBoolAndGroupsHeads) {
  const HostTensor q = RandomTensor(DType::kFloat64, {1, 4, 3, 2}, 8);
  const HostTensor k = RandomTensor(DType::kFloat64, {1, 2, 3, 2}, 9);
  const HostTensor v = RandomTensor(DType::kFloat64, {1, 2, 3, 2}, 10);
  const double scale = 1 / std::sqrt(2.0);
  auto causal = [](int64_t, int64_t i, int64_t j) { return j > i ? -kInf : 0.0; };
  ExpectValues(
      RunWhole("scaled_dot_product_attention",
               {T(0), T(1), T(2), A("is_causal", true), A("enable_gqa", true)}, {&q, &k, &v}),
      {1, 4, 3, 2}, AttentionLoops(q, k, v, scale, causal), 1e-9);
  // A bool mask keeps where True; a row it masks whole gives 0 (torch's _safe_softmax).
  const HostTensor qs = RandomTensor(DType::kFloat64, {1, 2, 3, 2}, 11);
  HostTensor keep =
      HostTensor::FromValues(DType::kBool, {3, 3}, std::vector<uint8_t>{1, 0, 1, 0, 0, 0, 1, 1, 0});
  auto by_mask = [&](int64_t, int64_t i, int64_t j) {
    return GetDouble(keep, i * 3 + j) != 0 ? 0.0 : -kInf;
  };
  ExpectValues(
      RunWhole("scaled_dot_product_attention", {T(0), T(1), T(2), T(3)}, {&qs, &k, &v, &keep}),
      {1, 2, 3, 2}, AttentionLoops(qs, k, v, scale, by_mask), 1e-9);
}

TEST(AtenNormValuesTest, VectorNormsOfEachOrd) {
  const std::vector<double> xv = {3, -4, 0, 1, -2, 2};
  const HostTensor x = HostTensor::FromValues(DType::kFloat64, {2, 3}, xv);
  auto norm = [&](ops::OpValue ord) {
    return RunWhole("linalg_vector_norm", {T(0), P(ord), P(L({1}))}, {&x});
  };
  ExpectValues(norm(int64_t{2}), {2}, {5, 3}, 1e-12);
  ExpectValues(norm(int64_t{1}), {2}, {7, 5}, 1e-12);
  ExpectValues(norm(kInf), {2}, {4, 2}, 1e-12);
  ExpectValues(norm(-kInf), {2}, {0, 1}, 1e-12);
  ExpectValues(norm(0.0), {2}, {2, 3}, 1e-12);
  ExpectValues(norm(3.0), {2}, {std::cbrt(91.0), std::cbrt(17.0)}, 1e-12);
  ExpectValues(norm(0.5), {2},
               {std::pow(std::sqrt(3.0) + 2, 2), std::pow(1 + 2 * std::sqrt(2.0), 2)}, 1e-12);
  ExpectValues(RunWhole("linalg_vector_norm", {T(0)}, {&x}), {}, {std::sqrt(34.0)}, 1e-12);
}

TEST(AtenNormValuesTest, SliceAndSelectBackwardWriteIntoZeros) {
  const HostTensor g =
      HostTensor::FromValues(DType::kFloat32, {2, 2}, std::vector<float>{1, 2, 3, 4});
  ExpectValues(
      RunWhole("slice_backward",
               {T(0), P(L({2, 5})), P(int64_t{1}), P(int64_t{1}), P(int64_t{100}), P(int64_t{2})},
               {&g}),
      {2, 5}, {0, 1, 0, 2, 0, 0, 3, 0, 4, 0}, 0);
  const HostTensor row = HostTensor::FromValues(DType::kFloat32, {2}, std::vector<float>{5, 6});
  ExpectValues(
      RunWhole("select_backward", {T(0), P(L({3, 2})), P(int64_t{0}), P(int64_t{-1})}, {&row}),
      {3, 2}, {0, 0, 0, 0, 5, 6}, 0);
}

TEST(AtenNormValuesTest, EmbeddingBackwardSumsRowsAndSkipsPadding) {
  const HostTensor g =
      HostTensor::FromValues(DType::kFloat32, {4, 2}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  const HostTensor ids =
      HostTensor::FromValues(DType::kInt64, {4}, std::vector<int64_t>{2, 0, 2, 1});
  ExpectValues(RunWhole("embedding_dense_backward",
                        {T(0), T(1), P(int64_t{4}), P(int64_t{1}), P(false)}, {&g, &ids}),
               {4, 2}, {3, 4, 0, 0, 6, 8, 0, 0}, 0);
  const HostTensor bad =
      HostTensor::FromValues(DType::kInt64, {4}, std::vector<int64_t>{0, 4, 1, 1});
  absl::StatusOr<HostTensor> out =
      RunWhole("embedding_dense_backward", {T(0), T(1), P(int64_t{4}), P(int64_t{-1}), P(false)},
               {&g, &bad});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("index 4 at 1"));
}

}  // namespace
}  // namespace tessera
