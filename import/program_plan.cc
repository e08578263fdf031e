#include "import/program_plan.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ops/factory_call.h"
#include "core/ops/op_registry.h"
#include "core/shape.h"
#include "core/status_macros.h"

namespace tessera::import {
namespace {

// The node's planned output specs, in order.
absl::StatusOr<std::vector<DTensorSpec>> PlanNode(const ops::OpDef& op, const ProgramNode& node,
                                                  const DeviceMesh& mesh,
                                                  std::span<const DTensorSpec> values,
                                                  ops::ShardingCache& cache, PlannedNode& out) {
  std::vector<DTensorSpec> specs;
  if (op.decompose != nullptr) {
    ASSIGN_OR_RETURN(ops::PlannedDecomposition d,
                     ops::PlanDecomposedCall(op, node.args, values, cache));
    specs.push_back(d.planned.values.back());
    out.decomposition = std::move(d);
    return specs;
  }
  ops::PlannedCall call;
  if (ops::TakesRequestedLayout(op)) {
    ASSIGN_OR_RETURN(
        call, ops::PlanCallInLayout(op, node.args, values, ops::RequestedLayout{&mesh, {}}, cache));
  } else {
    ASSIGN_OR_RETURN(call, ops::PlanOpCall(op, node.args, values, cache));
  }
  specs.push_back(call.plan->output);
  for (const DTensorSpec& s : call.plan->more_outputs) specs.push_back(s);
  out.call = std::move(call);
  return specs;
}

}  // namespace

std::string NodeText(const ExportedProgram& program, int k) {
  const ProgramNode& node = program.nodes[k];
  std::string text = absl::StrCat("node ", k, " '", node.name, "' (", node.op, ")");
  if (!node.module.empty()) absl::StrAppend(&text, " in ", node.module);
  return text;
}

absl::StatusOr<PlannedProgram> PlanExportedProgram(
    const ExportedProgram& program, const DeviceMesh& mesh,
    std::span<const std::vector<Placement>> input_placements, ops::ShardingCache& cache,
    std::span<const std::vector<std::optional<Placement>>> pins) {
  const std::map<std::string, int64_t> missing = UnregisteredOps(program);
  if (!missing.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "the program calls ", missing.size(), " op(s) the registry lacks: ",
        absl::StrJoin(missing, ", ", [](std::string* s, const auto& m) {
          absl::StrAppend(s, m.first, " (", m.second, m.second == 1 ? " node)" : " nodes)");
        })));
  }
  PlannedProgram out;
  out.values.reserve(program.num_values());
  for (size_t i = 0; i < program.inputs.size(); ++i) {
    const ops::TensorMeta& meta = program.value_metas[i];
    std::vector<Placement> placements;
    if (i < input_placements.size() && !input_placements[i].empty()) {
      placements = input_placements[i];
    } else {
      placements.assign(mesh.ndim(), Placement::Replicate());
    }
    absl::StatusOr<DTensorSpec> spec = MakeDTensorSpec(mesh, placements, meta.shape, meta.dtype);
    if (!spec.ok()) {
      const ProgramInput& in = program.inputs[i];
      return absl::InvalidArgumentError(
          absl::StrCat(InputKindName(in.kind), " '", in.target, "': ", spec.status().message()));
    }
    out.values.push_back(*std::move(spec));
  }
  for (size_t k = 0; k < program.nodes.size(); ++k) {
    const ProgramNode& node = program.nodes[k];
    auto context = [&](const absl::Status& s) {
      return absl::Status(s.code(),
                          absl::StrCat(NodeText(program, static_cast<int>(k)), ": ", s.message()));
    };
    absl::StatusOr<const ops::OpDef*> op = ops::Registry().Find(node.op);
    if (!op.ok()) return context(op.status());
    PlannedNode planned;
    absl::StatusOr<std::vector<DTensorSpec>> specs =
        PlanNode(**op, node, mesh, out.values, cache, planned);
    if (!specs.ok()) return context(specs.status());
    if (specs->size() != node.outputs.size()) {
      return context(absl::InvalidArgumentError(
          absl::StrCat("the registry's op gives ", specs->size(), " output(s); the archive's node ",
                       node.outputs.size())));
    }
    planned.output_moves.resize(specs->size());
    for (size_t o = 0; o < specs->size(); ++o) {
      const int v = node.outputs[o];
      DTensorSpec& s = (*specs)[o];
      if (v != static_cast<int>(out.values.size())) {
        return absl::InternalError(absl::StrCat(NodeText(program, static_cast<int>(k)),
                                                ": writes value ", v, " out of order"));
      }
      const ops::TensorMeta& recorded = program.value_metas[v];
      if (s.shape != recorded.shape || s.dtype != recorded.dtype) {
        return context(absl::InvalidArgumentError(
            absl::StrCat("value '", program.value_names[v], "' is ", MetaText(s.shape, s.dtype),
                         " by the registry's meta, but the archive records ",
                         MetaText(recorded.shape, recorded.dtype))));
      }
      if (static_cast<size_t>(v) < pins.size() && !pins[v].empty()) {
        std::vector<Placement> to = s.placements;
        for (size_t m = 0; m < to.size() && m < pins[v].size(); ++m) {
          if (pins[v][m].has_value()) to[m] = *pins[v][m];
        }
        if (to != s.placements) {
          absl::StatusOr<RedistributePlan> move = PlanRedistribute(s, to);
          if (!move.ok()) return context(move.status());
          planned.output_moves[o] = *std::move(move);
          s.placements = std::move(to);
        }
      }
      out.values.push_back(s);
    }
    out.nodes.push_back(std::move(planned));
  }
  return out;
}

}  // namespace tessera::import
