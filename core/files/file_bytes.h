#ifndef TESSERA_CORE_FILES_FILE_BYTES_H_
#define TESSERA_CORE_FILES_FILE_BYTES_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

// Every reader here reads regular files only: a device, FIFO, socket or directory is
// INVALID_ARGUMENT naming the path (and a FIFO is not waited on).

// The whole contents of the file at `path`: as many bytes as its size when opened. NOT_FOUND
// (naming the path) if it does not exist; other failures carry the errno-derived code and the path.
absl::StatusOr<std::vector<std::byte>> ReadFileBytes(absl::string_view path);

// The size of the file at `path` in bytes; NOT_FOUND naming the path if it does not exist.
absl::StatusOr<uint64_t> FileSize(absl::string_view path);

// Bytes [offset, offset + length) of the file at `path`; OUT_OF_RANGE naming the path if the file
// ends first (checked against its size before anything is allocated).
absl::StatusOr<std::string> ReadFileRange(absl::string_view path, uint64_t offset, size_t length);

// Replaces the file at `path` with `bytes`: writes `path`.tmp and syncs it to the disk, renames it
// over `path` and syncs the directory, so a reader never sees a half-written file, and once this
// returns OK the new file survives a crash of the machine too.
absl::Status WriteFileBytes(absl::string_view path, std::span<const std::byte> bytes);

}  // namespace tessera

#endif  // TESSERA_CORE_FILES_FILE_BYTES_H_
