// CommandExecutor's graph program commands: LoadGraph installs a module graph (an imported
// torch.export program compiled by the coordinator for its mesh), RunGraph runs it on this rank's
// inputs, each step as the command of its kind runs alone.

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/ops/op_registry.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "worker/command_executor.h"

namespace tessera {
namespace {

// "graph step 12 (aten::linear)", as a failing step is named.
std::string StepText(const v1::GraphStep& step, int k) {
  switch (step.kind_case()) {
    case v1::GraphStep::kRunOp:
      return absl::StrCat("graph step ", k, " (", step.run_op().op().name(), ")");
    case v1::GraphStep::kRedistribute:
      return absl::StrCat("graph step ", k, " (redistribute)");
    default:
      return absl::StrCat("graph step ", k);
  }
}

}  // namespace

absl::Status CommandExecutor::LoadGraph(const v1::LoadGraph& load) {
  RETURN_IF_ERROR(FindMesh(load.mesh_id()).status());
  const v1::GraphProgram& graph = load.graph();
  for (int k = 0; k < graph.steps_size(); ++k) {
    const v1::GraphStep& step = graph.steps(k);
    if (step.kind_case() == v1::GraphStep::KIND_NOT_SET) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph program ", load.program_id(), ": step ", k, " has no kind"));
    }
    if (step.has_run_op()) {
      const v1::RunOp& op = step.run_op();
      if (op.op().name().empty()) {
        return absl::InvalidArgumentError(absl::StrCat("graph program ", load.program_id(),
                                                       ": step ", k, " names no registry op"));
      }
      if (absl::Status found = ops::Registry().Find(op.op().name()).status(); !found.ok()) {
        return WithContext(absl::StrCat("graph program ", load.program_id(), ", step ", k), found);
      }
      if (op.mesh_id() != load.mesh_id()) {
        return absl::InvalidArgumentError(absl::StrCat("graph program ", load.program_id(),
                                                       ": step ", k, " runs on mesh ", op.mesh_id(),
                                                       ", not ", load.mesh_id()));
      }
    }
  }
  graphs_[load.program_id()] = InstalledGraph{load.mesh_id(), graph};
  return absl::OkStatus();
}

absl::Status CommandExecutor::RunGraph(const v1::RunGraph& run, v1::CommandReply* reply) {
  auto it = graphs_.find(run.program_id());
  if (it == graphs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker ", worker_id_, " has no graph program ", run.program_id()));
  }
  if (it->second.mesh_id != run.mesh_id()) {
    return absl::InvalidArgumentError(absl::StrCat("graph program ", run.program_id(),
                                                   " runs on mesh ", it->second.mesh_id,
                                                   ", not mesh ", run.mesh_id()));
  }
  const v1::GraphProgram& graph = it->second.graph;
  // Every tensor the run writes goes when it ends; the first failure is the run's, and the steps
  // after it still run so that this rank takes its part in every collective.
  std::set<std::string> written;
  absl::Status first;
  const auto fail = [&first](absl::Status s) {
    if (first.ok()) first = std::move(s);
  };
  if (run.inputs_size() != graph.inputs_size()) {
    fail(absl::InvalidArgumentError(absl::StrCat("graph program ", run.program_id(), " takes ",
                                                 graph.inputs_size(), " inputs; the command has ",
                                                 run.inputs_size())));
  }
  for (int i = 0; i < graph.inputs_size() && i < run.inputs_size(); ++i) {
    absl::StatusOr<HostTensor> input = FromProto(run.inputs(i));
    absl::Status stored = input.status();
    if (stored.ok()) stored = store_->PutHost(graph.inputs(i), *input);
    if (!stored.ok()) {
      fail(WithContext(absl::StrCat("input ", i), stored));
      continue;
    }
    written.insert(graph.inputs(i));
  }
  for (int k = 0; k < graph.steps_size(); ++k) {
    const v1::GraphStep& step = graph.steps(k);
    absl::Status s;
    switch (step.kind_case()) {
      case v1::GraphStep::kRunOp: {
        const v1::RunOp& op = step.run_op();
        written.insert(op.output());
        written.insert(op.more_outputs().begin(), op.more_outputs().end());
        s = RunOp(op).status();
        break;
      }
      case v1::GraphStep::kRedistribute:
        written.insert(step.redistribute().output());
        s = Redistribute(step.redistribute()).status();
        break;
      case v1::GraphStep::kDeleteTensors:
        for (const std::string& name : step.delete_tensors().names()) {
          // Only what the run wrote: a parameter is never a run's to free.
          if (written.erase(name) > 0) store_->Erase(name);
        }
        break;
      case v1::GraphStep::KIND_NOT_SET:
        s = absl::InvalidArgumentError("a step has no kind");
        break;
    }
    if (!s.ok()) fail(WithContext(StepText(step, k), s));
  }
  if (first.ok() && run.return_outputs()) {
    for (const std::string& name : graph.outputs()) {
      absl::StatusOr<HostTensor> out = store_->GetHost(name);
      if (!out.ok()) {
        fail(WithContext(absl::StrCat("output '", name, "'"), out.status()));
        break;
      }
      *reply->add_outputs() = ToProto(*out);
    }
  }
  for (const std::string& name : written) store_->Erase(name);
  if (!first.ok()) {
    reply->clear_outputs();
    return WithContext(absl::StrCat("graph program ", run.program_id()), first);
  }
  return absl::OkStatus();
}

}  // namespace tessera
