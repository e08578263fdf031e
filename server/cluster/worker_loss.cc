#include "server/cluster/worker_loss.h"

#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera {

absl::Status TensorLoss(const std::string& tensor, const DTensorSpec& spec,
                        const std::vector<int64_t>& ranks,
                        const std::function<absl::Status(int64_t position)>& gone) {
  return TensorLoss(tensor, spec, ranks, [&](int64_t p) {
    return WorkerAbsence{gone(p), /*blocks_lost=*/true};
  });
}

absl::Status TensorLoss(const std::string& tensor, const DTensorSpec& spec,
                        const std::vector<int64_t>& ranks,
                        const std::function<WorkerAbsence(int64_t position)>& absent) {
  const int64_t size = static_cast<int64_t>(ranks.size());
  std::vector<absl::Status> why(static_cast<size_t>(size));  // not OK: its blocks are lost
  absl::Status first_gone;
  for (int64_t p = 0; p < size; ++p) {
    WorkerAbsence a = absent(p);
    if (!a.why.ok() && first_gone.ok()) first_gone = a.why;
    if (a.blocks_lost) why[p] = std::move(a.why);
  }
  if (first_gone.ok()) return first_gone;
  const bool partial = HasPartial(spec);
  auto block = [&](int64_t p) {
    return LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(p));
  };
  for (int64_t p = 0; p < size; ++p) {
    if (why[p].ok()) continue;
    const LocalShard lost = block(p);
    bool elsewhere = false;
    for (int64_t q = 0; q < size && !partial && !elsewhere; ++q) {
      elsewhere = why[q].ok() && block(q) == lost;
    }
    if (elsewhere) continue;
    return absl::DataLossError(absl::StrCat(
        "tensor '", tensor, "' lost its ", partial ? "partial " : "", "block of shape [",
        absl::StrJoin(lost.shape, ", "), "] at offset [", absl::StrJoin(lost.offset, ", "),
        "], which only worker ", ranks[p], " held: ", why[p].message()));
  }
  return first_gone;
}

std::string WithoutInternalNames(absl::string_view message) {
  static const std::regex kTemporary(R"(dt/\.read/[0-9]+)");
  static const std::regex kTensor(R"(dt/)");
  std::string text(message);
  text = std::regex_replace(text, kTemporary, "a temporary copy");
  return std::regex_replace(text, kTensor, "");
}

}  // namespace tessera
