// Registry ops from the C++ client on a real cluster of 2 workers: Call and the typed wrappers on
// a [5, 3] tensor sharded unevenly by rows (3 + 2) or columns (2 + 1), or replicated, through a
// session on the op stream and one on unary calls, each compared with a single-process reference
// computed here; the op stream's own plan (metadata, redistributions) against the coordinator's
// answer; an unknown op, bad arguments and a refusal only the coordinator can make; ListOps
// against the registry.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <numbers>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/op_registry.h"
#include "tessera/tessera.h"
#include "tests/cluster/cluster_fixture.h"

namespace tessera {
namespace {

using ::tessera::client::Arg;
using ::tessera::client::Call;
using ::tessera::client::DTensor;
using ::tessera::client::Session;
using ::tessera::testing::StatusIs;
using ::tessera::testing::TensorsMatch;

struct Shared {
  testing::TestCluster cluster;
  std::shared_ptr<Session> stream;  // op_stream on: ops planned by the client
  std::shared_ptr<Session> unary;   // op_stream off: the coordinator's answers, one call each
  std::optional<client::Mesh> stream_mesh, unary_mesh;
};
Shared* shared = nullptr;

absl::StatusOr<std::shared_ptr<Session>> Connect(bool op_stream) {
  client::SessionOptions options;
  options.op_stream = op_stream;
  options.timeout = absl::Seconds(30);
  return Session::Connect(shared->cluster.cluster->address(), options);
}

class RegistryOpsEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    shared = new Shared;
    ASSERT_TRUE(shared->cluster.Start(testing::TestClusterOptions(2)).ok());
    ASSERT_TRUE(
        client::InitDeviceMesh(*shared->cluster.client, testing::TestDevice(), {2}, {"x"}, "pair")
            .ok());
    for (bool op_stream : {true, false}) {
      absl::StatusOr<std::shared_ptr<Session>> s = Connect(op_stream);
      ASSERT_TRUE(s.ok()) << s.status();
      absl::StatusOr<client::Mesh> m = client::GetMesh(**s, "pair");
      ASSERT_TRUE(m.ok()) << m.status();
      (op_stream ? shared->stream : shared->unary) = *s;
      (op_stream ? shared->stream_mesh : shared->unary_mesh) = *m;
    }
  }
  void TearDown() override {
    shared->stream.reset();
    shared->unary.reset();
    shared->cluster.Stop();
    delete shared;
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new RegistryOpsEnvironment);

Session& S(bool op_stream) { return op_stream ? *shared->stream : *shared->unary; }
const client::Mesh& M(bool op_stream) {
  return op_stream ? *shared->stream_mesh : *shared->unary_mesh;
}

constexpr int64_t kRows = 5, kCols = 3;

// [rows, cols] float32 with element (i, j) = scale * (i * cols + j) + offset.
HostTensor Ramp(int64_t rows, int64_t cols, float scale, float offset) {
  std::vector<float> v(rows * cols);
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(i) + offset;
  return HostTensor::FromValues(DType::kFloat32, {rows, cols}, v);
}
// The test's input x: -3.25 to 3.75 in steps of 0.5, so no element is zero (a P(sum) reduced with
// zeros stays bit-equal) and some are negative.
HostTensor X() { return Ramp(kRows, kCols, 0.5f, -3.25f); }

// Element (i, j) of a [rows, cols] float32 tensor.
float At(const HostTensor& t, int64_t i, int64_t j) {
  return t.data_as<float>()[i * t.shape()[1] + j];
}

// A [rows, cols] tensor of `dtype` (float32 or float64) whose element (i, j) is f(i, j).
HostTensor Make(int64_t rows, int64_t cols, const std::function<double(int64_t, int64_t)>& f,
                DType dtype = DType::kFloat32) {
  HostTensor t = HostTensor::ZerosOfValidShape(dtype, {rows, cols});
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      if (dtype == DType::kFloat64) {
        t.data_as<double>()[i * cols + j] = f(i, j);
      } else {
        t.data_as<float>()[i * cols + j] = static_cast<float>(f(i, j));
      }
    }
  }
  return t;
}

// softmax (or log_softmax) of a [rows, cols] float32 tensor along `dim`, in double.
HostTensor SoftmaxOf(const HostTensor& x, int dim, bool log, DType dtype = DType::kFloat32) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  return Make(
      rows, cols,
      [&](int64_t i, int64_t j) {
        const int64_t n = dim == 0 ? rows : cols;
        double max = -INFINITY;
        for (int64_t k = 0; k < n; ++k)
          max = std::max<double>(max, dim == 0 ? At(x, k, j) : At(x, i, k));
        double sum = 0;
        for (int64_t k = 0; k < n; ++k)
          sum += std::exp((dim == 0 ? At(x, k, j) : At(x, i, k)) - max);
        const double shifted = At(x, i, j) - max;
        return log ? shifted - std::log(sum) : std::exp(shifted) / sum;
      },
      dtype);
}

absl::StatusOr<DTensor> Put(bool op_stream, const HostTensor& t, Placement p) {
  return client::DistributeTensor(S(op_stream), t, M(op_stream), {p});
}

// `out` is ok, says the shape and dtype of `want` before any download (on the op stream, the
// client's own plan), and downloads as `want` (torch's assert_close rule with the tolerances).
::testing::AssertionResult Gives(const absl::StatusOr<DTensor>& out, const HostTensor& want,
                                 double rtol = 0, double atol = 0) {
  if (!out.ok()) return ::testing::AssertionFailure() << out.status();
  if (out->shape() != want.shape() || out->dtype() != want.dtype()) {
    return ::testing::AssertionFailure()
           << "the handle says " << DTypeName(out->dtype()) << ShapeToString(out->shape())
           << ", want " << DTypeName(want.dtype()) << ShapeToString(want.shape());
  }
  absl::StatusOr<HostTensor> got = out->FullTensor();
  if (!got.ok()) return ::testing::AssertionFailure() << got.status();
  return TensorsMatch(*got, want, rtol, atol);
}

// (op stream, x's placement): S(0) and S(1) are uneven on the 2-rank mesh.
using OpsCase = std::tuple<bool, Placement>;

class RegistryOpsTest : public ::testing::TestWithParam<OpsCase> {
 protected:
  void SetUp() override {
    absl::StatusOr<DTensor> x = Put(stream(), X(), placement());
    ASSERT_TRUE(x.ok()) << x.status();
    x_ = *x;
  }
  bool stream() const { return std::get<0>(GetParam()); }
  Placement placement() const { return std::get<1>(GetParam()); }
  // `t` laid out as x is.
  DTensor Like(const HostTensor& t) const {
    absl::StatusOr<DTensor> d = Put(stream(), t, placement());
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *d : DTensor();
  }
  DTensor Replicated(const HostTensor& t) const {
    absl::StatusOr<DTensor> d = Put(stream(), t, Placement::Replicate());
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *d : DTensor();
  }

  DTensor x_;
};

TEST_P(RegistryOpsTest, SoftmaxLogSoftmaxAndExp) {
  const HostTensor x = X();
  EXPECT_TRUE(Gives(Call("aten::softmax.int", {x_, -1}), SoftmaxOf(x, 1, false), 1e-5, 1e-7));
  EXPECT_TRUE(Gives(Call("softmax", {x_, 0, std::nullopt}), SoftmaxOf(x, 0, false), 1e-5, 1e-7));
  EXPECT_TRUE(Gives(client::Softmax(x_, 1), SoftmaxOf(x, 1, false), 1e-5, 1e-7));
  EXPECT_TRUE(Gives(client::Softmax(x_, 0, DType::kFloat64),
                    SoftmaxOf(x, 0, false, DType::kFloat64), 1e-12, 1e-15));
  EXPECT_TRUE(Gives(client::LogSoftmax(x_, 1), SoftmaxOf(x, 1, true), 1e-5, 1e-6));
  EXPECT_TRUE(
      Gives(Call("log_softmax.int", {x_, Arg("dim", 0)}), SoftmaxOf(x, 0, true), 1e-5, 1e-6));
  EXPECT_TRUE(Gives(client::Exp(x_),
                    Make(kRows, kCols, [&](int64_t i, int64_t j) { return std::exp(At(x, i, j)); }),
                    1e-6, 0));
}

TEST_P(RegistryOpsTest, ViewsAreTheHostTensorsBytes) {
  const HostTensor x = X();
  const auto transposed = Make(kCols, kRows, [&](int64_t i, int64_t j) { return At(x, j, i); });
  EXPECT_TRUE(Gives(Call("transpose.int", {x_, 0, 1}), transposed));
  EXPECT_TRUE(Gives(client::Permute(x_, {1, 0}), transposed));
  EXPECT_TRUE(Gives(Call("aten::permute", {x_, {-1, 0}}), transposed));
  HostTensor flat = x.Clone();
  ASSERT_TRUE(flat.Reshape({kRows * kCols}).ok());
  EXPECT_TRUE(Gives(client::View(x_, {kRows * kCols}), flat));
  HostTensor three_by_five = x.Clone();
  ASSERT_TRUE(three_by_five.Reshape({3, 5}).ok());
  EXPECT_TRUE(Gives(client::Reshape(x_, {3, -1}), three_by_five));
  EXPECT_TRUE(Gives(Call("view", {x_, {-1, 5}}), three_by_five));
  HostTensor unsqueezed = x.Clone();
  ASSERT_TRUE(unsqueezed.Reshape({kRows, 1, kCols}).ok());
  EXPECT_TRUE(Gives(client::Unsqueeze(x_, 1), unsqueezed));
  EXPECT_TRUE(Gives(client::Unsqueeze(x_, -2), unsqueezed));
}

TEST_P(RegistryOpsTest, ReductionsWithKeywordsAndDtypes) {
  const HostTensor x = X();
  const auto row_sums = Make(kRows, 1, [&](int64_t i, int64_t) {
    double s = 0;
    for (int64_t j = 0; j < kCols; ++j) s += At(x, i, j);
    return s;
  });
  EXPECT_TRUE(
      Gives(Call("sum.dim_IntList", {x_, {1}, Arg("keepdim", true)}), row_sums, 1e-6, 1e-6));
  HostTensor col_means = Make(1, kCols, [&](int64_t, int64_t j) {
    double s = 0;
    for (int64_t i = 0; i < kRows; ++i) s += At(x, i, j);
    return s / kRows;
  });
  ASSERT_TRUE(col_means.Reshape({kCols}).ok());
  EXPECT_TRUE(Gives(Call("mean.dim", {x_, {0}}), col_means, 1e-6, 1e-6));
  double total = 0;
  for (int64_t i = 0; i < kRows * kCols; ++i) total += x.data_as<float>()[i];
  EXPECT_TRUE(Gives(Call("aten::sum", {x_, Arg("dtype", DType::kFloat64)}),
                    HostTensor::FromValues(DType::kFloat64, {}, std::vector<double>{total}), 1e-12,
                    1e-12));
  EXPECT_TRUE(
      Gives(Call("_to_copy", {x_, Arg("dtype", DType::kFloat64)}),
            Make(
                kRows, kCols, [&](int64_t i, int64_t j) { return At(x, i, j); }, DType::kFloat64)));
}

TEST_P(RegistryOpsTest, CatSliceAndSelect) {
  const HostTensor x = X(), y = Ramp(kRows, kCols, -0.25f, 9.125f);
  const DTensor y_ = Like(y);
  EXPECT_TRUE(Gives(client::Cat({x_, y_}), Make(2 * kRows, kCols, [&](int64_t i, int64_t j) {
                      return i < kRows ? At(x, i, j) : At(y, i - kRows, j);
                    })));
  EXPECT_TRUE(Gives(Call("cat", {std::vector<DTensor>{x_, y_, x_}, 1}),
                    Make(kRows, 3 * kCols, [&](int64_t i, int64_t j) {
                      return j / kCols == 1 ? At(y, i, j % kCols) : At(x, i, j % kCols);
                    })));
  EXPECT_TRUE(Gives(client::Slice(x_, 0, 1, 4),
                    Make(3, kCols, [&](int64_t i, int64_t j) { return At(x, i + 1, j); })));
  EXPECT_TRUE(Gives(client::Slice(x_, 1, std::nullopt, std::nullopt, 2),
                    Make(kRows, 2, [&](int64_t i, int64_t j) { return At(x, i, 2 * j); })));
  EXPECT_TRUE(Gives(Call("slice.Tensor", {x_, 0, -2, std::nullopt}),
                    Make(2, kCols, [&](int64_t i, int64_t j) { return At(x, i + 3, j); })));
  HostTensor column = Make(kRows, 1, [&](int64_t i, int64_t) { return At(x, i, 2); });
  ASSERT_TRUE(column.Reshape({kRows}).ok());
  EXPECT_TRUE(Gives(client::Select(x_, 1, 2), column));
  HostTensor last_row = Make(1, kCols, [&](int64_t, int64_t j) { return At(x, kRows - 1, j); });
  ASSERT_TRUE(last_row.Reshape({kCols}).ok());
  EXPECT_TRUE(Gives(Call("select.int", {x_, 0, -1}), last_row));
}

TEST_P(RegistryOpsTest, WhereOnAComparisonWithANumber) {
  const HostTensor x = X(), y = Ramp(kRows, kCols, -0.25f, 9.125f);
  absl::StatusOr<DTensor> positive = Call("gt.Scalar", {x_, 0.0});
  ASSERT_TRUE(positive.ok()) << positive.status();
  EXPECT_EQ(positive->dtype(), DType::kBool);
  EXPECT_TRUE(
      Gives(client::Where(*positive, x_, Like(y)), Make(kRows, kCols, [&](int64_t i, int64_t j) {
              return At(x, i, j) > 0 ? At(x, i, j) : At(y, i, j);
            })));
}

TEST_P(RegistryOpsTest, LinearAndEmbedding) {
  const HostTensor x = X();
  const HostTensor w = Ramp(4, kCols, 0.125f, -0.75f);
  const HostTensor b =
      HostTensor::FromValues(DType::kFloat32, {4}, std::vector<float>{1, -2, 3, .5f});
  const DTensor w_ = Replicated(w), b_ = Replicated(b);
  const auto xwt = [&](int64_t i, int64_t o) {
    double s = 0;
    for (int64_t k = 0; k < kCols; ++k) s += static_cast<double>(At(x, i, k)) * At(w, o, k);
    return s;
  };
  EXPECT_TRUE(Gives(client::Linear(x_, w_), Make(kRows, 4, xwt), 1e-5, 1e-5));
  EXPECT_TRUE(
      Gives(client::Linear(x_, w_, b_),
            Make(kRows, 4, [&](int64_t i, int64_t o) { return xwt(i, o) + b.data_as<float>()[o]; }),
            1e-5, 1e-5));
  // A weight of 7 rows laid out as x is (S(0): a vocab-sharded 4 + 3), looked up by an int64
  // index tensor.
  const HostTensor table = Ramp(7, kCols, 0.25f, 1.0f);
  const std::vector<int64_t> rows = {6, 0, 2, 6};
  const DTensor indices = Replicated(HostTensor::FromValues(DType::kInt64, {4}, rows));
  EXPECT_TRUE(Gives(client::Embedding(Like(table), indices),
                    Make(4, kCols, [&](int64_t i, int64_t j) { return At(table, rows[i], j); })));
}

TEST_P(RegistryOpsTest, CrossEntropyRunsAsItsDecomposition) {
  // x's rows as logits over kCols classes (sharded by rows, by classes, or replicated).
  const HostTensor x = X();
  const std::vector<int64_t> targets = {2, 0, 1, 1, 2};
  const DTensor target = Replicated(HostTensor::FromValues(DType::kInt64, {kRows}, targets));
  const HostTensor w =
      HostTensor::FromValues(DType::kFloat32, {kCols}, std::vector<float>{0.5f, 2, 1.5f});
  std::vector<double> loss(kRows);
  double sum = 0, weights = 0;
  for (int64_t i = 0; i < kRows; ++i) {
    double max = -1e300, exps = 0;
    for (int64_t k = 0; k < kCols; ++k) max = std::max(max, static_cast<double>(At(x, i, k)));
    for (int64_t k = 0; k < kCols; ++k) exps += std::exp(At(x, i, k) - max);
    const int64_t t = targets[i];
    loss[i] = -w.data_as<float>()[t] * (At(x, i, t) - max - std::log(exps));
    sum += loss[i];
    weights += w.data_as<float>()[t];
  }
  client::CrossEntropyOptions options;
  options.weight = Replicated(w);
  EXPECT_TRUE(Gives(client::CrossEntropy(x_, target, options),
                    HostTensor::FromValues(DType::kFloat32, {},
                                           std::vector<float>{static_cast<float>(sum / weights)}),
                    1e-5, 1e-5));
  options.reduction = client::LossReduction::kNone;
  const std::vector<float> rows(loss.begin(), loss.end());
  EXPECT_TRUE(Gives(client::CrossEntropy(x_, target, options),
                    HostTensor::FromValues(DType::kFloat32, {kRows}, rows), 1e-5, 1e-5));
  // A target out of range fails on first touch, naming it; x is intact.
  const DTensor bad = Replicated(
      HostTensor::FromValues(DType::kInt64, {kRows}, std::vector<int64_t>{0, 7, 0, 0, 0}));
  absl::StatusOr<DTensor> failed = client::CrossEntropy(x_, bad);
  const absl::Status error = failed.ok() ? failed->FullTensor().status() : failed.status();
  EXPECT_TRUE(StatusIs(error, absl::StatusCode::kInvalidArgument, {"target 7"}));
  EXPECT_TRUE(Gives(absl::StatusOr<DTensor>(x_), x));
}

TEST_P(RegistryOpsTest, OpsWithSeveralOutputs) {
  const HostTensor x = X();  // increasing along both dims
  auto column = [&](int64_t j) {
    return Make(kRows, 1, [&](int64_t i, int64_t) { return At(x, i, j); });
  };
  absl::StatusOr<client::ValuesAndIndices> max = client::MaxAlong(x_, 1, /*keepdim=*/true);
  ASSERT_TRUE(max.ok()) << max.status();
  EXPECT_TRUE(Gives(max->values, column(kCols - 1)));
  EXPECT_TRUE(Gives(max->indices, HostTensor::FromValues(DType::kInt64, {kRows, 1},
                                                         std::vector<int64_t>(kRows, kCols - 1))));
  EXPECT_EQ(max->values.spec().placements, max->indices.spec().placements);
  // Descending along the classes: each row reversed.
  absl::StatusOr<client::ValuesAndIndices> sorted = client::Sort(x_, 1, /*descending=*/true);
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  EXPECT_TRUE(Gives(sorted->values, Make(kRows, kCols, [&](int64_t i, int64_t j) {
                      return At(x, i, kCols - 1 - j);
                    })));
  std::vector<int64_t> reversed;
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kCols; ++j) reversed.push_back(kCols - 1 - j);
  }
  EXPECT_TRUE(
      Gives(sorted->indices, HostTensor::FromValues(DType::kInt64, {kRows, kCols}, reversed)));
  // The two largest rows.
  absl::StatusOr<client::ValuesAndIndices> top = client::TopK(x_, 2, 0);
  ASSERT_TRUE(top.ok()) << top.status();
  EXPECT_TRUE(Gives(top->values,
                    Make(2, kCols, [&](int64_t i, int64_t j) { return At(x, kRows - 1 - i, j); })));
  EXPECT_TRUE(Gives(top->indices, HostTensor::FromValues(DType::kInt64, {2, kCols},
                                                         std::vector<int64_t>{4, 4, 4, 3, 3, 3})));
  // split: rows [0, 2), [2, 4), [4, 5), one call.
  absl::StatusOr<std::vector<DTensor>> pieces = client::Split(x_, 2, 0);
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  ASSERT_EQ(pieces->size(), 3u);
  for (int64_t k = 0; k < 3; ++k) {
    const int64_t rows = k == 2 ? 1 : 2;
    EXPECT_TRUE(Gives((*pieces)[k],
                      Make(rows, kCols, [&](int64_t i, int64_t j) { return At(x, 2 * k + i, j); })))
        << "piece " << k;
  }
  absl::StatusOr<std::vector<DTensor>> columns = client::Unbind(x_, 1);
  ASSERT_TRUE(columns.ok()) << columns.status();
  ASSERT_EQ(columns->size(), static_cast<size_t>(kCols));
  for (int64_t j = 0; j < kCols; ++j) {
    HostTensor want = column(j);
    EXPECT_TRUE(Gives((*columns)[j],
                      HostTensor::FromValues(DType::kFloat32, {kRows},
                                             std::vector<float>(want.data_as<float>(),
                                                                want.data_as<float>() + kRows))));
  }
  // k beyond the dim: INVALID_ARGUMENT naming k, on first touch on the op stream; x intact.
  absl::StatusOr<client::ValuesAndIndices> bad = client::TopK(x_, kCols + 1, 1);
  const absl::Status error = bad.ok() ? bad->indices.FullTensor().status() : bad.status();
  EXPECT_TRUE(StatusIs(error, absl::StatusCode::kInvalidArgument, {"'k'", "4"}));
  EXPECT_TRUE(Gives(absl::StatusOr<DTensor>(x_), x));
}

TEST_P(RegistryOpsTest, NumbersStringsAndRepeatedTensors) {
  const HostTensor x = X();
  // A number for a Tensor argument is a wrapped number: float32 stays float32.
  EXPECT_TRUE(Gives(Call("mul.Tensor", {x_, 2}),
                    Make(kRows, kCols, [&](int64_t i, int64_t j) { return 2 * At(x, i, j); })));
  // x given twice is one input.
  EXPECT_TRUE(Gives(Call("add.Tensor", {x_, x_, Arg("alpha", 2)}),
                    Make(kRows, kCols, [&](int64_t i, int64_t j) { return 3 * At(x, i, j); }), 1e-6,
                    0));
  const auto gelu_tanh = [&](int64_t i, int64_t j) {
    const double v = At(x, i, j);
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
  };
  EXPECT_TRUE(Gives(Call("gelu", {x_, Arg("approximate", "tanh")}), Make(kRows, kCols, gelu_tanh),
                    1e-5, 1e-6));
}

// The op stream's plan is the coordinator's: the same metadata and redistributions as the unary
// session's answer, and the same values.
TEST_P(RegistryOpsTest, TheStreamPlansAsTheCoordinator) {
  if (!stream()) GTEST_SKIP() << "compares the op stream with the unary path";
  const HostTensor x = X();
  absl::StatusOr<DTensor> ux = Put(false, x, placement());
  ASSERT_TRUE(ux.ok()) << ux.status();
  const HostTensor w = Ramp(4, kCols, 0.125f, -0.75f);
  absl::StatusOr<DTensor> sw = Put(true, w, Placement::Replicate());
  absl::StatusOr<DTensor> uw = Put(false, w, Placement::Replicate());
  ASSERT_TRUE(sw.ok() && uw.ok()) << sw.status() << uw.status();
  using Op = std::function<absl::StatusOr<DTensor>(const DTensor&, const DTensor&)>;
  const std::vector<std::pair<std::string, Op>> ops = {
      {"softmax over dim 1",
       [](const DTensor& a, const DTensor&) { return client::Softmax(a, 1); }},
      {"sum over dim 1",
       [](const DTensor& a, const DTensor&) {
         return Call("sum.dim_IntList", {a, {1}});
       }},
      {"cat along dim 0",
       [](const DTensor& a, const DTensor&) {
         return client::Cat({a, a}, 0);
       }},
      {"view as [15]", [](const DTensor& a, const DTensor&) { return client::View(a, {15}); }},
      {"linear", [](const DTensor& a, const DTensor& b) { return client::Linear(a, b); }},
  };
  for (const auto& [what, op] : ops) {
    SCOPED_TRACE(what);
    absl::StatusOr<DTensor> planned = op(x_, *sw);
    absl::StatusOr<DTensor> answered = op(*ux, *uw);
    ASSERT_TRUE(planned.ok()) << planned.status();
    ASSERT_TRUE(answered.ok()) << answered.status();
    EXPECT_EQ(planned->shape(), answered->shape());
    EXPECT_EQ(planned->dtype(), answered->dtype());
    EXPECT_EQ(PlacementsToString(planned->placements()),
              PlacementsToString(answered->placements()));
    EXPECT_TRUE(planned->info().shards == answered->info().shards);
    EXPECT_EQ(planned->info().nbytes, answered->info().nbytes);
    const auto& a = planned->redistributions();
    const auto& b = answered->redistributions();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(PlacementsToString(a[i].from), PlacementsToString(b[i].from));
      EXPECT_EQ(PlacementsToString(a[i].to), PlacementsToString(b[i].to));
      EXPECT_EQ(a[i].plan.ToString(), b[i].plan.ToString());
    }
    absl::StatusOr<client::DTensorInfo> refreshed = planned->Refresh();
    ASSERT_TRUE(refreshed.ok()) << refreshed.status();
    EXPECT_EQ(refreshed->spec.shape, planned->shape());
    EXPECT_EQ(PlacementsToString(refreshed->spec.placements),
              PlacementsToString(planned->placements()));
    absl::StatusOr<HostTensor> got = planned->FullTensor();
    absl::StatusOr<HostTensor> want = answered->FullTensor();
    ASSERT_TRUE(got.ok() && want.ok()) << got.status() << want.status();
    EXPECT_TRUE(TensorsMatch(*got, *want));
  }
  // Softmax over a sharded dim needs it whole: the inputs' redistribution is reported.
  absl::StatusOr<DTensor> s = client::Softmax(x_, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->redistributions().empty(), placement() != Placement::Shard(1));
}

INSTANTIATE_TEST_SUITE_P(StreamAndUnary, RegistryOpsTest,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(Placement::Shard(0),
                                                              Placement::Shard(1),
                                                              Placement::Replicate())),
                         [](const ::testing::TestParamInfo<OpsCase>& info) {
                           const Placement& p = std::get<1>(info.param);
                           return absl::StrCat(
                               std::get<0>(info.param) ? "Stream" : "Unary",
                               p.is_shard() ? absl::StrCat("Shard", p.dim) : "Replicate");
                         });

class RegistryOpErrorsTest : public ::testing::TestWithParam<bool> {};

// What the client or the coordinator refuses comes back from Call itself on either path, with
// the code and the names; no tensor changes.
TEST_P(RegistryOpErrorsTest, UnknownOpsAndBadArgumentsAreRefused) {
  const bool stream = GetParam();
  absl::StatusOr<DTensor> x = Put(stream, X(), Placement::Shard(0));
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_TRUE(StatusIs(Call("aten::no_such_op", {*x}).status(), absl::StatusCode::kUnimplemented,
                       {"aten::no_such_op"}));
  EXPECT_TRUE(StatusIs(Call("no_such_op.Tensor", {*x, 1}).status(),
                       absl::StatusCode::kUnimplemented, {"aten::no_such_op.Tensor"}));
  EXPECT_TRUE(StatusIs(Call("softmax.int", {*x, 1.5}).status(), absl::StatusCode::kInvalidArgument,
                       {"aten::softmax.int", "'dim'", "1.5"}));
  EXPECT_TRUE(StatusIs(Call("softmax.int", {*x}).status(), absl::StatusCode::kInvalidArgument,
                       {"aten::softmax.int", "'dim'"}));
  EXPECT_TRUE(StatusIs(Call("softmax.int", {*x, Arg("axis", 1)}).status(),
                       absl::StatusCode::kInvalidArgument, {"aten::softmax.int", "'axis'"}));
  EXPECT_TRUE(StatusIs(Call("gelu", {*x, Arg("approximate", "fast")}).status(),
                       absl::StatusCode::kInvalidArgument,
                       {"aten::gelu", "'approximate'", "fast"}));
  EXPECT_TRUE(StatusIs(Call("add.Tensor", {1, 2}).status(), absl::StatusCode::kInvalidArgument,
                       {"aten::add.Tensor", "DTensor"}));
  EXPECT_TRUE(StatusIs(Call("cat", {std::vector<DTensor>{*x, DTensor()}}).status(),
                       absl::StatusCode::kInvalidArgument, {"aten::cat", "argument 0", "empty"}));
  EXPECT_TRUE(StatusIs(client::View(*x, {4, 4}).status(), absl::StatusCode::kInvalidArgument,
                       {"aten::view"}));
  absl::StatusOr<HostTensor> still = x->FullTensor();
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_TRUE(TensorsMatch(*still, X()));
}

// An output name already taken is for the coordinator to refuse: on the op stream the handle
// comes back at once and carries the refusal; on the unary path the call fails.
TEST_P(RegistryOpErrorsTest, ATakenOutputNameFailsOnFirstTouch) {
  const bool stream = GetParam();
  absl::StatusOr<DTensor> x = Put(stream, X(), Placement::Shard(1));
  ASSERT_TRUE(x.ok()) << x.status();
  absl::StatusOr<DTensor> e = Call("exp", {*x}, x->name());
  if (stream) {
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_TRUE(StatusIs(e->Synchronize(), absl::StatusCode::kAlreadyExists, {x->name()}));
    e->Detach();  // it was never made; x must stay
  } else {
    EXPECT_TRUE(StatusIs(e.status(), absl::StatusCode::kAlreadyExists, {x->name()}));
  }
  e = absl::UnknownError("dropped");
  absl::StatusOr<HostTensor> still = x->FullTensor();
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_TRUE(TensorsMatch(*still, X()));
}

INSTANTIATE_TEST_SUITE_P(StreamAndUnary, RegistryOpErrorsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Stream" : "Unary");
                         });

TEST(ListOpsTest, TheCoordinatorListsTheRegistry) {
  absl::StatusOr<std::vector<client::OpInfo>> all = S(false).ListOps();
  ASSERT_TRUE(all.ok()) << all.status();
  const auto& registry = ops::Registry().ops();
  ASSERT_EQ(all->size(), registry.size());
  for (size_t i = 0; i < registry.size(); ++i) {
    EXPECT_EQ((*all)[i].name, registry[i]->name());
    EXPECT_EQ((*all)[i].schema, registry[i]->schema.text);
    EXPECT_EQ((*all)[i].family, ops::OpFamilyName(registry[i]->family));
  }
  absl::StatusOr<std::vector<client::OpInfo>> softmax = S(true).ListOps("softmax.int");
  ASSERT_TRUE(softmax.ok()) << softmax.status();
  ASSERT_FALSE(softmax->empty());
  bool found = false;
  for (const client::OpInfo& op : *softmax) {
    EXPECT_NE(op.name.find("softmax.int"), std::string::npos) << op.name;
    if (op.name != "aten::softmax.int") continue;
    found = true;
    EXPECT_EQ(op.schema, "softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor");
    EXPECT_FALSE(op.strategies.empty());
    EXPECT_FALSE(op.implementation.empty());
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace tessera
