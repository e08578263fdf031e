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

}  // namespace tessera

#endif  // TESSERA_CLIENT_CLI_MODULE_SELFCHECK_H_
