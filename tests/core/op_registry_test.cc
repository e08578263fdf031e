// The op registry by hand: what it holds, what meta functions answer and how they fail, and the
// strategies DTensor would choose, worked out case by case.

#include "core/ops/op_registry.h"

#include <limits>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ops/factory_call.h"
#include "core/ops/op_propagation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::ops {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

NamedValue T(int i) { return {"", TensorRef{i}}; }
NamedValue P(OpValue v) { return {"", std::move(v)}; }
NamedValue A(std::string name, OpValue v) { return {std::move(name), std::move(v)}; }

absl::StatusOr<PreparedCall> Prepare(absl::string_view op, std::vector<NamedValue> args,
                                     std::vector<TensorMeta> inputs) {
  absl::StatusOr<const OpDef*> def = Registry().Find(op);
  if (!def.ok()) return def.status();
  return PrepareCall(**def, args, inputs);
}

TEST(OpRegistryTest, EveryOpIsComplete) {
  EXPECT_GE(Registry().ops().size(), 140u);
  for (const OpDef* op : Registry().ops()) {
    EXPECT_NE(op->meta, nullptr) << op->name();
    // Strategies of its own, or a decomposition whose nodes have theirs.
    EXPECT_NE(op->strategies == nullptr, op->decompose == nullptr) << op->name();
    EXPECT_FALSE(op->implementation.empty()) << op->name();
    EXPECT_FALSE(op->strategy_text.empty()) << op->name();
    EXPECT_EQ(op->name(), op->schema.QualifiedName());
  }
}

// The ops a derivative names that the registry does not hold yet (the backward ops of the
// indexing, scan and variance ops), each checked to be missing, so the list shrinks as they come.
const std::set<std::string>& NotYetRegistered() {
  static const auto* names =
      new std::set<std::string>{"cumprod_backward", "flip",   "index_add",
                                "inverse",          "square", "value_selecting_reduction_backward",
                                "var_backward"};
  return *names;
}

TEST(OpRegistryTest, DerivativesAreWrittenInRegisteredOps) {
  const std::regex call(R"(([A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_]+)?)\()");
  for (const OpDef* op : Registry().ops()) {
    for (std::sregex_iterator it(op->derivative.begin(), op->derivative.end(), call), end;
         it != end; ++it) {
      const std::string name = (*it)[1];
      if (NotYetRegistered().contains(name)) continue;
      // A name without its overload ("mul") stands for the op's overloads.
      EXPECT_NE(Registry().Find(name).status().code(), absl::StatusCode::kUnimplemented)
          << op->name() << "'s derivative names " << name << ", which is not registered";
    }
  }
  for (const std::string& name : NotYetRegistered()) {
    EXPECT_FALSE(Registry().Find(name).ok()) << name << " is registered now: drop it from the list";
  }
}

TEST(OpRegistryTest, FindsByQualifiedNameShortNameAndOnlyOverload) {
  EXPECT_EQ(Registry().Find("aten::softmax.int").value()->name(), "aten::softmax.int");
  EXPECT_EQ(Registry().Find("softmax.int").value()->name(), "aten::softmax.int");
  EXPECT_EQ(Registry().Find("softmax").value()->name(), "aten::softmax.int");
  EXPECT_EQ(Registry().Find("exp").value()->name(), "aten::exp");
  absl::StatusOr<const OpDef*> unknown = Registry().Find("aten::fft_fft");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(unknown.status().message(), HasSubstr("aten::fft_fft"));
  absl::StatusOr<const OpDef*> several = Registry().Find("add");
  EXPECT_EQ(several.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(several.status().message(), AllOf(HasSubstr("add.Tensor"), HasSubstr("add.Scalar")));
}

TEST(OpMetaTest, TypePromotionAsTorch) {
  const TensorMeta i32{{4}, DType::kInt32};
  const TensorMeta f16{{4}, DType::kFloat16};
  const TensorMeta f64_0d{{}, DType::kFloat64};
  EXPECT_EQ(Prepare("add.Tensor", {T(0), P(int64_t{2})}, {i32})->call.output.dtype, DType::kInt32);
  EXPECT_EQ(Prepare("add.Tensor", {T(0), P(2.5)}, {i32})->call.output.dtype, DType::kFloat32);
  EXPECT_EQ(Prepare("mul.Tensor", {T(0), T(1)}, {f16, f64_0d})->call.output.dtype, DType::kFloat16);
  EXPECT_EQ(Prepare("div.Tensor", {T(0), T(0)}, {i32})->call.output.dtype, DType::kFloat32);
  EXPECT_EQ(Prepare("exp", {T(0)}, {i32})->call.output.dtype, DType::kFloat32);
  EXPECT_EQ(Prepare("eq.Scalar", {T(0), P(1.0)}, {f16})->call.output.dtype, DType::kBool);
  EXPECT_EQ(Prepare("sum", {T(0)}, {i32})->call.output.dtype, DType::kInt64);
  EXPECT_EQ(Prepare("sum", {T(0), A("dtype", DType::kFloat64)}, {i32})->call.output.dtype,
            DType::kFloat64);
  EXPECT_EQ(Prepare("argmax", {T(0)}, {f16})->call.output.dtype, DType::kInt64);
  EXPECT_EQ(
      Prepare("where.self", {T(0), T(1), P(0.5)}, {{{4}, DType::kBool}, i32})->call.output.dtype,
      DType::kFloat32);
  EXPECT_EQ(Prepare("_softmax", {T(0), P(int64_t{0}), P(true)}, {f16})->call.output.dtype,
            DType::kFloat32);
}

TEST(OpMetaTest, ShapesAsTorch) {
  const TensorMeta x{{2, 3, 4}, DType::kFloat32};
  auto shape = [](absl::StatusOr<PreparedCall> p) {
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? p->call.output.shape : Shape{-1};
  };
  EXPECT_EQ(shape(Prepare("sum.dim_IntList", {T(0), P(std::vector<int64_t>{-1, 0})}, {x})),
            (Shape{3}));
  EXPECT_EQ(shape(Prepare("mean.dim", {T(0), P(int64_t{1}), P(true)}, {x})), (Shape{2, 1, 4}));
  EXPECT_EQ(shape(Prepare("argmax", {T(0), A("keepdim", true)}, {x})), (Shape{1, 1, 1}));
  EXPECT_EQ(shape(Prepare("view", {T(0), P(std::vector<int64_t>{-1, 4})}, {x})), (Shape{6, 4}));
  EXPECT_EQ(shape(Prepare("matmul", {T(0), T(1)}, {x, {{5, 1, 4, 2}, DType::kFloat32}})),
            (Shape{5, 2, 3, 2}));
  EXPECT_EQ(shape(Prepare("matmul", {T(0), T(1)}, {{{3}, DType::kFloat32}, x})), (Shape{2, 4}));
  EXPECT_EQ(
      shape(Prepare("slice.Tensor",
                    {T(0), P(int64_t{2}), P(int64_t{1}), P(int64_t{100}), P(int64_t{2})}, {x})),
      (Shape{2, 3, 2}));
  EXPECT_EQ(
      shape(Prepare("slice.Tensor", {T(0), P(int64_t{1}), P(int64_t{-1}), P(int64_t{-3})}, {x})),
      (Shape{2, 0, 4}));
  EXPECT_EQ(shape(Prepare("select.int", {T(0), P(int64_t{-1}), P(int64_t{-4})}, {x})),
            (Shape{2, 3}));
  EXPECT_EQ(shape(Prepare("cat", {P(TensorList{{0, 1}}), P(int64_t{1})},
                          {x, {{2, 5, 4}, DType::kFloat32}})),
            (Shape{2, 8, 4}));
  EXPECT_EQ(shape(Prepare("stack", {P(TensorList{{0, 0}}), P(int64_t{-1})}, {x})),
            (Shape{2, 3, 4, 2}));
  EXPECT_EQ(shape(Prepare("embedding", {T(0), T(1)},
                          {{{10, 4}, DType::kFloat32}, {{2, 3}, DType::kInt64}})),
            (Shape{2, 3, 4}));
  EXPECT_EQ(shape(Prepare("linear", {T(0), T(1)}, {x, {{7, 4}, DType::kFloat32}})),
            (Shape{2, 3, 7}));
}

TEST(OpMetaTest, ErrorsNameTheOpArgumentAndValue) {
  const TensorMeta x{{2, 3}, DType::kFloat32};
  absl::Status s = Prepare("softmax.int", {T(0), P(int64_t{2})}, {x}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("aten::softmax.int"), HasSubstr("'dim'"), HasSubstr("2")));
  s = Prepare("softmax.int", {T(0), P(1.5)}, {x}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'dim'"), HasSubstr("1.5")));
  s = Prepare("mm", {T(0), T(0)}, {x}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("aten::mm"), HasSubstr("[2, 3]")));
  s = Prepare("add.Tensor", {T(0), T(1)}, {x, {{4}, DType::kFloat32}}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("[2, 3]"), HasSubstr("[4]")));
  s = Prepare("mean", {T(0)}, {{{2}, DType::kInt32}}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("aten::mean"), HasSubstr("int32")));
  s = Prepare("bitwise_and.Tensor", {T(0), T(0)}, {x}).status();
  EXPECT_THAT(s.message(), HasSubstr("float32"));
  s = Prepare("amax", {T(0), P(std::vector<int64_t>{0})}, {{{0, 3}, DType::kFloat32}}).status();
  EXPECT_THAT(s.message(), HasSubstr("empty"));
  s = Prepare("gelu", {T(0), A("approximate", std::string("fast"))}, {x}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'approximate'"), HasSubstr("fast")));
  s = Prepare("select.int", {T(0), P(int64_t{0}), P(int64_t{2})}, {x}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'index'"), HasSubstr("2")));
  s = Prepare("view", {T(0), P(std::vector<int64_t>{4, 2})}, {x}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = Prepare("index_select", {T(0), P(int64_t{0}), T(0)}, {x}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'index'"), HasSubstr("float32")));
}

TEST(OpMetaTest, IndexingShapesAsTorch) {
  const TensorMeta x{{2, 3, 4}, DType::kFloat32};
  auto ids = [](Shape shape) { return TensorMeta{std::move(shape), DType::kInt64}; };
  auto shape = [](absl::StatusOr<PreparedCall> p) {
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? p->call.output.shape : Shape{-1};
  };
  EXPECT_EQ(shape(Prepare("gather", {T(0), P(int64_t{1}), T(1)}, {x, ids({2, 5, 3})})),
            (Shape{2, 5, 3}));
  // x[i, :, j]: dims apart, the index shape first; x[:, i, j]: in place.
  EXPECT_EQ(
      shape(Prepare("index.Tensor", {T(0), P(TensorList{{1, -1, 2}})}, {x, ids({5}), ids({5})})),
      (Shape{5, 3}));
  EXPECT_EQ(shape(Prepare("index.Tensor", {T(0), P(TensorList{{-1, 1, 2}})},
                          {x, ids({2, 1}), {{3}, DType::kInt32}})),
            (Shape{2, 2, 3}));
  EXPECT_EQ(shape(Prepare("index.Tensor", {T(0), P(TensorList{{1}})}, {x, ids({})})),
            (Shape{3, 4}));
  EXPECT_EQ(shape(Prepare("index_put", {T(0), P(TensorList{{-1, 1}}), T(2)},
                          {x, ids({5}), {{4}, DType::kFloat32}})),
            (Shape{2, 3, 4}));
  EXPECT_EQ(shape(Prepare("scatter_add", {T(0), P(int64_t{0}), T(1), T(2)},
                          {x, ids({5, 3, 4}), {{5, 3, 4}, DType::kFloat32}})),
            (Shape{2, 3, 4}));
}

TEST(OpMetaTest, IndexingErrorsNameTheArgument) {
  const TensorMeta x{{2, 3}, DType::kFloat32};
  const TensorMeta ids{{2, 3}, DType::kInt64};
  absl::Status s =
      Prepare("index.Tensor", {T(0), P(TensorList{{1}})}, {x, {{2}, DType::kBool}}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("aten::index.Tensor"), HasSubstr("'indices'"),
                                 HasSubstr("mask"), HasSubstr("masked_fill")));
  s = Prepare("index.Tensor", {T(0), P(TensorList{{1}})}, {x, {{2}, DType::kFloat32}}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("int64 or int32"), HasSubstr("float32")));
  s = Prepare("index.Tensor", {T(0), P(TensorList{{1, 1, 1}})}, {x, ids}).status();
  EXPECT_THAT(s.message(), HasSubstr("too many indices"));
  s = Prepare("index.Tensor", {T(0), P(TensorList{{1, 2}})}, {x, {{2}, DType::kInt64}, ids})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("[2]"), HasSubstr("[2, 3]")));
  s = Prepare("gather", {T(0), P(int64_t{0}), T(1)}, {x, {{2, 3}, DType::kInt32}}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'index'"), HasSubstr("int64"), HasSubstr("int32")));
  s = Prepare("gather", {T(0), P(int64_t{0}), T(1)}, {x, {{2, 4}, DType::kInt64}}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'index'"), HasSubstr("larger"), HasSubstr("dim 1")));
  s = Prepare("gather", {T(0), P(int64_t{0}), T(1)}, {x, {{6}, DType::kInt64}}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'index'"), HasSubstr("dims")));
  s = Prepare("scatter.src", {T(0), P(int64_t{0}), T(1), T(2)}, {x, ids, {{2, 3}, DType::kFloat64}})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'src'"), HasSubstr("float64")));
  s = Prepare("scatter_add", {T(0), P(int64_t{0}), T(1), T(2)}, {x, ids, {{2, 2}, DType::kFloat32}})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'index'"), HasSubstr("src")));
  s = Prepare("index_put", {T(0), P(TensorList{{1}}), T(2)},
              {x, {{4}, DType::kInt64}, {{4, 2}, DType::kFloat32}})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'values'"), HasSubstr("[4, 2]"), HasSubstr("[4, 3]")));
  s = Prepare("index_put", {T(0), P(TensorList{{1}}), T(2)},
              {x, {{4}, DType::kInt64}, {{3}, DType::kFloat64}})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'values'"), HasSubstr("float64")));
  s = Prepare("index_select", {T(0), P(int64_t{0}), T(1)},
              {{{}, DType::kFloat32}, {{2}, DType::kInt64}})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'index'"), HasSubstr("0-dim")));
}

class StrategyTest : public ::testing::Test {
 protected:
  DTensorSpec Spec(absl::string_view placements, Shape shape, DType dtype = DType::kFloat32) {
    return MakeDTensorSpec(mesh_, ParsePlacements(placements).value(), std::move(shape), dtype)
        .value();
  }
  // "(S(0)) x (R) -> (S(0))" of the plan for `op` on `specs`.
  std::string Chosen(absl::string_view op, std::vector<NamedValue> args,
                     std::vector<DTensorSpec> specs) {
    std::vector<TensorMeta> metas;
    for (const DTensorSpec& s : specs) metas.push_back({s.shape, s.dtype});
    absl::StatusOr<PreparedCall> p = Prepare(op, args, metas);
    if (!p.ok()) return p.status().ToString();
    std::vector<DTensorSpec> ordered;
    for (int i : p->input_of) ordered.push_back(specs[i]);
    absl::StatusOr<OpPlan> plan = PlanCall(p->call, ordered);
    if (!plan.ok()) return plan.status().ToString();
    std::vector<std::string> parts;
    for (const auto& in : plan->strategy.inputs) parts.push_back(PlacementsToString(in));
    return absl::StrCat(absl::StrJoin(parts, " x "), " -> ",
                        PlacementsToString(plan->strategy.output));
  }
  DeviceMesh mesh_ = DeviceMesh::Create("cpu", {2}).value();
};

TEST_F(StrategyTest, PointwiseKeepsShardsAndLinearPartials) {
  EXPECT_EQ(Chosen("add.Tensor", {T(0), T(1)}, {Spec("S(0)", {4, 6}), Spec("R", {6})}),
            "(S(0)) x (R) -> (S(0))");
  EXPECT_EQ(Chosen("add.Tensor", {T(0), T(1)}, {Spec("S(1)", {4, 6}), Spec("S(0)", {6})}),
            "(S(1)) x (S(0)) -> (S(1))");
  EXPECT_EQ(Chosen("add.Tensor", {T(0), T(1)}, {Spec("P(sum)", {4}), Spec("P(sum)", {4})}),
            "(P(sum)) x (P(sum)) -> (P(sum))");
  // x + 2 is not linear in a partial x: it is reduced first.
  EXPECT_NE(Chosen("add.Tensor", {T(0), P(2.0)}, {Spec("P(sum)", {4})}), "(P(sum)) -> (P(sum))");
  EXPECT_EQ(Chosen("mul.Tensor", {T(0), P(2.0)}, {Spec("P(sum)", {4})}), "(P(sum)) -> (P(sum))");
  EXPECT_EQ(Chosen("mul.Tensor", {T(0), T(1)}, {Spec("R", {4}), Spec("P(avg)", {4})}),
            "(R) x (P(avg)) -> (P(avg))");
  EXPECT_EQ(Chosen("neg", {T(0)}, {Spec("P(sum)", {4})}), "(P(sum)) -> (P(sum))");
  EXPECT_EQ(Chosen("clone", {T(0)}, {Spec("P(max)", {4})}), "(P(max)) -> (P(max))");
  EXPECT_EQ(Chosen("exp", {T(0)}, {Spec("P(sum)", {4, 6})}), "(S(0)) -> (S(0))");
  // A size-1 dim that does not broadcast stays sharded (one rank holds it, the others nothing).
  EXPECT_EQ(Chosen("div.Tensor", {T(0), P(int64_t{0})}, {Spec("S(0)", {1, 6})}),
            "(S(0)) -> (S(0))");
  EXPECT_EQ(Chosen("mul.Tensor", {T(0), T(1)}, {Spec("S(0)", {1, 6}), Spec("S(0)", {1, 6})}),
            "(S(0)) x (S(0)) -> (S(0))");
}

TEST_F(StrategyTest, ReductionsGivePartialsOrNeedTheirDimWhole) {
  EXPECT_EQ(Chosen("sum.dim_IntList", {T(0), P(std::vector<int64_t>{1})}, {Spec("S(1)", {4, 6})}),
            "(S(1)) -> (P(sum))");
  EXPECT_EQ(Chosen("amax", {T(0), P(std::vector<int64_t>{0})}, {Spec("S(0)", {4, 6})}),
            "(S(0)) -> (P(max))");
  EXPECT_EQ(Chosen("mean.dim", {T(0), P(std::vector<int64_t>{0})}, {Spec("S(1)", {4, 6})}),
            "(S(1)) -> (S(0))");
  EXPECT_EQ(Chosen("softmax.int", {T(0), P(int64_t{-1})}, {Spec("S(0)", {4, 6})}),
            "(S(0)) -> (S(0))");
  EXPECT_EQ(Chosen("softmax.int", {T(0), P(int64_t{-1})}, {Spec("S(1)", {4, 6})}),
            "(S(0)) -> (S(0))");
  EXPECT_EQ(Chosen("argmax", {T(0), P(int64_t{1})}, {Spec("S(1)", {4, 6})}), "(S(0)) -> (S(0))");
  EXPECT_EQ(Chosen("cumsum", {T(0), P(int64_t{0})}, {Spec("P(sum)", {4, 6})}),
            "(P(sum)) -> (P(sum))");
}

TEST_F(StrategyTest, MatmulByEinsumRules) {
  EXPECT_EQ(Chosen("mm", {T(0), T(1)}, {Spec("S(1)", {4, 6}), Spec("S(0)", {6, 8})}),
            "(S(1)) x (S(0)) -> (P(sum))");
  EXPECT_EQ(Chosen("bmm", {T(0), T(1)}, {Spec("S(0)", {2, 4, 6}), Spec("S(0)", {2, 6, 8})}),
            "(S(0)) x (S(0)) -> (S(0))");
  EXPECT_EQ(Chosen("linear", {T(0), T(1), T(2)},
                   {Spec("R", {3, 4}), Spec("S(0)", {8, 4}), Spec("S(0)", {8})}),
            "(R) x (S(0)) x (S(0)) -> (S(1))");
  EXPECT_EQ(Chosen("linear", {T(0), T(1), T(2)},
                   {Spec("S(1)", {3, 4}), Spec("S(1)", {8, 4}), Spec("R", {8})}),
            "(S(1)) x (S(1)) x (P(sum)) -> (P(sum))");
}

TEST_F(StrategyTest, ViewsKeepOnlyShardsTheyCanKeep) {
  EXPECT_EQ(Chosen("view", {T(0), P(std::vector<int64_t>{24})}, {Spec("S(0)", {4, 6})}),
            "(S(0)) -> (S(0))");
  // Rows of 3 on 2 ranks: the merged dim cannot stay sharded, and is gathered first.
  EXPECT_EQ(Chosen("view", {T(0), P(std::vector<int64_t>{18})}, {Spec("S(0)", {3, 6})}),
            "(R) -> (R)");
  EXPECT_EQ(Chosen("transpose.int", {T(0), P(int64_t{0}), P(int64_t{1})}, {Spec("S(0)", {4, 6})}),
            "(S(0)) -> (S(1))");
}

TEST_F(StrategyTest, TensorOpsKeepUntouchedDims) {
  EXPECT_EQ(Chosen("cat", {P(TensorList{{0, 1}}), P(int64_t{1})},
                   {Spec("S(0)", {4, 6}), Spec("S(0)", {4, 2})}),
            "(S(0)) x (S(0)) -> (S(0))");
  EXPECT_EQ(Chosen("slice.Tensor", {T(0), P(int64_t{1}), P(int64_t{1})}, {Spec("S(0)", {4, 6})}),
            "(S(0)) -> (S(0))");
  EXPECT_EQ(Chosen("select.int", {T(0), P(int64_t{0}), P(int64_t{1})}, {Spec("S(1)", {4, 6})}),
            "(S(1)) -> (S(0))");
  EXPECT_EQ(
      Chosen("embedding", {T(0), T(1)}, {Spec("S(0)", {10, 4}), Spec("R", {3}, DType::kInt64)}),
      "(S(0)) x (R) -> (P(sum))");
}

TEST(OpMetaTest, NormsAttentionAndBackwardOpsAsTorch) {
  const TensorMeta x{{2, 3, 4}, DType::kFloat32};
  const TensorMeta w{{3, 4}, DType::kFloat32};
  auto meta = [](absl::StatusOr<PreparedCall> p) {
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? p->call.output : OutputMeta{{-1}, DType::kBool};
  };
  EXPECT_EQ(
      meta(Prepare("layer_norm", {T(0), P(std::vector<int64_t>{3, 4}), T(1), T(1)}, {x, w})).shape,
      (Shape{2, 3, 4}));
  EXPECT_EQ(meta(Prepare("rms_norm", {T(0), P(std::vector<int64_t>{4})}, {x})).shape,
            (Shape{2, 3, 4}));
  const TensorMeta q{{2, 4, 3, 8}, DType::kFloat16};
  const TensorMeta kv{{2, 2, 5, 8}, DType::kFloat16};
  const TensorMeta v{{2, 2, 5, 6}, DType::kFloat16};
  const OutputMeta attention = meta(Prepare("scaled_dot_product_attention",
                                            {T(0), T(1), T(2), A("enable_gqa", true)}, {q, kv, v}));
  EXPECT_EQ(attention.shape, (Shape{2, 4, 3, 6}));
  EXPECT_EQ(attention.dtype, DType::kFloat16);
  EXPECT_EQ(meta(Prepare("linalg_vector_norm",
                         {T(0), P(int64_t{2}), P(std::vector<int64_t>{-1}), P(true)}, {x}))
                .shape,
            (Shape{2, 3, 1}));
  EXPECT_EQ(meta(Prepare("linalg_vector_norm", {T(0), A("dtype", DType::kFloat64)}, {x})).dtype,
            DType::kFloat64);
  EXPECT_EQ(meta(Prepare("slice_backward",
                         {T(0), P(std::vector<int64_t>{2, 9, 4}), P(int64_t{1}), P(int64_t{-8}),
                          P(int64_t{1000}), P(int64_t{3})},
                         {x}))
                .shape,
            (Shape{2, 9, 4}));
  EXPECT_EQ(
      meta(Prepare("select_backward",
                   {T(0), P(std::vector<int64_t>{2, 3, 5, 4}), P(int64_t{2}), P(int64_t{-1})}, {x}))
          .shape,
      (Shape{2, 3, 5, 4}));
  EXPECT_EQ(meta(Prepare("embedding_dense_backward",
                         {T(0), T(1), P(int64_t{10}), P(int64_t{-1}), P(false)},
                         {x, {{2, 3}, DType::kInt64}}))
                .shape,
            (Shape{10, 4}));
}

TEST(OpMetaTest, NormsAttentionAndBackwardOpsNameTheirBadArguments) {
  const TensorMeta x{{2, 3, 4}, DType::kFloat32};
  absl::Status s = Prepare("layer_norm", {T(0), P(std::vector<int64_t>{3})}, {x}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("aten::layer_norm"), HasSubstr("'normalized_shape'"),
                                 HasSubstr("[3]"), HasSubstr("[2, 3, 4]")));
  s = Prepare("layer_norm", {T(0), P(std::vector<int64_t>{4}), T(1)}, {x, {{4}, DType::kFloat64}})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'weight'"), HasSubstr("float64")));
  s = Prepare("rms_norm", {T(0), P(std::vector<int64_t>{4})}, {{{4}, DType::kInt32}}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'input'"), HasSubstr("int32")));
  s = Prepare("scaled_dot_product_attention", {T(0), T(0), T(0), A("dropout_p", 0.1)}, {x})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'dropout_p'"), HasSubstr("0.1")));
  s = Prepare("scaled_dot_product_attention", {T(0), T(0), T(0), T(1)},
              {x, {{3, 3}, DType::kFloat64}})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'attn_mask'"), HasSubstr("float64")));
  s = Prepare("scaled_dot_product_attention", {T(0), T(1), T(1)}, {x, {{1, 3, 4}, DType::kFloat32}})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'key'"), HasSubstr("[1, 3, 4]")));
  s = Prepare("embedding_dense_backward", {T(0), T(1), P(int64_t{10}), P(int64_t{-1}), P(true)},
              {x, {{2, 3}, DType::kInt64}})
          .status();
  EXPECT_THAT(s.message(), HasSubstr("'scale_grad_by_freq'"));
  s = Prepare("linalg_vector_norm",
              {T(0), P(std::numeric_limits<double>::infinity()), P(std::vector<int64_t>{0})},
              {{{0, 3}, DType::kFloat32}})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'ord'"), HasSubstr("inf"), HasSubstr("empty")));
  s = Prepare("slice_backward",
              {T(0), P(std::vector<int64_t>{2, 3, 4}), P(int64_t{1}), P(int64_t{0}), P(int64_t{2}),
               P(int64_t{1})},
              {x})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'grad_output'"), HasSubstr("[2, 2, 4]")));
}

TEST_F(StrategyTest, NormsAttentionAndBackwardOpsKeepTheDimsTheyDoNotTouch) {
  const std::vector<int64_t> last = {6};
  EXPECT_EQ(Chosen("layer_norm", {T(0), P(last), T(1), T(2)},
                   {Spec("S(0)", {4, 6}), Spec("S(0)", {6}), Spec("R", {6})}),
            "(S(0)) x (R) x (R) -> (S(0))");
  EXPECT_EQ(Chosen("rms_norm", {T(0), P(last)}, {Spec("S(1)", {4, 6})}), "(S(0)) -> (S(0))");
  // A Partial is reduced first (here reduce-scattered onto the leading dim).
  EXPECT_EQ(Chosen("rms_norm", {T(0), P(last)}, {Spec("P(sum)", {4, 6})}), "(S(0)) -> (S(0))");
  // Heads sharded on query, key and value stay sharded, grouped heads too.
  EXPECT_EQ(
      Chosen("scaled_dot_product_attention", {T(0), T(1), T(2), A("enable_gqa", true)},
             {Spec("S(1)", {2, 4, 3, 8}), Spec("S(1)", {2, 2, 5, 8}), Spec("S(1)", {2, 2, 5, 8})}),
      "(S(1)) x (S(1)) x (S(1)) -> (S(1))");
  // A mask broadcast over the batch stays Replicate.
  EXPECT_EQ(Chosen("scaled_dot_product_attention", {T(0), T(1), T(2), T(3)},
                   {Spec("S(0)", {2, 4, 3, 8}), Spec("S(0)", {2, 4, 5, 8}),
                    Spec("S(0)", {2, 4, 5, 8}), Spec("R", {3, 5})}),
            "(S(0)) x (S(0)) x (S(0)) x (R) -> (S(0))");
  const std::vector<int64_t> rows = {0};
  EXPECT_EQ(
      Chosen("linalg_vector_norm", {T(0), P(std::numeric_limits<double>::infinity()), P(rows)},
             {Spec("S(0)", {4, 6})}),
      "(S(0)) -> (P(max))");
  EXPECT_EQ(Chosen("linalg_vector_norm", {T(0), P(int64_t{1}), P(rows)}, {Spec("S(0)", {4, 6})}),
            "(S(0)) -> (P(sum))");
  EXPECT_EQ(Chosen("linalg_vector_norm", {T(0), P(int64_t{2}), P(rows)}, {Spec("S(0)", {4, 6})}),
            "(S(1)) -> (S(0))");
  EXPECT_EQ(Chosen("linalg_vector_norm", {T(0)}, {Spec("P(sum)", {4, 6})}), "(R) -> (R)");
  const std::vector<int64_t> sizes = {4, 6};
  EXPECT_EQ(Chosen("slice_backward",
                   {T(0), P(sizes), P(int64_t{1}), P(int64_t{0}), P(int64_t{3}), P(int64_t{1})},
                   {Spec("S(0)", {4, 3})}),
            "(S(0)) -> (S(0))");
  EXPECT_EQ(Chosen("slice_backward",
                   {T(0), P(sizes), P(int64_t{1}), P(int64_t{0}), P(int64_t{3}), P(int64_t{1})},
                   {Spec("P(max)", {4, 3})}),
            "(P(max)) -> (P(max))");
  EXPECT_EQ(Chosen("select_backward", {T(0), P(sizes), P(int64_t{0}), P(int64_t{2})},
                   {Spec("S(0)", {6})}),
            "(S(0)) -> (S(1))");
  EXPECT_EQ(
      Chosen("embedding_dense_backward", {T(0), T(1), P(int64_t{10}), P(int64_t{-1}), P(false)},
             {Spec("S(0)", {4, 6}), Spec("S(0)", {4}, DType::kInt64)}),
      "(S(0)) x (S(0)) -> (P(sum))");
  EXPECT_EQ(
      Chosen("embedding_dense_backward", {T(0), T(1), P(int64_t{10}), P(int64_t{-1}), P(false)},
             {Spec("S(1)", {4, 6}), Spec("R", {4}, DType::kInt64)}),
      "(S(1)) x (R) -> (S(1))");
}

TEST_F(StrategyTest, IndexingKeepsTheShardsItCan) {
  const DType i64 = DType::kInt64;
  // gather: self and index sharded alike off the gathered dim; a sharded index along it; a
  // Partial self passes (a selection).
  EXPECT_EQ(Chosen("gather", {T(0), P(int64_t{1}), T(1)},
                   {Spec("S(0)", {4, 6}), Spec("S(0)", {4, 3}, i64)}),
            "(S(0)) x (S(0)) -> (S(0))");
  EXPECT_EQ(
      Chosen("gather", {T(0), P(int64_t{1}), T(1)}, {Spec("R", {4, 6}), Spec("S(1)", {4, 3}, i64)}),
      "(R) x (S(1)) -> (S(1))");
  EXPECT_EQ(Chosen("gather", {T(0), P(int64_t{1}), T(1)},
                   {Spec("P(max)", {4, 6}), Spec("R", {4, 3}, i64)}),
            "(P(max)) x (R) -> (P(max))");
  // Rows of 4 against an index of 3 rows: their blocks differ, so dim 0 cannot stay sharded.
  EXPECT_THAT(Chosen("gather", {T(0), P(int64_t{1}), T(1)},
                     {Spec("S(0)", {4, 6}), Spec("S(0)", {3, 3}, i64)}),
              ::testing::Not(::testing::EndsWith("-> (S(0))")));
  EXPECT_EQ(Chosen("scatter.src", {T(0), P(int64_t{0}), T(1), T(2)},
                   {Spec("S(1)", {4, 6}), Spec("S(1)", {3, 6}, i64), Spec("S(1)", {3, 6})}),
            "(S(1)) x (S(1)) x (S(1)) -> (S(1))");
  EXPECT_EQ(Chosen("scatter_add", {T(0), P(int64_t{0}), T(1), T(2)},
                   {Spec("P(sum)", {4, 6}), Spec("R", {3, 6}, i64), Spec("P(sum)", {3, 6})}),
            "(P(sum)) x (R) x (P(sum)) -> (P(sum))");
  // scatter writes are not linear: a Partial self is reduced first.
  EXPECT_THAT(Chosen("scatter.src", {T(0), P(int64_t{0}), T(1), T(2)},
                     {Spec("P(sum)", {4, 6}), Spec("R", {3, 6}, i64), Spec("P(sum)", {3, 6})}),
              ::testing::Not(::testing::EndsWith("(P(sum))")));
  // index.Tensor: a dim not indexed keeps its shard, at its place in the result.
  EXPECT_EQ(Chosen("index.Tensor", {T(0), P(TensorList{{1}})},
                   {Spec("S(1)", {4, 6}), Spec("R", {3}, i64)}),
            "(S(1)) x (R) -> (S(1))");
  EXPECT_EQ(Chosen("index.Tensor", {T(0), P(TensorList{{1, -1, 2}})},
                   {Spec("S(1)", {2, 4, 6}), Spec("R", {3}, i64), Spec("R", {3}, i64)}),
            "(S(1)) x (R) x (R) -> (S(1))");
  // ... and a sharded index gives the result's index dims sharded.
  EXPECT_EQ(Chosen("index.Tensor", {T(0), P(TensorList{{-1, 1}})},
                   {Spec("R", {4, 6}), Spec("S(0)", {8}, i64)}),
            "(R) x (S(0)) -> (S(1))");
  EXPECT_EQ(Chosen("index_put", {T(0), P(TensorList{{1}}), T(2)},
                   {Spec("S(1)", {4, 6}), Spec("R", {3}, i64), Spec("S(1)", {3, 6})}),
            "(S(1)) x (R) x (S(1)) -> (S(1))");
  EXPECT_EQ(Chosen("index_put", {T(0), P(TensorList{{1}}), T(2), P(true)},
                   {Spec("P(sum)", {4, 6}), Spec("R", {3}, i64), Spec("P(sum)", {3, 6})}),
            "(P(sum)) x (R) x (P(sum)) -> (P(sum))");
  EXPECT_THAT(Chosen("index_put", {T(0), P(TensorList{{1}}), T(2)},
                     {Spec("P(sum)", {4, 6}), Spec("R", {3}, i64), Spec("P(sum)", {3, 6})}),
              ::testing::Not(::testing::EndsWith("(P(sum))")));
  EXPECT_EQ(Chosen("index_select", {T(0), P(int64_t{1}), T(1)},
                   {Spec("R", {4, 6}), Spec("S(0)", {8}, i64)}),
            "(R) x (S(0)) -> (S(1))");
}

TEST(OpMetaTest, LossesAsTorch) {
  const TensorMeta logits{{4, 6}, DType::kFloat32};
  const TensorMeta target{{4}, DType::kInt64};
  const OpRegistry& r = Registry();
  EXPECT_EQ(r.Find("nll_loss").value()->schema.args[3].default_value, OpValue(int64_t{1}));  // Mean
  EXPECT_EQ(Prepare("nll_loss", {T(0), T(1)}, {logits, target})->call.output.shape, Shape{});
  EXPECT_EQ(Prepare("nll_loss", {T(0), T(1), P(NoneValue{}), P(int64_t{0})}, {logits, target})
                ->call.output.shape,
            (Shape{4}));
  EXPECT_EQ(Prepare("cross_entropy_loss", {T(0), T(1), A("reduction", int64_t{0})},
                    {{{2, 6, 3}, DType::kFloat64}, {{2, 3}, DType::kInt64}})
                ->call.output.dtype,
            DType::kFloat64);
  EXPECT_EQ(Prepare("cross_entropy_loss", {T(0), T(0)}, {logits})->call.output.shape, Shape{});
  EXPECT_EQ(Prepare("mse_loss", {T(0), T(1), P(int64_t{0})}, {logits, {{6}, DType::kFloat32}})
                ->call.output.shape,
            (Shape{4, 6}));
  EXPECT_NE(r.Find("cross_entropy_loss").value()->decompose, nullptr);
  EXPECT_EQ(r.Find("nll_loss").value()->decompose, nullptr);
}

// nll_loss_forward's output and total_weight, nll_loss_backward's gradient, and what torch
// refuses of them.
TEST(OpMetaTest, NllLossForwardAndBackwardAsTorch) {
  const TensorMeta logits{{4, 6}, DType::kFloat64};
  const TensorMeta target{{4}, DType::kInt64};
  const TensorMeta one{{}, DType::kFloat64};
  for (int64_t reduction : {0, 1, 2}) {
    absl::StatusOr<PreparedCall> f =
        Prepare("nll_loss_forward", {T(0), T(1), P(NoneValue{}), P(reduction), P(int64_t{-100})},
                {logits, target});
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->call.output.shape, reduction == 0 ? Shape{4} : Shape{});
    ASSERT_EQ(f->call.more_outputs.size(), 1u);
    EXPECT_EQ(f->call.more_outputs[0].shape, Shape{});
    EXPECT_EQ(f->call.more_outputs[0].dtype, DType::kFloat64);
    absl::StatusOr<PreparedCall> b =
        Prepare("nll_loss_backward",
                {T(0), T(1), T(2), P(NoneValue{}), P(reduction), P(int64_t{-100}), T(3)},
                {reduction == 0 ? TensorMeta{{4}, DType::kFloat64} : one, logits, target, one});
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->call.output.shape, (Shape{4, 6}));
  }
  absl::Status s =
      Prepare("nll_loss_forward", {T(0), T(1), P(NoneValue{}), P(int64_t{1}), P(int64_t{-100})},
              {{{2, 6, 3}, DType::kFloat32}, {{2, 3}, DType::kInt64}})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("aten::nll_loss_forward"), HasSubstr("'self'"),
                                 HasSubstr("has 3 dims")));
  // grad_output: one element for mean, of self's dtype; total_weight one element.
  s = Prepare("nll_loss_backward",
              {T(0), T(1), T(2), P(NoneValue{}), P(int64_t{1}), P(int64_t{-100}), T(3)},
              {{{4}, DType::kFloat64}, logits, target, one})
          .status();
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("'grad_output'"), HasSubstr("[4]"), HasSubstr("one element")));
  s = Prepare("nll_loss_backward",
              {T(0), T(1), T(2), P(NoneValue{}), P(int64_t{2}), P(int64_t{-100}), T(3)},
              {{{}, DType::kFloat32}, logits, target, one})
          .status();
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("'grad_output'"), HasSubstr("float32"), HasSubstr("float64")));
  s = Prepare("nll_loss_backward",
              {T(0), T(1), T(2), P(NoneValue{}), P(int64_t{0}), P(int64_t{-100}), T(3)},
              {{{4}, DType::kFloat64}, logits, target, {{2}, DType::kFloat64}})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'total_weight'"), HasSubstr("[2]")));
}

TEST(OpMetaTest, LossesNameTheirBadArguments) {
  const TensorMeta logits{{4, 6}, DType::kFloat32};
  absl::Status s = Prepare("nll_loss", {T(0), T(1)}, {logits, {{4}, DType::kInt32}}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("aten::nll_loss"), HasSubstr("'target'"),
                                 HasSubstr("int64"), HasSubstr("int32")));
  s = Prepare("nll_loss", {T(0), T(1)}, {logits, {{3}, DType::kInt64}}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'target'"), HasSubstr("[3]"), HasSubstr("[4]")));
  s = Prepare("nll_loss", {T(0), T(1), T(2)},
              {logits, {{4}, DType::kInt64}, {{5}, DType::kFloat32}})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'weight'"), HasSubstr("6 classes")));
  s = Prepare("nll_loss", {T(0), T(1), A("reduction", int64_t{3})}, {logits, {{4}, DType::kInt64}})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'reduction'"), HasSubstr("is 3")));
  s = Prepare("cross_entropy_loss", {T(0), T(1), A("label_smoothing", 1.5)},
              {logits, {{4}, DType::kInt64}})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'label_smoothing'"), HasSubstr("1.5")));
  s = Prepare("cross_entropy_loss", {T(0), T(1)}, {logits, {{4, 5}, DType::kFloat32}}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'target'"), HasSubstr("probabilities")));
  s = Prepare("mse_loss", {T(0), T(1)}, {logits, {{4, 6}, DType::kInt64}}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("aten::mse_loss"), HasSubstr("'target'")));
}

TEST(OpMetaTest, FactoriesAsTorch) {
  auto meta = [](absl::string_view op, std::vector<NamedValue> args,
                 std::vector<TensorMeta> inputs = {}) {
    absl::StatusOr<PreparedCall> p = Prepare(op, std::move(args), std::move(inputs));
    EXPECT_TRUE(p.ok()) << op << ": " << p.status();
    return p.ok()
               ? absl::StrCat(DTypeName(p->call.output.dtype), ShapeToString(p->call.output.shape))
               : std::string("error");
  };
  // arange: ceil((end - start) / step) elements; int64 from ints, the default float from floats.
  EXPECT_EQ(meta("arange", {P(int64_t{5})}), "int64[5]");
  EXPECT_EQ(meta("arange", {P(2.5)}), "float32[3]");
  EXPECT_EQ(meta("arange.start", {P(int64_t{1}), P(int64_t{4})}), "int64[3]");
  EXPECT_EQ(meta("arange.start_step", {P(int64_t{0}), P(int64_t{10}), P(int64_t{3})}), "int64[4]");
  EXPECT_EQ(meta("arange.start_step", {P(int64_t{0}), P(int64_t{4}), P(int64_t{2})}), "int64[2]");
  EXPECT_EQ(meta("arange.start_step", {P(int64_t{10}), P(int64_t{0}), P(int64_t{-3})}), "int64[4]");
  EXPECT_EQ(meta("arange.start_step", {P(0.0), P(1.0), P(0.1)}), "float32[10]");
  EXPECT_EQ(meta("arange.start_step", {P(int64_t{0}), P(int64_t{1}), P(0.25)}), "float32[4]");
  EXPECT_EQ(meta("arange.start", {P(int64_t{0}), P(int64_t{3}), A("dtype", DType::kFloat64)}),
            "float64[3]");
  EXPECT_EQ(meta("arange", {P(int64_t{0})}), "int64[0]");
  // full infers its dtype from the value; zeros, rand, eye and scalar_tensor take the default.
  EXPECT_EQ(meta("full", {P(std::vector<int64_t>{2, 3}), P(int64_t{7})}), "int64[2, 3]");
  EXPECT_EQ(meta("full", {P(std::vector<int64_t>{2}), P(true)}), "bool[2]");
  EXPECT_EQ(meta("full", {P(std::vector<int64_t>{2}), P(1.5)}), "float32[2]");
  EXPECT_EQ(meta("zeros", {P(std::vector<int64_t>{0, 4})}), "float32[0, 4]");
  EXPECT_EQ(meta("ones", {P(std::vector<int64_t>{3}), A("dtype", DType::kInt32)}), "int32[3]");
  EXPECT_EQ(meta("empty.memory_format", {P(std::vector<int64_t>{2, 2})}), "float32[2, 2]");
  EXPECT_EQ(meta("eye", {P(int64_t{3})}), "float32[3, 3]");
  EXPECT_EQ(meta("eye.m", {P(int64_t{2}), P(int64_t{5})}), "float32[2, 5]");
  EXPECT_EQ(meta("scalar_tensor", {P(int64_t{4})}), "float32[]");
  EXPECT_EQ(meta("rand", {P(std::vector<int64_t>{4, 6})}), "float32[4, 6]");
  EXPECT_EQ(meta("randn", {P(std::vector<int64_t>{3}), A("dtype", DType::kFloat64)}), "float64[3]");
  EXPECT_EQ(meta("randint", {P(int64_t{10}), P(std::vector<int64_t>{2, 2})}), "int64[2, 2]");
  EXPECT_EQ(meta("randint.low", {P(int64_t{-3}), P(int64_t{3}), P(std::vector<int64_t>{5})}),
            "int64[5]");
  // From another tensor: its dtype unless given; new_* take the size given.
  const TensorMeta x{{4, 6}, DType::kInt32};
  EXPECT_EQ(meta("new_zeros", {T(0), P(std::vector<int64_t>{2, 3})}, {x}), "int32[2, 3]");
  EXPECT_EQ(meta("new_full", {T(0), P(std::vector<int64_t>{2}), P(1.5)}, {x}), "int32[2]");
  EXPECT_EQ(meta("rand_like", {T(0), A("dtype", DType::kFloat64)}, {x}), "float64[4, 6]");
  EXPECT_EQ(meta("randint_like", {T(0), P(int64_t{5})}, {x}), "int32[4, 6]");
  EXPECT_EQ(meta("dropout", {T(0), P(0.5), P(true)}, {{{4, 6}, DType::kFloat32}}), "float32[4, 6]");
  EXPECT_EQ(meta("bernoulli.p", {T(0), P(0.25)}, {{{3}, DType::kFloat64}}), "float64[3]");
  // Which draw from the random stream, and how much.
  for (const char* op : {"rand", "randn", "randint", "randint.low", "rand_like", "randn_like",
                         "randint_like", "randint_like.low_dtype", "dropout", "bernoulli.p"}) {
    EXPECT_TRUE(Registry().Find(op).value()->random) << op;
  }
  for (const char* op : {"zeros", "full", "arange", "eye", "new_zeros", "zeros_like", "add.Tensor"})
    EXPECT_FALSE(Registry().Find(op).value()->random) << op;
  EXPECT_EQ(RandomElementsDrawn(Prepare("rand", {P(std::vector<int64_t>{4, 6})}, {})->call), 24);
  EXPECT_EQ(RandomElementsDrawn(Prepare("zeros", {P(std::vector<int64_t>{4, 6})}, {})->call), 0);
}

TEST(OpMetaTest, FactoriesNameTheirBadArguments) {
  auto error = [](absl::string_view op, std::vector<NamedValue> args,
                  std::vector<TensorMeta> inputs = {}) {
    absl::Status s = Prepare(op, std::move(args), std::move(inputs)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << op << ": " << s;
    return std::string(s.message());
  };
  EXPECT_THAT(
      error("arange.start_step", {P(int64_t{0}), P(int64_t{4}), P(int64_t{0})}),
      AllOf(HasSubstr("aten::arange.start_step"), HasSubstr("'step'"), HasSubstr("nonzero")));
  EXPECT_THAT(error("arange.start_step", {P(int64_t{0}), P(int64_t{4}), P(int64_t{-1})}),
              AllOf(HasSubstr("'step'"), HasSubstr("wrong sign")));
  EXPECT_THAT(error("arange", {P(std::numeric_limits<double>::infinity())}),
              AllOf(HasSubstr("'end'"), HasSubstr("finite")));
  EXPECT_THAT(error("zeros", {P(std::vector<int64_t>{2, -1})}),
              AllOf(HasSubstr("aten::zeros"), HasSubstr("'size'"), HasSubstr("-1")));
  EXPECT_THAT(error("eye", {P(int64_t{-2})}), AllOf(HasSubstr("'n'"), HasSubstr("-2")));
  EXPECT_THAT(error("rand", {P(std::vector<int64_t>{2}), A("dtype", DType::kInt64)}),
              AllOf(HasSubstr("aten::rand"), HasSubstr("'dtype'"), HasSubstr("int64")));
  EXPECT_THAT(error("randint.low", {P(int64_t{3}), P(int64_t{3}), P(std::vector<int64_t>{2})}),
              AllOf(HasSubstr("'high'"), HasSubstr("low (3)")));
  EXPECT_THAT(error("dropout", {T(0), P(1.5), P(true)}, {{{4}, DType::kFloat32}}),
              AllOf(HasSubstr("aten::dropout"), HasSubstr("'p'"), HasSubstr("1.5")));
  EXPECT_THAT(error("dropout", {T(0), P(0.5), P(true)}, {{{4}, DType::kInt64}}),
              AllOf(HasSubstr("'input'"), HasSubstr("floating")));
  EXPECT_THAT(error("rand", {P(std::vector<int64_t>{2}), A("generator", int64_t{1})}),
              HasSubstr("generator"));
}

TEST_F(StrategyTest, FactoriesTakeTheLayoutAskedFor) {
  ShardingCache cache;
  const OpDef& rand = *Registry().Find("rand").value();
  const std::vector<NamedValue> args = {P(std::vector<int64_t>{5, 3})};
  // Without a tensor input a mesh is needed; placements default to Replicate.
  absl::StatusOr<PlannedCall> p = PlanCallInLayout(rand, args, {}, {}, cache);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), AllOf(HasSubstr("aten::rand"), HasSubstr("mesh")));
  p = PlanCallInLayout(rand, args, {}, {&mesh_, {}}, cache);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(PlacementsToString(p->plan->output.placements), "(R)");
  p = PlanCallInLayout(rand, args, {}, {&mesh_, {Placement::Shard(1)}}, cache);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->plan->output.ToString(), Spec("S(1)", {5, 3}).ToString());
  // No Partial, one placement per mesh dim.
  p = PlanCallInLayout(rand, args, {}, {&mesh_, {Placement::Partial()}}, cache);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), AllOf(HasSubstr("aten::rand"), HasSubstr("Partial")));
  p = PlanCallInLayout(rand, args, {}, {&mesh_, {Placement::Shard(0), Placement::Shard(1)}}, cache);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  // A *_like op keeps its input's shards, or takes the placements asked for, moving nothing.
  const std::vector<DTensorSpec> x = {Spec("S(0)", {4, 6})};
  const OpDef& like = *Registry().Find("rand_like").value();
  const std::vector<NamedValue> self = {T(0)};
  p = PlanCallInLayout(like, self, x, {}, cache);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(PlacementsToString(p->plan->output.placements), "(S(0))");
  p = PlanCallInLayout(like, self, x, {nullptr, {Placement::Shard(1)}}, cache);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(PlacementsToString(p->plan->output.placements), "(S(1))");
  EXPECT_TRUE(p->plan->input_plans[0].steps.empty());
  const DeviceMesh other = DeviceMesh::Create("cpu", {2}, {}, {4, 5}).value();
  p = PlanCallInLayout(like, self, x, {&other, {}}, cache);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  // Ops outside the factories take their layout from their inputs.
  p = PlanCallInLayout(*Registry().Find("neg").value(), self, x, {nullptr, {Placement::Shard(1)}},
                       cache);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("aten::neg"));
  // The strategies: zeros_like of a Partial is Replicate without a reduction; dropout reduces it
  // (scattered, as the cheapest).
  EXPECT_EQ(Chosen("zeros_like", {T(0)}, {Spec("P(sum)", {4, 6})}), "(P(sum)) -> (R)");
  EXPECT_EQ(Chosen("new_ones", {T(0), P(std::vector<int64_t>{3})}, {Spec("S(1)", {4, 6})}),
            "(S(1)) -> (R)");
  EXPECT_EQ(Chosen("dropout", {T(0), P(0.5), P(true)}, {Spec("S(1)", {4, 6})}), "(S(1)) -> (S(1))");
  EXPECT_EQ(Chosen("dropout", {T(0), P(0.5), P(true)}, {Spec("P(sum)", {4, 6})}),
            "(S(0)) -> (S(0))");
}

// The shape and dtype of every output: "float32[4, 2] int64[4, 2]".
std::string Outputs(const absl::StatusOr<PreparedCall>& p) {
  if (!p.ok()) return p.status().ToString();
  std::string out =
      absl::StrCat(DTypeName(p->call.output.dtype), ShapeToString(p->call.output.shape));
  for (const OutputMeta& m : p->call.more_outputs) {
    absl::StrAppend(&out, " ", DTypeName(m.dtype), ShapeToString(m.shape));
  }
  return out;
}

TEST(OpMetaTest, SeveralOutputsAsTorch) {
  const TensorMeta x{{4, 6}, DType::kFloat32};
  EXPECT_EQ(Registry().Find("topk").value()->schema.num_returns, 2);
  EXPECT_TRUE(Registry().Find("split.Tensor").value()->schema.returns_list);
  EXPECT_FALSE(Registry().Find("topk").value()->schema.returns_list);
  EXPECT_EQ(Outputs(Prepare("max.dim", {T(0), P(int64_t{1})}, {x})), "float32[4] int64[4]");
  EXPECT_EQ(Outputs(Prepare("min.dim", {T(0), P(int64_t{0}), P(true)}, {x})),
            "float32[1, 6] int64[1, 6]");
  EXPECT_EQ(Outputs(Prepare("sort", {T(0)}, {x})), "float32[4, 6] int64[4, 6]");
  EXPECT_EQ(Outputs(Prepare("topk", {T(0), P(int64_t{2})}, {x})), "float32[4, 2] int64[4, 2]");
  EXPECT_EQ(Outputs(Prepare("topk", {T(0), P(int64_t{0}), P(int64_t{0})}, {x})),
            "float32[0, 6] int64[0, 6]");
  EXPECT_EQ(Outputs(Prepare("var_mean.correction", {T(0), P(std::vector<int64_t>{1})}, {x})),
            "float32[4] float32[4]");
  EXPECT_EQ(Outputs(Prepare(
                "native_layer_norm",
                {T(0), P(std::vector<int64_t>{3, 4}), P(NoneValue{}), P(NoneValue{}), P(1e-5)},
                {{{2, 3, 4}, DType::kFloat64}})),
            "float64[2, 3, 4] float64[2, 1, 1] float64[2, 1, 1]");
  EXPECT_EQ(Outputs(Prepare("native_dropout", {T(0), P(0.5), P(NoneValue{})}, {x})),
            "float32[4, 6] bool[4, 6]");
  EXPECT_EQ(Outputs(Prepare("native_dropout_backward", {T(0), T(1), P(2.0)},
                            {x, {{4, 6}, DType::kBool}})),
            "float32[4, 6]");
  // The pieces as torch makes them: the last smaller, an empty dim one empty piece (split) or
  // `chunks` of them (chunk), chunk giving fewer pieces where they do not divide.
  const TensorMeta five{{5, 6}, DType::kFloat32};
  EXPECT_EQ(Outputs(Prepare("split.Tensor", {T(0), P(int64_t{2})}, {five})),
            "float32[2, 6] float32[2, 6] float32[1, 6]");
  EXPECT_EQ(Outputs(Prepare("split.Tensor", {T(0), P(int64_t{4}), P(int64_t{-1})}, {five})),
            "float32[5, 4] float32[5, 2]");
  EXPECT_EQ(Outputs(Prepare("split.Tensor", {T(0), P(int64_t{2})}, {{{0, 3}, DType::kFloat32}})),
            "float32[0, 3]");
  EXPECT_EQ(Outputs(Prepare("chunk", {T(0), P(int64_t{3})}, {five})),
            "float32[2, 6] float32[2, 6] float32[1, 6]");
  EXPECT_EQ(Outputs(Prepare("chunk", {T(0), P(int64_t{4})}, {{{6}, DType::kFloat32}})),
            "float32[2] float32[2] float32[2]");
  EXPECT_EQ(Outputs(Prepare("chunk", {T(0), P(int64_t{3})}, {{{0}, DType::kFloat32}})),
            "float32[0] float32[0] float32[0]");
  EXPECT_EQ(Outputs(Prepare("split_with_sizes", {T(0), P(std::vector<int64_t>{1, 0, 4})}, {five})),
            "float32[1, 6] float32[0, 6] float32[4, 6]");
  EXPECT_EQ(Outputs(Prepare("unbind.int", {T(0), P(int64_t{0})}, {{{3, 2}, DType::kInt64}})),
            "int64[2] int64[2] int64[2]");
}

TEST(OpMetaTest, SeveralOutputsNameTheirBadArguments) {
  const TensorMeta x{{4, 6}, DType::kFloat32};
  absl::Status s = Prepare("topk", {T(0), P(int64_t{7})}, {x}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("aten::topk"), HasSubstr("'k'"), HasSubstr("7"),
                                 HasSubstr("size 6")));
  s = Prepare("max.dim", {T(0), P(int64_t{0})}, {{{0, 6}, DType::kFloat32}}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("aten::max.dim"), HasSubstr("empty")));
  s = Prepare("split_with_sizes", {T(0), P(std::vector<int64_t>{1, 2})}, {x}).status();
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("'split_sizes'"), HasSubstr("sums to 3"), HasSubstr("size 4")));
  s = Prepare("split.Tensor", {T(0), P(int64_t{0})}, {x}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'split_size'"), HasSubstr("0")));
  s = Prepare("chunk", {T(0), P(int64_t{0})}, {x}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'chunks'"), HasSubstr("> 0")));
  s = Prepare("unbind.int", {T(0), P(int64_t{0})}, {{{0, 3}, DType::kFloat32}}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'dim'"), HasSubstr("no tensor")));
  s = Prepare("native_dropout_backward", {T(0), T(1), P(2.0)}, {x, x}).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'mask'"), HasSubstr("bool")));
  s = Prepare("native_layer_norm",
              {T(0), P(std::vector<int64_t>{0}), P(NoneValue{}), P(NoneValue{}), P(1e-5)},
              {{{4, 0}, DType::kFloat32}})
          .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'normalized_shape'"), HasSubstr("no element")));
}

// native_layer_norm_backward: grad_input, grad_weight and grad_bias as torch shapes them, an
// output the mask leaves out empty; its bool[3] output_mask takes three 0s and 1s or one bool.
TEST(OpMetaTest, NativeLayerNormBackwardAsTorch) {
  const TensorMeta x{{4, 2, 6}, DType::kFloat32}, stats{{4, 1, 1}, DType::kFloat32},
      w{{2, 6}, DType::kFloat32};
  const auto call = [&](OpValue mask) {
    return Prepare("native_layer_norm_backward",
                   {T(0), T(1), P(std::vector<int64_t>{2, 6}), T(2), T(3), T(4), T(5), P(mask)},
                   {x, x, stats, stats, w, w});
  };
  EXPECT_EQ(Outputs(call(std::vector<int64_t>{1, 1, 1})),
            "float32[4, 2, 6] float32[2, 6] float32[2, 6]");
  EXPECT_EQ(Outputs(call(std::vector<int64_t>{1, 0, 1})),
            "float32[4, 2, 6] float32[0] float32[2, 6]");
  EXPECT_EQ(Outputs(call(true)), "float32[4, 2, 6] float32[2, 6] float32[2, 6]");
  for (const OpValue& bad : {OpValue(std::vector<int64_t>{1, 2, 0}),
                             OpValue(std::vector<int64_t>{1, 1}), OpValue(int64_t{1})}) {
    EXPECT_THAT(call(bad).status().message(),
                AllOf(HasSubstr("'output_mask'"), HasSubstr("must be bool[3]")));
  }
  EXPECT_THAT(call(std::vector<int64_t>{0, 1, 1}).status().message(),
              AllOf(HasSubstr("'output_mask'"), HasSubstr("grad_input")));
  absl::Status s = Prepare("native_layer_norm_backward",
                           {T(0), T(1), P(std::vector<int64_t>{2, 6}), T(2), T(3), P(NoneValue{}),
                            P(NoneValue{}), P(true)},
                           {x, x, {{4, 2, 1}, DType::kFloat32}, stats})
                       .status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'mean'"), HasSubstr("[4, 1, 1]")));
}

// _fused_rms_norm's rstd (the input's shape with the normalized dims 1; float32 for float16,
// bfloat16 and float32, float64 for float64, as torch computes it) and its backward's grad_input
// and grad_weight, an output the mask leaves out empty.
TEST(OpMetaTest, FusedRmsNormAndBackwardAsTorch) {
  const auto forward = [](DType dtype) {
    return Prepare("_fused_rms_norm", {T(0), P(std::vector<int64_t>{6}), T(1), P(NoneValue{})},
                   {{{4, 2, 6}, dtype}, {{6}, dtype}});
  };
  EXPECT_EQ(Outputs(forward(DType::kFloat32)), "float32[4, 2, 6] float32[4, 2, 1]");
  EXPECT_EQ(Outputs(forward(DType::kFloat64)), "float64[4, 2, 6] float64[4, 2, 1]");
  EXPECT_EQ(Outputs(forward(DType::kBFloat16)), "bfloat16[4, 2, 6] float32[4, 2, 1]");
  const TensorMeta x{{4, 2, 6}, DType::kFloat32}, rstd{{4, 1, 1}, DType::kFloat32},
      w{{2, 6}, DType::kFloat32};
  const auto backward = [&](OpValue weight, OpValue mask, TensorMeta r) {
    return Prepare("_fused_rms_norm_backward",
                   {T(0), T(1), P(std::vector<int64_t>{2, 6}), T(2), P(weight), P(mask)},
                   {x, x, r, w});
  };
  EXPECT_EQ(Outputs(backward(TensorRef{3}, std::vector<int64_t>{1, 1}, rstd)),
            "float32[4, 2, 6] float32[2, 6]");
  EXPECT_EQ(Outputs(backward(TensorRef{3}, std::vector<int64_t>{1, 0}, rstd)),
            "float32[4, 2, 6] float32[0]");
  EXPECT_EQ(Outputs(backward(NoneValue{}, true, rstd)), "float32[4, 2, 6] float32[0]");
  EXPECT_THAT(backward(TensorRef{3}, std::vector<int64_t>{1, 1, 1}, rstd).status().message(),
              AllOf(HasSubstr("'output_mask'"), HasSubstr("must be bool[2]")));
  EXPECT_THAT(backward(TensorRef{3}, true, {{4, 2, 1}, DType::kFloat32}).status().message(),
              AllOf(HasSubstr("'rstd'"), HasSubstr("[4, 1, 1]")));
  EXPECT_THAT(backward(TensorRef{3}, std::vector<int64_t>{0, 1}, rstd).status().message(),
              AllOf(HasSubstr("'output_mask'"), HasSubstr("grad_input")));
}

// _scaled_dot_product_flash_attention_for_cpu: output and logsumexp as torch's CPU kernel shapes
// them (grouped heads, a 2-D or 4-D mask of query's dtype), its refusals naming the argument; the
// backward gives the three gradients in the inputs' shapes.
TEST(OpMetaTest, FlashAttentionAsTorch) {
  const auto call = [](std::vector<TensorMeta> in, std::vector<NamedValue> more = {}) {
    std::vector<NamedValue> args = {T(0), T(1), T(2)};
    for (NamedValue& a : more) args.push_back(std::move(a));
    return Prepare("_scaled_dot_product_flash_attention_for_cpu", std::move(args), std::move(in));
  };
  const TensorMeta q{{2, 4, 3, 8}, DType::kFloat32}, kv{{2, 2, 5, 8}, DType::kFloat32};
  EXPECT_EQ(Outputs(call({q, kv, kv})), "float32[2, 4, 3, 8] float32[2, 4, 3]");
  EXPECT_EQ(Outputs(call({{{2, 4, 3, 8}, DType::kFloat64},
                          {{2, 4, 5, 8}, DType::kFloat64},
                          {{2, 4, 5, 8}, DType::kFloat64}})),
            "float64[2, 4, 3, 8] float64[2, 4, 3]");
  EXPECT_EQ(Outputs(call({q, kv, kv, {{3, 5}, DType::kFloat32}},
                         {A("attn_mask", TensorRef{3}), A("is_causal", true)})),
            "float32[2, 4, 3, 8] float32[2, 4, 3]");
  EXPECT_THAT(call({{{4, 3, 8}, DType::kFloat32}, kv, kv}).status().message(),
              AllOf(HasSubstr("'query'"), HasSubstr("4 dims")));
  EXPECT_THAT(call({q, kv, {{2, 2, 5, 6}, DType::kFloat32}}).status().message(),
              AllOf(HasSubstr("'value'"), HasSubstr("head size")));
  EXPECT_THAT(call({q, {{2, 3, 5, 8}, DType::kFloat32}, {{2, 3, 5, 8}, DType::kFloat32}})
                  .status()
                  .message(),
              AllOf(HasSubstr("'key'"), HasSubstr("must divide")));
  EXPECT_THAT(call({q, kv, kv}, {P(0.1)}).status().message(),
              AllOf(HasSubstr("'dropout_p'"), HasSubstr("0.1")));
  EXPECT_THAT(
      call({q, kv, kv, {{3, 5}, DType::kBool}}, {A("attn_mask", TensorRef{3})}).status().message(),
      AllOf(HasSubstr("'attn_mask'"), HasSubstr("bool")));
  EXPECT_THAT(call({q, kv, kv, {{4, 3, 5}, DType::kFloat32}}, {A("attn_mask", TensorRef{3})})
                  .status()
                  .message(),
              AllOf(HasSubstr("'attn_mask'"), HasSubstr("2 or 4 dims")));
  const TensorMeta lse{{2, 4, 3}, DType::kFloat32};
  absl::StatusOr<PreparedCall> b =
      Prepare("_scaled_dot_product_flash_attention_for_cpu_backward",
              {T(0), T(1), T(2), T(3), T(4), T(5), P(0.0), P(false)}, {q, q, kv, kv, q, lse});
  EXPECT_EQ(Outputs(b), "float32[2, 4, 3, 8] float32[2, 2, 5, 8] float32[2, 2, 5, 8]");
  b = Prepare("_scaled_dot_product_flash_attention_for_cpu_backward",
              {T(0), T(1), T(2), T(3), T(4), T(5), P(0.0), P(false)},
              {q, q, kv, kv, q, {{2, 4, 3}, DType::kFloat64}});
  EXPECT_THAT(b.status().message(), AllOf(HasSubstr("'logsumexp'"), HasSubstr("float32[2, 4, 3]")));
}

// nll_loss_forward: a sum over a sharded batch gives the loss and total_weight P(sum); mean
// (the whole target) gives total_weight R; class-sharded logits give total_weight R. Its
// backward keeps the batch or class shards of self.
TEST_F(StrategyTest, NllLossForwardPlacesTotalWeight) {
  auto plan = [this](int64_t reduction, const char* self, const char* target) {
    absl::StatusOr<PreparedCall> p =
        Prepare("nll_loss_forward", {T(0), T(1), P(NoneValue{}), P(reduction), P(int64_t{-100})},
                {{{8, 6}, DType::kFloat32}, {{8}, DType::kInt64}});
    EXPECT_TRUE(p.ok()) << p.status();
    const std::vector<DTensorSpec> specs = {Spec(self, {8, 6}), Spec(target, {8}, DType::kInt64)};
    absl::StatusOr<OpPlan> plan = PlanCall(p->call, specs);
    EXPECT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->more_outputs.size(), 1u);
    return absl::StrCat(PlacementsToString(plan->output.placements), " ",
                        PlacementsToString(plan->more_outputs[0].placements));
  };
  EXPECT_EQ(plan(2, "S(0)", "S(0)"), "(P(sum)) (P(sum))");
  EXPECT_EQ(plan(1, "S(0)", "R"), "(P(sum)) (R)");
  EXPECT_EQ(plan(0, "S(0)", "S(0)"), "(S(0)) (R)");
  EXPECT_EQ(plan(1, "S(1)", "R"), "(P(sum)) (R)");
  EXPECT_EQ(Chosen("nll_loss_backward",
                   {T(0), T(1), T(2), P(NoneValue{}), P(int64_t{2}), P(int64_t{-100}), T(3)},
                   {Spec("R", {}), Spec("S(0)", {8, 6}), Spec("S(0)", {8}, DType::kInt64),
                    Spec("P(sum)", {})}),
            "(R) x (S(0)) x (S(0)) x (P(sum)) -> (S(0))");
  EXPECT_EQ(
      Chosen("nll_loss_backward",
             {T(0), T(1), T(2), P(NoneValue{}), P(int64_t{1}), P(int64_t{-100}), T(3)},
             {Spec("R", {}), Spec("S(1)", {8, 6}), Spec("R", {8}, DType::kInt64), Spec("R", {})}),
      "(R) x (S(1)) x (R) x (R) -> (S(1))");
}

TEST_F(StrategyTest, FusedRmsNormAndFlashAttentionPlaceEachOutput) {
  // The batch sharded: rstd alike; its backward's grad_weight is P(sum).
  absl::StatusOr<PreparedCall> p = Prepare(
      "_fused_rms_norm_backward", {T(0), T(1), P(std::vector<int64_t>{6}), T(2), T(3), P(true)},
      {{{4, 6}, DType::kFloat32},
       {{4, 6}, DType::kFloat32},
       {{4, 1}, DType::kFloat32},
       {{6}, DType::kFloat32}});
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<DTensorSpec> specs = {Spec("S(0)", {4, 6}), Spec("S(0)", {4, 6}),
                                    Spec("S(0)", {4, 1}), Spec("R", {6})};
  absl::StatusOr<OpPlan> plan = PlanCall(p->call, specs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(PlacementsToString(plan->output.placements), "(S(0))");
  ASSERT_EQ(plan->more_outputs.size(), 1u);
  EXPECT_EQ(PlacementsToString(plan->more_outputs[0].placements), "(P(sum))");
  // Heads sharded: the output and logsumexp keep them.
  EXPECT_EQ(
      Chosen("_scaled_dot_product_flash_attention_for_cpu", {T(0), T(1), T(2)},
             {Spec("S(1)", {2, 4, 3, 8}), Spec("S(1)", {2, 4, 5, 8}), Spec("S(1)", {2, 4, 5, 8})}),
      "(S(1)) x (S(1)) x (S(1)) -> (S(1))");
  // A query sharded by position moves to a batch shard (an all_to_all, cheaper than gathering
  // it); key and value take theirs locally.
  EXPECT_EQ(Chosen("_scaled_dot_product_flash_attention_for_cpu", {T(0), T(1), T(2)},
                   {Spec("S(2)", {2, 4, 3, 8}), Spec("R", {2, 4, 5, 8}), Spec("R", {2, 4, 5, 8})}),
            "(S(0)) x (S(0)) x (S(0)) -> (S(0))");
}

TEST_F(StrategyTest, SeveralOutputsAreLaidOutAlike) {
  EXPECT_EQ(Chosen("topk", {T(0), P(int64_t{2})}, {Spec("S(0)", {4, 6})}), "(S(0)) -> (S(0))");
  EXPECT_EQ(Chosen("topk", {T(0), P(int64_t{2})}, {Spec("S(1)", {4, 6})}), "(S(0)) -> (S(0))");
  EXPECT_EQ(Chosen("max.dim", {T(0), P(int64_t{1})}, {Spec("S(0)", {4, 6})}), "(S(0)) -> (S(0))");
  EXPECT_EQ(Chosen("max.dim", {T(0), P(int64_t{0})}, {Spec("S(1)", {4, 6})}), "(S(1)) -> (S(0))");
  EXPECT_EQ(Chosen("split.Tensor", {T(0), P(int64_t{2}), P(int64_t{1})}, {Spec("S(0)", {4, 6})}),
            "(S(0)) -> (S(0))");
  EXPECT_EQ(Chosen("split.Tensor", {T(0), P(int64_t{2})}, {Spec("P(sum)", {4, 6})}),
            "(P(sum)) -> (P(sum))");
  EXPECT_EQ(Chosen("unbind.int", {T(0), P(int64_t{0})}, {Spec("S(1)", {4, 6})}),
            "(S(1)) -> (S(0))");
  EXPECT_EQ(
      Chosen("var_mean.correction", {T(0), P(std::vector<int64_t>{1})}, {Spec("S(1)", {4, 6})}),
      "(S(0)) -> (S(0))");
  // Every output takes the first's placements, in its own shape and dtype.
  absl::StatusOr<PreparedCall> p =
      Prepare("native_layer_norm",
              {T(0), P(std::vector<int64_t>{6}), P(NoneValue{}), P(NoneValue{}), P(1e-5)},
              {{{4, 6}, DType::kFloat32}});
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<DTensorSpec> specs = {Spec("S(0)", {4, 6})};
  absl::StatusOr<OpPlan> plan = PlanCall(p->call, specs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->more_outputs.size(), 2u);
  for (const DTensorSpec& more : plan->more_outputs) {
    EXPECT_EQ(more.placements, plan->output.placements);
    EXPECT_EQ(more.shape, (Shape{4, 1}));
  }
}

TEST(ShardingCacheTest, ARepeatedCallIsAHit) {
  const DeviceMesh mesh = DeviceMesh::Create("cpu", {2}).value();
  const DTensorSpec x =
      MakeDTensorSpec(mesh, {Placement::Shard(0)}, {4, 6}, DType::kFloat32).value();
  const PreparedCall p = Prepare("exp", {T(0)}, {{x.shape, x.dtype}}).value();
  ShardingCache cache;
  const std::vector<DTensorSpec> specs = {x};
  auto first = cache.Plan(p.call, specs);
  auto second = cache.Plan(p.call, specs);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->get(), second->get());
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(cache.misses(), 1);
}

}  // namespace
}  // namespace tessera::ops
