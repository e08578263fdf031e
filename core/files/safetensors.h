#ifndef TESSERA_CORE_FILES_SAFETENSORS_H_
#define TESSERA_CORE_FILES_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/host_tensor.h"
#include "core/shape.h"

namespace tessera {

// The contents of a safetensors file: named tensors (ordered by name) and the free-form
// "__metadata__" string map.
struct SafetensorsFile {
  std::map<std::string, HostTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// The safetensors dtype string: "F32", "F64", "F16", "BF16", "I8", "U8", "I32", "I64", "BOOL".
absl::string_view SafetensorsDTypeName(DType dtype);

// Parses a safetensors dtype string; INVALID_ARGUMENT naming it if Tessera has no such dtype.
absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name);

// One tensor of a safetensors header: its name, dtype, shape, and where its bytes lie in the data
// buffer ([begin, end), relative to the buffer's start).
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// A safetensors file without its data: the tensors in the order their bytes lie in the file, the
// metadata, and where the data buffer starts in the file.
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;
};

// Decodes the header of a safetensors file of `file_size` bytes from `prefix`, which holds at
// least its first 8 + N bytes (the length and the JSON), with ParseSafetensors' checks.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::span<const std::byte> prefix,
                                                         uint64_t file_size);

// Reads only the header of the file at `path` (its data stays on disk); NOT_FOUND naming the path
// if it does not exist.
absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(absl::string_view path);

// Decodes a whole safetensors file: an 8-byte little-endian header length N, N bytes of JSON,
// then the data buffer. INVALID_ARGUMENT naming the tensor and the bad value for a malformed
// header, an unknown dtype, a negative dim, data offsets outside the buffer or not matching the
// shape, overlapping tensors or a duplicate name. Gaps between tensors are allowed.
absl::StatusOr<SafetensorsFile> ParseSafetensors(std::span<const std::byte> bytes);

// Encodes `file` as the reference implementation does: metadata first, tensors sorted by name
// with contiguous data offsets, the header padded with spaces to a multiple of 8 bytes.
// INVALID_ARGUMENT if a tensor is named "__metadata__".
absl::StatusOr<std::vector<std::byte>> SerializeSafetensors(const SafetensorsFile& file);

// ParseSafetensors on the contents of `path`; NOT_FOUND naming the path if it does not exist.
absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(absl::string_view path);

// Replaces the file at `path` with SerializeSafetensors(file).
absl::Status WriteSafetensorsFile(absl::string_view path, const SafetensorsFile& file);

}  // namespace tessera

#endif  // TESSERA_CORE_FILES_SAFETENSORS_H_
