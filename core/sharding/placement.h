#ifndef TESSERA_CORE_SHARDING_PLACEMENT_H_
#define TESSERA_CORE_SHARDING_PLACEMENT_H_

#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

// How the values held by the ranks of a Partial placement combine into the tensor's value.
// Values are the wire values of tessera.v1.ReduceOp.
enum class ReduceOp : int { kSum = 1, kAvg = 2, kMax = 3, kMin = 4, kProduct = 5 };

inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax,
                                             ReduceOp::kMin, ReduceOp::kProduct};

// "sum", "avg", "max", "min", "product".
absl::string_view ReduceOpName(ReduceOp op);
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

// How a tensor is laid out along one mesh dimension: Shard(dim), Replicate() or Partial(op).
struct Placement {
  enum class Kind : int { kReplicate = 0, kShard = 1, kPartial = 2 };

  Kind kind = Kind::kReplicate;
  int dim = 0;                   // tensor dim, for kShard
  ReduceOp op = ReduceOp::kSum;  // for kPartial

  static Placement Shard(int dim) { return {Kind::kShard, dim, ReduceOp::kSum}; }
  static Placement Replicate() { return {Kind::kReplicate, 0, ReduceOp::kSum}; }
  static Placement Partial(ReduceOp op = ReduceOp::kSum) { return {Kind::kPartial, 0, op}; }

  bool is_shard() const { return kind == Kind::kShard; }
  bool is_shard(int d) const { return kind == Kind::kShard && dim == d; }
  bool is_replicate() const { return kind == Kind::kReplicate; }
  bool is_partial() const { return kind == Kind::kPartial; }
  bool is_partial(ReduceOp o) const { return kind == Kind::kPartial && op == o; }

  friend bool operator==(const Placement& a, const Placement& b) {
    if (a.kind != b.kind) return false;
    if (a.kind == Kind::kShard) return a.dim == b.dim;
    if (a.kind == Kind::kPartial) return a.op == b.op;
    return true;
  }
};

// DTensor's short form: "S(0)", "R", "P(sum)".
std::string PlacementToString(const Placement& p);
// "(S(0), R)".
std::string PlacementsToString(std::span<const Placement> placements);

// Parses one placement in Tessera's or torch's spelling: "S(0)", "S0", "Shard(0)", "Shard(dim=0)",
// "R", "Replicate()", "P", "P(max)", "Partial(avg)", "Partial('max')", "Partial(\"sum\")",
// "Partial(reduce_op=\"sum\")". INVALID_ARGUMENT quoting the text otherwise.
absl::StatusOr<Placement> ParsePlacement(absl::string_view text);
// Parses a comma-separated list such as "S(0),R", "(Shard(1), Partial(sum))" or
// "[Shard(dim=0), Partial(reduce_op='sum')]".
absl::StatusOr<std::vector<Placement>> ParsePlacements(absl::string_view text);

}  // namespace tessera

#endif  // TESSERA_CORE_SHARDING_PLACEMENT_H_
