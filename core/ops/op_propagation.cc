#include "core/ops/op_propagation.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace tessera::ops {
namespace {

// Renumbers the tensors of `values` by occurrence, recording where each came from.
void Renumber(std::vector<OpValue>& values, std::vector<int>& input_of) {
  for (OpValue& v : values) {
    if (auto* t = std::get_if<TensorRef>(&v)) {
      input_of.push_back(t->index);
      t->index = static_cast<int>(input_of.size()) - 1;
    } else if (auto* list = std::get_if<TensorList>(&v)) {
      for (int& i : list->indices) {
        if (i < 0) continue;
        input_of.push_back(i);
        i = static_cast<int>(input_of.size()) - 1;
      }
    }
  }
}

// A strategy together with the plans that bring each input to it.
struct Planned {
  Strategy strategy;
  std::vector<RedistributePlan> plans;
};

// The strategy of `chosen`, one choice per mesh dim: their inputs', output's and more outputs'
// placements. A choice that places its other outputs as the first says so by giving none of its
// own.
Strategy Combine(const std::vector<const DimChoice*>& chosen, size_t inputs) {
  Strategy s;
  s.inputs.resize(inputs);
  size_t more = 0;
  for (const DimChoice* d : chosen) more = std::max(more, d->more.size());
  s.more.resize(more);
  for (const DimChoice* d : chosen) {
    for (size_t i = 0; i < inputs; ++i) s.inputs[i].push_back(d->inputs[i]);
    s.output.push_back(d->output);
    for (size_t k = 0; k < more; ++k) {
      s.more[k].push_back(d->more.empty() ? d->output : d->more[k]);
    }
  }
  return s;
}

// The whole strategies of the candidates: per-dim choices as their product over the mesh dims
// (mesh dim 0 varying slowest), keeping those whose output placements are valid.
std::vector<Strategy> Expand(const StrategyCandidates& c, const DeviceMesh& mesh, int inputs,
                             int out_rank) {
  if (!c.whole.empty()) return c.whole;
  std::vector<Strategy> out;
  const int ndim = mesh.ndim();
  const size_t n = c.per_dim.size();
  if (n == 0) return out;
  std::vector<size_t> choice(ndim, 0);
  while (true) {
    std::vector<const DimChoice*> chosen;
    for (int m = 0; m < ndim; ++m) chosen.push_back(&c.per_dim[choice[m]]);
    Strategy s = Combine(chosen, static_cast<size_t>(inputs));
    if (NormalizePlacements(mesh, s.output, out_rank).ok()) out.push_back(std::move(s));
    int m = ndim - 1;
    while (m >= 0 && ++choice[m] == n) choice[m--] = 0;
    if (m < 0) break;
  }
  return out;
}

absl::Status CheckMeshes(const BoundCall& call, std::span<const DTensorSpec> specs) {
  if (specs.size() != call.inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(call.op->name(), ": ", call.inputs.size(),
                                                   " inputs but ", specs.size(), " specs"));
  }
  for (const DTensorSpec& s : specs) {
    if (!(s.mesh == specs[0].mesh)) {
      return absl::InvalidArgumentError(absl::StrCat(
          call.op->name(), ": inputs are on different meshes, ", specs[0].mesh.ToString(), " and ",
          s.mesh.ToString(), "; redistribute them onto one mesh first"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StrategyCandidates> CandidateSet(const BoundCall& call,
                                                std::span<const DTensorSpec> specs) {
  RETURN_IF_ERROR(CheckMeshes(call, specs));
  if (call.op->strategies == nullptr) {
    return absl::InternalError(absl::StrCat(
        call.op->name(), " has no strategies of its own: it runs as its decomposition"));
  }
  const CallContext context{*call.op, call.args, call.inputs};
  return call.op->strategies(context, specs, call.output);
}

absl::StatusOr<std::vector<Strategy>> Candidates(const BoundCall& call,
                                                 std::span<const DTensorSpec> specs) {
  ASSIGN_OR_RETURN(const StrategyCandidates c, CandidateSet(call, specs));
  if (specs.empty()) return std::vector<Strategy>{};
  return Expand(c, specs[0].mesh, static_cast<int>(specs.size()),
                static_cast<int>(call.output.shape.size()));
}

// The first strategy of the product (mesh dim 0 varying slowest) that takes every input as it is,
// found from the per-dim choices that match on each mesh dim without expanding the product.
std::optional<Strategy> FreeStrategy(const StrategyCandidates& c,
                                     std::span<const DTensorSpec> specs, int out_rank) {
  const DeviceMesh& mesh = specs[0].mesh;
  const int ndim = mesh.ndim();
  std::vector<std::vector<size_t>> matching(ndim);
  for (int m = 0; m < ndim; ++m) {
    for (size_t j = 0; j < c.per_dim.size(); ++j) {
      bool match = true;
      for (size_t i = 0; match && i < specs.size(); ++i) {
        match = c.per_dim[j].inputs[i] == specs[i].placements[m];
      }
      if (match) matching[m].push_back(j);
    }
    if (matching[m].empty()) return std::nullopt;
  }
  std::vector<size_t> choice(ndim, 0);
  while (true) {
    std::vector<const DimChoice*> chosen;
    for (int m = 0; m < ndim; ++m) chosen.push_back(&c.per_dim[matching[m][choice[m]]]);
    Strategy s = Combine(chosen, specs.size());
    if (NormalizePlacements(mesh, s.output, out_rank).ok()) return s;
    int m = ndim - 1;
    while (m >= 0 && ++choice[m] == matching[m].size()) choice[m--] = 0;
    if (m < 0) return std::nullopt;
  }
}

// Whether strategy `s` would turn a sharded input into a Partial one: a move that costs no bytes
// but leaves every rank holding a whole tensor of zeros and its block, and a reduction of the
// whole tensor for whoever reads the result. torch's DTensor picks no such move for an op's
// input (tests/python/test_client_ops_torch.py); neither does Tessera.
bool ShardBecomesPartial(const Strategy& s, std::span<const DTensorSpec> specs) {
  for (size_t i = 0; i < specs.size(); ++i) {
    for (size_t m = 0; m < specs[i].placements.size(); ++m) {
      if (specs[i].placements[m].is_shard() && s.inputs[i][m].is_partial()) return true;
    }
  }
  return false;
}

// The strategies each input can reach, with their plans; with `free_only`, the first that needs
// no redistribution (none if none does).
std::vector<Planned> PlanAll(const std::vector<Strategy>& strategies,
                             std::span<const DTensorSpec> specs, bool free_only) {
  std::vector<Planned> out;
  std::map<std::pair<size_t, std::string>, absl::StatusOr<RedistributePlan>> memo;
  for (const Strategy& s : strategies) {
    if (free_only) {
      bool free = true;
      for (size_t i = 0; free && i < specs.size(); ++i) free = s.inputs[i] == specs[i].placements;
      if (free) {
        out.push_back({s, std::vector<RedistributePlan>(specs.size())});
        return out;
      }
      continue;
    }
    if (ShardBecomesPartial(s, specs)) continue;
    Planned p{s, {}};
    bool valid = true;
    for (size_t i = 0; valid && i < specs.size(); ++i) {
      auto key = std::make_pair(i, PlacementsToString(s.inputs[i]));
      auto it = memo.find(key);
      if (it == memo.end()) {
        it =
            memo.emplace(key, PlanRedistribute(specs[i], s.inputs[i], PlannerKind::kMinCost)).first;
      }
      valid = it->second.ok();
      if (valid) p.plans.push_back(*it->second);
    }
    if (valid) out.push_back(std::move(p));
  }
  return out;
}

std::string SpecsText(std::span<const DTensorSpec> specs) {
  std::vector<std::string> texts;
  for (const DTensorSpec& s : specs) texts.push_back(s.ToString());
  return absl::StrJoin(texts, ", ");
}

}  // namespace

absl::StatusOr<PreparedCall> PrepareCall(const OpDef& op, std::span<const NamedValue> args,
                                         std::span<const TensorMeta> inputs) {
  ASSIGN_OR_RETURN(BoundArgs bound, Bind(op.schema, args, static_cast<int>(inputs.size())));
  std::vector<OpValue> values = bound.values();
  PreparedCall p;
  Renumber(values, p.input_of);
  p.call.op = &op;
  p.call.args = BoundArgs(&op.schema, std::move(values));
  for (int i : p.input_of) p.call.inputs.push_back(inputs[i]);
  const CallContext context{op, p.call.args, p.call.inputs};
  ASSIGN_OR_RETURN(p.call.output, op.meta(context));
  RETURN_IF_ERROR(ValidateTensorShape(p.call.output.dtype, p.call.output.shape));
  if (op.more_outputs != nullptr) {
    ASSIGN_OR_RETURN(p.call.more_outputs, op.more_outputs(context, p.call.output));
    for (const OutputMeta& m : p.call.more_outputs) {
      RETURN_IF_ERROR(ValidateTensorShape(m.dtype, m.shape));
    }
  }
  return p;
}

absl::StatusOr<std::vector<Strategy>> CallStrategies(const BoundCall& call,
                                                     std::span<const DTensorSpec> specs) {
  ASSIGN_OR_RETURN(const std::vector<Strategy> all, Candidates(call, specs));
  std::vector<Strategy> out;
  for (Planned& p : PlanAll(all, specs, false)) out.push_back(std::move(p.strategy));
  return out;
}

absl::StatusOr<OpPlan> PlanCall(const BoundCall& call, std::span<const DTensorSpec> specs) {
  if (specs.empty()) {
    return absl::UnimplementedError(
        absl::StrCat(call.op->name(), " with no tensor input has no mesh to run on"));
  }
  ASSIGN_OR_RETURN(const StrategyCandidates candidates, CandidateSet(call, specs));
  const int out_rank = static_cast<int>(call.output.shape.size());
  std::vector<Planned> planned;
  if (candidates.whole.empty()) {
    if (std::optional<Strategy> free = FreeStrategy(candidates, specs, out_rank)) {
      planned.push_back({*std::move(free), std::vector<RedistributePlan>(specs.size())});
    }
  }
  if (planned.empty()) {
    const std::vector<Strategy> all =
        Expand(candidates, specs[0].mesh, static_cast<int>(specs.size()), out_rank);
    planned = PlanAll(all, specs, /*free_only=*/true);
    if (planned.empty()) planned = PlanAll(all, specs, false);
  }
  using Cost = std::tuple<int64_t, bool>;
  Planned* best = nullptr;
  Cost best_cost;
  for (Planned& p : planned) {
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
    return absl::UnimplementedError(absl::StrCat("no sharding strategy of ", call.op->name(),
                                                 " fits inputs ", SpecsText(specs)));
  }
  ASSIGN_OR_RETURN(DTensorSpec out, MakeDTensorSpec(specs[0].mesh, best->strategy.output,
                                                    call.output.shape, call.output.dtype));
  std::vector<DTensorSpec> more;
  for (size_t k = 0; k < call.more_outputs.size(); ++k) {
    const OutputMeta& m = call.more_outputs[k];
    const std::vector<Placement>& placements =
        k < best->strategy.more.size() ? best->strategy.more[k] : best->strategy.output;
    absl::StatusOr<DTensorSpec> spec = MakeDTensorSpec(specs[0].mesh, placements, m.shape, m.dtype);
    if (!spec.ok()) {
      return absl::InternalError(absl::StrCat(call.op->name(), ": output ", k + 1, " of ",
                                              ShapeToString(m.shape), " cannot take placements ",
                                              PlacementsToString(placements), ": ",
                                              spec.status().message()));
    }
    more.push_back(*std::move(spec));
  }
  return OpPlan{std::move(best->strategy), std::move(best->plans), std::move(out), std::move(more),
                std::get<0>(best_cost)};
}

absl::StatusOr<PlannedCall> PlanOpCall(const OpDef& op, std::span<const NamedValue> args,
                                       std::span<const DTensorSpec> given, ShardingCache& cache) {
  std::vector<TensorMeta> metas;
  for (const DTensorSpec& s : given) metas.push_back({s.shape, s.dtype});
  PlannedCall out;
  ASSIGN_OR_RETURN(out.prepared, PrepareCall(op, args, metas));
  if (out.prepared.input_of.empty()) {
    return absl::UnimplementedError(
        absl::StrCat(op.name(),
                     " takes no DTensor here, so it has no mesh to run on; use the factories "
                     "(tessera.full, zeros, rand, ...) with a mesh"));
  }
  for (int i : out.prepared.input_of) out.specs.push_back(given[i]);
  ASSIGN_OR_RETURN(out.plan, cache.Plan(out.prepared.call, out.specs));
  return out;
}

absl::StatusOr<PlannedGraph> PlanGraph(const OpDef& op, const OpGraph& graph,
                                       std::span<const DTensorSpec> inputs, ShardingCache& cache) {
  if (static_cast<int>(inputs.size()) != graph.num_inputs) {
    return absl::InternalError(absl::StrCat(op.name(), ": its graph takes ", graph.num_inputs,
                                            " inputs, given ", inputs.size()));
  }
  PlannedGraph out;
  out.values.assign(inputs.begin(), inputs.end());
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    const OpNode& node = graph.nodes[k];
    auto context = [&](const absl::Status& s) {
      return absl::Status(s.code(),
                          absl::StrCat(op.name(), ", node ", k, " (", node.op, "): ", s.message()));
    };
    absl::StatusOr<const OpDef*> def = Registry().Find(node.op);
    if (!def.ok()) return context(def.status());
    if ((*def)->decompose != nullptr) {
      return context(absl::InternalError("a decomposition's node must not decompose again"));
    }
    absl::StatusOr<PlannedCall> planned = PlanOpCall(**def, node.args, out.values, cache);
    if (!planned.ok()) return context(planned.status());
    out.values.push_back(planned->plan->output);
    out.nodes.push_back(*std::move(planned));
  }
  if (out.nodes.empty()) return absl::InternalError(absl::StrCat(op.name(), ": an empty graph"));
  return out;
}

absl::StatusOr<PlannedDecomposition> PlanDecomposedCall(const OpDef& op,
                                                        std::span<const NamedValue> args,
                                                        std::span<const DTensorSpec> given,
                                                        ShardingCache& cache) {
  if (op.decompose == nullptr) {
    return absl::InternalError(absl::StrCat(op.name(), " does not decompose"));
  }
  std::vector<TensorMeta> metas;
  for (const DTensorSpec& s : given) metas.push_back({s.shape, s.dtype});
  PlannedDecomposition out;
  ASSIGN_OR_RETURN(out.prepared, PrepareCall(op, args, metas));
  if (out.prepared.input_of.empty()) {
    return absl::UnimplementedError(
        absl::StrCat(op.name(), " takes no DTensor here, so it has no mesh to run on"));
  }
  const CallContext context{op, out.prepared.call.args, out.prepared.call.inputs};
  ASSIGN_OR_RETURN(out.graph, op.decompose(context));
  std::vector<DTensorSpec> inputs;
  for (int i : out.prepared.input_of) inputs.push_back(given[i]);
  ASSIGN_OR_RETURN(out.planned, PlanGraph(op, out.graph, inputs, cache));
  const DTensorSpec& result = out.planned.values.back();
  if (result.shape != out.prepared.call.output.shape ||
      result.dtype != out.prepared.call.output.dtype) {
    return absl::InternalError(absl::StrCat(
        op.name(), ": its decomposition gives ", result.ToString(), " where its meta gives ",
        DTypeName(out.prepared.call.output.dtype), ShapeToString(out.prepared.call.output.shape)));
  }
  return out;
}

std::string NodeLabel(const OpDef& op, const PlannedGraph& planned, int k) {
  return absl::StrCat(op.name(), " node ", k, " (", planned.nodes[k].prepared.call.op->name(), ")");
}

std::string CallKey(const BoundCall& call, std::span<const DTensorSpec> specs) {
  std::string key = call.op->name();
  for (const OpValue& v : call.args.values()) absl::StrAppend(&key, "|", OpValueToString(v));
  for (const DTensorSpec& s : specs) {
    absl::StrAppend(&key, "|", static_cast<int>(s.dtype), ":", absl::StrJoin(s.shape, ","), ":",
                    PlacementsToString(s.placements), "@", s.mesh.device_type(), ":",
                    absl::StrJoin(s.mesh.shape(), ","), ":", absl::StrJoin(s.mesh.ranks(), ","));
  }
  return key;
}

absl::StatusOr<std::shared_ptr<const OpPlan>> ShardingCache::Plan(
    const BoundCall& call, std::span<const DTensorSpec> specs) {
  const std::string key = CallKey(call, specs);
  {
    absl::MutexLock lock(&mu_);
    if (auto it = plans_.find(key); it != plans_.end()) {
      ++hits_;
      return it->second;
    }
    ++misses_;
  }
  ASSIGN_OR_RETURN(OpPlan plan, PlanCall(call, specs));
  auto shared = std::make_shared<const OpPlan>(std::move(plan));
  absl::MutexLock lock(&mu_);
  if (plans_.size() >= capacity_) plans_.clear();
  plans_.emplace(key, shared);
  return shared;
}

int64_t ShardingCache::hits() const {
  absl::MutexLock lock(&mu_);
  return hits_;
}

int64_t ShardingCache::misses() const {
  absl::MutexLock lock(&mu_);
  return misses_;
}

}  // namespace tessera::ops
