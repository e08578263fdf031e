#ifndef TESSERA_WORKER_COMMAND_EXECUTOR_H_
#define TESSERA_WORKER_COMMAND_EXECUTOR_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device_mesh.h"
#include "gloo/rendezvous/store.h"
#include "tessera/v1/worker.pb.h"
#include "worker/comm/communicator.h"
#include "worker/comm/make_communicator.h"
#include "worker/shard_store.h"

namespace tessera {

// Runs the coordinator's commands on this worker: sets up a mesh's communicators (one for the
// whole mesh, one per mesh dim group) and runs collectives on local tensors. Every worker of a
// mesh gets the same command and derives its own part from its worker id. Called by one thread at a
// time (the sequencer orders commands).
class CommandExecutor {
 public:
  CommandExecutor(int64_t worker_id, std::string device, ShardStore* store,
                  gloo::rendezvous::Store* rendezvous, std::string collective_host);

  absl::StatusOr<v1::CommandReply> Execute(const v1::Command& command);

 private:
  // A mesh as this worker takes part in it.
  struct MeshComms {
    DeviceMesh mesh;
    std::vector<int64_t> coordinate;
    std::unique_ptr<comm::Communicator> world;
    std::vector<std::unique_ptr<comm::Communicator>> dims;
  };

  absl::Status SetupMesh(const v1::SetupMesh& setup);
  absl::StatusOr<std::vector<v1::LocalTensorInfo>> RunCollective(const v1::RunCollective& c);
  absl::StatusOr<std::unique_ptr<comm::Communicator>> Connect(const std::string& prefix, int rank,
                                                              int size, absl::Duration timeout);

  const int64_t worker_id_;
  const std::string device_;
  ShardStore* store_;
  gloo::rendezvous::Store* rendezvous_;
  const std::string collective_host_;
  std::map<int64_t, std::unique_ptr<MeshComms>> meshes_;
};

}  // namespace tessera

#endif  // TESSERA_WORKER_COMMAND_EXECUTOR_H_
