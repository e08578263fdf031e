// Sharding propagation of one call of a registered op on DTensors: bind the arguments, run the
// meta function, list the op's strategies over the mesh and choose the one whose input
// redistributions (the min-cost planner's) move the fewest bytes. Cached by (op, input specs,
// arguments), so a repeated op plans in microseconds.
#ifndef TESSERA_CORE_OPS_OP_PROPAGATION_H_
#define TESSERA_CORE_OPS_OP_PROPAGATION_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/ops/op_registry.h"
#include "core/ops/op_schema.h"
#include "core/sharding/dtensor_spec.h"
#include "core/sharding/redistribute_planner.h"

namespace tessera::ops {

// A call bound and checked: the op, its arguments (tensors numbered by input as
// CallContext says), its inputs' metas and the output's.
struct BoundCall {
  const OpDef* op = nullptr;
  BoundArgs args;
  std::vector<TensorMeta> inputs;
  OutputMeta output;
  std::vector<OutputMeta> more_outputs;  // an op with several: the outputs after the first
};

// Binds `args` to `op` (input tensors referred to by index into `inputs`, renumbered so that
// each occurrence is one input, in schema order: `input_of` maps each new input to the index it
// came from) and runs the meta function. INVALID_ARGUMENT naming the op, the argument and the
// value.
struct PreparedCall {
  BoundCall call;
  std::vector<int> input_of;
};
absl::StatusOr<PreparedCall> PrepareCall(const OpDef& op, std::span<const NamedValue> args,
                                         std::span<const TensorMeta> inputs);

// The chosen strategy, the plan that brings each input to it, and the output spec.
struct OpPlan {
  Strategy strategy;
  std::vector<RedistributePlan> input_plans;
  DTensorSpec output;
  std::vector<DTensorSpec> more_outputs;  // in the first's placements (OpDef::more_outputs)
  int64_t redistribute_bytes = 0;
};

// Every strategy of the call whose inputs `specs` can be redistributed to, in order.
absl::StatusOr<std::vector<Strategy>> CallStrategies(const BoundCall& call,
                                                     std::span<const DTensorSpec> specs);

// The strategy that moves the fewest bytes (among equals, one that moves nothing, then the
// first), as DTensor chooses. Inputs must share a mesh (INVALID_ARGUMENT naming the meshes).
// UNIMPLEMENTED naming the op and the placements when no strategy fits.
absl::StatusOr<OpPlan> PlanCall(const BoundCall& call, std::span<const DTensorSpec> specs);

// PlanCall behind a cache keyed by (op, arguments, input specs); thread-safe. Bounded: it is
// emptied when it holds `capacity` plans.
class ShardingCache {
 public:
  explicit ShardingCache(size_t capacity = 4096) : capacity_(capacity) {}
  absl::StatusOr<std::shared_ptr<const OpPlan>> Plan(const BoundCall& call,
                                                     std::span<const DTensorSpec> specs);
  int64_t hits() const;
  int64_t misses() const;

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const OpPlan>> plans_ ABSL_GUARDED_BY(mu_);
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

// A call as a client gives it (the arguments refer to the tensors of `given` by index), planned
// as the coordinator plans it: bound by PrepareCall on the metas of `given`, its strategy chosen
// through `cache`. UNIMPLEMENTED naming the op when the call uses none of the tensors (it has no
// mesh to run on).
struct PlannedCall {
  PreparedCall prepared;
  std::vector<DTensorSpec> specs;  // the spec of each input of `prepared.call`
  std::shared_ptr<const OpPlan> plan;
};
absl::StatusOr<PlannedCall> PlanOpCall(const OpDef& op, std::span<const NamedValue> args,
                                       std::span<const DTensorSpec> given, ShardingCache& cache);

// A graph planned in one pass: each node's call planned on the specs its inputs have by then (the
// arguments refer to graph values, so `prepared.input_of` lists the values each input is), and
// every value's spec (the inputs', then each node's output).
struct PlannedGraph {
  std::vector<PlannedCall> nodes;
  std::vector<DTensorSpec> values;
};
// The errors of a node name the graph's op and the node: "aten::cross_entropy_loss, node 6
// (aten::nll_loss): ...".
absl::StatusOr<PlannedGraph> PlanGraph(const OpDef& op, const OpGraph& graph,
                                       std::span<const DTensorSpec> inputs, ShardingCache& cache);

// A call of an op that decomposes, planned as the coordinator plans it: bound and checked by
// its own meta on the metas of `given` (its arguments refer to them by index), decomposed, and
// its graph planned on the specs of the inputs it uses (`prepared.input_of`, the graph's inputs).
// The graph's output has the call's meta (INTERNAL otherwise).
struct PlannedDecomposition {
  PreparedCall prepared;
  OpGraph graph;
  PlannedGraph planned;
};
absl::StatusOr<PlannedDecomposition> PlanDecomposedCall(const OpDef& op,
                                                        std::span<const NamedValue> args,
                                                        std::span<const DTensorSpec> given,
                                                        ShardingCache& cache);
// How a decomposition's intermediate is named in the redistributions a reply lists:
// "aten::cross_entropy_loss node 1 (aten::sub.Tensor)", for the output of node `k`.
std::string NodeLabel(const OpDef& op, const PlannedGraph& planned, int k);

// The cache key of a call: its op, arguments and input specs, compactly.
std::string CallKey(const BoundCall& call, std::span<const DTensorSpec> specs);

}  // namespace tessera::ops

#endif  // TESSERA_CORE_OPS_OP_PROPAGATION_H_
