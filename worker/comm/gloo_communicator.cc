#include "worker/comm/gloo_communicator.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/elementwise_reduce.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/alltoall.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/gather.h"
#include "gloo/reduce.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/rendezvous/store.h"
#include "gloo/scatter.h"
#include "gloo/transport/context.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "worker/comm/gloo_status.h"

namespace tessera::comm {
namespace {

// AllReduce uses Gloo's new-style gloo::allreduce: BCUBE (recursive halving/doubling generalised
// to any group size, log(size) rounds) up to kBcubeMaxBytes, RING (bandwidth-optimal) above.
// Measured with bench/gloo_collectives_bench (ranks as threads over loopback, 2 shared cores,
// median ms; bench/RESULTS.md has the full table):
//
//   ranks  bytes   RingChunked  HalvingDoubling  allreduce RING  allreduce BCUBE
//   2      4 KiB         3.95         3.78            4.01             4.01
//   4      4 KiB        21.96         4.11           12.95             4.22
//   4      1 MiB            -            -           24.5             17.9
//   4      4 MiB            -            -           58.7             60.0
//   2      64 MiB       275.1        564.3           277.8            359.4
//   4      64 MiB       904.8       1284.3           718.6            904.2
//
// The old-style classes (AllreduceRingChunked, AllreduceHalvingDoubling) are no faster and would
// cost more here: they register pair buffers per call, limit counts to int, take a typed
// ReductionFunction pointer per (op, dtype), and time out only per step with the timeout fixed at
// connection time, not per call.
constexpr int64_t kBcubeMaxBytes = int64_t{1} << 20;

// ReduceScatter: up to this many input bytes, an all-to-all (each rank sends and receives
// (size-1)/size of its input once, in one round) followed by a local reduction in rank order;
// above, an all-reduce of a copy of the input, keeping this rank's block. Over loopback Gloo's
// all-to-all sends each block as one message and falls behind the ring's pipelined 1 MiB segments
// once blocks pass ~8 MiB (bench/RESULTS.md):
//
//   ranks  input    all-to-all + reduce   all-reduce (RING)
//   2      16 MiB        18.6                 20.7
//   2      64 MiB       155.0                 73.5
//   4      16 MiB        23.9                 33.5
//   4      64 MiB       275.3                131.7
//
// On a real network, where bytes sent and not memory copies dominate, the all-to-all (half the
// all-reduce's traffic) may win at every size: re-measure there.
constexpr int64_t kReduceScatterAllToAllMaxBytes = int64_t{16} << 20;

// Slots of Send/Recv: a prefix no Gloo collective uses (they use 0x01..0x08 in the top byte).
uint64_t PointToPointSlot(uint32_t tag) { return (uint64_t{0x40} << 56) | (uint64_t{tag} << 8); }

// Gloo's per-wait timeout for what is left of `deadline` (at least 1 ms: 0 means "none" to Gloo).
std::chrono::milliseconds Remaining(absl::Time deadline) {
  return std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now())));
}

// INVALID_ARGUMENT unless `hostname` resolves. Gloo (2022-05) does not check getaddrinfo's error
// codes and then walks an uninitialized list, so a bad name must never reach it.
absl::Status CheckResolvable(const std::string& hostname) {
  if (hostname.empty()) {
    return absl::InvalidArgumentError("Gloo communicator: neither a host name nor an interface");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rv = getaddrinfo(hostname.c_str(), nullptr, &hints, &result);
  if (rv != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Gloo communicator: host '%s' does not resolve: %s", hostname, gai_strerror(rv)));
  }
  freeaddrinfo(result);
  return absl::OkStatus();
}

// Calls f(T{}) with an unsigned integer type of dtype's size: Gloo needs only the element size,
// the arithmetic is done by core's ReduceInto on the real dtype.
template <typename F>
void WithElementType(DType dtype, F&& f) {
  switch (DTypeSize(dtype)) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    default:
      return f(uint64_t{});
  }
}

// Gloo's reduction callback c = a op b for `op` on `dtype`, with core's semantics. Every op is
// commutative, so when c aliases b the other operand is folded into c instead.
gloo::AllreduceOptions::Func ReduceFunction(ReduceOp op, DType dtype) {
  const size_t element_size = DTypeSize(dtype);
  return [op, dtype, element_size](void* c, const void* a, const void* b, size_t n) {
    if (c == b) {
      ReduceInto(op, dtype, c, a, static_cast<int64_t>(n));
      return;
    }
    if (c != a) std::memcpy(c, a, n * element_size);
    ReduceInto(op, dtype, c, b, static_cast<int64_t>(n));
  };
}

// A buffer of `n` bytes whose contents are about to be overwritten.
std::unique_ptr<std::byte[]> Scratch(int64_t n) {
  return std::make_unique_for_overwrite<std::byte[]>(static_cast<size_t>(n));
}

int64_t Bytes(int64_t count, DType dtype) { return count * static_cast<int64_t>(DTypeSize(dtype)); }

void* Mutable(const void* p) { return const_cast<void*>(p); }

}  // namespace

// Gloo's rendezvous context with a wait timeout that can change per call. Gloo's new-style
// algorithms pass their own timeout to some waits (ring) but not to others (BCUBE, whose waits use
// the transport context's timeout), so both are set before every operation.
class TimedGlooContext : public gloo::rendezvous::Context {
 public:
  using gloo::rendezvous::Context::Context;

  void SetWaitTimeout(std::chrono::milliseconds timeout) {
    setTimeout(timeout);
    if (transportContext_ != nullptr) transportContext_->setTimeout(timeout);
  }
};

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    gloo::rendezvous::Store& store, absl::string_view prefix, int rank, int size,
    const GlooCommunicatorOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Gloo communicator: rank %d is not in a group of size %d", rank, size));
  }
  if (prefix.empty()) {
    return absl::InvalidArgumentError("Gloo communicator: the rendezvous prefix is empty");
  }
  if (options.timeout <= absl::ZeroDuration() || options.timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("Gloo communicator: timeout ",
                                                   absl::FormatDuration(options.timeout),
                                                   " must be positive and finite"));
  }
  gloo::transport::tcp::attr attr;
  if (options.interface.empty()) {
    if (absl::Status s = CheckResolvable(options.hostname); !s.ok()) return s;
    attr.hostname = options.hostname;
  } else {
    attr.iface = options.interface;
  }
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Gloo communicator: cannot open a TCP device on %s '%s': %s",
        options.interface.empty() ? "host" : "interface",
        options.interface.empty() ? options.hostname : options.interface, e.what()));
  }
  auto context = std::make_shared<TimedGlooContext>(rank, size);
  context->SetWaitTimeout(std::chrono::milliseconds(absl::ToInt64Milliseconds(options.timeout)));
  const absl::Time deadline = absl::Now() + options.timeout;
  gloo::rendezvous::PrefixStore prefixed{std::string(prefix), store};
  absl::Status connected = CallGloo(deadline, [&] { context->connectFullMesh(prefixed, device); });
  if (!connected.ok()) {
    return absl::Status(
        connected.code(),
        absl::StrFormat("Gloo communicator '%s': rank %d of %d could not connect: %s", prefix, rank,
                        size, connected.message()));
  }
  return std::unique_ptr<GlooCommunicator>(
      new GlooCommunicator(std::move(context), options.timeout));
}

GlooCommunicator::GlooCommunicator(std::shared_ptr<TimedGlooContext> context,
                                   absl::Duration timeout)
    : Communicator(context->rank, context->size, timeout), context_(std::move(context)) {}

GlooCommunicator::~GlooCommunicator() = default;

std::chrono::milliseconds GlooCommunicator::BoundWaits(absl::Time deadline) {
  const std::chrono::milliseconds remaining = Remaining(deadline);
  context_->SetWaitTimeout(remaining);
  return remaining;
}

absl::Status GlooCommunicator::DoBroadcast(void* data, int64_t count, DType dtype, int root,
                                           absl::Time deadline) {
  if (size() == 1) return absl::OkStatus();
  return CallGloo(deadline, [&] {
    gloo::BroadcastOptions opts(context_);
    WithElementType(dtype, [&](auto t) {
      opts.setOutput(static_cast<decltype(t)*>(data), static_cast<size_t>(count));
    });
    opts.setRoot(root);
    opts.setTag(NextTag());
    opts.setTimeout(BoundWaits(deadline));
    gloo::broadcast(opts);
  });
}

absl::Status GlooCommunicator::SumLikeAllReduce(void* data, int64_t count, DType dtype, ReduceOp op,
                                                absl::Time deadline) {
  return CallGloo(deadline, [&] {
    gloo::AllreduceOptions opts(context_);
    opts.setAlgorithm(Bytes(count, dtype) <= kBcubeMaxBytes
                          ? gloo::AllreduceOptions::Algorithm::BCUBE
                          : gloo::AllreduceOptions::Algorithm::RING);
    WithElementType(dtype, [&](auto t) {
      opts.setOutput(static_cast<decltype(t)*>(data), static_cast<size_t>(count));
    });
    opts.setReduceFunction(ReduceFunction(op, dtype));
    opts.setTag(NextTag());
    opts.setTimeout(BoundWaits(deadline));
    gloo::allreduce(opts);
  });
}

absl::Status GlooCommunicator::DoAllReduce(void* data, int64_t count, DType dtype, ReduceOp op,
                                           absl::Time deadline) {
  if (size() == 1) return absl::OkStatus();
  absl::Status status = SumLikeAllReduce(data, count, dtype, op, deadline);
  if (status.ok() && op == ReduceOp::kAvg) DivideInPlace(dtype, data, count, size());
  return status;
}

absl::Status GlooCommunicator::DoReduce(void* data, int64_t count, DType dtype, ReduceOp op,
                                        int root, absl::Time deadline) {
  if (size() == 1) return absl::OkStatus();
  // Gloo's ring writes partial results into the output on every rank: off the root that output
  // is scratch, so the caller's data stays unchanged.
  std::unique_ptr<std::byte[]> scratch;
  if (rank() != root) scratch = Scratch(Bytes(count, dtype));
  absl::Status status = CallGloo(deadline, [&] {
    gloo::ReduceOptions opts(context_);
    WithElementType(dtype, [&](auto t) {
      using T = decltype(t);
      if (rank() != root) {
        opts.setInput(static_cast<T*>(data), static_cast<size_t>(count));
        opts.setOutput(reinterpret_cast<T*>(scratch.get()), static_cast<size_t>(count));
      } else {
        opts.setOutput(static_cast<T*>(data), static_cast<size_t>(count));
      }
    });
    opts.setRoot(root);
    opts.setReduceFunction(ReduceFunction(op, dtype));
    opts.setTag(NextTag());
    opts.setTimeout(BoundWaits(deadline));
    gloo::reduce(opts);
  });
  if (status.ok() && op == ReduceOp::kAvg && rank() == root) {
    DivideInPlace(dtype, data, count, size());
  }
  return status;
}

absl::Status GlooCommunicator::DoAllGather(const void* send, void* recv, int64_t count, DType dtype,
                                           absl::Time deadline) {
  const int64_t block = Bytes(count, dtype);
  auto* own_block = static_cast<std::byte*>(recv) + rank() * block;
  if (size() == 1) {
    if (send != own_block) std::memcpy(recv, send, static_cast<size_t>(block));
    return absl::OkStatus();
  }
  return CallGloo(deadline, [&] {
    gloo::AllgatherOptions opts(context_);
    WithElementType(dtype, [&](auto t) {
      using T = decltype(t);
      // Without an input Gloo runs in place on the output's own block.
      if (send != own_block) opts.setInput(static_cast<T*>(Mutable(send)), count);
      opts.setOutput(static_cast<T*>(recv), static_cast<size_t>(size() * count));
    });
    opts.setTag(NextTag());
    opts.setTimeout(BoundWaits(deadline));
    gloo::allgather(opts);
  });
}

absl::Status GlooCommunicator::DoGather(const void* send, void* recv, int64_t count, DType dtype,
                                        int root, absl::Time deadline) {
  if (size() == 1) {
    std::memcpy(recv, send, static_cast<size_t>(Bytes(count, dtype)));
    return absl::OkStatus();
  }
  return CallGloo(deadline, [&] {
    gloo::GatherOptions opts(context_);
    WithElementType(dtype, [&](auto t) {
      using T = decltype(t);
      opts.setInput(static_cast<T*>(Mutable(send)), static_cast<size_t>(count));
      if (rank() == root)
        opts.setOutput(static_cast<T*>(recv), static_cast<size_t>(size() * count));
    });
    opts.setRoot(root);
    opts.setTag(NextTag());
    opts.setTimeout(BoundWaits(deadline));
    gloo::gather(opts);
  });
}

absl::Status GlooCommunicator::DoScatter(const void* send, void* recv, int64_t count, DType dtype,
                                         int root, absl::Time deadline) {
  if (size() == 1) {
    std::memcpy(recv, send, static_cast<size_t>(Bytes(count, dtype)));
    return absl::OkStatus();
  }
  return CallGloo(deadline, [&] {
    gloo::ScatterOptions opts(context_);
    WithElementType(dtype, [&](auto t) {
      using T = decltype(t);
      if (rank() == root) {
        std::vector<T*> blocks(static_cast<size_t>(size()));
        for (int r = 0; r < size(); ++r) blocks[r] = static_cast<T*>(Mutable(send)) + r * count;
        opts.setInputs(blocks, static_cast<size_t>(count));
      }
      opts.setOutput(static_cast<T*>(recv), static_cast<size_t>(count));
    });
    opts.setRoot(root);
    opts.setTag(NextTag());
    opts.setTimeout(BoundWaits(deadline));
    gloo::scatter(opts);
  });
}

absl::Status GlooCommunicator::DoReduceScatter(const void* send, void* recv, int64_t count,
                                               DType dtype, ReduceOp op, absl::Time deadline) {
  const int64_t block = Bytes(count, dtype);
  if (size() == 1) {
    std::memcpy(recv, send, static_cast<size_t>(block));
    return absl::OkStatus();
  }
  std::unique_ptr<std::byte[]> scratch = Scratch(size() * block);
  if (size() * block <= kReduceScatterAllToAllMaxBytes) {
    // Block r of every rank goes to rank r, which reduces the blocks in rank order.
    absl::Status status = DoAllToAll(send, scratch.get(), count, dtype, deadline);
    if (!status.ok()) return status;
    std::memcpy(recv, scratch.get(), static_cast<size_t>(block));
    for (int r = 1; r < size(); ++r) ReduceInto(op, dtype, recv, scratch.get() + r * block, count);
  } else {
    std::memcpy(scratch.get(), send, static_cast<size_t>(size() * block));
    absl::Status status = SumLikeAllReduce(scratch.get(), size() * count, dtype, op, deadline);
    if (!status.ok()) return status;
    std::memcpy(recv, scratch.get() + rank() * block, static_cast<size_t>(block));
  }
  if (op == ReduceOp::kAvg) DivideInPlace(dtype, recv, count, size());
  return absl::OkStatus();
}

absl::Status GlooCommunicator::DoAllToAll(const void* send, void* recv, int64_t count, DType dtype,
                                          absl::Time deadline) {
  if (size() == 1) {
    std::memcpy(recv, send, static_cast<size_t>(Bytes(count, dtype)));
    return absl::OkStatus();
  }
  return CallGloo(deadline, [&] {
    gloo::AlltoallOptions opts(context_);
    WithElementType(dtype, [&](auto t) {
      using T = decltype(t);
      opts.setInput(static_cast<T*>(Mutable(send)), static_cast<size_t>(size() * count));
      opts.setOutput(static_cast<T*>(recv), static_cast<size_t>(size() * count));
    });
    opts.setTag(NextTag());
    opts.setTimeout(BoundWaits(deadline));
    gloo::alltoall(opts);
  });
}

absl::Status GlooCommunicator::DoSend(const void* data, int64_t count, DType dtype, int peer,
                                      uint32_t tag, absl::Time deadline) {
  bool completed = false;
  absl::Status status = CallGloo(deadline, [&] {
    auto buffer =
        context_->createUnboundBuffer(Mutable(data), static_cast<size_t>(Bytes(count, dtype)));
    buffer->send(peer, PointToPointSlot(tag));
    completed = buffer->waitSend(BoundWaits(deadline));
  });
  if (status.ok() && !completed) {
    return absl::UnavailableError(absl::StrFormat("send to rank %d was aborted", peer));
  }
  return status;
}

absl::Status GlooCommunicator::DoRecv(void* data, int64_t count, DType dtype, int peer,
                                      uint32_t tag, absl::Time deadline) {
  bool completed = false;
  absl::Status status = CallGloo(deadline, [&] {
    auto buffer = context_->createUnboundBuffer(data, static_cast<size_t>(Bytes(count, dtype)));
    buffer->recv(peer, PointToPointSlot(tag));
    completed = buffer->waitRecv(BoundWaits(deadline));
  });
  if (status.ok() && !completed) {
    return absl::UnavailableError(absl::StrFormat("receive from rank %d was aborted", peer));
  }
  return status;
}

absl::Status GlooCommunicator::DoBarrier(absl::Time deadline) {
  if (size() == 1) return absl::OkStatus();
  return CallGloo(deadline, [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTag(NextTag());
    opts.setTimeout(BoundWaits(deadline));
    gloo::barrier(opts);
  });
}

}  // namespace tessera::comm
