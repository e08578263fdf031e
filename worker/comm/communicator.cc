#include "worker/comm/communicator.h"

#include <cstddef>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "metrics/registry.h"

namespace tessera::comm {
namespace {

// The argument checks every backend shares; each returns INVALID_ARGUMENT naming the value.
class ArgumentChecker {
 public:
  ArgumentChecker(absl::string_view op, int rank, int size) : op_(op), rank_(rank), size_(size) {}

  // A valid dtype and a count in [0, max], where `blocks` elements of that count must fit in a
  // buffer whose byte size is an int64_t.
  absl::Status Count(int64_t count, DType dtype, int64_t blocks) const {
    if (!IsValidDType(static_cast<int>(dtype))) {
      return Error(absl::StrCat("dtype ", static_cast<int>(dtype), " is not a valid dtype"));
    }
    if (count < 0) return Error(absl::StrCat("count ", count, " is negative"));
    const int64_t limit =
        std::numeric_limits<int64_t>::max() / (blocks * static_cast<int64_t>(DTypeSize(dtype)));
    if (count > limit) {
      return Error(absl::StrCat("count ", count, " x ", blocks, " blocks of ", DTypeName(dtype),
                                " overflows the byte size of a buffer"));
    }
    return absl::OkStatus();
  }

  absl::Status Op(ReduceOp op) const {
    const int v = static_cast<int>(op);
    if (v < static_cast<int>(ReduceOp::kSum) || v > static_cast<int>(ReduceOp::kProduct)) {
      return Error(absl::StrCat("reduce op ", v, " is not a valid reduce op"));
    }
    return absl::OkStatus();
  }

  // A rank of the group; `what` is "root" or "peer". A peer must not be this rank.
  absl::Status Rank(absl::string_view what, int value, bool allow_self) const {
    if (value < 0 || value >= size_) {
      return Error(
          absl::StrFormat("%s %d is out of range for a group of %d ranks", what, value, size_));
    }
    if (!allow_self && value == rank_) {
      return Error(
          absl::StrFormat("%s %d is this rank; a rank cannot send to or receive from "
                          "itself",
                          what, value));
    }
    return absl::OkStatus();
  }

  // `ptr` is non-null when it must hold `count` > 0 elements.
  absl::Status Buffer(absl::string_view what, const void* ptr, int64_t count) const {
    if (ptr == nullptr && count > 0) {
      return Error(absl::StrFormat("%s buffer is null but must hold %d elements", what, count));
    }
    return absl::OkStatus();
  }

  // The byte ranges [a, a + a_bytes) and [b, b + b_bytes) do not overlap.
  absl::Status Disjoint(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) const {
    const auto pa = reinterpret_cast<uintptr_t>(a);
    const auto pb = reinterpret_cast<uintptr_t>(b);
    if (a_bytes > 0 && b_bytes > 0 && pa < pb + static_cast<uintptr_t>(b_bytes) &&
        pb < pa + static_cast<uintptr_t>(a_bytes)) {
      return Error("send and recv buffers overlap; they must be disjoint");
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Error(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(op_, " on rank ", rank_, ": ", message));
  }

  absl::string_view op_;
  int rank_;
  int size_;
};

int64_t Bytes(int64_t count, DType dtype) { return count * static_cast<int64_t>(DTypeSize(dtype)); }

}  // namespace

Communicator::Communicator(int rank, int size, absl::Duration timeout)
    : rank_(rank), size_(size), timeout_(timeout) {}

absl::Duration Communicator::timeout() const {
  absl::MutexLock lock(&mu_);
  return timeout_;
}

absl::Status Communicator::set_timeout(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration() || timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "communicator timeout ", absl::FormatDuration(timeout), " must be positive and finite"));
  }
  absl::MutexLock lock(&mu_);
  timeout_ = timeout;
  return absl::OkStatus();
}

absl::Status Communicator::Health() const {
  absl::MutexLock lock(&mu_);
  if (broken_.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrFormat("%s communicator (rank %d of %d) is broken by an earlier failure: %s",
                      backend(), rank_, size_, broken_.ToString()));
}

absl::Status Communicator::MarkBroken(absl::Status cause) {
  absl::MutexLock lock(&mu_);
  if (broken_.ok()) broken_ = cause;
  return cause;
}

absl::Status Communicator::Begin(absl::string_view op, const Timeout& timeout,
                                 absl::Time* deadline) const {
  RETURN_IF_ERROR(Health());
  const absl::Duration t = timeout.value_or(this->timeout());
  if (t <= absl::ZeroDuration() || t == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(op, " on rank ", rank_, ": timeout ",
                                                   absl::FormatDuration(t),
                                                   " must be positive and finite"));
  }
  *deadline = absl::Now() + t;
  return absl::OkStatus();
}

absl::Status Communicator::Finish(absl::string_view op, absl::Status status) {
  if (status.ok() || absl::IsInvalidArgument(status)) return status;
  absl::Status cause(status.code(), absl::StrFormat("%s on rank %d of %d (%s): %s", op, rank_,
                                                    size_, backend(), status.message()));
  Break(cause);
  return cause;
}

void Communicator::Break(absl::Status cause) {
  const bool was_healthy = Health().ok();
  MarkBroken(std::move(cause)).IgnoreError();  // the first cause is kept
  if (was_healthy) Disconnect();
}

absl::Status Communicator::Timed(absl::string_view op, int64_t bytes,
                                 absl::FunctionRef<absl::Status()> run) {
  const absl::Time start = absl::Now();
  absl::Status status = Finish(op, run());
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  metrics::Registry& registry = metrics::DefaultRegistry();
  static metrics::Family<metrics::Counter>& calls = registry.AddCounter(
      "tessera_collectives_total", "collective calls by kind, backend and status code",
      {"kind", "backend", "code"});
  static metrics::Family<metrics::Counter>& sent = registry.AddCounter(
      "tessera_collective_bytes_total",
      "bytes of the count elements each collective call names (this rank's block), by kind",
      {"kind", "backend"});
  static metrics::Family<metrics::Histogram>& latency = registry.AddHistogram(
      "tessera_collective_seconds", "time of each collective call on this rank, by kind",
      {"kind", "backend"}, metrics::LatencyBounds());
  const std::string kind(op);
  const std::string backend_name(backend());
  calls.With({kind, backend_name, absl::StatusCodeToString(status.code())}).Increment();
  sent.With({kind, backend_name}).Increment(static_cast<double>(bytes));
  latency.With({kind, backend_name}).Observe(seconds);
  return status;
}

absl::Status Communicator::Broadcast(void* data, int64_t count, DType dtype, int root,
                                     Timeout timeout) {
  const ArgumentChecker check("Broadcast", rank_, size_);
  absl::Time deadline;
  RETURN_IF_ERROR(Begin("Broadcast", timeout, &deadline));
  RETURN_IF_ERROR(check.Count(count, dtype, 1));
  RETURN_IF_ERROR(check.Rank("root", root, true));
  RETURN_IF_ERROR(check.Buffer("data", data, count));
  if (count == 0) return absl::OkStatus();
  return Timed("Broadcast", Bytes(count, dtype),
               [&] { return DoBroadcast(data, count, dtype, root, deadline); });
}

absl::Status Communicator::AllReduce(void* data, int64_t count, DType dtype, ReduceOp op,
                                     Timeout timeout) {
  const ArgumentChecker check("AllReduce", rank_, size_);
  absl::Time deadline;
  RETURN_IF_ERROR(Begin("AllReduce", timeout, &deadline));
  RETURN_IF_ERROR(check.Count(count, dtype, 1));
  RETURN_IF_ERROR(check.Op(op));
  RETURN_IF_ERROR(check.Buffer("data", data, count));
  if (count == 0) return absl::OkStatus();
  return Timed("AllReduce", Bytes(count, dtype),
               [&] { return DoAllReduce(data, count, dtype, op, deadline); });
}

absl::Status Communicator::Reduce(void* data, int64_t count, DType dtype, ReduceOp op, int root,
                                  Timeout timeout) {
  const ArgumentChecker check("Reduce", rank_, size_);
  absl::Time deadline;
  RETURN_IF_ERROR(Begin("Reduce", timeout, &deadline));
  RETURN_IF_ERROR(check.Count(count, dtype, 1));
  RETURN_IF_ERROR(check.Op(op));
  RETURN_IF_ERROR(check.Rank("root", root, true));
  RETURN_IF_ERROR(check.Buffer("data", data, count));
  if (count == 0) return absl::OkStatus();
  return Timed("Reduce", Bytes(count, dtype),
               [&] { return DoReduce(data, count, dtype, op, root, deadline); });
}

absl::Status Communicator::AllGather(const void* send, void* recv, int64_t count, DType dtype,
                                     Timeout timeout) {
  const ArgumentChecker check("AllGather", rank_, size_);
  absl::Time deadline;
  RETURN_IF_ERROR(Begin("AllGather", timeout, &deadline));
  RETURN_IF_ERROR(check.Count(count, dtype, size_));
  RETURN_IF_ERROR(check.Buffer("send", send, count));
  RETURN_IF_ERROR(check.Buffer("recv", recv, size_ * count));
  if (count == 0) return absl::OkStatus();
  const int64_t block = Bytes(count, dtype);
  const bool in_place = send == static_cast<const std::byte*>(recv) + rank_ * block;
  if (!in_place) RETURN_IF_ERROR(check.Disjoint(send, block, recv, size_ * block));
  return Timed("AllGather", Bytes(count, dtype),
               [&] { return DoAllGather(send, recv, count, dtype, deadline); });
}

absl::Status Communicator::Gather(const void* send, void* recv, int64_t count, DType dtype,
                                  int root, Timeout timeout) {
  const ArgumentChecker check("Gather", rank_, size_);
  absl::Time deadline;
  RETURN_IF_ERROR(Begin("Gather", timeout, &deadline));
  RETURN_IF_ERROR(check.Count(count, dtype, size_));
  RETURN_IF_ERROR(check.Rank("root", root, true));
  const int64_t recv_count = rank_ == root ? size_ * count : 0;
  RETURN_IF_ERROR(check.Buffer("send", send, count));
  RETURN_IF_ERROR(check.Buffer("recv", recv, recv_count));
  RETURN_IF_ERROR(check.Disjoint(send, Bytes(count, dtype), recv, Bytes(recv_count, dtype)));
  if (count == 0) return absl::OkStatus();
  return Timed("Gather", Bytes(count, dtype),
               [&] { return DoGather(send, recv, count, dtype, root, deadline); });
}

absl::Status Communicator::Scatter(const void* send, void* recv, int64_t count, DType dtype,
                                   int root, Timeout timeout) {
  const ArgumentChecker check("Scatter", rank_, size_);
  absl::Time deadline;
  RETURN_IF_ERROR(Begin("Scatter", timeout, &deadline));
  RETURN_IF_ERROR(check.Count(count, dtype, size_));
  RETURN_IF_ERROR(check.Rank("root", root, true));
  const int64_t send_count = rank_ == root ? size_ * count : 0;
  RETURN_IF_ERROR(check.Buffer("send", send, send_count));
  RETURN_IF_ERROR(check.Buffer("recv", recv, count));
  RETURN_IF_ERROR(check.Disjoint(send, Bytes(send_count, dtype), recv, Bytes(count, dtype)));
  if (count == 0) return absl::OkStatus();
  return Timed("Scatter", Bytes(count, dtype),
               [&] { return DoScatter(send, recv, count, dtype, root, deadline); });
}

absl::Status Communicator::ReduceScatter(const void* send, void* recv, int64_t count, DType dtype,
                                         ReduceOp op, Timeout timeout) {
  const ArgumentChecker check("ReduceScatter", rank_, size_);
  absl::Time deadline;
  RETURN_IF_ERROR(Begin("ReduceScatter", timeout, &deadline));
  RETURN_IF_ERROR(check.Count(count, dtype, size_));
  RETURN_IF_ERROR(check.Op(op));
  RETURN_IF_ERROR(check.Buffer("send", send, size_ * count));
  RETURN_IF_ERROR(check.Buffer("recv", recv, count));
  RETURN_IF_ERROR(check.Disjoint(send, Bytes(size_ * count, dtype), recv, Bytes(count, dtype)));
  if (count == 0) return absl::OkStatus();
  return Timed("ReduceScatter", Bytes(count, dtype),
               [&] { return DoReduceScatter(send, recv, count, dtype, op, deadline); });
}

absl::Status Communicator::AllToAll(const void* send, void* recv, int64_t count, DType dtype,
                                    Timeout timeout) {
  const ArgumentChecker check("AllToAll", rank_, size_);
  absl::Time deadline;
  RETURN_IF_ERROR(Begin("AllToAll", timeout, &deadline));
  RETURN_IF_ERROR(check.Count(count, dtype, size_));
  RETURN_IF_ERROR(check.Buffer("send", send, size_ * count));
  RETURN_IF_ERROR(check.Buffer("recv", recv, size_ * count));
  RETURN_IF_ERROR(
      check.Disjoint(send, Bytes(size_ * count, dtype), recv, Bytes(size_ * count, dtype)));
  if (count == 0) return absl::OkStatus();
  return Timed("AllToAll", Bytes(count, dtype),
               [&] { return DoAllToAll(send, recv, count, dtype, deadline); });
}

absl::Status Communicator::Send(const void* data, int64_t count, DType dtype, int peer,
                                uint32_t tag, Timeout timeout) {
  const ArgumentChecker check("Send", rank_, size_);
  absl::Time deadline;
  RETURN_IF_ERROR(Begin("Send", timeout, &deadline));
  RETURN_IF_ERROR(check.Count(count, dtype, 1));
  RETURN_IF_ERROR(check.Rank("peer", peer, false));
  RETURN_IF_ERROR(check.Buffer("data", data, count));
  if (count == 0) return absl::OkStatus();
  return Timed("Send", Bytes(count, dtype),
               [&] { return DoSend(data, count, dtype, peer, tag, deadline); });
}

absl::Status Communicator::Recv(void* data, int64_t count, DType dtype, int peer, uint32_t tag,
                                Timeout timeout) {
  const ArgumentChecker check("Recv", rank_, size_);
  absl::Time deadline;
  RETURN_IF_ERROR(Begin("Recv", timeout, &deadline));
  RETURN_IF_ERROR(check.Count(count, dtype, 1));
  RETURN_IF_ERROR(check.Rank("peer", peer, false));
  RETURN_IF_ERROR(check.Buffer("data", data, count));
  if (count == 0) return absl::OkStatus();
  return Timed("Recv", Bytes(count, dtype),
               [&] { return DoRecv(data, count, dtype, peer, tag, deadline); });
}

absl::Status Communicator::Barrier(Timeout timeout) {
  absl::Time deadline;
  RETURN_IF_ERROR(Begin("Barrier", timeout, &deadline));
  return Timed("Barrier", 0, [&] { return DoBarrier(deadline); });
}

#undef RETURN_IF_ERROR

}  // namespace tessera::comm
