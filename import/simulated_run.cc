#include "import/simulated_run.h"

#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/sharding/simulated_mesh.h"
#include "core/status_macros.h"
#include "kernels/aten/local_call.h"

namespace tessera::import {
namespace {

// Each rank's shard of every value so far, and the value's spec.
struct Values {
  std::vector<std::vector<HostTensor>> shards;
  std::vector<DTensorSpec> specs;
};

// Runs one planned call whose inputs are values of `values` (prepared.input_of), appending its
// outputs to `values`: all of them for a program's node, the first alone for an op graph's (which
// numbers one value per node, core/ops/op_graph.h).
absl::Status RunCall(kernels::KernelBackend& backend, SimulatedMesh& sim, const DeviceMesh& mesh,
                     const ops::PlannedCall& planned, Values& values, bool first_only = false) {
  const ops::OpPlan& plan = *planned.plan;
  std::vector<std::vector<HostTensor>> moved;
  std::vector<DTensorSpec> laid_out;
  for (size_t k = 0; k < planned.prepared.input_of.size(); ++k) {
    const int v = planned.prepared.input_of[k];
    std::vector<HostTensor> copies;
    for (const HostTensor& t : values.shards[v]) copies.push_back(t.Clone());
    ASSIGN_OR_RETURN(std::vector<HostTensor> m,
                     sim.Redistribute(values.specs[v], plan.input_plans[k], std::move(copies)));
    moved.push_back(std::move(m));
    DTensorSpec after = values.specs[v];
    after.placements = plan.strategy.inputs[k];
    laid_out.push_back(std::move(after));
  }
  std::vector<std::vector<HostTensor>> outputs(1 + plan.more_outputs.size());
  for (int64_t pos = 0; pos < mesh.size(); ++pos) {
    const std::vector<int64_t> coordinate = mesh.CoordinateOfIndex(pos);
    std::vector<kernels::DeviceTensor> uploaded;
    uploaded.reserve(moved.size());
    std::vector<kernels::ConstTensorView> views;
    for (const std::vector<HostTensor>& m : moved) {
      ASSIGN_OR_RETURN(kernels::DeviceTensor t, backend.Upload(m[pos]));
      uploaded.push_back(std::move(t));
      views.push_back(std::as_const(uploaded.back()).View());
    }
    const kernels::LocalCall local{
        &planned.prepared.call,  laid_out,         &plan.output, coordinate,
        kernels::RandomStream{}, plan.more_outputs};
    ASSIGN_OR_RETURN(std::vector<kernels::DeviceTensor> outs,
                     kernels::RunLocalCallOutputs(backend, local, views));
    for (size_t o = 0; o < outs.size(); ++o) {
      ASSIGN_OR_RETURN(HostTensor h, backend.Download(std::as_const(outs[o]).View()));
      outputs[o].push_back(std::move(h));
    }
  }
  for (size_t o = 0; o < (first_only ? 1 : outputs.size()); ++o) {
    values.shards.push_back(std::move(outputs[o]));
    values.specs.push_back(o == 0 ? plan.output : plan.more_outputs[o - 1]);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SimulatedRun> RunOnSimulatedMesh(kernels::KernelBackend& backend,
                                                const ExportedProgram& program,
                                                const PlannedProgram& planned,
                                                std::span<const HostTensor> inputs) {
  if (inputs.size() != program.inputs.size() || planned.values.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the program takes ", program.inputs.size(),
                                                   " inputs, given ", inputs.size()));
  }
  const DeviceMesh& mesh = planned.values[0].mesh;
  SimulatedMesh sim(mesh);
  Values values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSIGN_OR_RETURN(std::vector<HostTensor> s, sim.Distribute(inputs[i], planned.values[i]));
    values.shards.push_back(std::move(s));
    values.specs.push_back(planned.values[i]);
  }
  for (size_t k = 0; k < planned.nodes.size(); ++k) {
    const PlannedNode& node = planned.nodes[k];
    absl::Status s;
    if (node.call.has_value()) {
      s = RunCall(backend, sim, mesh, *node.call, values);
    } else {
      // The decomposition's graph on values of its own: its inputs, then its nodes' outputs.
      const ops::PlannedDecomposition& d = *node.decomposition;
      Values graph;
      for (int v : d.prepared.input_of) {
        std::vector<HostTensor> copies;
        for (const HostTensor& t : values.shards[v]) copies.push_back(t.Clone());
        graph.shards.push_back(std::move(copies));
        graph.specs.push_back(values.specs[v]);
      }
      for (const ops::PlannedCall& call : d.planned.nodes) {
        s = RunCall(backend, sim, mesh, call, graph, /*first_only=*/true);
        if (!s.ok()) break;
      }
      if (s.ok()) {
        values.shards.push_back(std::move(graph.shards.back()));
        values.specs.push_back(graph.specs.back());
      }
    }
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat(NodeText(program, k), ": ", s.message()));
    }
    // Outputs pinned to a layout (a styled module's) are redistributed to it.
    const size_t first = values.shards.size() - node.output_moves.size();
    for (size_t o = 0; o < node.output_moves.size(); ++o) {
      if (!node.output_moves[o].has_value()) continue;
      const int v = program.nodes[k].outputs[o];
      absl::StatusOr<std::vector<HostTensor>> moved = sim.Redistribute(
          values.specs[first + o], *node.output_moves[o], std::move(values.shards[first + o]));
      if (!moved.ok()) {
        return absl::Status(moved.status().code(),
                            absl::StrCat(NodeText(program, k), ": ", moved.status().message()));
      }
      values.shards[first + o] = *std::move(moved);
      values.specs[first + o] = planned.values[v];
    }
  }
  SimulatedRun run;
  const std::vector<int64_t>& sent = sim.bytes_sent();
  run.bytes_moved = std::accumulate(sent.begin(), sent.end(), int64_t{0});
  for (int v : program.outputs) {
    std::vector<HostTensor> copies;
    for (const HostTensor& t : values.shards[v]) copies.push_back(t.Clone());
    ASSIGN_OR_RETURN(HostTensor full, sim.FullTensor(values.specs[v], std::move(copies)));
    run.outputs.push_back(std::move(full));
  }
  return run;
}

}  // namespace tessera::import
