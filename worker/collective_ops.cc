#include "worker/collective_ops.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/sharding/chunk.h"
#include "core/sharding/padding.h"
#include "kernels/layout.h"
#include "proto/convert.h"

namespace tessera {
namespace {

// `shape` with `rows` rows (dim 0).
Shape WithRows(const Shape& shape, int64_t rows) { return WithDimSize(shape, 0, rows); }

// `in` as k blocks of c rows, the layout the equal-block collectives send: `in` itself when its
// rows divide evenly, else a zero-padded copy (counted against the budget) held in `padded`.
absl::StatusOr<const std::byte*> RowBlocks(const kernels::DeviceTensor& in, int64_t k,
                                           CollectiveOutputs& outputs,
                                           kernels::DeviceTensor& padded) {
  const Shape block_shape = WithRows(in.shape(), ChunkSize(in.shape()[0], k));
  if (!IsChunkBlocks(in.shape(), 0, k, block_shape)) {
    const int64_t bytes =
        k * NumElements(block_shape) * static_cast<int64_t>(DTypeSize(in.dtype()));
    outputs.Charge(bytes);
  }
  return kernels::ChunkBlocksData(outputs.memory(), in.View(), 0, k, block_shape, padded);
}

// The rows this rank keeps of `received`, a block padded to the chunk size: `received` itself when
// it has no padding, else its first `rows` rows.
absl::StatusOr<kernels::DeviceTensor> WithoutPadding(kernels::MemorySpace& memory,
                                                     kernels::DeviceTensor received, int64_t rows) {
  const Shape shape = WithRows(received.shape(), rows);
  if (received.shape() == shape) return received;
  if (absl::Status s = received.Reshape(BlocksShape(1, received.shape())); !s.ok()) return s;
  return kernels::UnpadFromChunks(memory, std::as_const(received).View(), 0, shape);
}

}  // namespace

absl::StatusOr<CollectiveResult> RunBroadcast(comm::Communicator& group,
                                              const kernels::DeviceTensor& in, int root,
                                              CollectiveOutputs& outputs) {
  absl::StatusOr<kernels::DeviceTensor> out = outputs.Final(in.shape());
  if (!out.ok()) return out.status();
  if (absl::Status s = outputs.memory().Copy(in.View(), out->View()); !s.ok()) return s;
  if (absl::Status s = group.Broadcast(out->data(), out->num_elements(), in.dtype(), root);
      !s.ok()) {
    return s;
  }
  return CollectiveResult(*std::move(out));
}

absl::StatusOr<CollectiveResult> RunReduce(comm::Communicator& group,
                                           const kernels::DeviceTensor& in, ReduceOp op,
                                           std::optional<int> root, CollectiveOutputs& outputs) {
  // A reduce's other ranks write no output: they work in a scratch buffer and leave any tensor of
  // the output's name alone.
  const bool writes = !root.has_value() || group.rank() == *root;
  absl::StatusOr<kernels::DeviceTensor> out =
      writes ? outputs.Final(in.shape()) : outputs.Scratch(in.shape());
  if (!out.ok()) return out.status();
  if (absl::Status s = outputs.memory().Copy(in.View(), out->View()); !s.ok()) return s;
  absl::Status s = root.has_value()
                       ? group.Reduce(out->data(), out->num_elements(), in.dtype(), op, *root)
                       : group.AllReduce(out->data(), out->num_elements(), in.dtype(), op);
  if (!s.ok()) return s;
  if (!writes) return CollectiveResult();
  return CollectiveResult(*std::move(out));
}

absl::StatusOr<CollectiveResult> RunGather(comm::Communicator& group,
                                           const kernels::DeviceTensor& in, std::optional<int> root,
                                           CollectiveOutputs& outputs) {
  const bool writes = !root.has_value() || group.rank() == *root;
  const Shape shape = WithRows(in.shape(), group.size() * in.shape()[0]);
  absl::StatusOr<kernels::DeviceTensor> out =
      writes ? outputs.Final(shape) : outputs.Scratch(shape);
  if (!out.ok()) return out.status();
  absl::Status s = root.has_value()
                       ? group.Gather(in.data(), out->data(), in.num_elements(), in.dtype(), *root)
                       : group.AllGather(in.data(), out->data(), in.num_elements(), in.dtype());
  if (!s.ok()) return s;
  if (!writes) return CollectiveResult();
  return CollectiveResult(*std::move(out));
}

absl::StatusOr<CollectiveResult> RunScatter(comm::Communicator& group,
                                            const kernels::DeviceTensor& in, int root,
                                            CollectiveOutputs& outputs) {
  const int64_t k = group.size();
  const int64_t c = ChunkSize(in.shape()[0], k);
  kernels::DeviceTensor padded;
  absl::StatusOr<const std::byte*> send = RowBlocks(in, k, outputs, padded);
  if (!send.ok()) return send.status();
  absl::StatusOr<kernels::DeviceTensor> recv = outputs.Final(WithRows(in.shape(), c));
  if (!recv.ok()) return recv.status();
  if (absl::Status s = group.Scatter(*send, recv->data(), recv->num_elements(), in.dtype(), root);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<kernels::DeviceTensor> mine = WithoutPadding(
      outputs.memory(), *std::move(recv), ChunkOf(in.shape()[0], k, group.rank()).size);
  if (!mine.ok()) return mine.status();
  return CollectiveResult(*std::move(mine));
}

absl::StatusOr<CollectiveResult> RunReduceScatter(comm::Communicator& group,
                                                  const kernels::DeviceTensor& in, ReduceOp op,
                                                  CollectiveOutputs& outputs) {
  const int64_t k = group.size();
  const int64_t c = ChunkSize(in.shape()[0], k);
  kernels::DeviceTensor padded;
  absl::StatusOr<const std::byte*> send = RowBlocks(in, k, outputs, padded);
  if (!send.ok()) return send.status();
  absl::StatusOr<kernels::DeviceTensor> recv = outputs.Final(WithRows(in.shape(), c));
  if (!recv.ok()) return recv.status();
  if (absl::Status s =
          group.ReduceScatter(*send, recv->data(), recv->num_elements(), in.dtype(), op);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<kernels::DeviceTensor> mine = WithoutPadding(
      outputs.memory(), *std::move(recv), ChunkOf(in.shape()[0], k, group.rank()).size);
  if (!mine.ok()) return mine.status();
  return CollectiveResult(*std::move(mine));
}

absl::StatusOr<CollectiveResult> RunAllToAll(comm::Communicator& group,
                                             const kernels::DeviceTensor& in,
                                             CollectiveOutputs& outputs) {
  const int64_t k = group.size();
  const int64_t n = in.shape()[0];
  const Shape block_shape = WithRows(in.shape(), ChunkSize(n, k));
  kernels::DeviceTensor padded;
  absl::StatusOr<const std::byte*> send = RowBlocks(in, k, outputs, padded);
  if (!send.ok()) return send.status();
  absl::StatusOr<kernels::DeviceTensor> recv =
      outputs.Final(WithRows(in.shape(), k * block_shape[0]));
  if (!recv.ok()) return recv.status();
  if (absl::Status s = group.AllToAll(*send, recv->data(), NumElements(block_shape), in.dtype());
      !s.ok()) {
    return s;
  }
  // Every rank sent its piece `me` of the same n rows: k blocks of ChunkOf(n, k, me) rows, received
  // as blocks of c rows; when the two agree the received buffer is the output.
  const int64_t rows = ChunkOf(n, k, group.rank()).size;
  if (rows == block_shape[0]) return CollectiveResult(*std::move(recv));
  if (absl::Status s = recv->Reshape(BlocksShape(k, block_shape)); !s.ok()) return s;
  absl::StatusOr<kernels::DeviceTensor> out = outputs.Scratch(WithRows(in.shape(), k * rows));
  if (!out.ok()) return out.status();
  if (absl::Status s =
          kernels::UnpadFromChunks(outputs.memory(), std::as_const(*recv).View(), 0, out->View());
      !s.ok()) {
    return s;
  }
  return CollectiveResult(*std::move(out));
}

absl::StatusOr<CollectiveResult> RunSendRecv(comm::Communicator& group,
                                             const kernels::DeviceTensor& in, int root, int peer,
                                             CollectiveOutputs& outputs) {
  if (group.rank() == root) {
    if (absl::Status s = group.Send(in.data(), in.num_elements(), in.dtype(), peer, 0); !s.ok()) {
      return s;
    }
    return CollectiveResult();
  }
  if (group.rank() != peer) return CollectiveResult();
  absl::StatusOr<kernels::DeviceTensor> out = outputs.Scratch(in.shape());
  if (!out.ok()) return out.status();
  if (absl::Status s = group.Recv(out->data(), out->num_elements(), in.dtype(), root, 0); !s.ok()) {
    return s;
  }
  return CollectiveResult(*std::move(out));
}

absl::StatusOr<CollectiveResult> RunCollectiveOp(const v1::RunCollective& c,
                                                 comm::Communicator& group,
                                                 const kernels::DeviceTensor& in,
                                                 CollectiveOutputs& outputs) {
  const bool splits = c.op() == v1::ALL_GATHER_OP || c.op() == v1::GATHER ||
                      c.op() == v1::SCATTER || c.op() == v1::REDUCE_SCATTER_OP ||
                      c.op() == v1::ALL_TO_ALL_OP;
  if (splits && in.rank() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", c.input(), "' is a scalar; this collective works along dim 0"));
  }
  const int root = static_cast<int>(c.root());
  const bool reduces =
      c.op() == v1::ALL_REDUCE_OP || c.op() == v1::REDUCE || c.op() == v1::REDUCE_SCATTER_OP;
  absl::StatusOr<ReduceOp> op = FromProto(c.reduce_op());
  if (reduces && !op.ok()) return op.status();
  switch (c.op()) {
    case v1::BROADCAST:
      return RunBroadcast(group, in, root, outputs);
    case v1::ALL_REDUCE_OP:
      return RunReduce(group, in, *op, std::nullopt, outputs);
    case v1::REDUCE:
      return RunReduce(group, in, *op, root, outputs);
    case v1::ALL_GATHER_OP:
      return RunGather(group, in, std::nullopt, outputs);
    case v1::GATHER:
      return RunGather(group, in, root, outputs);
    case v1::SCATTER:
      return RunScatter(group, in, root, outputs);
    case v1::REDUCE_SCATTER_OP:
      return RunReduceScatter(group, in, *op, outputs);
    case v1::ALL_TO_ALL_OP:
      return RunAllToAll(group, in, outputs);
    case v1::SEND_RECV:
      return RunSendRecv(group, in, root, static_cast<int>(c.peer()), outputs);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("collective op ", c.op(), " is not supported"));
  }
}

}  // namespace tessera
