// CommandExecutor's module program commands: LoadProgram installs a compiled program for this
// worker's rank of its mesh, RunProgram runs a forward or a training step on this rank's input.

#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "worker/command_executor.h"

namespace tessera {
namespace {

// The training step a RunProgram asks for, or nullopt for a forward.
absl::StatusOr<std::optional<TrainingStep>> TrainingOf(const v1::RunProgram& run) {
  if (!run.train()) {
    if (run.loss_sum() || run.has_grad_output() || run.has_sgd()) {
      return absl::InvalidArgumentError(
          "loss_sum, grad_output and sgd belong to training steps; train is not set");
    }
    return std::nullopt;
  }
  TrainingStep training;
  if (run.loss_sum() == run.has_grad_output()) {
    return absl::InvalidArgumentError(
        "a training step takes its output's gradient from exactly one of loss_sum and "
        "grad_output");
  }
  if (run.has_grad_output()) {
    absl::StatusOr<HostTensor> grad = FromProto(run.grad_output());
    if (!grad.ok()) return WithContext("grad_output", grad.status());
    training.grad_output = *std::move(grad);
  }
  if (run.has_sgd()) {
    const v1::SgdOptions& sgd = run.sgd();
    for (auto [name, value] : {std::pair<absl::string_view, double>{"lr", sgd.lr()},
                               {"momentum", sgd.momentum()},
                               {"weight_decay", sgd.weight_decay()}}) {
      if (!std::isfinite(value) || value < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("sgd.", name, " is ", value, "; it must be finite and >= 0"));
      }
    }
    training.sgd = SgdOptions{sgd.lr(), sgd.momentum(), sgd.weight_decay()};
  }
  return training;
}

}  // namespace

absl::Status CommandExecutor::LoadProgram(const v1::LoadProgram& load) {
  ASSIGN_OR_RETURN(MeshComms* const mc, FindMesh(load.mesh_id()));
  if (!load.has_program()) return absl::InvalidArgumentError("LoadProgram has no program");
  absl::StatusOr<WorkerProgram> program = FromProto(load.program());
  if (!program.ok()) {
    return WithContext(absl::StrCat("program ", load.program_id()), program.status());
  }
  absl::StatusOr<std::unique_ptr<ProgramRunner>> runner =
      ProgramRunner::Create(*std::move(program), mc->mesh, mc->coordinate, *store_);
  if (!runner.ok()) {
    return WithContext(absl::StrCat("program ", load.program_id()), runner.status());
  }
  programs_[load.program_id()] = InstalledProgram{load.mesh_id(), *std::move(runner)};
  return absl::OkStatus();
}

absl::Status CommandExecutor::RunProgram(const v1::RunProgram& run, v1::CommandReply* reply) {
  auto it = programs_.find(run.program_id());
  if (it == programs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker ", worker_id_, " has no program ", run.program_id()));
  }
  if (it->second.mesh_id != run.mesh_id()) {
    return absl::InvalidArgumentError(absl::StrCat("program ", run.program_id(), " runs on mesh ",
                                                   it->second.mesh_id, ", not mesh ",
                                                   run.mesh_id()));
  }
  ASSIGN_OR_RETURN(MeshComms* const mc, FindMesh(run.mesh_id()));
  const std::vector<comm::Communicator*> groups = DimGroups(*mc);
  const ProgramRunner& runner = *it->second.runner;
  // A command this rank cannot read still takes its part in the run's agreements, so that its
  // peers stop at once instead of waiting in a collective for it.
  const auto refuse = [&](absl::Status failure) {
    return WithContext(absl::StrCat("program ", run.program_id()),
                       runner.Stand(std::move(failure), run.train(), kernels_, *store_, groups));
  };
  if (!run.has_input()) return refuse(absl::InvalidArgumentError("RunProgram has no input"));
  absl::StatusOr<HostTensor> input = FromProto(run.input());
  if (!input.ok()) return refuse(WithContext("input", input.status()));
  absl::StatusOr<std::optional<TrainingStep>> training = TrainingOf(run);
  if (!training.ok()) return refuse(training.status());
  absl::StatusOr<ProgramRunResult> result =
      runner.Run(*std::move(input), *std::move(training), kernels_, *store_, groups);
  if (!result.ok()) {
    return WithContext(absl::StrCat("program ", run.program_id()), result.status());
  }
  if (run.return_output()) *reply->mutable_output() = ToProto(result->output);
  for (const std::string& name : result->written) {
    ASSIGN_OR_RETURN(std::shared_ptr<const kernels::DeviceTensor> t, store_->Get(name));
    *reply->add_tensors() = LocalInfo(name, *t);
  }
  return absl::OkStatus();
}

}  // namespace tessera
