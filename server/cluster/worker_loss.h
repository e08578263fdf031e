#ifndef TESSERA_SERVER_CLUSTER_WORKER_LOSS_H_
#define TESSERA_SERVER_CLUSTER_WORKER_LOSS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/sharding/dtensor_spec.h"

namespace tessera {

// What a tensor laid out as `spec` over workers `ranks` (by mesh position) lost with the workers
// for which `gone` is not OK (it says why, naming the worker: UNAVAILABLE "worker N at ADDR ..."):
// OK if every worker is there; DATA_LOSS naming the tensor, the block and the worker if a block
// was held only by gone workers (a Partial placement's blocks are each needed); otherwise the
// first gone worker's UNAVAILABLE (every block survives elsewhere, but the mesh cannot run).
absl::Status TensorLoss(const std::string& tensor, const DTensorSpec& spec,
                        const std::vector<int64_t>& ranks,
                        const std::function<absl::Status(int64_t position)>& gone);

// The state of the worker at one mesh position for a tensor, as TensorLoss' second form takes it:
// OK where it is there; else why not, and whether its blocks are gone with it (restarted empty, or
// unreachable) or only out of reach for now (silent: missed heartbeats, but it may resume with
// everything it held).
struct WorkerAbsence {
  absl::Status why;
  bool blocks_lost = true;
};

// TensorLoss where silent workers keep their blocks: DATA_LOSS only for a block no worker holds
// but lost ones; UNAVAILABLE (the first absent worker's reason) while every block is held by a
// worker that is there or silent.
absl::Status TensorLoss(const std::string& tensor, const DTensorSpec& spec,
                        const std::vector<int64_t>& ranks,
                        const std::function<WorkerAbsence(int64_t position)>& absent);

// `message` without the workers' internal tensor names: "dt/NAME" becomes "NAME" and a read's
// temporary "dt/.read/N" becomes "a temporary copy".
std::string WithoutInternalNames(absl::string_view message);

}  // namespace tessera

#endif  // TESSERA_SERVER_CLUSTER_WORKER_LOSS_H_
