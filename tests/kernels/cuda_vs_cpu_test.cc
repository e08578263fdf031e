// Every kernel of the CUDA backend against the CPU backend on the same inputs: each test uploads
// the same host tensors to both, runs the same call, and expects every tensor afterwards to agree,
// bit for bit where the two compute the same way (data moves, casts, fills, sorts, uniform random
// fills, integer arithmetic) and within a few roundoffs of the dtype elsewhere (GEMMs, reductions
// and norms sum in other orders). Parameterized over dtypes, shapes and options. Without a usable
// cuda:0 (or without CUDA support in the build) every test skips with the one-line reason.

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/testing/reference.h"

namespace tessera::kernels {
namespace {

using testing::GetDouble;
using testing::RandomTensor;
using testing::SameElement;
using testing::SetFromDouble;

// The backends, made once: the CPU one, and cuda:0 or why there is none.
struct Backends {
  std::unique_ptr<KernelBackend> cpu;
  absl::StatusOr<std::unique_ptr<KernelBackend>> cuda;
};
Backends& Both() {
  static Backends* const both = new Backends{MakeBackend("cpu").value(), MakeBackend("cuda:0")};
  return *both;
}

// What a call did on each backend: every tensor it was given, afterwards.
struct Outcome {
  std::vector<HostTensor> cpu, cuda;
};

// Relative tolerance of a result in `dtype` computed in another order: a few hundred roundoffs
// of float32 and float64, two ulps of the 16-bit types; 0 (bit for bit) for the rest.
double Tolerance(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 2e-5;
    case DType::kFloat64:
      return 1e-12;
    case DType::kFloat16:
      return 2e-3;
    case DType::kBFloat16:
      return 1.6e-2;
    default:
      return 0;
  }
}

template <typename Param>
class CudaVsCpu : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (!Both().cuda.ok()) GTEST_SKIP() << Both().cuda.status().message();
  }

  // Runs `call` on each backend over uploads of `tensors`; the tensors afterwards.
  Outcome Run(const std::vector<HostTensor>& tensors,
              const std::function<absl::Status(KernelBackend&, std::vector<DeviceTensor>&)>& call) {
    Outcome out;
    for (auto [backend, into] :
         {std::pair{Both().cpu.get(), &out.cpu}, std::pair{Both().cuda->get(), &out.cuda}}) {
      std::vector<DeviceTensor> on;
      for (const HostTensor& t : tensors) on.push_back(backend->Upload(t).value());
      const absl::Status s = call(*backend, on);
      EXPECT_TRUE(s.ok()) << backend->device() << ": " << s;
      for (const DeviceTensor& t : on) into->push_back(backend->Download(t.View()).value());
    }
    return out;
  }

  // Expects tensor i of both sides to agree: within `rel` * (|cpu| + max(1, max |cpu|)), or bit
  // for bit (NaN matching NaN) where `rel` is 0; negative `rel`: the dtype's Tolerance.
  void ExpectAgree(const Outcome& o, const std::string& what, double rel = -1) {
    for (size_t i = 0; i < o.cpu.size(); ++i) {
      const HostTensor& a = o.cpu[i];
      const HostTensor& b = o.cuda[i];
      ASSERT_EQ(a.shape(), b.shape()) << what << ", tensor " << i;
      const double tol = rel >= 0 ? rel : Tolerance(a.dtype());
      double scale = 1;
      for (int64_t e = 0; tol > 0 && e < a.num_elements(); ++e) {
        if (std::isfinite(GetDouble(a, e))) scale = std::max(scale, std::abs(GetDouble(a, e)));
      }
      int reported = 0;
      for (int64_t e = 0; e < a.num_elements() && reported < 5; ++e) {
        if (SameElement(a, b, e)) continue;
        const double x = GetDouble(a, e), y = GetDouble(b, e);
        if (tol > 0 && std::abs(x - y) <= tol * (std::abs(x) + scale)) continue;
        ++reported;
        ADD_FAILURE() << what << ", tensor " << i << " (" << DTypeName(a.dtype())
                      << ShapeToString(a.shape()) << ") element " << e << ": cpu " << x << ", cuda "
                      << y << (tol > 0 ? absl::StrCat(" (tolerance ", tol, ")") : "");
      }
    }
  }
};

// The tensors given, moved into a vector (HostTensor is move-only).
template <typename... T>
std::vector<HostTensor> Tensors(T&&... tensors) {
  std::vector<HostTensor> v;
  (v.push_back(std::forward<T>(tensors)), ...);
  return v;
}

std::string Name(DType d) { return std::string(DTypeName(d)); }
std::string Name(const Shape& s) { return s.empty() ? "scalar" : absl::StrJoin(s, "x"); }
std::string Name(bool b) { return b ? "yes" : "no"; }

std::vector<DType> Floating() {
  return {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
}
std::vector<DType> NnDTypes() { return {DType::kFloat32, DType::kFloat64}; }

// ---------------------------------------------------------------------------------------------
// GEMM: op(A) [m, k] x op(B) [k, n], every transpose, beta 0 and 1.

using GemmParam = std::tuple<DType, bool, bool, Shape>;  // dtype, transpose a, b, {m, n, k}
class GemmVsCpu : public CudaVsCpu<GemmParam> {};

TEST_P(GemmVsCpu, Agrees) {
  const auto& [dtype, ta, tb, mnk] = GetParam();
  const int64_t m = mnk[0], n = mnk[1], k = mnk[2];
  const Shape a_shape = ta ? Shape{k, m} : Shape{m, k}, b_shape = tb ? Shape{n, k} : Shape{k, n};
  for (double beta : {0.0, 1.0}) {
    ExpectAgree(Run(Tensors(RandomTensor(dtype, a_shape, 1), RandomTensor(dtype, b_shape, 2),
                            RandomTensor(dtype, {m, n}, 3)),
                    [&](KernelBackend& be, std::vector<DeviceTensor>& t) {
                      return be.Gemm(ta, tb, 0.75, t[0].View(), t[1].View(), beta, t[2].View());
                    }),
                absl::StrCat("beta ", beta));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, GemmVsCpu,
    ::testing::Combine(::testing::ValuesIn(Floating()), ::testing::Bool(), ::testing::Bool(),
                       ::testing::Values(Shape{1, 1, 1}, Shape{7, 5, 3}, Shape{33, 17, 64},
                                         Shape{0, 3, 2}, Shape{4, 6, 0})),
    [](const auto& info) {
      return absl::StrCat(Name(std::get<0>(info.param)), "_ta", Name(std::get<1>(info.param)),
                          "_tb", Name(std::get<2>(info.param)), "_", Name(std::get<3>(info.param)));
    });

// ---------------------------------------------------------------------------------------------
// Elementwise: binary ops with broadcasting, activations, casts, fills, the collectives'
// reductions.

using BinaryParam = std::tuple<BinaryOp, DType>;
class BinaryVsCpu : public CudaVsCpu<BinaryParam> {};

TEST_P(BinaryVsCpu, AgreesWithBroadcasting) {
  const auto& [op, dtype] = GetParam();
  if (op == BinaryOp::kDiv && !IsFloatingPoint(dtype)) GTEST_SKIP() << "div takes floats";
  if (op == BinaryOp::kSub && dtype == DType::kBool) GTEST_SKIP() << "sub takes no bools";
  for (const auto& [a, b, out] : std::vector<std::tuple<Shape, Shape, Shape>>{
           {{3, 1, 5}, {4, 1}, {3, 4, 5}}, {{6, 7}, {6, 7}, {6, 7}}, {{}, {2, 3}, {2, 3}}}) {
    ExpectAgree(Run(Tensors(RandomTensor(dtype, a, 4, 0.5, 3), RandomTensor(dtype, b, 5, 0.5, 3),
                            HostTensor::Zeros(dtype, out).value()),
                    [&](KernelBackend& be, std::vector<DeviceTensor>& t) {
                      return be.Binary(op, t[0].View(), t[1].View(), t[2].View());
                    }),
                absl::StrCat(BinaryOpName(op), " ", Name(a), " by ", Name(b)));
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, BinaryVsCpu,
                         ::testing::Combine(::testing::Values(BinaryOp::kAdd, BinaryOp::kSub,
                                                              BinaryOp::kMul, BinaryOp::kDiv),
                                            ::testing::ValuesIn(kAllDTypes)),
                         [](const auto& info) {
                           return absl::StrCat(BinaryOpName(std::get<0>(info.param)), "_",
                                               Name(std::get<1>(info.param)));
                         });

using ActivationParam = std::tuple<Activation, DType>;
class ActivationVsCpu : public CudaVsCpu<ActivationParam> {};

TEST_P(ActivationVsCpu, ForwardAgrees) {
  const auto& [f, dtype] = GetParam();
  ExpectAgree(Run(Tensors(RandomTensor(dtype, {9, 31}, 6, -5, 5),
                          HostTensor::Zeros(dtype, {9, 31}).value()),
                  [&](KernelBackend& be, std::vector<DeviceTensor>& t) {
                    return be.Activate(f, t[0].View(), t[1].View());
                  }),
              std::string(ActivationName(f)));
}

TEST_P(ActivationVsCpu, BackwardAgrees) {
  const auto& [f, dtype] = GetParam();
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) GTEST_SKIP() << "float32 and 64 only";
  HostTensor x = RandomTensor(dtype, {9, 31}, 7, -5, 5);
  testing::SetFromDouble(x, 0, 0.0);  // relu'(0) = 0 on both
  ExpectAgree(Run(Tensors(x.Clone(), RandomTensor(dtype, {9, 31}, 8),
                          HostTensor::Zeros(dtype, {9, 31}).value()),
                  [&](KernelBackend& be, std::vector<DeviceTensor>& t) {
                    return be.ActivateBackward(f, t[0].View(), t[1].View(), t[2].View());
                  }),
              absl::StrCat(ActivationName(f), " backward"));
}

INSTANTIATE_TEST_SUITE_P(Kernels, ActivationVsCpu,
                         ::testing::Combine(::testing::Values(Activation::kRelu, Activation::kGelu,
                                                              Activation::kGeluTanh,
                                                              Activation::kTanh, Activation::kSilu),
                                            ::testing::ValuesIn(Floating())),
                         [](const auto& info) {
                           return absl::StrCat(ActivationName(std::get<0>(info.param)), "_",
                                               Name(std::get<1>(info.param)));
                         });

using CastParam = std::tuple<DType, DType>;
class CastVsCpu : public CudaVsCpu<CastParam> {};

TEST_P(CastVsCpu, AgreesBitForBit) {
  const auto& [from, to] = GetParam();
  HostTensor src = RandomTensor(from, {5, 13}, 9, -300, 300);
  if (IsFloatingPoint(from)) {
    // The edges of the rule: NaN, infinities, values past every integer type.
    testing::SetFromDouble(src, 0, std::nan(""));
    testing::SetFromDouble(src, 1, INFINITY);
    testing::SetFromDouble(src, 2, -1e30);
    testing::SetFromDouble(src, 3, -0.5);
  }
  ExpectAgree(Run(Tensors(src.Clone(), HostTensor::Zeros(to, {5, 13}).value()),
                  [&](KernelBackend& be, std::vector<DeviceTensor>& t) {
                    return be.Cast(t[0].View(), t[1].View());
                  }),
              "cast", 0);
  for (double value : {0.0, -2.5, 1e9, std::nan("")}) {
    ExpectAgree(Run(Tensors(HostTensor::Zeros(to, {7}).value()),
                    [&](KernelBackend& be, std::vector<DeviceTensor>& t) {
                      return be.Fill(t[0].View(), value);
                    }),
                absl::StrCat("fill ", value), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, CastVsCpu,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::ValuesIn(kAllDTypes)),
                         [](const auto& info) {
                           return absl::StrCat(Name(std::get<0>(info.param)), "_to_",
                                               Name(std::get<1>(info.param)));
                         });

using ReduceParam = std::tuple<ReduceOp, DType>;
class ReduceVsCpu : public CudaVsCpu<ReduceParam> {};

TEST_P(ReduceVsCpu, AlongEveryDimAndIntoAgree) {
  const auto& [op, dtype] = GetParam();
  if (op == ReduceOp::kAvg && !IsFloatingPoint(dtype)) GTEST_SKIP() << "mean takes floats";
  const Shape shape = {4, 5, 6};
  for (int dim = 0; dim < 3; ++dim) {
    Shape kept = shape;
    kept[dim] = 1;
    ExpectAgree(
        Run(Tensors(RandomTensor(dtype, shape, 10, -3, 3), HostTensor::Zeros(dtype, kept).value()),
            [&](KernelBackend& be, std::vector<DeviceTensor>& t) {
              return be.ReduceAlongDim(op, t[0].View(), dim, t[1].View());
            }),
        absl::StrCat(ReduceOpName(op), " along dim ", dim));
  }
  ExpectAgree(
      Run(Tensors(RandomTensor(dtype, {37}, 11, -3, 3), RandomTensor(dtype, {37}, 12, -3, 3)),
          [&](KernelBackend& be, std::vector<DeviceTensor>& t) {
            RETURN_IF_ERROR(be.ReduceInto(op, t[0].View(), t[1].View()));
            return be.DivideInPlace(t[0].View(), 3);
          }),
      absl::StrCat(ReduceOpName(op), " into, then divided by 3"));
}

INSTANTIATE_TEST_SUITE_P(Kernels, ReduceVsCpu,
                         ::testing::Combine(::testing::Values(ReduceOp::kSum, ReduceOp::kAvg,
                                                              ReduceOp::kMax, ReduceOp::kMin,
                                                              ReduceOp::kProduct),
                                            ::testing::ValuesIn(kAllDTypes)),
                         [](const auto& info) {
                           return absl::StrCat(ReduceOpName(std::get<0>(info.param)), "_",
                                               Name(std::get<1>(info.param)));
                         });

// ---------------------------------------------------------------------------------------------
// Sort along a dim, both ways: values and indices bit for bit (a stable sort has one answer), on
// values with ties on every line and, for floating dtypes, NaN.

using SortParam = std::tuple<DType, bool>;  // dtype, descending
class SortVsCpu : public CudaVsCpu<SortParam> {};

TEST_P(SortVsCpu, AlongEveryDimAgreesBitForBit) {
  const auto& [dtype, descending] = GetParam();
  const auto tied = [dtype](const Shape& shape) {
    HostTensor x = RandomTensor(dtype, shape, 13, -3, 3);
    for (int64_t i = 0; IsFloatingPoint(dtype) && i < x.num_elements(); ++i) {
      SetFromDouble(x, i, i % 7 == 3 ? std::nan("") : std::round(GetDouble(x, i)) / 2);
    }
    return x;
  };
  for (const auto& [shape, dim] : std::vector<std::pair<Shape, int>>{
           {{4, 5, 6}, 0}, {{4, 5, 6}, 1}, {{4, 5, 6}, 2}, {{2, 300}, 1}, {{}, 0}}) {
    ExpectAgree(
        Run(Tensors(tied(shape), HostTensor::Zeros(dtype, shape).value(),
                    HostTensor::Zeros(DType::kInt64, shape).value()),
            [&](KernelBackend& be, std::vector<DeviceTensor>& t) {
              return be.SortAlongDim(t[0].View(), dim, descending, t[1].View(), t[2].View());
            }),
        absl::StrCat(descending ? "descending" : "ascending", " sort of ", ShapeToString(shape),
                     " along dim ", dim),
        /*rel=*/0);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, SortVsCpu,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes), ::testing::Bool()),
                         [](const auto& info) {
                           return absl::StrCat(
                               Name(std::get<0>(info.param)),
                               std::get<1>(info.param) ? "_descending" : "_ascending");
                         });

// ---------------------------------------------------------------------------------------------
// Random fill: a shard of a global tensor, the same on both for the same seed and global index.

using RandomParam = std::tuple<Distribution, DType>;
class RandomVsCpu : public CudaVsCpu<RandomParam> {};

TEST_P(RandomVsCpu, ShardIsTheSameOnEitherDevice) {
  const auto& [dist, dtype] = GetParam();
  const std::vector<int64_t> global = {10, 12, 7}, offset = {3, 4, 2};
  // Uniform draws are bit-identical; normal ones go through log and cos, whose host and device
  // versions may differ in the last bit.
  const double rel = dist == Distribution::kUniform ? 0 : Tolerance(dtype) * 1e-2;
  ExpectAgree(Run(Tensors(HostTensor::Zeros(dtype, {5, 6, 4}).value()),
                  [&](KernelBackend& be, std::vector<DeviceTensor>& t) {
                    return be.RandomFill(dist, 20240611, global, offset, t[0].View());
                  }),
              std::string(DistributionName(dist)), rel);
}

INSTANTIATE_TEST_SUITE_P(Kernels, RandomVsCpu,
                         ::testing::Combine(::testing::Values(Distribution::kUniform,
                                                              Distribution::kNormal),
                                            ::testing::ValuesIn(Floating())),
                         [](const auto& info) {
                           return absl::StrCat(DistributionName(std::get<0>(info.param)), "_",
                                               Name(std::get<1>(info.param)));
                         });

// ---------------------------------------------------------------------------------------------
// Neural-network kernels.

using NormParam = std::tuple<DType, bool, Shape>;  // dtype, affine, x shape
class NormVsCpu : public CudaVsCpu<NormParam> {};

TEST_P(NormVsCpu, LayerNormAndItsBackwardAgree) {
  const auto& [dtype, affine, shape] = GetParam();
  const int64_t cols = shape.back(), rows = NumElements(shape) / cols;
  const HostTensor x = RandomTensor(dtype, shape, 13), dy = RandomTensor(dtype, shape, 14);
  const HostTensor w = RandomTensor(dtype, {cols}, 15), b = RandomTensor(dtype, {cols}, 16);
  const HostTensor stats = HostTensor::Zeros(DType::kFloat32, {rows}).value();
  // x, weight, bias, y, mean, rstd, dy, dx, dweight, dbias
  ExpectAgree(
      Run(Tensors(x.Clone(), w.Clone(), b.Clone(), HostTensor::Zeros(dtype, shape).value(),
                  stats.Clone(), stats.Clone(), dy.Clone(), HostTensor::Zeros(dtype, shape).value(),
                  RandomTensor(dtype, {cols}, 17), RandomTensor(dtype, {cols}, 18)),
          [&](KernelBackend& be, std::vector<DeviceTensor>& t) {
            const ConstTensorView cw = t[1].View(), cb = t[2].View();
            const TensorView dw = t[8].View(), db = t[9].View();
            RETURN_IF_ERROR(be.LayerNorm(t[0].View(), affine ? &cw : nullptr,
                                         affine ? &cb : nullptr, 1e-5, t[3].View(), t[4].View(),
                                         t[5].View()));
            return be.LayerNormBackward(t[6].View(), t[0].View(), affine ? &cw : nullptr,
                                        t[4].View(), t[5].View(), t[7].View(),
                                        affine ? &dw : nullptr, affine ? &db : nullptr);
          }),
      "layer_norm");
}

TEST_P(NormVsCpu, RmsNormAndItsBackwardAgree) {
  const auto& [dtype, affine, shape] = GetParam();
  const int64_t cols = shape.back(), rows = NumElements(shape) / cols;
  ExpectAgree(Run(Tensors(RandomTensor(dtype, shape, 19), RandomTensor(dtype, {cols}, 20),
                          HostTensor::Zeros(dtype, shape).value(),
                          HostTensor::Zeros(DType::kFloat32, {rows}).value(),
                          RandomTensor(dtype, shape, 21), HostTensor::Zeros(dtype, shape).value(),
                          RandomTensor(dtype, {cols}, 22)),
                  [&](KernelBackend& be, std::vector<DeviceTensor>& t) {
                    const ConstTensorView cw = t[1].View();
                    const TensorView dw = t[6].View();
                    RETURN_IF_ERROR(be.RmsNorm(t[0].View(), affine ? &cw : nullptr, 1e-6,
                                               t[2].View(), t[3].View()));
                    return be.RmsNormBackward(t[4].View(), t[0].View(), affine ? &cw : nullptr,
                                              t[3].View(), t[5].View(), affine ? &dw : nullptr);
                  }),
              "rms_norm");
}

INSTANTIATE_TEST_SUITE_P(Kernels, NormVsCpu,
                         ::testing::Combine(::testing::ValuesIn(NnDTypes()), ::testing::Bool(),
                                            ::testing::Values(Shape{1, 1}, Shape{3, 7},
                                                              Shape{2, 5, 300}, Shape{513, 64})),
                         [](const auto& info) {
                           return absl::StrCat(Name(std::get<0>(info.param)), "_affine",
                                               Name(std::get<1>(info.param)), "_",
                                               Name(std::get<2>(info.param)));
                         });

using EmbeddingParam = std::tuple<DType, int64_t>;  // dtype, row offset of the shard
class EmbeddingVsCpu : public CudaVsCpu<EmbeddingParam> {};

TEST_P(EmbeddingVsCpu, LookupAndItsBackwardAgree) {
  const auto& [dtype, row_offset] = GetParam();
  constexpr int64_t kNum = 20, kRows = 8, kDim = 6;
  // ids with repeats, some inside the shard's rows and some outside.
  const HostTensor ids = RandomTensor(DType::kInt64, {3, 11}, 23, 0, kNum - 1);
  // dweight's accumulation order differs (atomic adds on the GPU): float tolerance.
  ExpectAgree(
      Run(Tensors(ids.Clone(), RandomTensor(dtype, {kRows, kDim}, 24),
                  HostTensor::Zeros(dtype, {3, 11, kDim}).value(),
                  RandomTensor(dtype, {3, 11, kDim}, 25), RandomTensor(dtype, {kRows, kDim}, 26)),
          [&](KernelBackend& be, std::vector<DeviceTensor>& t) {
            RETURN_IF_ERROR(be.Embedding(t[0].View(), t[1].View(), row_offset, kNum, t[2].View()));
            return be.EmbeddingBackward(t[0].View(), t[3].View(), row_offset, t[4].View());
          }),
      "embedding");
}

TEST_P(EmbeddingVsCpu, BadIdsAreRefusedAlikeNamingTheFirst) {
  const auto& [dtype, row_offset] = GetParam();
  HostTensor ids = RandomTensor(DType::kInt64, {2, 9}, 27, 0, 19);
  ids.data_as<int64_t>()[11] = 20;
  ids.data_as<int64_t>()[5] = -3;
  std::vector<absl::Status> got;
  for (KernelBackend* be : {Both().cpu.get(), Both().cuda->get()}) {
    DeviceTensor i = be->Upload(ids).value(), w = be->Zeros(dtype, {8, 4}).value();
    DeviceTensor out = be->Upload(RandomTensor(dtype, {2, 9, 4}, 28)).value();
    got.push_back(be->Embedding(i.View(), w.View(), row_offset, 20, out.View()));
  }
  EXPECT_EQ(got[0].code(), absl::StatusCode::kInvalidArgument) << got[0];
  EXPECT_EQ(got[0], got[1]);
}

INSTANTIATE_TEST_SUITE_P(Kernels, EmbeddingVsCpu,
                         ::testing::Combine(::testing::ValuesIn(NnDTypes()),
                                            ::testing::Values(int64_t{0}, int64_t{7}, int64_t{12})),
                         [](const auto& info) {
                           return absl::StrCat(Name(std::get<0>(info.param)), "_offset",
                                               std::get<1>(info.param));
                         });

using AttentionParam = std::tuple<DType, bool, Shape>;  // dtype, causal, {B, S, H, D}
class AttentionVsCpu : public CudaVsCpu<AttentionParam> {};

TEST_P(AttentionVsCpu, ForwardAndBackwardAgree) {
  const auto& [dtype, causal, bshd] = GetParam();
  const int64_t batch = bshd[0], seq = bshd[1], heads = bshd[2], dim = bshd[3];
  const Shape x = {batch, seq, heads * dim}, probs = {batch, heads, seq, seq};
  const HostTensor zero = HostTensor::Zeros(dtype, x).value();
  // q, k, v, out, probs, dout, dq, dk, dv
  ExpectAgree(Run(Tensors(RandomTensor(dtype, x, 29), RandomTensor(dtype, x, 30),
                          RandomTensor(dtype, x, 31), zero.Clone(),
                          HostTensor::Zeros(DType::kFloat32, probs).value(),
                          RandomTensor(dtype, x, 32), zero.Clone(), zero.Clone(), zero.Clone()),
                  [&](KernelBackend& be, std::vector<DeviceTensor>& t) {
                    RETURN_IF_ERROR(be.Attention(t[0].View(), t[1].View(), t[2].View(), heads,
                                                 causal, t[3].View(), t[4].View()));
                    return be.AttentionBackward(t[0].View(), t[1].View(), t[2].View(), t[4].View(),
                                                t[5].View(), heads, t[6].View(), t[7].View(),
                                                t[8].View());
                  }),
              "attention");
}

INSTANTIATE_TEST_SUITE_P(Kernels, AttentionVsCpu,
                         ::testing::Combine(::testing::ValuesIn(NnDTypes()), ::testing::Bool(),
                                            ::testing::Values(Shape{1, 1, 1, 1}, Shape{2, 5, 3, 4},
                                                              Shape{3, 33, 2, 16},
                                                              Shape{1, 300, 4, 8})),
                         [](const auto& info) {
                           return absl::StrCat(Name(std::get<0>(info.param)), "_causal",
                                               Name(std::get<1>(info.param)), "_",
                                               Name(std::get<2>(info.param)));
                         });

using SgdParam = std::tuple<DType, double, double, bool>;  // momentum, weight decay, first step
class SgdVsCpu : public CudaVsCpu<SgdParam> {};

TEST_P(SgdVsCpu, StepAgrees) {
  const auto& [dtype, momentum, decay, first] = GetParam();
  ExpectAgree(Run(Tensors(RandomTensor(dtype, {17, 3}, 33), RandomTensor(dtype, {17, 3}, 34),
                          RandomTensor(dtype, {17, 3}, 35)),
                  [&](KernelBackend& be, std::vector<DeviceTensor>& t) {
                    TensorView buf = t[2].View();
                    return be.SgdStep(t[0].View(), t[1].View(), momentum != 0 ? &buf : nullptr,
                                      0.05, momentum, decay, first);
                  }),
              "sgd");
}

INSTANTIATE_TEST_SUITE_P(Kernels, SgdVsCpu,
                         ::testing::Combine(::testing::ValuesIn(NnDTypes()),
                                            ::testing::Values(0.0, 0.9),
                                            ::testing::Values(0.0, 0.01), ::testing::Bool()),
                         [](const auto& info) {
                           return absl::StrCat(Name(std::get<0>(info.param)), "_momentum",
                                               std::get<1>(info.param) != 0 ? "yes" : "no",
                                               "_decay",
                                               std::get<2>(info.param) != 0 ? "yes" : "no",
                                               "_first", Name(std::get<3>(info.param)));
                         });

}  // namespace
}  // namespace tessera::kernels
