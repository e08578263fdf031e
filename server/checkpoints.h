#ifndef TESSERA_SERVER_CHECKPOINTS_H_
#define TESSERA_SERVER_CHECKPOINTS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/dtensor_table.h"
#include "tessera/v1/tensor.pb.h"

namespace tessera {

// Saving DTensors into checkpoints and loading them back (docs/checkpoints.md). The coordinator
// plans and the workers move the bytes: no tensor data passes through it. Thread-safe.
class Checkpoints {
 public:
  explicit Checkpoints(DTensorTable* tensors) : tensors_(tensors) {}

  // Saves the DTensor `request.name()`: its ranks reduce Partial dims and write their blocks into
  // a fresh data directory, then one worker publishes the index naming it. Waits for both, up to
  // `deadline`. INVALID_ARGUMENT for a relative path (the workers name a missing parent);
  // NOT_FOUND for an unknown tensor. A failed save leaves the previous checkpoint as it was.
  absl::Status Save(const v1::SaveTensorRequest& request, absl::Time deadline,
                    v1::SaveTensorReply* reply);
  // Loads a checkpoint's tensor onto `request.mesh()` as `request.placements()`, owned by `client`:
  // one worker reads the index, then every rank reads its shard's bytes (posted; the reply comes
  // once planned). INVALID_ARGUMENT for a relative path, Partial placements or a bad index.
  absl::Status Load(const v1::LoadTensorRequest& request, const std::string& client,
                    absl::Time deadline, v1::TensorInfo* reply);

 private:
  // Posts `command` to `workers` and waits for every reply, up to `deadline`; a command that
  // `reads` a tensor is posted only if it was not freed (NOT_FOUND).
  absl::StatusOr<std::vector<v1::CommandReply>> RunOn(const std::vector<WorkerHandle>& workers,
                                                      const v1::Command& command,
                                                      absl::Time deadline,
                                                      const DTensorEntry* reads = nullptr);

  DTensorTable* tensors_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_CHECKPOINTS_H_
