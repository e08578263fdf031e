#ifndef TESSERA_CLIENT_CLI_CLUSTER_SELFCHECK_H_
#define TESSERA_CLIENT_CLI_CLUSTER_SELFCHECK_H_

#include <ostream>

#include "absl/status/status.h"
#include "tessera/session.h"

namespace tessera {

// A real workload against a running cluster: on a 1-D mesh of every worker and a 2-D mesh, uploads
// per-rank tensors, runs all_reduce, all_gather, reduce_scatter, broadcast and all_to_all through
// the service, downloads the results and compares each with a single-process reference. Prints
// what it did and how long it took; fails on the first mismatch.
// `device` is the workers' device type ("cpu" or "cuda").
absl::Status RunClusterSelfcheck(client::Session& session, int workers, const std::string& device,
                                 std::ostream& out);

}  // namespace tessera

#endif  // TESSERA_CLIENT_CLI_CLUSTER_SELFCHECK_H_
