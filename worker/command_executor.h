#ifndef TESSERA_WORKER_COMMAND_EXECUTOR_H_
#define TESSERA_WORKER_COMMAND_EXECUTOR_H_

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/sharding/device_mesh.h"
#include "core/sharding/dtensor_spec.h"
#include "gloo/rendezvous/store.h"
#include "kernels/backend.h"
#include "tessera/v1/worker.pb.h"
#include "worker/comm/communicator.h"
#include "worker/comm/make_communicator.h"
#include "worker/program_runner.h"
#include "worker/shard_store.h"

namespace tessera {

// Runs the coordinator's commands on this worker: sets up a mesh's communicators (one for the
// whole mesh, one per mesh dim group), runs collectives on local tensors, runs the DTensor
// commands (spread, redistribute, fill, ops; tensor_commands.cc), and installs and runs module
// programs (program_commands.cc). The same code runs on every device: shards live in the memory
// space of `kernels` (host memory with the CPU backend, a GPU's with a CUDA backend), are computed
// on with its kernels, and move between workers through the communicators of the device
// (MakeCommunicator: Gloo for cpu, NCCL for cuda:N). Every worker of a mesh gets the same command
// and derives its own part from its worker id. Called by one thread at a time (the sequencer orders
// commands); each command's queued device work has finished when Execute returns.
class CommandExecutor {
 public:
  // `kernels` (whose memory `store` uses) and `store` must outlive the executor. Checkpoints are
  // read and written only inside `checkpoint_root` (none where it is empty).
  CommandExecutor(int64_t worker_id, kernels::KernelBackend* kernels, ShardStore* store,
                  gloo::rendezvous::Store* rendezvous, std::string collective_host,
                  std::string checkpoint_root = "");

  // Runs `command` and fills `reply` with what it wrote. Whether it succeeded or not, a command on
  // a mesh whose communicators one failure broke reports that in reply->broken (the coordinator
  // then re-forms them with a new SetupMesh).
  absl::Status Execute(const v1::Command& command, v1::CommandReply* reply);

 private:
  // A mesh as this worker takes part in it.
  struct MeshComms {
    DeviceMesh mesh;
    std::vector<int64_t> coordinate;
    int64_t generation = 0;  // of SetupMesh that formed the communicators
    std::unique_ptr<comm::Communicator> world;
    std::vector<std::unique_ptr<comm::Communicator>> dims;
  };

  // Runs `command`, filling reply->tensors.
  absl::Status Run(const v1::Command& command, v1::CommandReply* reply);
  // If a communicator of mesh `mesh_id` is broken, breaks the mesh's others too (closing their
  // connections), so that a peer waiting on this worker in any of them fails at once: the
  // coordinator re-forms the mesh's communicators all together anyway.
  void BreakWholeMesh(int64_t mesh_id);
  // Sets reply->broken if a communicator of mesh `mesh_id` is broken.
  void ReportBroken(int64_t mesh_id, v1::CommandReply* reply) const;

  // What a command reports about a local tensor it wrote.
  static v1::LocalTensorInfo LocalInfo(const std::string& name, const kernels::DeviceTensor& t);
  absl::Status SetupMesh(const v1::SetupMesh& setup);
  absl::StatusOr<MeshComms*> FindMesh(int64_t mesh_id);
  // The spec of a command, which must be on the mesh `mc`.
  static absl::StatusOr<DTensorSpec> SpecOnMesh(const v1::DTensorMeta& meta, const MeshComms& mc);
  static std::vector<comm::Communicator*> DimGroups(MeshComms& mc);
  absl::StatusOr<v1::LocalTensorInfo> SpreadTensor(const v1::SpreadTensor& s);
  absl::StatusOr<v1::LocalTensorInfo> Redistribute(const v1::RedistributeTensor& r);
  absl::StatusOr<v1::LocalTensorInfo> FillTensor(const v1::FillTensor& f);
  // Every tensor the op wrote: its output, then a registry op's further outputs.
  absl::StatusOr<std::vector<v1::LocalTensorInfo>> RunOp(const v1::RunOp& r);
  // A registry op (OpCall.name) on inputs already in its strategy's layout (`laid_out`): each of
  // its outputs.
  absl::StatusOr<std::vector<kernels::DeviceTensor>> RunRegistryOp(
      const v1::RunOp& r, const MeshComms& mc, std::span<const DTensorSpec> laid_out,
      std::span<const kernels::ConstTensorView> inputs);
  absl::StatusOr<std::vector<v1::LocalTensorInfo>> RunCollective(const v1::RunCollective& c);
  // Installs a program (replacing one of its id only once the new one is checked).
  absl::Status LoadProgram(const v1::LoadProgram& load);
  // Runs a program; fills reply->output (when asked) and reply->tensors.
  absl::Status RunProgram(const v1::RunProgram& run, v1::CommandReply* reply);
  // Graph programs (graph_commands.cc): installed once, run by one command per forward.
  absl::Status LoadGraph(const v1::LoadGraph& load);
  absl::Status RunGraph(const v1::RunGraph& run, v1::CommandReply* reply);
  // Checkpoints (checkpoint_commands.cc): this rank's block written, the index published or read,
  // and a shard loaded from the byte ranges it needs.
  absl::Status SaveShard(const v1::SaveShard& save);
  absl::Status CommitCheckpoint(const v1::CommitCheckpoint& commit);
  absl::Status ReadCheckpoint(const v1::ReadCheckpoint& read, v1::CommandReply* reply);
  absl::StatusOr<v1::LocalTensorInfo> LoadShard(const v1::LoadShard& load);
  // broadcast and all_reduce whose output is their input: updated in the stored buffer.
  absl::StatusOr<std::vector<v1::LocalTensorInfo>> RunInPlace(const v1::RunCollective& c,
                                                              comm::Communicator& group);
  // A communicator of the group under `prefix`, which connects within `connect_timeout`; its calls
  // time out after `timeout`.
  absl::StatusOr<std::unique_ptr<comm::Communicator>> Connect(const std::string& prefix, int rank,
                                                              int size,
                                                              absl::Duration connect_timeout,
                                                              absl::Duration timeout);

  const int64_t worker_id_;
  kernels::KernelBackend& kernels_;
  const std::string device_;
  ShardStore* store_;
  gloo::rendezvous::Store* rendezvous_;
  const std::string collective_host_;
  const std::string checkpoint_root_;
  std::map<int64_t, std::unique_ptr<MeshComms>> meshes_;
  // A module program as this worker holds it: the mesh it runs on and its runner.
  struct InstalledProgram {
    int64_t mesh_id = 0;
    std::unique_ptr<ProgramRunner> runner;
  };
  std::map<int64_t, InstalledProgram> programs_;  // by program id
  // A graph program as this worker holds it: the mesh it runs on and its steps.
  struct InstalledGraph {
    int64_t mesh_id = 0;
    v1::GraphProgram graph;
  };
  std::map<int64_t, InstalledGraph> graphs_;  // by program id, beside programs_
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMMAND_EXECUTOR_H_
