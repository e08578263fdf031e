#ifndef TESSERA_CORE_FILES_NPY_H_
#define TESSERA_CORE_FILES_NPY_H_

#include <cstddef>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/host_tensor.h"

namespace tessera {

// The numpy descr for `dtype`: "<f4", "<f8", "<f2", "|i1", "|u1", "<i4", "<i8", "|b1".
// INVALID_ARGUMENT for bfloat16, which numpy has no dtype for (use safetensors instead).
absl::StatusOr<absl::string_view> NpyDescr(DType dtype);

// Decodes a whole .npy file of format version 1.0, 2.0 or 3.0: little-endian (or byte-order-free)
// descr, C order. INVALID_ARGUMENT naming the bad value for a bad magic, an unknown version or
// descr, a big-endian descr, fortran_order True, a malformed header dict, a negative dim, or a
// data size that does not match the shape.
absl::StatusOr<HostTensor> ParseNpy(std::span<const std::byte> bytes);

// Encodes `tensor` byte for byte as numpy's np.save does: version 1.0 unless the header needs
// more than 65535 bytes (then 2.0), data starting at a multiple of 64 bytes. INVALID_ARGUMENT
// for bfloat16.
absl::StatusOr<std::vector<std::byte>> SerializeNpy(const HostTensor& tensor);

// ParseNpy on the contents of `path`; NOT_FOUND naming the path if it does not exist.
absl::StatusOr<HostTensor> ReadNpyFile(absl::string_view path);

// Replaces the file at `path` with SerializeNpy(tensor).
absl::Status WriteNpyFile(absl::string_view path, const HostTensor& tensor);

}  // namespace tessera

#endif  // TESSERA_CORE_FILES_NPY_H_
