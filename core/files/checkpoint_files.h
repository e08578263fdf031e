#ifndef TESSERA_CORE_FILES_CHECKPOINT_FILES_H_
#define TESSERA_CORE_FILES_CHECKPOINT_FILES_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/files/checkpoint.h"
#include "core/host_tensor.h"
#include "core/sharding/dtensor_spec.h"

namespace tessera {

// The file side of checkpoints (core/files/checkpoint.h has the format): what one rank does on its
// own filesystem when it saves or loads its part.

// The checkpoint directory a call names, as a worker with checkpoint root `root` resolves it:
// `path` absolute, or relative to `root`, with the symlinks of its existing part followed and
// `..` applied; it must then lie strictly inside `root` (itself resolved the same way).
// FAILED_PRECONDITION when `root` is empty (the worker takes no checkpoint paths: its
// --checkpoint_root is not set); PERMISSION_DENIED naming the path and the root when the path
// resolves outside it; INVALID_ARGUMENT for an empty path.
absl::StatusOr<std::string> ResolveCheckpointPath(absl::string_view root, absl::string_view path);

// Checks that `directory` can hold a checkpoint: an absolute path whose parent is an existing
// directory and which is a directory itself or does not exist yet. INVALID_ARGUMENT naming it.
absl::Status CheckCheckpointDirectory(absl::string_view directory);

// CheckCheckpointDirectory, and that a save may write into `directory`: it does not exist yet, is
// empty, or is a Tessera checkpoint (it holds the marker file kCheckpointMarkerFile that saves
// write, or an index.json of format "tessera-checkpoint"). FAILED_PRECONDITION naming it
// otherwise: a save never writes into, nor cleans, a directory that is not its own.
absl::Status CheckSaveDirectory(absl::string_view directory);

// The file that marks a directory as a Tessera checkpoint, and each of its data directories as
// written by a save: what a commit may remove is only what carries it.
inline constexpr char kCheckpointMarkerFile[] = ".tessera-checkpoint";

// Writes the block of rank `rank` of a tensor laid out as `spec` (no Partial) to
// <directory>/<data_dir>/CheckpointFileName(param, rank) under `key`, with the spec in its
// metadata as core/files/sharded_files.h writes it (creating the directories, and marking both
// <directory> and its data directory with kCheckpointMarkerFile).
absl::Status WriteCheckpointBlock(absl::string_view directory, absl::string_view data_dir,
                                  absl::string_view param, absl::string_view key,
                                  const DTensorSpec& spec, int64_t rank, const HostTensor& block);

// Publishes `index` as <directory>/index.json (written to a temporary file, then renamed over
// the old one), then removes the data directories ("data-*") it does not name that a save wrote
// (those holding kCheckpointMarkerFile, or named by the index replaced): the checkpoint switches
// from the old data to the new one at once, and nothing else in the directory is touched. Commits
// to one directory take turns (a lock file); ABORTED, changing nothing, if a block file the index
// names is gone (a concurrent save's commit removed it).
absl::Status CommitCheckpointIndex(absl::string_view directory, const CheckpointIndex& index);

// The index of the checkpoint at `directory`; for a directory without index.json, one made from
// the rank-<r>.safetensors files that `tessera shard` writes (one tensor each, a block per replica
// group). NOT_FOUND naming the directory if it holds neither; INVALID_ARGUMENT for a bad index.
absl::StatusOr<CheckpointIndex> ReadCheckpointIndex(absl::string_view directory);

// Builds the local shard `target` of `tensor` from its saved blocks, reading only the byte ranges
// it needs (PlanShardReads) of the files that hold them. INVALID_ARGUMENT naming the file if a
// block's file holds something else under its key; NOT_FOUND for a missing file.
absl::StatusOr<HostTensor> LoadCheckpointShard(absl::string_view directory,
                                               const CheckpointTensor& tensor,
                                               const LocalShard& target);

}  // namespace tessera

#endif  // TESSERA_CORE_FILES_CHECKPOINT_FILES_H_
