#include "import/program_weights.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessera::import {

absl::StatusOr<ProgramWeights> ProgramWeights::Open(const std::string& archive_path,
                                                    const std::string& checkpoint_dir) {
  ProgramWeights w;
  w.archive_path_ = archive_path;
  ASSIGN_OR_RETURN(Pt2Zip zip, Pt2Zip::Open(archive_path));
  w.zip_ = std::make_unique<Pt2Zip>(std::move(zip));
  ASSIGN_OR_RETURN(w.model_, ReadArchiveModel(*w.zip_));
  ASSIGN_OR_RETURN(w.program_, ParseExportedProgram(w.model_.json, archive_path));
  ASSIGN_OR_RETURN(w.stored_, ListArchiveTensors(*w.zip_, w.model_.archive));
  std::vector<std::string> from_checkpoint(w.program_.inputs.size());
  if (!checkpoint_dir.empty()) {
    std::map<std::string, int64_t> entries;
    for (const ArchiveTensor& t : w.stored_) entries[t.name] = t.entry;
    ASSIGN_OR_RETURN(w.checkpoint_, OpenHfCheckpoint(checkpoint_dir));
    ASSIGN_OR_RETURN(const WeightSources matched,
                     MatchCheckpoint(w.program_, *w.checkpoint_, entries));
    from_checkpoint = matched.checkpoint_names;
  }
  std::map<std::string, const ArchiveTensor*> stored;
  for (const ArchiveTensor& t : w.stored_) stored[t.name] = &t;
  for (size_t i = 0; i < w.program_.inputs.size(); ++i) {
    const ProgramInput& in = w.program_.inputs[i];
    if (in.kind == InputKind::kUserInput) continue;
    if (from_checkpoint[i].empty() && !stored.contains(in.target)) {
      return absl::InvalidArgumentError(absl::StrCat(archive_path, " stores no value for ",
                                                     InputKindName(in.kind), " '", in.target, "'"));
    }
    w.weights_.push_back(
        {static_cast<int>(i), in.target, w.program_.value_metas[i], from_checkpoint[i]});
  }
  return w;
}

std::string ProgramWeights::SourceOf(const Weight& weight) const {
  if (weight.checkpoint_name.empty()) return "archive";
  if (weight.checkpoint_name == weight.name) return "checkpoint";
  return absl::StrCat("checkpoint (tied: ", weight.checkpoint_name, ")");
}

absl::StatusOr<HostTensor> ProgramWeights::Read(const Weight& weight) const {
  HostTensor t;
  if (!weight.checkpoint_name.empty()) {
    ASSIGN_OR_RETURN(t, ReadCheckpointTensor(checkpoint_->tensors.at(weight.checkpoint_name)));
  } else {
    const ArchiveTensor* found = nullptr;
    for (const ArchiveTensor& s : stored_) {
      if (s.name == weight.name) found = &s;
    }
    if (found == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(archive_path_, " stores no value for '", weight.name, "'"));
    }
    ASSIGN_OR_RETURN(t, ReadArchiveTensor(*zip_, *found));
  }
  if (t.dtype() != weight.meta.dtype || t.shape() != weight.meta.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", weight.name, "' is stored as ", DTypeName(t.dtype()), ShapeToString(t.shape()),
        "; the program takes ", DTypeName(weight.meta.dtype), ShapeToString(weight.meta.shape)));
  }
  return t;
}

}  // namespace tessera::import
