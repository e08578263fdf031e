#ifndef TESSERA_CORE_FILE_BYTES_H_
#define TESSERA_CORE_FILE_BYTES_H_

#include <cstddef>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

// The whole contents of the file at `path`. NOT_FOUND (naming the path) if it does not exist;
// other failures carry the errno-derived code and the path.
absl::StatusOr<std::vector<std::byte>> ReadFileBytes(absl::string_view path);

// Replaces the file at `path` with `bytes`: writes `path`.tmp, then renames it over `path`, so a
// reader never sees a half-written file.
absl::Status WriteFileBytes(absl::string_view path, std::span<const std::byte> bytes);

}  // namespace tessera

#endif  // TESSERA_CORE_FILE_BYTES_H_
