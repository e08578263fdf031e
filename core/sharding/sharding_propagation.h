#ifndef TESSERA_CORE_SHARDING_SHARDING_PROPAGATION_H_
#define TESSERA_CORE_SHARDING_SHARDING_PROPAGATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/sharding/dtensor_spec.h"
#include "core/sharding/op_call.h"
#include "core/sharding/placement.h"
#include "core/sharding/redistribute_planner.h"

namespace tessera {

// One way to run an op: the placements each input must have and the output's placements.
struct OpStrategy {
  std::vector<std::vector<Placement>> inputs;
  std::vector<Placement> output;
};

// Every strategy DTensor would consider for `op` on these input specs: on each mesh dim the op's
// own rules (matmul: S(0)×R→S(0), R×S(1)→S(1), S(1)×S(0)→P(sum), R×R→R, ...), combined over mesh
// dims as a cartesian product (mesh dim 0 varying slowest), keeping those every input can be
// redistributed to. All inputs must be on one mesh (INVALID_ARGUMENT naming the meshes otherwise)
// and fit InferOpOutput.
absl::StatusOr<std::vector<OpStrategy>> OpStrategies(const OpCall& op,
                                                     absl::Span<const DTensorSpec> inputs);

// The chosen strategy, the plan that brings each input to it, and the output spec.
struct OpSharding {
  OpStrategy strategy;
  std::vector<RedistributePlan> input_plans;
  DTensorSpec output;
  int64_t redistribute_bytes = 0;  // sum over inputs of the plans' total_recv_bytes()
};

// Picks the strategy whose redistributions (min-cost planner) move the fewest bytes; among equals,
// one that needs no redistribution at all, then the first in OpStrategies' order, as DTensor does.
absl::StatusOr<OpSharding> PropagateSharding(const OpCall& op,
                                             absl::Span<const DTensorSpec> inputs);

}  // namespace tessera

#endif  // TESSERA_CORE_SHARDING_SHARDING_PROPAGATION_H_
