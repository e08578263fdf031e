#ifndef TESSERA_KERNELS_TESTING_ATTENTION_CONFORMANCE_H_
#define TESSERA_KERNELS_TESTING_ATTENTION_CONFORMANCE_H_

// Conformance of scaled dot-product attention, forward and backward, against the float64
// references of nn_reference.h and central differences, over dtype x [batch, seq, heads,
// head_dim] x causal. Include once per test binary (see conformance_fixture.h).

#include <ostream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/testing/conformance_fixture.h"
#include "kernels/testing/nn_conformance.h"
#include "kernels/testing/nn_reference.h"

namespace tessera::kernels::testing {

inline void PrintTo(const AttentionShape& s, std::ostream* os) {
  *os << "batch " << s.batch << " seq " << s.seq << " heads " << s.heads << " head_dim "
      << s.head_dim;
}
using AttentionParam = std::tuple<DType, AttentionShape, bool>;

// q, k and v of an attention test, and the kernel's forward on them.
class AttentionTest : public KernelParamTest<AttentionParam> {
 protected:
  void SetUp() override {
    KernelParamTest<AttentionParam>::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    const auto& [dtype, s, causal] = GetParam();
    shape_ = {s.batch, s.seq, s.features()};
    q_ = RandomTensor(dtype, shape_, 91);
    k_ = RandomTensor(dtype, shape_, 92);
    v_ = RandomTensor(dtype, shape_, 93);
    q_in_ = Up(q_);
    k_in_ = Up(k_);
    v_in_ = Up(v_);
    out_ = Empty(dtype, shape_);
    probs_ = Empty(DType::kFloat32, {s.batch, s.heads, s.seq, s.seq});
  }

  absl::Status Forward() {
    const auto& [dtype, s, causal] = GetParam();
    return backend().Attention(q_in_.View(), k_in_.View(), v_in_.View(), s.heads, causal,
                               out_.View(), probs_.View());
  }

  Shape shape_;
  HostTensor q_, k_, v_;
  DeviceTensor q_in_, k_in_, v_in_, out_, probs_;
};

TEST_P(AttentionTest, ForwardMatchesReference) {
  const auto& [dtype, s, causal] = GetParam();
  TESSERA_ASSERT_OK(Forward());
  const Values qs = ToValues(q_), ks = ToValues(k_), vs = ToValues(v_);
  ExpectClose(ToValues(Down(out_)), NaiveAttention(qs, ks, vs, s, causal), NnTolerance(dtype),
              "out");
  const Values probs = ToValues(Down(probs_));
  ExpectClose(probs, NaiveAttentionProbs(qs, ks, s, causal), NnTolerance(DType::kFloat32), "probs");
  if (causal) {
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t h = 0; h < s.heads; ++h) {
        for (int64_t i = 0; i < s.seq; ++i) {
          for (int64_t j = i + 1; j < s.seq; ++j) {
            ASSERT_EQ(probs[s.ProbAt(b, h, i, j)], 0.0) << "masked prob " << b << h << i << j;
          }
        }
      }
    }
  }
}

TEST_P(AttentionTest, BackwardMatchesReferenceAndFiniteDifferences) {
  const auto& [dtype, s, causal] = GetParam();
  TESSERA_ASSERT_OK(Forward());
  const HostTensor dout = RandomTensor(dtype, shape_, 94);
  DeviceTensor ddout = Up(dout), dq = Up(RandomTensor(dtype, shape_, 95)),
               dk = Up(RandomTensor(dtype, shape_, 96)), dv = Up(RandomTensor(dtype, shape_, 97));
  TESSERA_ASSERT_OK(backend().AttentionBackward(q_in_.View(), k_in_.View(), v_in_.View(),
                                                probs_.View(), ddout.View(), s.heads, dq.View(),
                                                dk.View(), dv.View()));
  const Values qs = ToValues(q_), ks = ToValues(k_), vs = ToValues(v_), douts = ToValues(dout);
  const AttentionGrads want = NaiveAttentionBackward(qs, ks, vs, douts, s, causal);
  const double tol = NnTolerance(dtype, /*through_float32=*/true);
  const double fd_tol = FiniteDifferenceTolerance(dtype, /*through_float32=*/true);
  const Values got_dq = ToValues(Down(dq)), got_dk = ToValues(Down(dk)),
               got_dv = ToValues(Down(dv));
  ExpectClose(got_dq, want.dq, tol, "dq");
  ExpectClose(got_dk, want.dk, tol, "dk");
  ExpectClose(got_dv, want.dv, tol, "dv");
  auto forward = [&](const Values& q, const Values& k, const Values& v) {
    return NaiveAttention(q, k, v, s, causal);
  };
  ExpectClose(got_dq,
              CentralDifferences([&](const Values& in) { return forward(in, ks, vs); }, qs, douts),
              fd_tol, "dq vs finite differences");
  ExpectClose(got_dk,
              CentralDifferences([&](const Values& in) { return forward(qs, in, vs); }, ks, douts),
              fd_tol, "dk vs finite differences");
  ExpectClose(got_dv,
              CentralDifferences([&](const Values& in) { return forward(qs, ks, in); }, vs, douts),
              fd_tol, "dv vs finite differences");
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, AttentionTest,
    ::testing::Combine(::testing::ValuesIn(NnDTypes()),
                       ::testing::Values(AttentionShape{1, 1, 1, 1}, AttentionShape{2, 3, 1, 4},
                                         AttentionShape{2, 5, 2, 3}, AttentionShape{1, 4, 4, 2},
                                         AttentionShape{1, 7, 2, 8}, AttentionShape{2, 33, 4, 16}),
                       ::testing::Bool()),
    [](const ::testing::TestParamInfo<AttentionParam>& info) {
      const AttentionShape& s = std::get<1>(info.param);
      return absl::StrCat(DTypeName(std::get<0>(info.param)), "_b", s.batch, "_s", s.seq, "_h",
                          s.heads, "_d", s.head_dim, std::get<2>(info.param) ? "_causal" : "");
    });

class AttentionDTypeTest : public KernelParamTest<DType> {};

TEST_P(AttentionDTypeTest, SoftmaxStaysFiniteForLargeScores) {
  const DType dtype = GetParam();
  const AttentionShape s{1, 6, 2, 16};
  const Shape shape = {s.batch, s.seq, s.features()};
  // k = q: each position's score with itself is |q|^2 / 4, about 1200, past where exp overflows
  // (float64 at 709) unless the row max is subtracted.
  const HostTensor q = RandomTensor(dtype, shape, 98, -30, 30);
  const HostTensor v = RandomTensor(dtype, shape, 99);
  DeviceTensor dq = Up(q), dk = Up(q), dv = Up(v), out = Empty(dtype, shape),
               probs = Empty(DType::kFloat32, {s.batch, s.heads, s.seq, s.seq});
  TESSERA_ASSERT_OK(backend().Attention(dq.View(), dk.View(), dv.View(), s.heads, false, out.View(),
                                        probs.View()));
  const Values qs = ToValues(q);
  // float32 scores of this size carry absolute errors of ~1e-2, which move the probabilities.
  const double tol = dtype == DType::kFloat32 ? 1e-2 : NnTolerance(DType::kFloat32);
  ExpectClose(ToValues(Down(probs)), NaiveAttentionProbs(qs, qs, s, false), tol, "probs");
  ExpectClose(ToValues(Down(out)), NaiveAttention(qs, qs, ToValues(v), s, false), tol, "out");
}

INSTANTIATE_TEST_SUITE_P(Kernels, AttentionDTypeTest, ::testing::ValuesIn(NnDTypes()),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace tessera::kernels::testing

#endif  // TESSERA_KERNELS_TESTING_ATTENTION_CONFORMANCE_H_
