#include "core/sharding/redistribute_planner.h"

#include <algorithm>
#include <map>
#include <queue>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/sharding/chunk.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

// Product of every size of `shape` except those at `skip_a` and `skip_b`.
int64_t ProductExcept(const Shape& shape, int skip_a, int skip_b = -1) {
  int64_t n = 1;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    if (i != skip_a && i != skip_b) n *= shape[i];
  }
  return n;
}

absl::StatusOr<Collective> CollectiveFor(const Placement& from, const Placement& to) {
  if (from.is_replicate() && to.is_shard()) return Collective::kLocalChunk;
  if (from.is_replicate() && to.is_partial()) return Collective::kLocalPartition;
  if (from.is_shard() && to.is_replicate()) return Collective::kAllGather;
  if (from.is_partial() && to.is_replicate()) return Collective::kAllReduce;
  if (from.is_partial() && to.is_shard()) return Collective::kReduceScatter;
  if (from.is_shard() && to.is_shard()) return Collective::kAllToAll;
  if (from.is_shard() && to.is_partial(ReduceOp::kSum)) return Collective::kLocalEmbed;
  if (from.is_shard() && to.is_partial()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "redistribute from ", PlacementToString(from), " to ", PlacementToString(to),
        " is not supported: a shard becomes only P(sum), its zeros adding nothing (DTensor "
        "refuses Shard -> Partial for every reduce op); go through R for ",
        PlacementToString(to)));
  }
  return absl::InvalidArgumentError(absl::StrCat("redistribute from ", PlacementToString(from),
                                                 " to ", PlacementToString(to),
                                                 " is not supported: Partial reduce ops differ"));
}

// Rejects a destination no step reaches: Shard → Partial(op other than sum), or Partial(a) →
// Partial(b), on a mesh dim.
absl::Status CheckSupported(std::span<const Placement> src, std::span<const Placement> dst) {
  for (size_t m = 0; m < src.size(); ++m) {
    if (!dst[m].is_partial() || src[m] == dst[m]) continue;
    if (absl::Status s = CollectiveFor(src[m], dst[m]).status(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("mesh dim ", m, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

DTensorSpec WithPlacement(const DTensorSpec& spec, int mesh_dim, const Placement& p) {
  DTensorSpec next = spec;
  next.placements[mesh_dim] = p;
  return next;
}

// Appends the step that sets `mesh_dim` of `*spec` to `to`, and applies it.
absl::Status AppendStep(DTensorSpec* spec, int mesh_dim, const Placement& to,
                        RedistributePlan* plan) {
  ASSIGN_OR_RETURN(RedistributeStep step, PlanStep(*spec, mesh_dim, to));
  plan->steps.push_back(step);
  spec->placements[mesh_dim] = to;
  return absl::OkStatus();
}

absl::StatusOr<RedistributePlan> PlanGreedy(const DTensorSpec& src,
                                            std::span<const Placement> dst) {
  RedistributePlan plan;
  DTensorSpec current = src;
  const int ndim = src.mesh.ndim();
  bool sharded = false;
  for (const Placement& p : src.placements) sharded |= p.is_shard();
  if (sharded && ndim > 1) {
    // Inner → outer: a dim whose target is Shard(d) goes to Replicate first when the mesh dims
    // before it shard tensor dim d differently now than in the target (nested sharding).
    for (int m = ndim - 1; m >= 0; --m) {
      Placement target = dst[m];
      if (target.is_shard()) {
        for (int i = 0; i < m; ++i) {
          if (current.placements[i].is_shard(target.dim) != dst[i].is_shard(target.dim)) {
            target = Placement::Replicate();
            break;
          }
        }
      }
      if (current.placements[m] != target) {
        RETURN_IF_ERROR(AppendStep(&current, m, target, &plan));
      }
    }
  }
  // Outer → inner: the remaining transitions.
  for (int m = 0; m < ndim; ++m) {
    if (current.placements[m] != dst[m]) {
      RETURN_IF_ERROR(AppendStep(&current, m, dst[m], &plan));
    }
  }
  return plan;
}

// The placements each mesh dim may pass through in the search: Replicate, every Shard, and the
// Partial of the source or destination on that dim.
std::vector<Placement> Candidates(int tensor_rank, const Placement& src, const Placement& dst) {
  std::vector<Placement> out = {Placement::Replicate()};
  for (int d = 0; d < tensor_rank; ++d) out.push_back(Placement::Shard(d));
  if (src.is_partial()) out.push_back(src);
  if (dst.is_partial() && dst != src) out.push_back(dst);
  return out;
}

std::string StateKey(std::span<const Placement> placements) {
  return PlacementsToString(placements);
}

absl::StatusOr<RedistributePlan> PlanMinCost(const DTensorSpec& src,
                                             std::span<const Placement> dst) {
  // Dijkstra over placement states. Cost: (bytes received, collectives, steps), lexicographic.
  using Cost = std::tuple<int64_t, int, int>;
  struct Node {
    Cost cost;
    std::vector<Placement> placements;
    RedistributePlan plan;
  };
  auto later = [](const Node& a, const Node& b) { return a.cost > b.cost; };
  std::priority_queue<Node, std::vector<Node>, decltype(later)> frontier(later);
  absl::flat_hash_map<std::string, Cost> best;
  const std::string goal = StateKey(dst);
  const int ndim = src.mesh.ndim();
  const int tensor_rank = static_cast<int>(src.shape.size());
  std::vector<std::vector<Placement>> candidates;
  for (int m = 0; m < ndim; ++m) {
    candidates.push_back(Candidates(tensor_rank, src.placements[m], dst[m]));
  }

  frontier.push(Node{Cost{0, 0, 0}, src.placements, {}});
  best[StateKey(src.placements)] = Cost{0, 0, 0};
  while (!frontier.empty()) {
    Node node = frontier.top();
    frontier.pop();
    const std::string key = StateKey(node.placements);
    if (key == goal) return node.plan;
    if (best[key] < node.cost) continue;
    DTensorSpec spec = src;
    spec.placements = node.placements;
    for (int m = 0; m < ndim; ++m) {
      for (const Placement& to : candidates[m]) {
        const Placement& from = node.placements[m];
        if (to == from) continue;
        // A Partial is only ever created on the dim that ends Partial.
        if (to.is_partial() && to != dst[m]) continue;
        absl::StatusOr<RedistributeStep> step = PlanStep(spec, m, to);
        if (!step.ok()) continue;
        Node next{Cost{std::get<0>(node.cost) + step->recv_bytes,
                       std::get<1>(node.cost) + (IsLocal(step->collective) ? 0 : 1),
                       std::get<2>(node.cost) + 1},
                  node.placements, node.plan};
        next.placements[m] = to;
        next.plan.steps.push_back(*step);
        const std::string next_key = StateKey(next.placements);
        auto it = best.find(next_key);
        if (it != best.end() && it->second <= next.cost) continue;
        best[next_key] = next.cost;
        frontier.push(std::move(next));
      }
    }
  }
  return absl::InternalError(absl::StrCat("no redistribute plan from ",
                                          PlacementsToString(src.placements), " to ",
                                          PlacementsToString(dst)));
}

}  // namespace

absl::string_view CollectiveName(Collective c) {
  switch (c) {
    case Collective::kLocalChunk:
      return "local_chunk";
    case Collective::kLocalPartition:
      return "local_partition";
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAllToAll:
      return "all_to_all";
    case Collective::kLocalEmbed:
      return "local_embed";
  }
  return "invalid";
}

bool IsLocal(Collective c) {
  return c == Collective::kLocalChunk || c == Collective::kLocalPartition ||
         c == Collective::kLocalEmbed;
}

int64_t RedistributePlan::total_send_bytes() const {
  int64_t n = 0;
  for (const RedistributeStep& s : steps) n += s.send_bytes;
  return n;
}

int64_t RedistributePlan::total_recv_bytes() const {
  int64_t n = 0;
  for (const RedistributeStep& s : steps) n += s.recv_bytes;
  return n;
}

std::string RedistributePlan::ToString() const {
  if (steps.empty()) return "no steps: the layouts are the same\n";
  std::string out;
  for (const RedistributeStep& s : steps) {
    absl::StrAppendFormat(&out, "mesh dim %d: %-7s -> %-7s %-15s send %d B  recv %d B\n",
                          s.mesh_dim, PlacementToString(s.from), PlacementToString(s.to),
                          CollectiveName(s.collective), s.send_bytes, s.recv_bytes);
  }
  return out;
}

absl::StatusOr<RedistributeStep> PlanStep(const DTensorSpec& spec, int mesh_dim,
                                          const Placement& to) {
  if (mesh_dim < 0 || mesh_dim >= spec.mesh.ndim()) {
    return absl::InvalidArgumentError(absl::StrCat("mesh dim ", mesh_dim, " is out of range for a ",
                                                   spec.mesh.ndim(), "-D mesh"));
  }
  const Placement& from = spec.placements[mesh_dim];
  if (from == to) {
    return absl::InvalidArgumentError(
        absl::StrCat("mesh dim ", mesh_dim, " is already ", PlacementToString(to)));
  }
  ASSIGN_OR_RETURN(Collective collective, CollectiveFor(from, to));
  // Sharding nests left to right: a step may only cut or join a tensor dim that no inner mesh dim
  // shards, or the inner shards would end up holding the wrong elements.
  for (const Placement* p : {&from, &to}) {
    if (!p->is_shard()) continue;
    for (int inner = mesh_dim + 1; inner < spec.mesh.ndim(); ++inner) {
      if (spec.placements[inner].is_shard(p->dim)) {
        return absl::InvalidArgumentError(
            absl::StrCat("mesh dim ", mesh_dim, " cannot go from ", PlacementToString(from), " to ",
                         PlacementToString(to), " while inner mesh dim ", inner,
                         " also shards tensor dim ", p->dim));
      }
    }
  }

  RedistributeStep step{mesh_dim, from, to, collective, 0, 0};
  const int64_t k = spec.mesh.size(mesh_dim);
  const int64_t elem = static_cast<int64_t>(DTypeSize(spec.dtype));
  const DTensorSpec after_spec = WithPlacement(spec, mesh_dim, to);
  int64_t bytes = 0;
  for (int64_t index = 0; index < spec.mesh.size(); ++index) {
    const std::vector<int64_t> coord = spec.mesh.CoordinateOfIndex(index);
    const Shape before = LocalShapeAndOffsetAt(spec, coord).shape;
    const Shape after = LocalShapeAndOffsetAt(after_spec, coord).shape;
    int64_t per_peer = 0;  // elements exchanged with each of the k-1 peers
    switch (collective) {
      case Collective::kLocalChunk:
      case Collective::kLocalPartition:
      case Collective::kLocalEmbed:
        break;
      case Collective::kAllGather:
        per_peer = ChunkSize(after[from.dim], k) * ProductExcept(after, from.dim);
        break;
      case Collective::kAllReduce:  // reduce_scatter then all_gather of 1/k of the elements
        per_peer = 2 * ChunkSize(NumElements(before), k);
        break;
      case Collective::kReduceScatter:
        per_peer = ChunkSize(before[to.dim], k) * ProductExcept(before, to.dim);
        break;
      case Collective::kAllToAll:
        per_peer = ChunkSize(after[from.dim], k) * ChunkSize(before[to.dim], k) *
                   ProductExcept(before, from.dim, to.dim);
        break;
    }
    bytes = std::max(bytes, (k - 1) * per_peer * elem);
  }
  step.send_bytes = bytes;
  step.recv_bytes = bytes;
  return step;
}

absl::StatusOr<RedistributePlan> PlanRedistribute(const DTensorSpec& src,
                                                  absl::Span<const Placement> dst_placements,
                                                  PlannerKind kind) {
  ASSIGN_OR_RETURN(
      std::vector<Placement> dst,
      NormalizePlacements(src.mesh,
                          std::vector<Placement>(dst_placements.begin(), dst_placements.end()),
                          static_cast<int>(src.shape.size())));
  RETURN_IF_ERROR(CheckSupported(src.placements, dst));
  return kind == PlannerKind::kGreedy ? PlanGreedy(src, dst) : PlanMinCost(src, dst);
}

}  // namespace tessera
