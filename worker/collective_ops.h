#ifndef TESSERA_WORKER_COLLECTIVE_OPS_H_
#define TESSERA_WORKER_COLLECTIVE_OPS_H_

#include <optional>

#include "absl/status/statusor.h"
#include "core/sharding/placement.h"
#include "kernels/device_tensor.h"
#include "tessera/v1/worker.pb.h"
#include "worker/collective_outputs.h"
#include "worker/comm/communicator.h"

namespace tessera {

// What a collective leaves on this rank: its output tensor, or nothing (a reduce's or gather's
// non-root, the sender of a send/recv, a rank outside the pair).
using CollectiveResult = std::optional<kernels::DeviceTensor>;

// Runs the collective op of `c` (not BARRIER) on `group` with this rank's input `in`, taking its
// buffers from `outputs` (in the memory space of `in` and of the group's buffers). INVALID_ARGUMENT
// for an op or reduce op that is not one, or a scalar input to an op that splits along dim 0; the
// communicator's error if the collective fails.
absl::StatusOr<CollectiveResult> RunCollectiveOp(const v1::RunCollective& c,
                                                 comm::Communicator& group,
                                                 const kernels::DeviceTensor& in,
                                                 CollectiveOutputs& outputs);

// The collectives, one each, as torch.distributed runs them on a process group. `root` and `peer`
// are group ranks; uneven dim-0 splits are padded to the chunk size on the wire
// (core/sharding/padding.h). Those that split along dim 0 (gather, scatter, all_to_all) need an
// input of rank >= 1.

// root's `in` on every rank.
absl::StatusOr<CollectiveResult> RunBroadcast(comm::Communicator& group,
                                              const kernels::DeviceTensor& in, int root,
                                              CollectiveOutputs& outputs);
// The element-wise reduction of every rank's `in`: on every rank, or on `root` only if given.
absl::StatusOr<CollectiveResult> RunReduce(comm::Communicator& group,
                                           const kernels::DeviceTensor& in, ReduceOp op,
                                           std::optional<int> root, CollectiveOutputs& outputs);
// Every rank's `in` concatenated along dim 0: on every rank, or on `root` only if given.
absl::StatusOr<CollectiveResult> RunGather(comm::Communicator& group,
                                           const kernels::DeviceTensor& in, std::optional<int> root,
                                           CollectiveOutputs& outputs);
// root's `in` split along dim 0 by the torch.chunk rule; this rank's piece.
absl::StatusOr<CollectiveResult> RunScatter(comm::Communicator& group,
                                            const kernels::DeviceTensor& in, int root,
                                            CollectiveOutputs& outputs);
// The reduction of every rank's `in`, split along dim 0 by the torch.chunk rule; this rank's piece.
absl::StatusOr<CollectiveResult> RunReduceScatter(comm::Communicator& group,
                                                  const kernels::DeviceTensor& in, ReduceOp op,
                                                  CollectiveOutputs& outputs);
// Piece j (along dim 0, torch.chunk rule) of rank i's `in` goes to rank j; each rank's received
// pieces concatenated in rank order.
absl::StatusOr<CollectiveResult> RunAllToAll(comm::Communicator& group,
                                             const kernels::DeviceTensor& in,
                                             CollectiveOutputs& outputs);
// `root`'s `in` to `peer`.
absl::StatusOr<CollectiveResult> RunSendRecv(comm::Communicator& group,
                                             const kernels::DeviceTensor& in, int root, int peer,
                                             CollectiveOutputs& outputs);

}  // namespace tessera

#endif  // TESSERA_WORKER_COLLECTIVE_OPS_H_
