#include "worker/comm/gloo_communicator.h"

#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/status_context.h"
#include "core/status_macros.h"
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
#include "gloo/transport/pair.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "worker/comm/gloo_status.h"

namespace tessera::comm {
namespace {

// AllReduce uses Gloo's new-style gloo::allreduce: BCUBE (recursive halving/doubling generalised
// to any group size, log(size) rounds) up to kBcubeMaxBytes, RING (bandwidth-optimal, pipelined
// 1 MiB segments) above. The old-style classes (AllreduceRingChunked, AllreduceHalvingDoubling)
// are slower at large sizes and win nowhere by a margin; they would also register pair buffers per
// call, limit counts to int, need a typed ReductionFunction per (op, dtype), and time out per step
// with a timeout fixed at connection time.
// Figures: bench/RESULTS.md, "Gloo allreduce algorithms and the Gloo communicator".
constexpr int64_t kBcubeMaxBytes = int64_t{1} << 20;

// ReduceScatter is an all-to-all (each rank sends and receives (size-1)/size of its input once, in
// one round, half the traffic of an all-reduce) and a local reduction in rank order, which also
// makes the result deterministic. Against an all-reduce of the same bytes: that section too.

// Scratch buffers up to this size are kept for the next call: fresh pages cost a page fault each,
// which made a 64 MiB ReduceScatter take 2-3x as long on this machine's VM.
constexpr int64_t kKeptScratchBytes = int64_t{64} << 20;

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

int64_t Bytes(int64_t count, DType dtype) { return count * static_cast<int64_t>(DTypeSize(dtype)); }

void* Mutable(const void* p) { return const_cast<void*>(p); }

// Gloo writes to its sockets with writev, which raises SIGPIPE when the peer has closed the
// connection (a killed peer, or one that gave up on a collective first), and SIGPIPE's default
// action ends the process without a word. So, once per process and only while SIGPIPE still has its
// default action (a handler or disposition the embedding program chose is left alone), SIGPIPE is
// ignored: the write then fails with EPIPE and the communicator reports the broken connection.
void IgnoreBrokenPipesUnlessHandled() {
  static const bool once = [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL &&
        (current.sa_flags & SA_SIGINFO) == 0) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      sigemptyset(&ignore.sa_mask);
      sigaction(SIGPIPE, &ignore, nullptr);
    }
    return true;
  }();
  (void)once;
}

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
  IgnoreBrokenPipesUnlessHandled();
  gloo::transport::tcp::attr attr;
  if (options.interface.empty()) {
    RETURN_IF_ERROR(CheckResolvable(options.hostname));
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
    return WithContext(absl::StrFormat("Gloo communicator '%s': rank %d of %d could not connect",
                                       prefix, rank, size),
                       connected);
  }
  return std::unique_ptr<GlooCommunicator>(
      new GlooCommunicator(std::move(context), options.timeout));
}

GlooCommunicator::GlooCommunicator(std::shared_ptr<TimedGlooContext> context,
                                   absl::Duration timeout)
    : Communicator(context->rank, context->size, timeout), context_(std::move(context)) {}

GlooCommunicator::~GlooCommunicator() = default;

void GlooCommunicator::Disconnect() {
  for (int peer = 0; peer < context_->size; ++peer) {
    if (peer == context_->rank) continue;
    try {
      if (std::unique_ptr<gloo::transport::Pair>& pair = context_->getPair(peer); pair != nullptr) {
        pair->close();
      }
    } catch (const std::exception&) {
      // A pair that cannot be closed is already gone.
    }
  }
}

std::byte* GlooCommunicator::Scratch(int64_t bytes, std::unique_ptr<std::byte[]>& oversized) {
  if (bytes > kKeptScratchBytes) {
    oversized = std::make_unique_for_overwrite<std::byte[]>(static_cast<size_t>(bytes));
    return oversized.get();
  }
  if (bytes > scratch_bytes_) {
    scratch_ = std::make_unique_for_overwrite<std::byte[]>(static_cast<size_t>(bytes));
    scratch_bytes_ = bytes;
  }
  return scratch_.get();
}

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

absl::Status GlooCommunicator::DoAllReduce(void* data, int64_t count, DType dtype, ReduceOp op,
                                           absl::Time deadline) {
  if (size() == 1) return absl::OkStatus();
  absl::Status status = CallGloo(deadline, [&] {
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
  if (status.ok() && op == ReduceOp::kAvg) DivideInPlace(dtype, data, count, size());
  return status;
}

absl::Status GlooCommunicator::DoReduce(void* data, int64_t count, DType dtype, ReduceOp op,
                                        int root, absl::Time deadline) {
  if (size() == 1) return absl::OkStatus();
  // Gloo's ring writes partial results into the output on every rank: off the root that output
  // is scratch, so the caller's data stays unchanged.
  std::unique_ptr<std::byte[]> oversized;
  std::byte* scratch = rank() != root ? Scratch(Bytes(count, dtype), oversized) : nullptr;
  absl::Status status = CallGloo(deadline, [&] {
    gloo::ReduceOptions opts(context_);
    WithElementType(dtype, [&](auto t) {
      using T = decltype(t);
      if (rank() != root) {
        opts.setInput(static_cast<T*>(data), static_cast<size_t>(count));
        opts.setOutput(reinterpret_cast<T*>(scratch), static_cast<size_t>(count));
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
  std::unique_ptr<std::byte[]> oversized;
  std::byte* scratch = Scratch(size() * block, oversized);
  // Block r of every rank goes to rank r, which reduces the blocks in rank order.
  RETURN_IF_ERROR(DoAllToAll(send, scratch, count, dtype, deadline));
  std::memcpy(recv, scratch, static_cast<size_t>(block));
  for (int r = 1; r < size(); ++r) ReduceInto(op, dtype, recv, scratch + r * block, count);
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
