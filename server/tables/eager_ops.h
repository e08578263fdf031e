#ifndef TESSERA_SERVER_TABLES_EAGER_OPS_H_
#define TESSERA_SERVER_TABLES_EAGER_OPS_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
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

  // Seeds `client`'s random stream: its random ops draw from (seed, offset 0) on.
  void ManualSeed(const std::string& client, uint64_t seed);
  // Drops `client`'s random stream (its lease expired).
  void Forget(const std::string& client);

  // The seed of a stream never seeded: torch's default CPU generator's.
  static constexpr uint64_t kDefaultSeed = 67280421310721;

  // The registry, for ListOps: every op whose name contains `filter`.
  static v1::ListOpsReply List(const std::string& filter);

  const ops::ShardingCache& cache() const { return cache_; }

 private:
  // Posts one planned call on `mesh` and `inputs` (the call's, in order) writing a new tensor for
  // each output, named by `names` (a fresh name where empty; one per output), hidden for a
  // decomposition's intermediate; the reply's redistributions name each input by `labels` (its
  // name if empty). Returns the first output.
  absl::StatusOr<std::shared_ptr<DTensorEntry>> Post(
      const std::string& client, const ops::PlannedCall& planned, const std::shared_ptr<Mesh>& mesh,
      const std::vector<std::shared_ptr<DTensorEntry>>& inputs, std::span<const std::string> names,
      bool hidden, v1::OpReply* reply, const std::vector<std::string>& labels);
  // Runs an op that decomposes: its meta checks the call, then each node of its graph is planned
  // (sharding propagation through the graph) and posted, its intermediates freed after.
  absl::Status RunGraph(const std::string& client, const ops::OpDef& op,
                        const std::vector<ops::NamedValue>& args,
                        const std::vector<std::shared_ptr<DTensorEntry>>& given,
                        const std::vector<DTensorSpec>& given_specs, const std::string& output,
                        v1::OpReply* reply);
  // A client's random stream: the seed and the counter its next random op starts at.
  struct RandomStream {
    uint64_t seed = kDefaultSeed;
    uint64_t offset = 0;
  };
  // The stream position for a call of `client` drawing `elements`, advanced past them.
  RandomStream Draw(const std::string& client, int64_t elements);

  DTensorTable* const tensors_;
  ops::ShardingCache cache_;
  absl::Mutex random_mu_;
  absl::flat_hash_map<std::string, RandomStream> random_ ABSL_GUARDED_BY(random_mu_);
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TABLES_EAGER_OPS_H_
