// Sharding propagation's cost per call, on the coordinator's path and without a network: binding a
// registry op and running its meta function (PrepareCall), planning it from scratch (PlanCall),
// and a repeated call served by the sharding cache (ShardingCache::Plan: the key and the lookup);
// beside them the older fixed-op planner (PropagateSharding) on the same calls, its peer in the
// same run. torch DTensor's own propagation cannot run here without torch: its C++ fast path is
// quoted in bench/RESULTS.md, not measured.
//
//   build/test/bench/op_planning_bench --benchmark_min_time=0.2

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "core/ops/op_propagation.h"
#include "core/ops/op_registry.h"
#include "core/sharding/sharding_propagation.h"

namespace tessera {
namespace {

using ops::NamedValue;
using ops::TensorRef;

// One benchmarked call: a registry op with its arguments and the legacy op it equals.
struct Case {
  const char* op;
  std::vector<NamedValue> args;
  std::vector<std::pair<std::string, Shape>> inputs;  // placements, shape
  OpCall legacy;
  bool has_legacy = true;
};

OpCall Legacy(OpKind kind) {
  OpCall op;
  op.kind = kind;
  return op;
}

std::vector<Case> Cases(int mesh_ndim) {
  const std::string s0 = mesh_ndim == 1 ? "S(0)" : "S(0), R";
  const std::string r = mesh_ndim == 1 ? "R" : "R, R";
  const std::string s1 = mesh_ndim == 1 ? "S(1)" : "R, S(1)";
  OpCall sum = Legacy(OpKind::kSum);
  sum.dims = {1};
  return {
      {"add.Tensor",
       {{"", TensorRef{0}}, {"", TensorRef{1}}},
       {{s0, {64, 64}}, {s0, {64, 64}}},
       Legacy(OpKind::kAdd)},
      {"mm",
       {{"", TensorRef{0}}, {"", TensorRef{1}}},
       {{s0, {64, 64}}, {r, {64, 64}}},
       Legacy(OpKind::kMm)},
      {"sum.dim_IntList",
       {{"", TensorRef{0}}, {"", std::vector<int64_t>{1}}},
       {{s1, {64, 64}}},
       sum},
      {"softmax.int", {{"", TensorRef{0}}, {"", int64_t{-1}}}, {{s0, {64, 64}}}, {}, false},
      {"view",
       {{"", TensorRef{0}}, {"", std::vector<int64_t>{8, 8, 64}}},
       {{s0, {64, 64}}},
       {},
       false},
  };
}

struct Prepared {
  ops::PreparedCall call;
  std::vector<DTensorSpec> specs;
  Case c;
};

Prepared Prepare(const Case& c, const DeviceMesh& mesh) {
  Prepared p{{}, {}, c};
  std::vector<ops::TensorMeta> metas;
  for (const auto& [placements, shape] : c.inputs) {
    p.specs.push_back(
        MakeDTensorSpec(mesh, ParsePlacements(placements).value(), shape, DType::kFloat32).value());
    metas.push_back({shape, DType::kFloat32});
  }
  p.call = ops::PrepareCall(*ops::Registry().Find(c.op).value(), c.args, metas).value();
  return p;
}

DeviceMesh MeshOf(int ndim) {
  return DeviceMesh::Create("cpu", ndim == 1 ? Shape{2} : Shape{2, 2}).value();
}

// Which part of the path a benchmark times.
enum class Part { kPrepare, kPlan, kCacheHit, kLegacy };

void BM_Planning(benchmark::State& state) {
  const Part part = static_cast<Part>(state.range(0));
  const int ndim = static_cast<int>(state.range(1));
  const Case c = Cases(ndim)[state.range(2)];
  if (part == Part::kLegacy && !c.has_legacy) {
    state.SkipWithError("no legacy op");
    return;
  }
  const Prepared p = Prepare(c, MeshOf(ndim));
  std::vector<ops::TensorMeta> metas;
  for (const DTensorSpec& s : p.specs) metas.push_back({s.shape, s.dtype});
  const ops::OpDef& op = *ops::Registry().Find(c.op).value();
  ops::ShardingCache cache;
  (void)cache.Plan(p.call.call, p.specs);
  for (auto _ : state) {
    switch (part) {
      case Part::kPrepare:
        benchmark::DoNotOptimize(ops::PrepareCall(op, c.args, metas));
        break;
      case Part::kPlan:
        benchmark::DoNotOptimize(ops::PlanCall(p.call.call, p.specs));
        break;
      case Part::kCacheHit:
        benchmark::DoNotOptimize(cache.Plan(p.call.call, p.specs));
        break;
      case Part::kLegacy:
        benchmark::DoNotOptimize(PropagateSharding(c.legacy, p.specs));
        break;
    }
  }
  static const char* const kParts[] = {"prepare", "plan", "cache_hit", "legacy_plan"};
  state.SetLabel(absl::StrCat(kParts[state.range(0)], " ", c.op, " mesh ", ndim, "-D"));
}

BENCHMARK(BM_Planning)->ArgsProduct({{0, 1, 2, 3}, {1, 2}, {0, 1, 2, 3, 4}});

}  // namespace
}  // namespace tessera

BENCHMARK_MAIN();
