#include "server/modules/graph_modules.h"

#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/json.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "server/tables/dtensor_table.h"
#include "server/tables/module_table.h"

namespace tessera {
namespace {

// A step and the local tensors it reads and writes, before the frees are placed.
struct Step {
  v1::GraphStep step;
  std::vector<std::string> reads;
  std::vector<std::string> writes;
};

class Compiler {
 public:
  Compiler(const import::ExportedProgram& program, int64_t mesh_id, const std::string& module,
           int64_t program_id)
      : program_(program), mesh_id_(mesh_id), prefix_(absl::StrCat("graph/", program_id, "/")) {
    for (size_t i = 0; i < program.inputs.size(); ++i) {
      const import::ProgramInput& in = program.inputs[i];
      names_.push_back(in.kind == import::InputKind::kUserInput
                           ? absl::StrCat(prefix_, "in", i)
                           : DTensorTable::WorkerName(ParameterTensorName(module, in.target)));
      if (in.kind != import::InputKind::kUserInput) kept_.insert(names_.back());
    }
    for (int v = static_cast<int>(program.inputs.size()); v < program.num_values(); ++v) {
      names_.push_back(absl::StrCat(prefix_, "v", v));
    }
  }

  v1::GraphProgram Compile(const import::PlannedProgram& planned) {
    for (size_t k = 0; k < planned.nodes.size(); ++k) {
      const import::PlannedNode& node = planned.nodes[k];
      const std::vector<int>& outputs = program_.nodes[k].outputs;
      std::vector<DTensorSpec> written;  // each output's spec as the node leaves it
      if (node.call.has_value()) {
        std::vector<std::string> outs;
        for (int v : outputs) outs.push_back(names_[v]);
        std::vector<std::string> ins;
        for (int v : node.call->prepared.input_of) ins.push_back(names_[v]);
        Call(*node.call, ins, outs);
        written.push_back(node.call->plan->output);
        for (const DTensorSpec& s : node.call->plan->more_outputs) written.push_back(s);
      } else {
        // The decomposition's values: its inputs (values of the program), then its nodes'
        // outputs, the last written as the node's output.
        const ops::PlannedDecomposition& d = *node.decomposition;
        std::vector<std::string> inner;
        for (int v : d.prepared.input_of) inner.push_back(names_[v]);
        for (size_t j = 0; j < d.planned.nodes.size(); ++j) {
          const ops::PlannedCall& call = d.planned.nodes[j];
          std::vector<std::string> ins;
          for (int v : call.prepared.input_of) ins.push_back(inner[v]);
          std::vector<std::string> outs;
          const size_t count = 1 + call.plan->more_outputs.size();
          for (size_t o = 0; o < count; ++o) {
            outs.push_back(j + 1 == d.planned.nodes.size() && o == 0
                               ? names_[outputs[0]]
                               : absl::StrCat(names_[outputs[0]], "/d", j, "_", o));
          }
          Call(call, ins, outs);
          // An op graph numbers each node's first output only (core/ops/op_graph.h); the others
          // are written and freed unread.
          inner.push_back(outs[0]);
        }
        written.push_back(d.planned.values.back());
      }
      for (size_t o = 0; o < node.output_moves.size() && o < outputs.size(); ++o) {
        if (!node.output_moves[o].has_value()) continue;
        Step s;
        v1::RedistributeTensor* r = s.step.mutable_redistribute();
        r->set_mesh_id(mesh_id_);
        r->set_input(names_[outputs[o]]);
        r->set_output(names_[outputs[o]]);
        *r->mutable_spec() = ToProto(written[o]);
        *r->mutable_plan() = ToProto(*node.output_moves[o]);
        s.reads.push_back(names_[outputs[o]]);
        s.writes.push_back(names_[outputs[o]]);
        steps_.push_back(std::move(s));
      }
    }
    for (int v : program_.outputs) kept_.insert(names_[v]);
    return Finish();
  }

 private:
  void Call(const ops::PlannedCall& call, const std::vector<std::string>& ins,
            const std::vector<std::string>& outs) {
    const ops::OpPlan& plan = *call.plan;
    Step s;
    v1::RunOp* run = s.step.mutable_run_op();
    run->set_mesh_id(mesh_id_);
    run->mutable_op()->set_name(call.prepared.call.op->name());
    ArgsToProto(call.prepared.call.args, *run->mutable_op());
    run->set_output(outs[0]);
    *run->mutable_output_spec() = ToProto(plan.output);
    for (size_t o = 1; o < outs.size(); ++o) {
      run->add_more_outputs(outs[o]);
      *run->add_more_output_specs() = ToProto(plan.more_outputs[o - 1]);
    }
    for (size_t i = 0; i < ins.size(); ++i) {
      v1::OpInput* in = run->add_inputs();
      in->set_tensor(ins[i]);
      *in->mutable_spec() = ToProto(call.specs[i]);
      *in->mutable_plan() = ToProto(plan.input_plans[i]);
    }
    s.reads = ins;
    s.writes = outs;
    steps_.push_back(std::move(s));
  }

  // The steps with each tensor the run wrote freed after the last step that uses it (outputs and
  // parameters kept).
  v1::GraphProgram Finish() {
    std::map<std::string, size_t> last;
    for (size_t i = 0; i < steps_.size(); ++i) {
      for (const std::string& n : steps_[i].reads) last[n] = i;
      for (const std::string& n : steps_[i].writes) last[n] = i;
    }
    std::vector<std::vector<std::string>> frees(steps_.size());
    for (const auto& [name, at] : last) {
      if (!kept_.contains(name)) frees[at].push_back(name);
    }
    v1::GraphProgram graph;
    for (size_t i = 0; i < program_.inputs.size(); ++i) {
      if (program_.inputs[i].kind == import::InputKind::kUserInput) graph.add_inputs(names_[i]);
    }
    for (size_t i = 0; i < steps_.size(); ++i) {
      *graph.add_steps() = std::move(steps_[i].step);
      if (frees[i].empty()) continue;
      v1::DeleteTensors* d = graph.add_steps()->mutable_delete_tensors();
      for (const std::string& n : frees[i]) d->add_names(n);
    }
    for (int v : program_.outputs) graph.add_outputs(names_[v]);
    return graph;
  }

  const import::ExportedProgram& program_;
  const int64_t mesh_id_;
  const std::string prefix_;
  std::vector<std::string> names_;  // each value's local tensor
  std::set<std::string> kept_;      // parameters and outputs: never freed by the run
  std::vector<Step> steps_;
};

// Collectives of one forward: each non-local step of every plan the graph runs.
int64_t CountCollectives(const import::PlannedProgram& planned) {
  int64_t n = 0;
  const auto add = [&n](const RedistributePlan& plan) {
    for (const RedistributeStep& s : plan.steps) n += IsLocal(s.collective) ? 0 : 1;
  };
  const auto add_call = [&add](const ops::PlannedCall& call) {
    for (const RedistributePlan& p : call.plan->input_plans) add(p);
  };
  for (const import::PlannedNode& node : planned.nodes) {
    if (node.call.has_value()) add_call(*node.call);
    if (node.decomposition.has_value()) {
      for (const ops::PlannedCall& c : node.decomposition->planned.nodes) add_call(c);
    }
    for (const std::optional<RedistributePlan>& move : node.output_moves) {
      if (move.has_value()) add(*move);
    }
  }
  return n;
}

}  // namespace

v1::GraphProgram CompileGraph(const import::ExportedProgram& program,
                              const import::PlannedProgram& planned, int64_t mesh_id,
                              const std::string& module, int64_t program_id) {
  return Compiler(program, mesh_id, module, program_id).Compile(planned);
}

absl::StatusOr<std::shared_ptr<const ModuleGraph>> BuildModuleGraph(
    const v1::ImportedProgram& source, const std::string& plan_json, const DeviceMesh& mesh,
    int64_t mesh_id, const std::string& module, int64_t program_id) {
  const std::string what = source.source().empty() ? "the program" : source.source();
  if (static_cast<int64_t>(source.program_json().size()) > kMaxProgramJsonBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the program's JSON is ",
                                                   source.program_json().size(), " bytes; at most ",
                                                   kMaxProgramJsonBytes));
  }
  absl::StatusOr<nlohmann::json> json = ParseJson(source.program_json());
  if (!json.ok()) return WithContext(what, json.status());
  auto graph = std::make_shared<ModuleGraph>();
  graph->source = source;
  ASSIGN_OR_RETURN(graph->program, import::ParseExportedProgram(*json, what));
  // Ops the registry lacks come first, before the plan is looked at.
  if (const std::map<std::string, int64_t> missing = import::UnregisteredOps(graph->program);
      !missing.empty()) {
    std::string list;
    for (const auto& [op, n] : missing) {
      absl::StrAppend(&list, list.empty() ? "" : ", ", op, " (", n, n == 1 ? " node)" : " nodes)");
    }
    return absl::UnimplementedError(
        absl::StrCat(what, ": ", missing.size(), " op(s) have no entry in the registry: ", list,
                     " (`tessera ops coverage` lists them); nothing was loaded"));
  }
  ASSIGN_OR_RETURN(const std::optional<import::ProgramPlan> plan,
                   import::ProgramPlanFromText(plan_json, source.tp_plan_json(), source.tp_prefix(),
                                               source.mesh_dim(), mesh));
  if (plan.has_value()) {
    ASSIGN_OR_RETURN(graph->layout, import::LayOutProgram(graph->program, *plan, mesh));
  }
  ops::ShardingCache cache;
  ASSIGN_OR_RETURN(graph->planned,
                   import::PlanExportedProgram(graph->program, mesh, graph->layout.inputs, cache,
                                               graph->layout.pins));
  for (size_t i = 0; i < graph->program.inputs.size(); ++i) {
    (graph->program.inputs[i].kind == import::InputKind::kUserInput ? graph->user_inputs
                                                                    : graph->weights)
        .push_back(static_cast<int>(i));
  }
  graph->compiled = CompileGraph(graph->program, graph->planned, mesh_id, module, program_id);
  graph->collectives = CountCollectives(graph->planned);
  return graph;
}

std::vector<ProgramParameter> GraphParameters(const ModuleGraph& graph) {
  std::vector<ProgramParameter> parameters;
  for (int i : graph.weights) {
    ProgramParameter p;
    p.fqn = graph.program.inputs[i].target;
    p.shape = graph.planned.values[i].shape;
    p.placements = graph.planned.values[i].placements;
    parameters.push_back(std::move(p));
  }
  return parameters;
}

}  // namespace tessera
