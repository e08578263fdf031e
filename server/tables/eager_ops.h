#ifndef TESSERA_SERVER_TABLES_EAGER_OPS_H_
#define TESSERA_SERVER_TABLES_EAGER_OPS_H_

#include <string>

#include "absl/status/status.h"
#include "core/ops/op_propagation.h"
#include "server/tables/dtensor_table.h"
#include "tessera/v1/tensor.pb.h"

namespace tessera {

// Eager ops of the registry (core/ops) on DTensors: each call is bound, planned by sharding
// propagation behind a cache, and posted to the mesh's workers as one RunOp with the plans that
// bring its inputs to the chosen strategy. Thread-safe.
class EagerOps {
 public:
  explicit EagerOps(DTensorTable* tensors) : tensors_(tensors) {}

  // Runs `request` (OpCall.name set) for `client`: UNIMPLEMENTED naming an op outside the
  // registry or a layout no strategy takes; INVALID_ARGUMENT naming the argument and value; every
  // existing tensor intact on error. `reply`, when given, gets the output and the inputs'
  // redistributions.
  absl::Status Run(const std::string& client, const v1::OpRequest& request, v1::OpReply* reply);

  // The registry, for ListOps: every op whose name contains `filter`.
  static v1::ListOpsReply List(const std::string& filter);

  const ops::ShardingCache& cache() const { return cache_; }

 private:
  DTensorTable* const tensors_;
  ops::ShardingCache cache_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TABLES_EAGER_OPS_H_
