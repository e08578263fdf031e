#ifndef TESSERA_CORE_SHARDING_SIMULATED_MESH_H_
#define TESSERA_CORE_SHARDING_SIMULATED_MESH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/host_tensor.h"
#include "core/sharding/dtensor_spec.h"
#include "core/sharding/redistribute_planner.h"

namespace tessera {

// An in-process reference mesh: every rank's shard is a HostTensor, and each collective moves
// padded blocks between ranks exactly as the wire would, counting the bytes. It is the oracle that
// the planner and the real cluster are checked against. Shards are indexed by the rank's row-major
// position in the mesh. Not thread-safe.
class SimulatedMesh {
 public:
  explicit SimulatedMesh(const DeviceMesh& mesh);

  // distribute_tensor: each rank's shard of `full` under `spec`. A Partial mesh dim holds the value
  // at coordinate 0 and the reduce op's identity elsewhere (sum, product), or the value everywhere
  // (avg, max, min), so that reducing gives back `full`.
  absl::StatusOr<std::vector<HostTensor>> Distribute(const HostTensor& full,
                                                     const DTensorSpec& spec) const;

  // Runs every step of `plan` on `shards` (laid out as `src`) and returns the shards of the result.
  absl::StatusOr<std::vector<HostTensor>> Redistribute(const DTensorSpec& src,
                                                       const RedistributePlan& plan,
                                                       std::vector<HostTensor> shards);

  // full_tensor(): redistributes to all-Replicate and returns rank 0's copy.
  absl::StatusOr<HostTensor> FullTensor(const DTensorSpec& spec, std::vector<HostTensor> shards);

  // Bytes each rank sent to / received from other ranks so far, by position.
  const std::vector<int64_t>& bytes_sent() const { return sent_; }
  const std::vector<int64_t>& bytes_received() const { return received_; }
  void ResetTraffic();

 private:
  // The positions of one process group's ranks, by coordinate along its mesh dim.
  using Group = std::vector<int64_t>;

  // Runs one step on every process group of its mesh dim and checks the shapes it leaves.
  absl::Status RunStep(const DTensorSpec& spec, const RedistributeStep& step,
                       std::vector<HostTensor>& shards);
  // Runs one step on one group; `after` is the spec the step makes.
  absl::Status RunOnGroup(const DTensorSpec& after, const RedistributeStep& step,
                          const Group& group, std::vector<HostTensor>& shards);

  // The steps, one per collective, each on one group's shards. Uneven shards are padded to the
  // chunk size on the wire (core/sharding/padding.h), and the bytes each rank moves are counted.
  absl::Status LocalChunk(const Group& group, int d, std::vector<HostTensor>& shards);
  void LocalPartition(const Group& group, ReduceOp op, std::vector<HostTensor>& shards);
  // Shard(d) → Partial(sum): each shard written into zeros of `after_shape` at its chunk's offset.
  absl::Status LocalEmbed(const Group& group, int d, const Shape& after_shape,
                          std::vector<HostTensor>& shards);
  absl::Status AllGather(const Group& group, int d, const Shape& after_shape,
                         std::vector<HostTensor>& shards);
  absl::Status AllReduce(const Group& group, ReduceOp op, std::vector<HostTensor>& shards);
  absl::Status ReduceScatter(const Group& group, int d, ReduceOp op,
                             std::vector<HostTensor>& shards);
  absl::Status AllToAll(const Group& group, int i, int j, int64_t ni,
                        std::vector<HostTensor>& shards);
  void Transfer(int64_t from, int64_t to, int64_t bytes);

  DeviceMesh mesh_;
  std::vector<int64_t> sent_;
  std::vector<int64_t> received_;
};

// Writes every shard into a full tensor at its offset; the spec must have no Partial placement.
absl::StatusOr<HostTensor> AssembleShards(const DTensorSpec& spec,
                                          const std::vector<HostTensor>& shards);

}  // namespace tessera

#endif  // TESSERA_CORE_SHARDING_SIMULATED_MESH_H_
