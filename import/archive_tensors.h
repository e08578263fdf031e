// The tensors a torch.export archive stores beside its graph: parameters and buffers
// (<name>/data/weights/) and lifted constants (<name>/data/constants/), each a raw little-endian
// file its config (model_weights_config.json, model_constants_config.json) describes.
#ifndef TESSERA_IMPORT_ARCHIVE_TENSORS_H_
#define TESSERA_IMPORT_ARCHIVE_TENSORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/host_tensor.h"
#include "core/ops/op_registry.h"
#include "import/pt2_zip.h"

namespace tessera::import {

// One stored tensor, by the state_dict name the program's signature uses.
struct ArchiveTensor {
  std::string name;  // "model.embed_tokens.weight"
  bool is_param = false;
  bool constant = false;  // from data/constants (a buffer not in the state_dict, a lifted constant)
  ops::TensorMeta meta;
  // The zip entry of its bytes. Tied tensors (an LM head sharing its embedding's weight) share
  // one entry, as the state_dict's names share one tensor.
  int64_t entry = -1;
};

// The tensors of archive folder `archive` in `zip`, sorted by name. INVALID_ARGUMENT naming the
// tensor where its config entry does not read, its file is missing, or its layout is not a
// contiguous row-major one from offset 0 (torch.export.save writes each tensor's own bytes);
// UNIMPLEMENTED for one stored pickled, or an archive whose byteorder is not little.
absl::StatusOr<std::vector<ArchiveTensor>> ListArchiveTensors(const Pt2Zip& zip,
                                                              const std::string& archive);

// The value of `tensor`: INVALID_ARGUMENT naming it where its file's size is not its meta's.
absl::StatusOr<HostTensor> ReadArchiveTensor(const Pt2Zip& zip, const ArchiveTensor& tensor);

}  // namespace tessera::import

#endif  // TESSERA_IMPORT_ARCHIVE_TENSORS_H_
