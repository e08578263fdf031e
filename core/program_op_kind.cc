// The names of a module program's step kinds (core/module_program.h).

#include "core/module_program.h"

namespace tessera {

absl::string_view ProgramOpKindName(ProgramOpKind kind) {
  switch (kind) {
    case ProgramOpKind::kLinear:
      return "linear";
    case ProgramOpKind::kEmbedding:
      return "embedding";
    case ProgramOpKind::kLayerNorm:
      return "layer_norm";
    case ProgramOpKind::kRmsNorm:
      return "rms_norm";
    case ProgramOpKind::kActivation:
      return "activation";
    case ProgramOpKind::kAttention:
      return "attention";
    case ProgramOpKind::kAdd:
      return "add";
    case ProgramOpKind::kAllReduce:
      return "all_reduce";
    case ProgramOpKind::kAllGather:
      return "all_gather";
    case ProgramOpKind::kReduceScatter:
      return "reduce_scatter";
    case ProgramOpKind::kChunk:
      return "chunk";
    case ProgramOpKind::kAllToAll:
      return "all_to_all";
    case ProgramOpKind::kLinearBackward:
      return "linear_backward";
    case ProgramOpKind::kEmbeddingBackward:
      return "embedding_backward";
    case ProgramOpKind::kLayerNormBackward:
      return "layer_norm_backward";
    case ProgramOpKind::kRmsNormBackward:
      return "rms_norm_backward";
    case ProgramOpKind::kActivationBackward:
      return "activation_backward";
    case ProgramOpKind::kAttentionBackward:
      return "attention_backward";
    case ProgramOpKind::kAccumulate:
      return "accumulate";
    case ProgramOpKind::kScale:
      return "scale";
    case ProgramOpKind::kGradAllReduce:
      return "grad_all_reduce";
  }
  return "invalid";
}

}  // namespace tessera
