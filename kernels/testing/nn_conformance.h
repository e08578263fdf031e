#ifndef TESSERA_KERNELS_TESTING_NN_CONFORMANCE_H_
#define TESSERA_KERNELS_TESTING_NN_CONFORMANCE_H_

// Conformance of the neural-network kernels (activation gradients, LayerNorm, RMSNorm, embedding,
// SGD; attention in attention_conformance.h) against the float64 references of nn_reference.h:
// each forward against its reference, each backward against the analytic reference and against
// central differences of the forward reference, over dtype x shape x options. Include once per
// test binary (see conformance_fixture.h).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/testing/conformance_fixture.h"
#include "kernels/testing/nn_reference.h"

namespace tessera::kernels::testing {

// The dtypes the neural-network kernels take.
inline std::vector<DType> NnDTypes() { return {DType::kFloat32, DType::kFloat64}; }

// Relative tolerance of a kernel's result in `dtype` against a float64 reference (a few hundred
// roundoffs), looser for float64 results computed from float32 statistics or probabilities.
inline double NnTolerance(DType dtype, bool through_float32 = false) {
  if (dtype == DType::kFloat32) return 2e-5;
  return through_float32 ? 1e-6 : 1e-12;
}
// The same against central differences, whose own error is about 1e-9 of the gradient's scale.
inline double FiniteDifferenceTolerance(DType dtype, bool through_float32 = false) {
  return std::max(NnTolerance(dtype, through_float32), 1e-7);
}

// Expects got[i] within rel * (|want[i]| + max(1, max |want|)) of want[i] for every i where
// want[i] is not NaN (unchecked finite differences), reporting the first few misses under `what`.
// The tests' data are of order 1, the smallest scale errors are measured against.
inline void ExpectClose(const Values& got, const Values& want, double rel,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1;
  for (double w : want) {
    if (!std::isnan(w)) scale = std::max(scale, std::abs(w));
  }
  int mismatches = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) continue;
    const double tol = rel * (std::abs(want[i]) + scale);
    if (!(std::abs(got[i] - want[i]) <= tol) && mismatches++ < kMaxReportedMismatches) {
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", expected " << want[i]
                    << " within " << tol;
    }
  }
}

// got - before, elementwise: what an accumulating kernel added.
inline Values Added(const Values& got, const Values& before) {
  Values out(got.size());
  for (size_t i = 0; i < got.size(); ++i) out[i] = got[i] - before[i];
  return out;
}

// ---------------------------------------------------------------------------------------------
// Activation gradients

using ActivationBackwardParam = std::tuple<DType, Activation, Shape>;
class ActivationBackwardTest : public KernelParamTest<ActivationBackwardParam> {};

TEST_P(ActivationBackwardTest, MatchesDerivativeAndFiniteDifferences) {
  const auto& [dtype, f, shape] = GetParam();
  const HostTensor x = RandomTensor(dtype, shape, 51, -4, 4);
  const HostTensor dy = RandomTensor(dtype, shape, 52);
  DeviceTensor dx_in = Up(x), dy_in = Up(dy), dx = Empty(dtype, shape);
  TESSERA_ASSERT_OK(backend().ActivateBackward(f, dx_in.View(), dy_in.View(), dx.View()));
  const Values got = ToValues(Down(dx)), xs = ToValues(x), dys = ToValues(dy);
  Values want(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) want[i] = dys[i] * NaiveActivationDerivative(f, xs[i]);
  ExpectClose(got, want, NnTolerance(dtype), "dx");
  const Values numeric = CentralDifferences(
      [&](const Values& in) {
        Values out(in.size());
        for (size_t i = 0; i < in.size(); ++i) out[i] = NaiveActivation(f, in[i]);
        return out;
      },
      xs, dys);
  ExpectClose(got, numeric, FiniteDifferenceTolerance(dtype), "dx vs finite differences");
}

INSTANTIATE_TEST_SUITE_P(Kernels, ActivationBackwardTest,
                         ::testing::Combine(::testing::ValuesIn(NnDTypes()),
                                            ::testing::Values(Activation::kRelu, Activation::kGelu,
                                                              Activation::kGeluTanh,
                                                              Activation::kTanh, Activation::kSilu),
                                            ::testing::Values(Shape{257}, Shape{3, 4, 5})),
                         [](const ::testing::TestParamInfo<ActivationBackwardParam>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               ActivationName(std::get<1>(info.param)), "_",
                                               ShapeName(std::get<2>(info.param)));
                         });

TEST_F(KernelTest, ReluGradientIsZeroAtZeroAndBelow) {
  const HostTensor x = HostTensor::FromValues<double>(DType::kFloat64, {4}, {-1.0, 0.0, 0.5, 3.0});
  const HostTensor dy = HostTensor::FromValues<double>(DType::kFloat64, {4}, {7.0, 7.0, 7.0, -2.0});
  DeviceTensor dx_in = Up(x), dy_in = Up(dy), dx = Empty(DType::kFloat64, {4});
  TESSERA_ASSERT_OK(
      backend().ActivateBackward(Activation::kRelu, dx_in.View(), dy_in.View(), dx.View()));
  EXPECT_EQ(ToValues(Down(dx)), (Values{0.0, 0.0, 7.0, -2.0}));
}

// ---------------------------------------------------------------------------------------------
// LayerNorm and RMSNorm

// Which norm, and which of its parameters the module has.
struct NormCase {
  bool rms;
  bool weight;
  bool bias;
};
inline void PrintTo(const NormCase& c, std::ostream* os) {
  *os << (c.rms ? "rms_norm" : "layer_norm") << (c.weight ? " weight" : "")
      << (c.bias ? " bias" : "");
}
using NormParam = std::tuple<DType, NormCase, Shape>;

// Inputs of a norm test and the kernels' forward on them.
class NormTest : public KernelParamTest<NormParam> {
 protected:
  static constexpr double kEps = 0.01;  // large enough to matter at float32 precision

  void SetUp() override {
    KernelParamTest<NormParam>::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    const auto& [dtype, norm, shape] = GetParam();
    cols_ = shape.back();
    rows_ = NumElements(shape) / cols_;
    x_ = RandomTensor(dtype, shape, 61, -3, 3);
    weight_ = RandomTensor(dtype, {cols_}, 62, 0.5, 1.5);
    bias_ = RandomTensor(dtype, {cols_}, 63);
    xs_ = ToValues(x_);
    if (norm.weight) ws_ = ToValues(weight_);
    if (norm.bias) bs_ = ToValues(bias_);
  }

  bool rms() const { return std::get<1>(GetParam()).rms; }

  // Runs the forward under test into y, mean (LayerNorm only) and rstd.
  absl::Status Forward(DeviceTensor& x, DeviceTensor& weight, DeviceTensor& bias, DeviceTensor& y,
                       DeviceTensor& mean, DeviceTensor& rstd) {
    const auto& [dtype, norm, shape] = GetParam();
    const ConstTensorView w = weight.View(), b = bias.View();
    if (rms()) {
      return backend().RmsNorm(x.View(), norm.weight ? &w : nullptr, kEps, y.View(), rstd.View());
    }
    return backend().LayerNorm(x.View(), norm.weight ? &w : nullptr, norm.bias ? &b : nullptr, kEps,
                               y.View(), mean.View(), rstd.View());
  }

  int64_t rows_ = 0, cols_ = 0;
  HostTensor x_, weight_, bias_;
  Values xs_, ws_, bs_;  // ws_ and bs_ are empty when the module has no such parameter
};

TEST_P(NormTest, ForwardMatchesReference) {
  const auto& [dtype, norm, shape] = GetParam();
  DeviceTensor x = Up(x_), weight = Up(weight_), bias = Up(bias_), y = Empty(dtype, shape),
               mean = Empty(DType::kFloat32, {rows_}), rstd = Empty(DType::kFloat32, {rows_});
  TESSERA_ASSERT_OK(Forward(x, weight, bias, y, mean, rstd));
  const NormForward want = NaiveNorm(xs_, cols_, ws_, bs_, kEps, !rms());
  ExpectClose(ToValues(Down(y)), want.y, NnTolerance(dtype), "y");
  ExpectClose(ToValues(Down(rstd)), want.rstd, NnTolerance(DType::kFloat32), "rstd");
  if (!rms()) ExpectClose(ToValues(Down(mean)), want.mean, NnTolerance(DType::kFloat32), "mean");
}

TEST_P(NormTest, BackwardMatchesReferenceAndFiniteDifferences) {
  const auto& [dtype, norm, shape] = GetParam();
  DeviceTensor x = Up(x_), weight = Up(weight_), bias = Up(bias_), y = Empty(dtype, shape),
               mean = Empty(DType::kFloat32, {rows_}), rstd = Empty(DType::kFloat32, {rows_});
  TESSERA_ASSERT_OK(Forward(x, weight, bias, y, mean, rstd));
  const HostTensor dy = RandomTensor(dtype, shape, 64);
  // Gradients accumulate: start them from nonzero values.
  const HostTensor dweight_before = RandomTensor(dtype, {cols_}, 65);
  const HostTensor dbias_before = RandomTensor(dtype, {cols_}, 66);
  DeviceTensor ddy = Up(dy), dx = Empty(dtype, shape), dweight = Up(dweight_before),
               dbias = Up(dbias_before);
  const ConstTensorView w = weight.View();
  const TensorView dw = dweight.View(), db = dbias.View();
  if (rms()) {
    TESSERA_ASSERT_OK(backend().RmsNormBackward(ddy.View(), x.View(), norm.weight ? &w : nullptr,
                                                rstd.View(), dx.View(),
                                                norm.weight ? &dw : nullptr));
  } else {
    TESSERA_ASSERT_OK(backend().LayerNormBackward(
        ddy.View(), x.View(), norm.weight ? &w : nullptr, mean.View(), rstd.View(), dx.View(),
        norm.weight ? &dw : nullptr, norm.bias ? &db : nullptr));
  }
  const Values dys = ToValues(dy);
  const NormGrads want = NaiveNormBackward(dys, xs_, cols_, ws_, kEps, !rms());
  const double tol = NnTolerance(dtype, /*through_float32=*/true);
  const double fd_tol = FiniteDifferenceTolerance(dtype, /*through_float32=*/true);
  const Values got_dx = ToValues(Down(dx));
  ExpectClose(got_dx, want.dx, tol, "dx");
  ExpectClose(got_dx,
              CentralDifferences(
                  [&](const Values& in) { return NaiveNorm(in, cols_, ws_, bs_, kEps, !rms()).y; },
                  xs_, dys),
              fd_tol, "dx vs finite differences");
  if (norm.weight) {
    const Values dweight_added = Added(ToValues(Down(dweight)), ToValues(dweight_before));
    ExpectClose(dweight_added, want.dweight, tol, "dweight");
    ExpectClose(
        dweight_added,
        CentralDifferences(
            [&](const Values& in) { return NaiveNorm(xs_, cols_, in, bs_, kEps, !rms()).y; }, ws_,
            dys),
        fd_tol, "dweight vs finite differences");
  }
  if (norm.bias) {
    const Values dbias_added = Added(ToValues(Down(dbias)), ToValues(dbias_before));
    ExpectClose(dbias_added, want.dbias, tol, "dbias");
    ExpectClose(
        dbias_added,
        CentralDifferences(
            [&](const Values& in) { return NaiveNorm(xs_, cols_, ws_, in, kEps, !rms()).y; }, bs_,
            dys),
        fd_tol, "dbias vs finite differences");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, NormTest,
    ::testing::Combine(
        ::testing::ValuesIn(NnDTypes()),
        ::testing::Values(NormCase{false, false, false}, NormCase{false, true, false},
                          NormCase{false, false, true}, NormCase{false, true, true},
                          NormCase{true, false, false}, NormCase{true, true, false}),
        ::testing::Values(Shape{6}, Shape{3, 1}, Shape{3, 5}, Shape{2, 3, 8}, Shape{4, 300})),
    [](const ::testing::TestParamInfo<NormParam>& info) {
      const NormCase& c = std::get<1>(info.param);
      return absl::StrCat(DTypeName(std::get<0>(info.param)), "_", c.rms ? "rms" : "layer",
                          c.weight ? "_weight" : "", c.bias ? "_bias" : "", "_",
                          ShapeName(std::get<2>(info.param)));
    });

// ---------------------------------------------------------------------------------------------
// Embedding

// A lookup into the weight shard of `rows` rows at `row_offset` of `num_embeddings`.
struct EmbeddingCase {
  Shape ids_shape;
  int64_t rows, dim, row_offset, num_embeddings;
};
inline void PrintTo(const EmbeddingCase& c, std::ostream* os) {
  *os << "ids " << ShapeToString(c.ids_shape) << " rows [" << c.row_offset << ", "
      << c.row_offset + c.rows << ") of " << c.num_embeddings << " dim " << c.dim;
}
using EmbeddingParam = std::tuple<DType, EmbeddingCase>;

class EmbeddingTest : public KernelParamTest<EmbeddingParam> {
 protected:
  void SetUp() override {
    KernelParamTest<EmbeddingParam>::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    const EmbeddingCase& c = std::get<1>(GetParam());
    // Spread over every row (twice when there are enough ids), inside and outside the shard.
    for (int64_t i = 0; i < NumElements(c.ids_shape); ++i) {
      ids_.push_back((i * 3 + 1) % c.num_embeddings);
    }
    out_shape_ = c.ids_shape;
    out_shape_.push_back(c.dim);
  }

  std::vector<int64_t> ids_;
  Shape out_shape_;
};

TEST_P(EmbeddingTest, ForwardCopiesTheShardsRowsAndZerosTheRest) {
  const auto& [dtype, c] = GetParam();
  const HostTensor weight = RandomTensor(dtype, {c.rows, c.dim}, 71);
  DeviceTensor ids = Up(HostTensor::FromValues<int64_t>(DType::kInt64, c.ids_shape, ids_)),
               w = Up(weight), out = Up(RandomTensor(dtype, out_shape_, 72));
  TESSERA_ASSERT_OK(
      backend().Embedding(ids.View(), w.View(), c.row_offset, c.num_embeddings, out.View()));
  EXPECT_EQ(ToValues(Down(out)),
            NaiveEmbedding(ids_, ToValues(weight), c.rows, c.dim, c.row_offset));
}

TEST_P(EmbeddingTest, BackwardAddsTheShardsRows) {
  const auto& [dtype, c] = GetParam();
  const HostTensor dy = RandomTensor(dtype, out_shape_, 73);
  const HostTensor dweight_before = RandomTensor(dtype, {c.rows, c.dim}, 74);
  DeviceTensor ids = Up(HostTensor::FromValues<int64_t>(DType::kInt64, c.ids_shape, ids_)),
               ddy = Up(dy), dweight = Up(dweight_before);
  TESSERA_ASSERT_OK(
      backend().EmbeddingBackward(ids.View(), ddy.View(), c.row_offset, dweight.View()));
  const Values added = Added(ToValues(Down(dweight)), ToValues(dweight_before));
  const Values dys = ToValues(dy);
  ExpectClose(added, NaiveEmbeddingBackward(ids_, dys, c.rows, c.dim, c.row_offset),
              NnTolerance(dtype), "dweight");
  ExpectClose(
      added,
      CentralDifferences(
          [&](const Values& in) { return NaiveEmbedding(ids_, in, c.rows, c.dim, c.row_offset); },
          ToValues(RandomTensor(dtype, {c.rows, c.dim}, 75)), dys),
      FiniteDifferenceTolerance(dtype), "dweight vs finite differences");
}

INSTANTIATE_TEST_SUITE_P(Kernels, EmbeddingTest,
                         ::testing::Combine(::testing::ValuesIn(NnDTypes()),
                                            ::testing::Values(EmbeddingCase{{2, 5}, 10, 4, 0, 10},
                                                              EmbeddingCase{{4, 5}, 4, 3, 0, 10},
                                                              EmbeddingCase{{4, 5}, 3, 3, 4, 10},
                                                              EmbeddingCase{{4, 5}, 3, 2, 7, 10},
                                                              EmbeddingCase{{}, 5, 6, 0, 5},
                                                              EmbeddingCase{{2, 0}, 5, 3, 0, 5},
                                                              EmbeddingCase{{3}, 5, 0, 0, 5})),
                         [](const ::testing::TestParamInfo<EmbeddingParam>& info) {
                           const EmbeddingCase& c = std::get<1>(info.param);
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_ids_",
                                               ShapeName(c.ids_shape), "_rows_", c.row_offset,
                                               "_to_", c.row_offset + c.rows, "_of_",
                                               c.num_embeddings, "_dim_", c.dim);
                         });

TEST_F(KernelTest, EmbeddingRejectsAnIdOutsideTheVocabularyWritingNothing) {
  for (int64_t bad : {int64_t{10}, int64_t{-1}}) {
    const HostTensor before = RandomTensor(DType::kFloat32, {2, 2, 3}, 76);
    DeviceTensor ids = Up(HostTensor::FromValues<int64_t>(DType::kInt64, {2, 2}, {1, 4, bad, 2})),
                 weight = Up(RandomTensor(DType::kFloat32, {10, 3}, 77)), out = Up(before);
    const absl::Status s = backend().Embedding(ids.View(), weight.View(), 0, 10, out.View());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(absl::StrCat("id ", bad, " at position 2")), absl::string_view::npos)
        << s;
    EXPECT_NE(s.message().find("[0, 10)"), absl::string_view::npos) << s;
    EXPECT_EQ(ToValues(Down(out)), ToValues(before));
  }
}

// ---------------------------------------------------------------------------------------------
// SGD

struct SgdCase {
  double lr, momentum, weight_decay;
};
inline void PrintTo(const SgdCase& c, std::ostream* os) {
  *os << "lr " << c.lr << " momentum " << c.momentum << " weight_decay " << c.weight_decay;
}
using SgdParam = std::tuple<DType, SgdCase, Shape>;
class SgdTest : public KernelParamTest<SgdParam> {};

TEST_P(SgdTest, ThreeStepsMatchTorchSgd) {
  const auto& [dtype, c, shape] = GetParam();
  const HostTensor param0 = RandomTensor(dtype, shape, 81);
  DeviceTensor param = Up(param0), buf = Empty(dtype, shape);
  // The first step must not read the momentum buffer.
  TESSERA_ASSERT_OK(backend().Fill(buf.View(), std::nan("")));
  Values want = ToValues(param0), want_buf(want.size(), 0.0);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    const HostTensor grad = RandomTensor(dtype, shape, 82 + step);
    DeviceTensor dgrad = Up(grad);
    const TensorView buf_view = buf.View();
    TESSERA_ASSERT_OK(backend().SgdStep(param.View(), dgrad.View(),
                                        c.momentum != 0 ? &buf_view : nullptr, c.lr, c.momentum,
                                        c.weight_decay, step == 0));
    NaiveSgdStep(want, ToValues(grad), want_buf, c.lr, c.momentum, c.weight_decay, step == 0);
    ExpectClose(ToValues(Down(param)), want, NnTolerance(dtype), "param");
    if (c.momentum != 0) ExpectClose(ToValues(Down(buf)), want_buf, NnTolerance(dtype), "buf");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, SgdTest,
    ::testing::Combine(::testing::ValuesIn(NnDTypes()),
                       ::testing::Values(SgdCase{0.25, 0, 0}, SgdCase{0.1, 0.9, 0},
                                         SgdCase{0.1, 0, 0.01}, SgdCase{0.05, 0.5, 0.1}),
                       ::testing::Values(Shape{7}, Shape{3, 5})),
    [](const ::testing::TestParamInfo<SgdParam>& info) {
      const SgdCase& c = std::get<1>(info.param);
      return absl::StrCat(
          DTypeName(std::get<0>(info.param)), "_momentum", c.momentum != 0 ? "_on" : "_off",
          "_decay", c.weight_decay != 0 ? "_on" : "_off", "_", ShapeName(std::get<2>(info.param)));
    });

}  // namespace tessera::kernels::testing

#endif  // TESSERA_KERNELS_TESTING_NN_CONFORMANCE_H_
