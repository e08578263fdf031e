#include "server/tables/eager_ops.h"

#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/ops/factory_call.h"
#include "core/status_macros.h"
#include "proto/convert.h"

namespace tessera {

absl::Status EagerOps::Run(const std::string& client, const v1::OpRequest& request,
                           v1::OpReply* reply) {
  ASSIGN_OR_RETURN(const ops::OpDef* op, ops::Registry().Find(request.op().name()));
  std::vector<std::shared_ptr<DTensorEntry>> given;
  std::vector<DTensorSpec> given_specs;
  for (const std::string& name : request.inputs()) {
    ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> t, tensors_->Usable(name));
    if (!given.empty() && t->mesh != given[0]->mesh) {
      return absl::InvalidArgumentError(absl::StrCat(
          op->name(), ": inputs '", given[0]->name, "' and '", name, "' are on different meshes ('",
          given[0]->mesh->name, "', '", t->mesh->name, "'); redistribute one to the other's mesh"));
    }
    given_specs.push_back(t->spec);
    given.push_back(std::move(t));
  }
  ASSIGN_OR_RETURN(const std::vector<ops::NamedValue> args, ArgsFromProto(request.op()));
  if (op->decompose != nullptr) {
    return RunGraph(client, *op, args, given, given_specs, request.output(), reply);
  }
  std::shared_ptr<Mesh> asked_mesh;
  ops::RequestedLayout layout;
  if (!request.mesh().empty()) {
    ASSIGN_OR_RETURN(asked_mesh, tensors_->meshes().Ready(request.mesh()));
    layout.mesh = &asked_mesh->mesh;
  }
  ASSIGN_OR_RETURN(layout.placements, FromProto(request.placements()));
  ASSIGN_OR_RETURN(const ops::PlannedCall planned,
                   ops::PlanCallInLayout(*op, args, given_specs, layout, cache_));
  std::vector<std::shared_ptr<DTensorEntry>> inputs;
  for (int i : planned.prepared.input_of) inputs.push_back(given[i]);
  const std::shared_ptr<Mesh> mesh = inputs.empty() ? asked_mesh : inputs[0]->mesh;
  const size_t num_outputs = 1 + planned.prepared.call.more_outputs.size();
  std::vector<std::string> names(request.outputs().begin(), request.outputs().end());
  if (names.empty()) {
    names.assign(num_outputs, "");
    names[0] = request.output();
  } else if (names.size() != num_outputs) {
    return absl::InvalidArgumentError(absl::StrCat(
        op->name(), " gives ", num_outputs, " outputs here, but 'outputs' names ", names.size()));
  } else if (!request.output().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op->name(), ": give 'output' or 'outputs', not both"));
  }
  return Post(client, planned, mesh, inputs, names, /*hidden=*/false, reply, {}).status();
}

absl::StatusOr<std::shared_ptr<DTensorEntry>> EagerOps::Post(
    const std::string& client, const ops::PlannedCall& planned, const std::shared_ptr<Mesh>& mesh,
    const std::vector<std::shared_ptr<DTensorEntry>>& inputs, std::span<const std::string> names,
    bool hidden, v1::OpReply* reply, const std::vector<std::string>& labels) {
  const ops::PreparedCall& prepared = planned.prepared;
  const ops::OpDef* op = prepared.call.op;
  const std::vector<DTensorSpec>& specs = planned.specs;
  const std::shared_ptr<const ops::OpPlan>& plan = planned.plan;
  if (names.size() != 1 + plan->more_outputs.size()) {
    return absl::InternalError(absl::StrCat(op->name(), ": ", names.size(), " names for ",
                                            1 + plan->more_outputs.size(), " outputs"));
  }
  // Every output is added before any command is posted; an op's outputs share one write.
  std::vector<std::shared_ptr<DTensorEntry>> outs;
  for (size_t k = 0; k < names.size(); ++k) {
    absl::StatusOr<std::shared_ptr<DTensorEntry>> t =
        tensors_->Add(names[k], mesh, k == 0 ? plan->output : plan->more_outputs[k - 1], client,
                      hidden, k == 0 ? nullptr : outs[0]->write);
    if (!t.ok()) {
      for (const std::shared_ptr<DTensorEntry>& added : outs) {
        tensors_->Release(*added, Durability::kQueued);
      }
      return t.status();
    }
    outs.push_back(*std::move(t));
  }
  const std::shared_ptr<DTensorEntry>& out = outs[0];
  v1::Command command;
  v1::RunOp* run = command.mutable_run_op();
  run->set_mesh_id(mesh->id);
  if (op->random) {
    const RandomStream at = Draw(client, ops::RandomElementsDrawn(prepared.call));
    run->set_random_seed(at.seed);
    run->set_random_offset(at.offset);
  }
  run->mutable_op()->set_name(op->name());
  ArgsToProto(prepared.call.args, *run->mutable_op());
  run->set_output(DTensorTable::WorkerName(out->name));
  *run->mutable_output_spec() = ToProto(plan->output);
  for (size_t k = 1; k < outs.size(); ++k) {
    run->add_more_outputs(DTensorTable::WorkerName(outs[k]->name));
    *run->add_more_output_specs() = ToProto(plan->more_outputs[k - 1]);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    v1::OpInput* in = run->add_inputs();
    in->set_tensor(DTensorTable::WorkerName(inputs[i]->name));
    *in->mutable_spec() = ToProto(specs[i]);
    *in->mutable_plan() = ToProto(plan->input_plans[i]);
    if (reply != nullptr && !plan->input_plans[i].steps.empty()) {
      v1::InputRedistribution* r = reply->add_redistributions();
      r->set_input(labels.empty() ? inputs[i]->name : labels[i]);
      *r->mutable_from_placements() = ToProto(specs[i].placements);
      *r->mutable_to_placements() = ToProto(plan->strategy.inputs[i]);
      *r->mutable_plan() = in->plan();
    }
  }
  if (outs.size() == 1) {
    RETURN_IF_ERROR(tensors_->PostWrite(*out, command, inputs));
  } else {
    RETURN_IF_ERROR(tensors_->PostWrites(outs, command, inputs));
  }
  if (reply != nullptr && !hidden) {
    *reply->mutable_output() = tensors_->Describe(*out);
    if (outs.size() > 1) {
      for (const std::shared_ptr<DTensorEntry>& t : outs) {
        *reply->add_outputs() = tensors_->Describe(*t);
      }
    }
  }
  return out;
}

absl::Status EagerOps::RunGraph(const std::string& client, const ops::OpDef& op,
                                const std::vector<ops::NamedValue>& args,
                                const std::vector<std::shared_ptr<DTensorEntry>>& given,
                                const std::vector<DTensorSpec>& given_specs,
                                const std::string& output, v1::OpReply* reply) {
  ASSIGN_OR_RETURN(const ops::PlannedDecomposition d,
                   ops::PlanDecomposedCall(op, args, given_specs, cache_));
  std::vector<std::shared_ptr<DTensorEntry>> values;
  std::vector<std::string> names;  // an intermediate is named by the node that made it
  for (int i : d.prepared.input_of) {
    values.push_back(given[i]);
    names.push_back(given[i]->name);
  }
  // Every node is posted before any intermediate is freed (a free is ordered after the commands
  // that read it); a node's failure reaches the output through its inputs.
  std::vector<std::shared_ptr<DTensorEntry>> temporaries;
  absl::Status status;
  const int n = static_cast<int>(d.planned.nodes.size());
  for (int k = 0; k < n; ++k) {
    const ops::PlannedCall& node = d.planned.nodes[k];
    const bool last = k + 1 == n;
    std::vector<std::shared_ptr<DTensorEntry>> inputs;
    std::vector<std::string> labels;
    for (int v : node.prepared.input_of) {
      inputs.push_back(values[v]);
      labels.push_back(names[v]);
    }
    if (!node.plan->more_outputs.empty()) {
      status = absl::InternalError(
          absl::StrCat(op.name(), ", node ", k, ": a decomposition's node has one output"));
      break;
    }
    const std::string name = last ? output : "";
    absl::StatusOr<std::shared_ptr<DTensorEntry>> out =
        Post(client, node, values[0]->mesh, inputs, {&name, 1}, !last, reply, labels);
    if (!out.ok()) {
      status = out.status();
      break;
    }
    values.push_back(*out);
    names.push_back(ops::NodeLabel(op, d.planned, k));
    if (!last) temporaries.push_back(*out);
  }
  for (const std::shared_ptr<DTensorEntry>& t : temporaries) {
    tensors_->Release(*t, Durability::kQueued);
  }
  return status;
}

void EagerOps::ManualSeed(const std::string& client, uint64_t seed) {
  absl::MutexLock lock(&random_mu_);
  random_[client] = RandomStream{seed, 0};
}

void EagerOps::Forget(const std::string& client) {
  absl::MutexLock lock(&random_mu_);
  random_.erase(client);
}

EagerOps::RandomStream EagerOps::Draw(const std::string& client, int64_t elements) {
  absl::MutexLock lock(&random_mu_);
  RandomStream& stream = random_[client];
  const RandomStream at = stream;
  stream.offset += static_cast<uint64_t>(elements);
  return at;
}

v1::ListOpsReply EagerOps::List(const std::string& filter) {
  v1::ListOpsReply reply;
  for (const ops::OpDef* op : ops::Registry().ops()) {
    if (!filter.empty() && !absl::StrContains(op->name(), filter)) continue;
    v1::OpInfo* info = reply.add_ops();
    info->set_name(op->name());
    info->set_schema(op->schema.text);
    info->set_family(std::string(ops::OpFamilyName(op->family)));
    info->set_strategies(op->strategy_text);
    info->set_implementation(op->implementation);
    info->set_derivative(op->derivative);
  }
  return reply;
}

}  // namespace tessera
