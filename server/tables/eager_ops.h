#ifndef TESSERA_SERVER_TABLES_EAGER_OPS_H_
#define TESSERA_SERVER_TABLES_EAGER_OPS_H_

#include <memory>
#include <string>
#include <vector>

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
  // Posts one planned call on `inputs` (the call's, in order) writing a new tensor named
  // `output` (a fresh name if empty), hidden for a decomposition's intermediate; the reply's
  // redistributions name each input by `labels` (its name if empty).
  absl::StatusOr<std::shared_ptr<DTensorEntry>> Post(
      const std::string& client, const ops::PlannedCall& planned,
      const std::vector<std::shared_ptr<DTensorEntry>>& inputs, const std::string& output,
      bool hidden, v1::OpReply* reply, const std::vector<std::string>& labels);
  // Runs an op that decomposes: its meta checks the call, then each node of its graph is planned
  // (sharding propagation through the graph) and posted, its intermediates freed after.
  absl::Status RunGraph(const std::string& client, const ops::OpDef& op,
                        const std::vector<ops::NamedValue>& args,
                        const std::vector<std::shared_ptr<DTensorEntry>>& given,
                        const std::vector<DTensorSpec>& given_specs, const std::string& output,
                        v1::OpReply* reply);

  DTensorTable* const tensors_;
  ops::ShardingCache cache_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TABLES_EAGER_OPS_H_
