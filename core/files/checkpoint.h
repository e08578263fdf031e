#ifndef TESSERA_CORE_FILES_CHECKPOINT_H_
#define TESSERA_CORE_FILES_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/sharding/dtensor_spec.h"

namespace tessera {

// A checkpoint directory (docs/checkpoints.md):
//   <dir>/index.json                  which data directory is current and which file holds which
//                                     block of which tensor; replaced atomically, written last
//   <dir>/<data>/rank-<r>.safetensors one file per writing rank, as core/files/sharded_files.h
//   writes
//                                     them (the block under the tensor's name, the spec in
//                                     "__metadata__"); a module's parameter p under <data>/<p>/
// A reader follows index.json only, so a save killed half-way leaves the previous checkpoint whole.

// One block of a saved tensor: the file that holds it (relative to the checkpoint directory),
// the name it has there, and the box of the global tensor it is.
struct CheckpointBlock {
  std::string file;
  std::string key;
  std::vector<int64_t> offset;
  Shape shape;
  friend bool operator==(const CheckpointBlock&, const CheckpointBlock&) = default;
};

// One saved tensor: its value's dtype and shape, the layout it was saved from (information
// only: a load may use any), and blocks that tile it exactly once.
struct CheckpointTensor {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  std::string saved_layout;  // e.g. "(S(0), S(1)) on mesh [2, 2]"
  std::vector<CheckpointBlock> blocks;
};

// The contents of index.json.
struct CheckpointIndex {
  std::string data_dir;  // relative to the checkpoint directory; "" for a `tessera shard` one
  std::vector<CheckpointTensor> tensors;
};

inline constexpr absl::string_view kCheckpointIndexFile = "index.json";
inline constexpr absl::string_view kCheckpointFormat = "tessera-checkpoint";
inline constexpr int kCheckpointVersion = 1;

// `placements` with every Partial replaced by Replicate: the layout a tensor is saved in (its
// Partial dims reduced first).
std::vector<Placement> SavedPlacements(std::vector<Placement> placements);

// True iff the rank at mesh `coordinate` writes its block of a tensor laid out as `spec` (no
// Partial): it is the first of its replica group (coordinate 0 on every non-Shard mesh dim).
bool WritesBlock(const DTensorSpec& spec, const std::vector<int64_t>& coordinate);

// The file (relative to the data directory) rank `rank` writes for tensor `param` ("" for a
// lone tensor): "rank-<r>.safetensors" or "<param>/rank-<r>.safetensors".
std::string CheckpointFileName(absl::string_view param, int64_t rank);

// The saved tensor of a tensor laid out as `spec` (no Partial), stored under `key` in files of
// `data_dir` named by CheckpointFileName(param, rank): one block per writing rank, in mesh order.
// INVALID_ARGUMENT if `spec` has a Partial placement.
absl::StatusOr<CheckpointTensor> PlanCheckpointTensor(const DTensorSpec& spec,
                                                      absl::string_view data_dir,
                                                      absl::string_view param,
                                                      absl::string_view key);

// index.json's text, and its parse: INVALID_ARGUMENT naming the field for a malformed index,
// including blocks that do not tile their tensor exactly once or a file outside the directory.
absl::StatusOr<std::string> CheckpointIndexToJson(const CheckpointIndex& index);
absl::StatusOr<CheckpointIndex> ParseCheckpointIndex(absl::string_view text);

// Checks that `blocks` tile a tensor of `shape` exactly once (every element in one block).
absl::Status CheckBlocksTile(const Shape& shape, const std::vector<CheckpointBlock>& blocks);

// One copy a loading rank makes: `bytes` bytes from byte `source` of block `block`'s data (its
// own row-major order) to byte `target` of the rank's new local shard.
struct ByteCopy {
  int64_t block = 0;
  int64_t source = 0;
  int64_t target = 0;
  int64_t bytes = 0;
  friend bool operator==(const ByteCopy&, const ByteCopy&) = default;
};

// The copies that build the local shard `target` (a box of the global tensor) of a tensor of
// `dtype` from saved `blocks`: the byte ranges of each block the rank needs and no others,
// contiguous runs merged, ordered by block then source byte.
std::vector<ByteCopy> PlanShardReads(const std::vector<CheckpointBlock>& blocks, DType dtype,
                                     const LocalShard& target);

}  // namespace tessera

#endif  // TESSERA_CORE_FILES_CHECKPOINT_H_
