#ifndef TESSERA_SERVER_MODULES_MODULE_RUNS_H_
#define TESSERA_SERVER_MODULES_MODULE_RUNS_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/host_tensor.h"
#include "core/modules/module_program.h"
#include "server/modules/module_programs.h"
#include "server/tables/dtensor_table.h"
#include "server/tables/module_table.h"
#include "server/tables/served_models.h"
#include "tessera/v1/worker.pb.h"

namespace tessera {

// The input of a run: the full tensor (split over the ranks by the input layout), or every rank's
// local tensor in the mesh's row-major order.
struct RunInput {
  std::optional<HostTensor> full;
  std::vector<HostTensor> locals;
};

// Which outputs a run sends back.
struct RunOutputs {
  bool full = true;     // the full output, put together by the output layout
  bool locals = false;  // every rank's local output
};

// What a run gave.
struct RunResult {
  EdgeLayout output_layout;  // on the tp mesh dim
  int tp_mesh_dim = 0;
  std::optional<HostTensor> full;
  std::vector<HostTensor> locals;
};

// The backward and update of a training step.
struct StepOptions {
  bool loss_sum = true;                   // the loss is output.sum()
  std::optional<HostTensor> grad_output;  // else: the full output's gradient
  std::optional<v1::SgdOptions> sgd;      // the update; none: gradients only
};

// Forwards and training steps of modules: one RunProgram command per worker, each carrying its
// rank's local input; the ranks' outputs come back in the replies. Nothing is planned per run
// beyond splitting the input and putting the output together. Thread-safe.
class ModuleRuns {
 public:
  ModuleRuns(DTensorTable* tensors, ModulePrograms* programs)
      : tensors_(tensors), programs_(programs) {}

  // module(input), waiting for the workers until `deadline`. INVALID_ARGUMENT naming the input's
  // dtype or shape if the model cannot take it; FAILED_PRECONDITION if the mesh is not ready.
  absl::StatusOr<RunResult> Forward(ModuleEntry& module, RunInput input, RunOutputs outputs,
                                    absl::Time deadline);
  // A training step: forward, backward from the loss into the gradients
  // ("<module>.<fqn>.grad", laid out as their parameters), then SGD when asked. On an N-D mesh the
  // gradients are those of the loss over the whole batch, as in one process.
  absl::StatusOr<RunResult> Step(ModuleEntry& module, RunInput input, StepOptions step,
                                 RunOutputs outputs, absl::Time deadline);

  // An imported module's forward (module.graph set): `inputs` the full value of each user input of
  // its program, in order; the full value of each output. One RunGraph command per worker, each
  // carrying its rank's part of every input; only the ranks an output is put together from send
  // theirs back. INVALID_ARGUMENT naming an input whose dtype or shape is not the one the program
  // was exported with.
  absl::StatusOr<std::vector<HostTensor>> ForwardGraph(ModuleEntry& module,
                                                       std::vector<HostTensor> inputs,
                                                       absl::Time deadline);

  // What serves a published module: a forward of a full input batch to the full output.
  std::shared_ptr<ModelRunner> RunnerFor(std::shared_ptr<ModuleEntry> module);
  // How long a served forward may take.
  static constexpr absl::Duration kServedTimeout = absl::Seconds(60);

 private:
  // Every rank's local input, checked against what the model takes; a full input that every rank
  // takes whole (replicated on every mesh dim) stays one tensor, uncopied.
  static absl::StatusOr<std::vector<HostTensor>> LocalInputs(const ModuleEntry& module,
                                                             RunInput input)
      ABSL_SHARED_LOCKS_REQUIRED(module.mu);
  // Every rank's local output gradient for a step on a full input of `input_shape` (none when the
  // workers take output.sum()'s themselves): the one given or the sum's, cut by the output
  // layout, and scaled by the number of
  // data-parallel groups, whose gradients the program averages, so that a step's gradients are the
  // whole batch's as one process computes them.
  static absl::StatusOr<std::vector<HostTensor>> LocalGradients(const ModuleEntry& module,
                                                                const Shape& input_shape,
                                                                const StepOptions& step)
      ABSL_SHARED_LOCKS_REQUIRED(module.mu);
  // The ranks whose local outputs a run sends back (returned[r]): every rank's for local outputs,
  // none without outputs; for the full output alone, those it is put together from: the ranks at
  // coordinate 0 of every mesh dim that replicates the output (the tp dim when the output is
  // Replicate there, a distributed module's every dim): the other copies would cross the network
  // for nothing.
  static std::vector<bool> ReturnedOutputs(const ModuleEntry& module, RunOutputs outputs)
      ABSL_SHARED_LOCKS_REQUIRED(module.mu);
  // Sends `commands[r]` to rank r and waits until `deadline`; the outputs of the ranks with
  // `returned[r]`, in rank order. `done` also gets the outcome, once the workers replied (even
  // after the deadline).
  absl::StatusOr<std::vector<HostTensor>> Run(const ModuleEntry& module,
                                              std::vector<v1::Command> commands,
                                              const std::vector<bool>& returned,
                                              absl::Time deadline,
                                              std::function<void(const absl::Status&)> done);
  // Run's dispatch: every rank's reply, in rank order.
  absl::StatusOr<std::vector<v1::CommandReply>> Dispatch(
      const ModuleEntry& module, std::vector<v1::Command> commands, absl::Time deadline,
      std::function<void(const absl::Status&)> done);
  // The reply of a run from the outputs of the ranks ReturnedOutputs named.
  static absl::StatusOr<RunResult> Result(const ModuleEntry& module, std::vector<HostTensor> locals,
                                          RunOutputs outputs) ABSL_SHARED_LOCKS_REQUIRED(module.mu);
  // One RunProgram per rank, rank r's output sent back when `returned[r]`; `inputs` one per rank
  // or one for all, `grads` empty or one per rank.
  static std::vector<v1::Command> Commands(const ModuleEntry& module,
                                           const std::vector<HostTensor>& inputs,
                                           const std::vector<HostTensor>& grads,
                                           const StepOptions* step,
                                           const std::vector<bool>& returned);

  DTensorTable* tensors_;
  ModulePrograms* programs_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_MODULES_MODULE_RUNS_H_
