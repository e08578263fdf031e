#include "client/cli/tensor_files.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/files/npy.h"
#include "core/files/safetensors.h"
#include "core/status_macros.h"

namespace tessera::cli {

absl::StatusOr<HostTensor> ReadTensorFile(const std::string& path, const std::string& key) {
  if (absl::EndsWith(path, ".npy")) return ReadNpyFile(path);
  if (!absl::EndsWith(path, ".safetensors")) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is neither .npy nor .safetensors"));
  }
  ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensorsFile(path));
  if (key.empty() && file.tensors.size() == 1) return std::move(file.tensors.begin()->second);
  auto it = file.tensors.find(key);
  if (it == file.tensors.end()) {
    return absl::NotFoundError(absl::StrCat(path, " has no tensor '", key,
                                            "'; pass --tensor with one of its ",
                                            file.tensors.size(), " names"));
  }
  return std::move(it->second);
}

absl::Status WriteTensorFile(const std::string& path, const std::string& key, HostTensor t) {
  if (absl::EndsWith(path, ".npy")) return WriteNpyFile(path, t);
  if (!absl::EndsWith(path, ".safetensors")) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is neither .npy nor .safetensors"));
  }
  SafetensorsFile file;
  file.tensors.emplace(key, std::move(t));
  return WriteSafetensorsFile(path, file);
}

}  // namespace tessera::cli
