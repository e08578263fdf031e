#ifndef TESSERA_CLIENT_CLI_MODULE_SELFCHECK_H_
#define TESSERA_CLIENT_CLI_MODULE_SELFCHECK_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace tessera {

// Tensor parallelism as a service on a running cluster of at least 4 workers: a transformer block
// is written as a spec file with its weights in a safetensors file (in `workdir`), loaded onto a
// 4-worker mesh, parallelized by a Megatron plan file, run forward, published and called through
// the KServe v2 inference endpoint, and trained one SGD step, on workers of `device` ("cpu" or
// "cuda"); every output, and every parameter after the step, compared with the same model computed
// in one process (reference/).
absl::Status RunModuleSelfcheck(const std::string& address, const std::string& workdir,
                                const std::string& device, std::ostream& out);

// A model brought from PyTorch, on a running cluster of at least 4 workers: what
// `tessera up --selfcheck --selfcheck-model` names.
struct ImportSelfcheck {
  std::string archive;  // a torch.export archive (.pt2)
  std::string tp_plan;  // a Hugging Face tp_plan file; empty: none
  std::string weights;  // a Hugging Face checkpoint directory; empty: the archive's weights
  // A safetensors file of the program's user inputs by name, and optionally "logits" (the model's
  // own output for them, as transformers computed it).
  std::string inputs;
};

// The archive loaded onto a 4-worker mesh of `device` as `tessera module load FILE.pt2` loads it
// (laid out by the tp_plan), run forward on the inputs, its first output compared with the same
// program run in one process (import/simulated_run.h) and with the file's logits where it has them.
absl::Status RunImportSelfcheck(const std::string& address, const ImportSelfcheck& model,
                                const std::string& device, std::ostream& out);

}  // namespace tessera

#endif  // TESSERA_CLIENT_CLI_MODULE_SELFCHECK_H_
