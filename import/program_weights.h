// An exported program's weights as a load streams them: every program input that is not a user
// input (parameters, buffers, constants), in the program's order, each read whole only when asked,
// from a Hugging Face checkpoint where one gives it, else from the archive.
#ifndef TESSERA_IMPORT_PROGRAM_WEIGHTS_H_
#define TESSERA_IMPORT_PROGRAM_WEIGHTS_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/host_tensor.h"
#include "import/archive_tensors.h"
#include "import/exported_program.h"
#include "import/hf_checkpoint.h"
#include "import/pt2_archive.h"
#include "import/pt2_zip.h"

namespace tessera::import {

class ProgramWeights {
 public:
  // One weight: the program input it is, its state_dict name, its dtype and shape as the program
  // records them, and where it comes from.
  struct Weight {
    int input = 0;
    std::string name;
    ops::TensorMeta meta;
    std::string checkpoint_name;  // the checkpoint's tensor; "" where the archive gives it
  };

  // The archive at `archive_path` read (its program, the tensors it stores) and, with
  // `checkpoint_dir` not empty, that checkpoint opened and matched to the program
  // (MatchCheckpoint's errors). The archive's errors as ReadArchiveModel, ParseExportedProgram
  // and ListArchiveTensors give them; INVALID_ARGUMENT naming a weight neither stores.
  static absl::StatusOr<ProgramWeights> Open(const std::string& archive_path,
                                             const std::string& checkpoint_dir = "");

  const ArchiveModel& model() const { return model_; }
  const ExportedProgram& program() const { return program_; }
  const std::vector<Weight>& weights() const { return weights_; }
  // "checkpoint", "checkpoint (tied: NAME)" or "archive".
  std::string SourceOf(const Weight& weight) const;
  // The weight's value, checked against its meta (INVALID_ARGUMENT naming it).
  absl::StatusOr<HostTensor> Read(const Weight& weight) const;

 private:
  std::string archive_path_;
  std::unique_ptr<Pt2Zip> zip_;
  ArchiveModel model_;
  ExportedProgram program_;
  std::vector<ArchiveTensor> stored_;
  std::optional<HfCheckpoint> checkpoint_;
  std::vector<Weight> weights_;
};

}  // namespace tessera::import

#endif  // TESSERA_IMPORT_PROGRAM_WEIGHTS_H_
