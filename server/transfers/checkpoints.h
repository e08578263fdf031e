#ifndef TESSERA_SERVER_TRANSFERS_CHECKPOINTS_H_
#define TESSERA_SERVER_TRANSFERS_CHECKPOINTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/files/checkpoint.h"
#include "server/tables/dtensor_table.h"
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
  // One tensor of a save: the DTensor and the name it gets in the checkpoint, which for a module's
  // parameter is its state_dict name (its blocks go under <data>/<param>/); "" keeps a lone
  // tensor's own name.
  struct Saved {
    std::string param;
    std::shared_ptr<DTensorEntry> tensor;
  };
  // Saves `tensors` into one checkpoint at `path` (absolute): each one's ranks reduce Partial dims
  // and write their blocks into a fresh data directory, then one worker publishes the index
  // naming them all. Waits for it, up to `deadline`; a failed save leaves the previous checkpoint
  // as it was. `layout` describes what was saved for the reply (a lone tensor's own layout when
  // empty).
  absl::Status SaveAll(const std::string& path, const std::vector<Saved>& tensors,
                       absl::Time deadline, v1::SaveTensorReply* reply,
                       const std::string& layout = "");
  // The index of the checkpoint at `path` as a worker of `mesh` reads it: its text and parse.
  struct Index {
    std::string json;
    CheckpointIndex parsed;
  };
  absl::StatusOr<Index> ReadIndex(const std::string& path, const Mesh& mesh, absl::Time deadline);
  // Posts the reads that fill the new DTensor `out` (no Partial) from the tensor `name` of the
  // checkpoint at `path`: every rank reads only its shard's bytes.
  absl::Status PostLoad(const DTensorEntry& out, const std::string& path, const Index& index,
                        const std::string& name);
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

#endif  // TESSERA_SERVER_TRANSFERS_CHECKPOINTS_H_
