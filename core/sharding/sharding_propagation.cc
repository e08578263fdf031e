#include "core/sharding/sharding_propagation.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

// One mesh dim's choice: the placement of each input on it and the output's.
struct DimStrategy {
  std::vector<Placement> inputs;
  Placement output;
};

using DimStrategies = std::vector<DimStrategy>;

Placement S(int dim) { return Placement::Shard(dim); }
Placement R() { return Placement::Replicate(); }
Placement P(ReduceOp op = ReduceOp::kSum) { return Placement::Partial(op); }

// mm / matmul: a[..., M, K] (or a[K]) × b[K, N].
DimStrategies MatmulStrategies(const Shape& a) {
  const int rank = static_cast<int>(a.size());
  const int k = rank - 1;
  DimStrategies out;
  if (rank >= 2) out.push_back({{S(rank - 2), R()}, S(rank - 2)});
  out.push_back({{R(), S(1)}, S(std::max(rank - 1, 0))});
  out.push_back({{S(k), S(0)}, P()});
  out.push_back({{R(), R()}, R()});
  out.push_back({{P(), R()}, P()});
  out.push_back({{R(), P()}, P()});
  for (int d = 0; d + 2 < rank; ++d) out.push_back({{S(d), R()}, S(d)});
  return out;
}

// addmm(bias, a[M, K], b[K, N]): mm's strategies, with the bias following the output.
DimStrategies AddmmStrategies(const Shape& bias) {
  const int rank = static_cast<int>(bias.size());
  DimStrategies out;
  for (DimStrategy s : MatmulStrategies({0, 0})) {
    Placement b = R();
    if (s.output.is_partial()) {
      b = s.output;
    } else if (s.output.is_shard(0) && rank == 2 && bias[0] != 1) {
      b = S(0);
    } else if (s.output.is_shard(1) && rank >= 1 && bias.back() != 1) {
      b = S(rank - 1);
    }
    s.inputs.insert(s.inputs.begin(), b);
    out.push_back(std::move(s));
  }
  return out;
}

// add / sub / mul / div with numpy broadcasting: shard an output dim together with every input
// that has it unbroadcast; linear partials as the op allows.
DimStrategies BinaryStrategies(OpKind kind, absl::Span<const Shape> in, const Shape& out_shape) {
  const int out_rank = static_cast<int>(out_shape.size());
  DimStrategies out;
  for (int o = 0; o < out_rank; ++o) {
    DimStrategy s{{}, S(o)};
    bool any_sharded = false;
    for (const Shape& shape : in) {
      const int d = o - (out_rank - static_cast<int>(shape.size()));
      const bool sharded = d >= 0 && shape[d] != 1;
      s.inputs.push_back(sharded ? S(d) : R());
      any_sharded |= sharded;
    }
    if (any_sharded) out.push_back(std::move(s));
  }
  out.push_back({{R(), R()}, R()});
  if (kind == OpKind::kAdd || kind == OpKind::kSub) out.push_back({{P(), P()}, P()});
  if (kind == OpKind::kMul || kind == OpKind::kDiv) out.push_back({{P(), R()}, P()});
  if (kind == OpKind::kMul) out.push_back({{R(), P()}, P()});
  return out;
}

// relu, gelu, tanh, cast and transpose: S(d) → S(perm(d)), R → R, and the given partials kept.
DimStrategies PointwiseStrategies(int rank, int dim0, int dim1,
                                  absl::Span<const ReduceOp> kept_partials) {
  DimStrategies out;
  for (int d = 0; d < rank; ++d) {
    const int o = d == dim0 ? dim1 : d == dim1 ? dim0 : d;
    out.push_back({{S(d)}, S(o)});
  }
  out.push_back({{R()}, R()});
  for (ReduceOp op : kept_partials) out.push_back({{P(op)}, P(op)});
  return out;
}

// sum / mean / max: a sharded reduced dim gives the partial of the reduction; other shards move to
// their position in the output.
DimStrategies ReductionStrategies(const OpCall& op, int rank, const std::vector<int>& reduced) {
  const ReduceOp partial = op.kind == OpKind::kMax ? ReduceOp::kMax : ReduceOp::kSum;
  DimStrategies out;
  int removed = 0;
  for (int d = 0; d < rank; ++d) {
    const bool is_reduced = std::find(reduced.begin(), reduced.end(), d) != reduced.end();
    out.push_back({{S(d)}, is_reduced ? P(partial) : S(op.keepdim ? d : d - removed)});
    if (is_reduced) ++removed;
  }
  out.push_back({{R()}, R()});
  out.push_back({{P(partial)}, P(partial)});
  if (op.kind == OpKind::kMean) out.push_back({{P(ReduceOp::kAvg)}, P(ReduceOp::kAvg)});
  return out;
}

absl::StatusOr<DimStrategies> StrategiesForOp(const OpCall& op,
                                              absl::Span<const DTensorSpec> inputs,
                                              const Shape& out_shape) {
  const Shape& x = inputs[0].shape;
  const int rank = static_cast<int>(x.size());
  switch (op.kind) {
    case OpKind::kMm:
    case OpKind::kMatmul:
      return MatmulStrategies(x);
    case OpKind::kAddmm:
      return AddmmStrategies(x);
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kDiv:
      return BinaryStrategies(op.kind, {inputs[0].shape, inputs[1].shape}, out_shape);
    case OpKind::kRelu:
    case OpKind::kGelu:
    case OpKind::kTanh:
      return PointwiseStrategies(rank, -1, -1, {});
    case OpKind::kCast:
      // Casting is monotonic (except to bool), so it commutes with max and min.
      if (op.dtype == DType::kBool) return PointwiseStrategies(rank, -1, -1, {});
      return PointwiseStrategies(rank, -1, -1, {ReduceOp::kMax, ReduceOp::kMin});
    case OpKind::kTranspose: {
      ASSIGN_OR_RETURN(const int d0, NormalizeDim(op.dim0, rank));
      ASSIGN_OR_RETURN(const int d1, NormalizeDim(op.dim1, rank));
      return PointwiseStrategies(rank, d0, d1, kAllReduceOps);
    }
    case OpKind::kSum:
    case OpKind::kMean:
    case OpKind::kMax: {
      ASSIGN_OR_RETURN(std::vector<int> reduced, ReducedDims(op, rank));
      return ReductionStrategies(op, rank, reduced);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("no sharding rule for op ", OpKindName(op.kind)));
}

// A valid strategy with the plans that bring each input to it.
struct PlannedStrategy {
  OpStrategy strategy;
  std::vector<RedistributePlan> plans;
};

absl::StatusOr<OpOutput> CheckInputs(const OpCall& op, absl::Span<const DTensorSpec> inputs) {
  if (static_cast<int>(inputs.size()) != op.num_inputs()) {
    return absl::InvalidArgumentError(absl::StrCat(OpKindName(op.kind), " takes ", op.num_inputs(),
                                                   " inputs; got ", inputs.size()));
  }
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const DTensorSpec& in : inputs) {
    if (!(in.mesh == inputs[0].mesh)) {
      return absl::InvalidArgumentError(absl::StrCat(
          OpKindName(op.kind), ": inputs are on different meshes, ", inputs[0].mesh.ToString(),
          " and ", in.mesh.ToString(), "; redistribute them onto one mesh first"));
    }
    shapes.push_back(in.shape);
    dtypes.push_back(in.dtype);
  }
  return InferOpOutput(op, shapes, dtypes);
}

// Every strategy of the product that each input can reach, in order, with its plans. With
// `free_only`, just the first strategy that needs no redistribution at all (none if there is
// none), found without running the planner: no other strategy can cost less.
absl::StatusOr<std::vector<PlannedStrategy>> PlannedStrategies(const OpCall& op,
                                                               absl::Span<const DTensorSpec> inputs,
                                                               const OpOutput& out,
                                                               bool free_only = false) {
  ASSIGN_OR_RETURN(DimStrategies per_dim, StrategiesForOp(op, inputs, out.shape));
  const DeviceMesh& mesh = inputs[0].mesh;
  const int ndim = mesh.ndim();
  const size_t n = per_dim.size();
  std::vector<PlannedStrategy> result;
  // The same input target recurs across the product; plan it once.
  std::map<std::pair<size_t, std::string>, absl::StatusOr<RedistributePlan>> memo;
  std::vector<size_t> choice(ndim, 0);
  while (true) {
    PlannedStrategy planned;
    planned.strategy.inputs.resize(inputs.size());
    for (int m = 0; m < ndim; ++m) {
      const DimStrategy& s = per_dim[choice[m]];
      for (size_t i = 0; i < inputs.size(); ++i) planned.strategy.inputs[i].push_back(s.inputs[i]);
      planned.strategy.output.push_back(s.output);
    }
    bool valid =
        NormalizePlacements(mesh, planned.strategy.output, static_cast<int>(out.shape.size())).ok();
    if (free_only) {
      for (size_t i = 0; valid && i < inputs.size(); ++i) {
        valid = planned.strategy.inputs[i] == inputs[i].placements;
      }
      if (valid) {
        planned.plans.resize(inputs.size());
        result.push_back(std::move(planned));
        return result;
      }
    } else {
      for (size_t i = 0; valid && i < inputs.size(); ++i) {
        auto key = std::make_pair(i, PlacementsToString(planned.strategy.inputs[i]));
        auto it = memo.find(key);
        if (it == memo.end()) {
          it = memo.emplace(key, PlanRedistribute(inputs[i], planned.strategy.inputs[i],
                                                  PlannerKind::kMinCost))
                   .first;
        }
        valid = it->second.ok();
        if (valid) planned.plans.push_back(*it->second);
      }
      if (valid) result.push_back(std::move(planned));
    }
    // Next combination, the last mesh dim varying fastest.
    int m = ndim - 1;
    while (m >= 0 && ++choice[m] == n) choice[m--] = 0;
    if (m < 0) break;
  }
  return result;
}

}  // namespace

absl::StatusOr<std::vector<OpStrategy>> OpStrategies(const OpCall& op,
                                                     absl::Span<const DTensorSpec> inputs) {
  ASSIGN_OR_RETURN(OpOutput out, CheckInputs(op, inputs));
  ASSIGN_OR_RETURN(std::vector<PlannedStrategy> planned, PlannedStrategies(op, inputs, out));
  std::vector<OpStrategy> result;
  for (PlannedStrategy& p : planned) result.push_back(std::move(p.strategy));
  return result;
}

absl::StatusOr<OpSharding> PropagateSharding(const OpCall& op,
                                             absl::Span<const DTensorSpec> inputs) {
  ASSIGN_OR_RETURN(OpOutput out, CheckInputs(op, inputs));
  absl::StatusOr<std::vector<PlannedStrategy>> planned =
      PlannedStrategies(op, inputs, out, /*free_only=*/true);
  if (planned.ok() && planned->empty()) planned = PlannedStrategies(op, inputs, out);
  if (!planned.ok()) return planned.status();
  // Cost: (bytes received, needs any redistribution); ties keep the earlier strategy.
  using Cost = std::tuple<int64_t, bool>;
  PlannedStrategy* best = nullptr;
  Cost best_cost;
  for (PlannedStrategy& p : *planned) {
    int64_t bytes = 0;
    bool moves = false;
    for (const RedistributePlan& plan : p.plans) {
      bytes += plan.total_recv_bytes();
      moves |= !plan.steps.empty();
    }
    const Cost cost{bytes, moves};
    if (best == nullptr || cost < best_cost) {
      best = &p;
      best_cost = cost;
    }
  }
  if (best == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no sharding strategy fits ", OpKindName(op.kind), " on ", inputs[0].ToString()));
  }
  ASSIGN_OR_RETURN(DTensorSpec spec,
                   MakeDTensorSpec(inputs[0].mesh, best->strategy.output, out.shape, out.dtype));
  return OpSharding{std::move(best->strategy), std::move(best->plans), std::move(spec),
                    std::get<0>(best_cost)};
}

}  // namespace tessera
