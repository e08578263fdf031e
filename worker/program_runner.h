#ifndef TESSERA_WORKER_PROGRAM_RUNNER_H_
#define TESSERA_WORKER_PROGRAM_RUNNER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/host_tensor.h"
#include "core/sharding/device_mesh.h"
#include "kernels/backend.h"
#include "proto/convert.h"
#include "worker/comm/communicator.h"
#include "worker/program_steps.h"
#include "worker/shard_store.h"

namespace tessera {

// SGD as torch.optim.SGD (dampening 0, no Nesterov).
struct SgdOptions {
  double lr = 0;
  double momentum = 0;
  double weight_decay = 0;
};

// What a training step does after the forward.
struct TrainingStep {
  // The output's gradient, laid out as this rank's local output; nullopt: ones (the loss is the
  // sum of the output).
  std::optional<HostTensor> grad_output;
  // The update after backward; nullopt: gradients only.
  std::optional<SgdOptions> sgd;
};

// What a run leaves: this rank's local output and the local tensors it wrote to the store.
struct ProgramRunResult {
  HostTensor output;
  std::vector<std::string> written;
};

// A module program installed on one rank of its mesh. Parameters are local tensors of the store
// (WorkerProgram::tensors): read by every run; a training step writes each one's gradient (its
// local shape, zeroed first), and SGD updates the value in place and keeps the momentum buffer
// (made at its first step). Activations live in the run's buffers, each freed after its last
// use: a forward keeps nothing, a training step what backward reads. Every failure of a step
// names it (list, index, kind, module FQN).
//
// A forward-only run reads each Linear weight that is a parameter through the kernels' prepared
// copy of it (KernelBackend::PrepareLinearWeight: oneDNN's packed layout on the CPU), made at the
// first such run and kept until a forward finds another value: it is used only while the store
// holds the very value it was made from. Each copy is charged to the store's budget while it lives
// (ShardStore::ChargeOutside); where the budget has no room for one, the forward reads the weight
// as it is. The store never writes a tensor in place (SGD, a load, a redistribute store a new
// one), so a new value makes a new copy.
class ProgramRunner {
 public:
  // Installs `program` for the rank at `coordinate` of `mesh`. INVALID_ARGUMENT if it does not
  // fit the mesh (a parameter without one placement per mesh dim or sharding a dim it lacks, a
  // mesh dim past the mesh, a data-parallel dim among them); FAILED_PRECONDITION naming the
  // parameter and its tensor if `store` lacks the tensor or holds it with another local shape.
  static absl::StatusOr<std::unique_ptr<ProgramRunner>> Create(WorkerProgram program,
                                                               DeviceMesh mesh,
                                                               std::vector<int64_t> coordinate,
                                                               const ShardStore& store);

  // OK iff `input` is this rank's piece of the program's input: its dtype, its rank, and every
  // size the program fixes (the tp group's torch.chunk piece of a dim the input layout shards;
  // dim 0 unchecked where a data-parallel mesh dim splits the batch). INVALID_ARGUMENT naming the
  // shapes otherwise.
  absl::Status CheckInput(const HostTensor& input) const;

  // Runs the forward on `input` (checked by CheckInput) and, with `training`, the backward and
  // SGD. `dim_groups[m]` is this rank's communicator along mesh dim m; `kernels` computes and
  // `store` holds the parameters, in the memory of `kernels`: the input (and grad_output) are
  // copied there first and the output copied back to the host last. A training step's grad_output
  // must have the dtype and shape of this rank's output (INVALID_ARGUMENT). Parameters are updated
  // only once the whole backward has run and every gradient and momentum buffer is stored.
  //
  // A rank that fails (its input, a step, its budget) stops computing, and its peers stop at the
  // next step that communicates: before each, the ranks of its groups agree (a one-number
  // all_reduce) whether any of them failed. Every rank still walks every step, so the groups'
  // communicators stay in step and the mesh serves the next command at once. The failing rank
  // returns its own error; its peers return ABORTED naming its mesh coordinate. A training step
  // agrees over the whole mesh before it stores anything, so a failure anywhere leaves every
  // gradient, parameter and momentum buffer as it was.
  absl::StatusOr<ProgramRunResult> Run(HostTensor input, std::optional<TrainingStep> training,
                                       kernels::KernelBackend& kernels, ShardStore& store,
                                       std::span<comm::Communicator* const> dim_groups) const;

  // Where a run failed before it could begin on this rank (its command did not decode): walks
  // the run's agreements with `failure` so that the peers stop too, and returns `failure`.
  absl::Status Stand(absl::Status failure, bool training, kernels::KernelBackend& kernels,
                     ShardStore& store, std::span<comm::Communicator* const> dim_groups) const;

 private:
  // Where a buffer is last used: in a forward-only run, and in a training step (forward steps
  // first, then backward steps numbered on).
  struct BufferUses {
    std::vector<std::vector<int>> free_after_forward;   // per forward step
    std::vector<std::vector<int>> free_after_training;  // per forward then backward step
    std::vector<int> last_forward_use;                  // per buffer, -1 if none
    std::vector<int> last_training_use;                 // per buffer, -1 if none
  };
  struct RunState;

  ProgramRunner(WorkerProgram program, DeviceMesh mesh, std::vector<int64_t> coordinate);
  void PlanBufferUses();
  // This rank's local shape of parameter `i`.
  const Shape& LocalShape(int i) const { return local_shapes_[i]; }
  // The parameters' values in `store`, checked against their local shapes.
  absl::StatusOr<std::vector<std::shared_ptr<const kernels::DeviceTensor>>> FetchParameters(
      const ShardStore& store) const;
  // Run's work; a failed `failure` makes this rank stand by from the start.
  absl::StatusOr<ProgramRunResult> Run(absl::Status failure, HostTensor input,
                                       std::optional<TrainingStep> training,
                                       kernels::KernelBackend& kernels, ShardStore& store,
                                       std::span<comm::Communicator* const> dim_groups) const;
  // Runs step `index` of `list` (position `position` among the run's steps), agreeing first
  // where it communicates; a failure of its own is kept in `state` (an error return: the
  // communicators failed, and the run cannot go on).
  absl::Status RunStep(RunState& state, absl::string_view list, int index, int position) const;
  // The agreement along each of `mesh_dims`: whether a rank of the group failed (recorded in
  // `state`, named by `where`).
  absl::Status Agree(RunState& state, std::span<const int> mesh_dims,
                     absl::FunctionRef<std::string()> where) const;
  // The run's status: this rank's failure, ABORTED where a peer's stopped it, else OK.
  absl::Status Outcome(const RunState& state) const;
  // RunStep's work on `step`: its collective or compute, its outputs into their buffers.
  absl::Status ExecuteStep(RunState& state, const ProgramStep& step, int position) const;
  // A compute step on `inputs` with its weight and bias; a whole one from a buffer gets a zeroed
  // gradient buffer of its own, stored once the step ran. Returns the step's outputs.
  absl::StatusOr<std::vector<kernels::DeviceTensor>> RunCompute(
      RunState& state, const ProgramStep& step, std::span<const StepInput> inputs) const;
  // Points a forward-only Linear's `weight` at the parameter's prepared copy where shapes fit.
  absl::Status PrepareLinearWeight(RunState& state, const ProgramStep& step,
                                   std::span<const StepInput> inputs, StepParameter& weight) const;
  // Zeroed gradients of every parameter, reusing the memory of the stored ones.
  absl::StatusOr<std::vector<kernels::DeviceTensor>> ZeroGradients(kernels::KernelBackend& kernels,
                                                                   ShardStore& store) const;
  // The SGD update of every parameter with its stored gradient; appends what it wrote.
  absl::Status ApplySgd(const SgdOptions& sgd, kernels::KernelBackend& kernels, ShardStore& store,
                        std::vector<std::string>& written) const;

  const WorkerProgram program_;
  const DeviceMesh mesh_;
  // The prepared copy of parameter `i`: the kept one when it was made from `value` (the stored
  // value the run reads), else one made now for `rows` rows and charged to `store`'s budget; null
  // where the kernels prepare none or the budget has no room for it.
  absl::StatusOr<std::shared_ptr<const kernels::PreparedWeight>> PreparedParameter(
      kernels::KernelBackend& kernels, ShardStore& store, int i,
      const std::shared_ptr<const kernels::DeviceTensor>& value, int64_t rows) const;

  // A prepared copy of a parameter and the stored value it was made from (held weakly: a new
  // value in the store is a new entry, never this one again).
  struct Prepared {
    std::weak_ptr<const kernels::DeviceTensor> value;
    std::shared_ptr<const kernels::PreparedWeight> weight;
  };

  const std::vector<int64_t> coordinate_;
  mutable absl::Mutex prepared_mu_;
  mutable std::vector<Prepared> prepared_ ABSL_GUARDED_BY(prepared_mu_);  // per parameter
  std::vector<Shape> local_shapes_;                                       // per parameter
  std::vector<std::vector<int64_t>> offsets_;  // per parameter: its shard's offset, per dim
  BufferUses uses_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_PROGRAM_RUNNER_H_
