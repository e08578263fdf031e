#ifndef TESSERA_CORE_FILES_SHARDED_FILES_H_
#define TESSERA_CORE_FILES_SHARDED_FILES_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/host_tensor.h"
#include "core/sharding/dtensor_spec.h"

namespace tessera {

// A DTensor stored as one safetensors file per rank, "<dir>/rank-<r>.safetensors", each holding
// that rank's shard under the tensor's name and the spec in "__metadata__" (keys "tessera.*"), so
// any one file says how to read the set back.
struct ShardedTensor {
  DTensorSpec spec;
  std::vector<HostTensor> shards;  // by row-major mesh position
};

// The "__metadata__" entries that describe `spec` ("tessera.device", "tessera.mesh_shape", ...).
std::map<std::string, std::string> SpecMetadata(const DTensorSpec& spec);
// The spec those entries describe; INVALID_ARGUMENT naming `file` for a missing or bad key.
absl::StatusOr<DTensorSpec> SpecFromMetadata(const std::map<std::string, std::string>& meta,
                                             const std::string& file);

// The path of `rank`'s file under `dir`.
std::string ShardFilePath(absl::string_view dir, int64_t rank);

// Writes every rank's file (creating `dir` if needed). INVALID_ARGUMENT if a shard's shape is not
// the one the spec gives that rank.
absl::Status WriteShardedTensor(absl::string_view dir, absl::string_view name,
                                const ShardedTensor& tensor);

// Reads the set back: the spec from rank files' metadata (which must agree), and every shard.
// NOT_FOUND for a missing file; INVALID_ARGUMENT naming the file for a missing or bad key.
absl::StatusOr<ShardedTensor> ReadShardedTensor(absl::string_view dir, absl::string_view name);

}  // namespace tessera

#endif  // TESSERA_CORE_FILES_SHARDED_FILES_H_
