#ifndef TESSERA_CLIENT_CLI_TENSOR_FILES_H_
#define TESSERA_CLIENT_CLI_TENSOR_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/host_tensor.h"

namespace tessera::cli {

// Reads one tensor from a .npy file, or the tensor `key` (or the only one) of a .safetensors file.
absl::StatusOr<HostTensor> ReadTensorFile(const std::string& path, const std::string& key);
// Writes `t` as a .npy file, or as tensor `key` of a new .safetensors file.
absl::Status WriteTensorFile(const std::string& path, const std::string& key, HostTensor t);

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_CLI_TENSOR_FILES_H_
