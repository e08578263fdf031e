#ifndef TESSERA_CORE_SHARDING_REDISTRIBUTE_PLANNER_H_
#define TESSERA_CORE_SHARDING_REDISTRIBUTE_PLANNER_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/sharding/dtensor_spec.h"
#include "core/sharding/placement.h"

namespace tessera {

// What one redistribute step does on the process groups of one mesh dim.
enum class Collective : int {
  kLocalChunk = 1,      // Replicate → Shard: each rank keeps its chunk, no traffic
  kLocalPartition = 2,  // Replicate → Partial: one coordinate keeps the value, others the identity
  kAllGather = 3,       // Shard → Replicate
  kAllReduce = 4,       // Partial → Replicate
  kReduceScatter = 5,   // Partial → Shard
  kAllToAll = 6,        // Shard(i) → Shard(j)
  kLocalEmbed = 7,      // Shard → Partial(sum): each rank's shard in zeros of the unsharded shape
};

// "all_gather", "local_chunk", ...
absl::string_view CollectiveName(Collective c);

// True for the steps that move no data between ranks: local_chunk, local_partition, local_embed.
bool IsLocal(Collective c);

// One step of a plan: the placement of one mesh dim changes, by one collective run on every
// process group of that mesh dim. Byte counts are per rank, the largest over all ranks, with
// uneven shards padded to the chunk size as they are on the wire.
struct RedistributeStep {
  int mesh_dim = 0;
  Placement from;
  Placement to;
  Collective collective = Collective::kLocalChunk;
  int64_t send_bytes = 0;
  int64_t recv_bytes = 0;
};

// The ordered steps that turn one layout of a tensor into another on the same mesh.
struct RedistributePlan {
  std::vector<RedistributeStep> steps;

  int64_t total_send_bytes() const;
  int64_t total_recv_bytes() const;
  // One line per step: "mesh dim 0: S(0) -> R  all_gather  send 48 B  recv 48 B".
  std::string ToString() const;
};

// How to choose the steps.
enum class PlannerKind {
  // DTensor's greedy rule (torch.distributed.tensor._redistribute): walk mesh dims inner → outer,
  // replicating any dim whose sharding would be misaligned by the change, then outer → inner
  // applying the remaining per-dim transitions.
  kGreedy,
  // A shortest-path search over placement states whose cost is the bytes each rank receives
  // (ties: fewer collectives, then fewer steps). Never moves more bytes than kGreedy.
  kMinCost,
};

// Plans the steps from `src` to `dst_placements` (same mesh, shape, dtype). INVALID_ARGUMENT for
// placements that do not fit the tensor or mesh, and for transitions that do not exist:
// Shard → Partial(op) for an op other than sum, and Partial(op1) → Partial(op2) on one mesh dim.
absl::StatusOr<RedistributePlan> PlanRedistribute(const DTensorSpec& src,
                                                  absl::Span<const Placement> dst_placements,
                                                  PlannerKind kind = PlannerKind::kMinCost);

// The step (collective and byte counts) that changes mesh dim `mesh_dim` of `spec` to `to`; the
// building block of both planners. INVALID_ARGUMENT if that single change is not a valid step:
// it would involve a tensor dim that a later (inner) mesh dim also shards, or it is one of the
// transitions that do not exist.
absl::StatusOr<RedistributeStep> PlanStep(const DTensorSpec& spec, int mesh_dim,
                                          const Placement& to);

}  // namespace tessera

#endif  // TESSERA_CORE_SHARDING_REDISTRIBUTE_PLANNER_H_
