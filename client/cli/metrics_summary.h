#ifndef TESSERA_CLIENT_CLI_METRICS_SUMMARY_H_
#define TESSERA_CLIENT_CLI_METRICS_SUMMARY_H_

#include <ostream>

#include "absl/status/status.h"
#include "client/local_cluster/local_cluster.h"

namespace tessera {

// Scrapes every daemon of `cluster` (started with metrics) over HTTP /metrics and prints what
// they counted: RPCs the coordinator answered and how many failed, commands and collectives the
// workers ran, the bytes those collectives moved, and the shards still held.
absl::Status PrintMetricsSummary(const LocalCluster& cluster, std::ostream& out);

}  // namespace tessera

#endif  // TESSERA_CLIENT_CLI_METRICS_SUMMARY_H_
