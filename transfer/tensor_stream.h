#ifndef TESSERA_TRANSFER_TENSOR_STREAM_H_
#define TESSERA_TRANSFER_TENSOR_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/host_tensor.h"
#include "core/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/sync_stream.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"

namespace tessera {

// The one chunked-stream path that tensor bytes take between client, coordinator and worker:
// the chunk size, the deadlines, the send and receive loops, and the error that names a worker.

// Bytes per message of every tensor stream (client, coordinator and worker alike); the workers'
// chunks and the coordinator's windows line up, so a window passes through without a copy.
inline constexpr size_t kChunkBytes = 1 << 20;
// The longest a tensor stream may take end to end.
inline constexpr absl::Duration kTransferTimeout = absl::Minutes(10);

// The deadline of a stream served under `context`: the caller's, but at most kTransferTimeout.
absl::Time TransferDeadline(const grpc::ServerContext& context);

// A host tensor's bytes, as the streams carry them.
inline absl::string_view AsBytes(const HostTensor& tensor) {
  return {reinterpret_cast<const char*>(tensor.data()), tensor.nbytes()};
}

// Calls `chunk` with the windows [offset, offset + size) that `total` bytes go in, in order: each
// of `max_bytes` (> 0) bytes but the last, at least one (one empty window for no bytes). False as
// soon as a call returns false (the other side ended the stream).
bool ForEachChunk(size_t total, absl::FunctionRef<bool(size_t offset, size_t size)> chunk,
                  size_t max_bytes = kChunkBytes);

// Calls `write` with `bytes` in order, in the windows of ForEachChunk: pieces of at most
// `max_bytes`, at least one (one empty piece for no bytes). False as soon as a write returns false.
bool WriteChunks(absl::string_view bytes, absl::FunctionRef<bool(absl::string_view)> write,
                 size_t max_bytes = kChunkBytes);

// Sends bytes that come in pieces (the runs of a block, say) as the chunks WriteChunks makes of all
// of them together: kChunkBytes each but the last, one empty chunk for no bytes. Not thread-safe.
class ChunkWriter {
 public:
  // `write` sends one chunk, whose bytes it may keep; false when the other side ended the stream.
  explicit ChunkWriter(std::function<bool(std::string)> write) : write_(std::move(write)) {}

  // The next bytes, sending each chunk they fill; false once a write returned false (nothing more
  // is sent then).
  bool Append(absl::string_view bytes);
  // Sends the last chunk (the bytes left, or the one empty chunk where nothing was sent), once,
  // after the last Append; false once a write returned false.
  bool Finish();

 private:
  void Send();

  const std::function<bool(std::string)> write_;
  std::string buffer_;
  bool sent_ = false;
  bool open_ = true;
};

// Counts a tensor's bytes as they arrive in pieces, for a receiver that puts them where it will
// (TensorAssembler into a host tensor, a worker into its device's memory): neither more nor fewer
// than its dtype and shape give are accepted.
class TensorByteCount {
 public:
  // `what` names the stream in errors ("upload of 'x'"); `mismatch` is the code of a wrong byte
  // count: INVALID_ARGUMENT where a caller sent it, DATA_LOSS where a server did.
  TensorByteCount(std::string what, absl::StatusCode mismatch, DType dtype, Shape shape);

  size_t received() const { return received_; }
  size_t expected() const { return expected_; }
  // Counts `n` more bytes; `mismatch`, nothing counted, past the tensor's size.
  absl::Status Add(size_t n);
  // `mismatch` if bytes are missing.
  absl::Status CheckComplete() const;

 private:
  const std::string what_;
  const absl::StatusCode mismatch_;
  const DType dtype_;
  const Shape shape_;
  const size_t expected_;
  size_t received_ = 0;
};

// Receives a tensor's bytes in pieces into one buffer: the dtype and shape come first, and
// neither more nor fewer bytes than they give are accepted. Not thread-safe.
class TensorAssembler {
 public:
  // `what` and `mismatch` as TensorByteCount's.
  TensorAssembler(std::string what, absl::StatusCode mismatch)
      : what_(std::move(what)), mismatch_(mismatch) {}

  // Starts the tensor (once, before any Append).
  absl::Status Start(DType dtype, const Shape& shape);
  bool started() const { return tensor_.ok(); }
  size_t received() const { return count_.has_value() ? count_->received() : 0; }
  size_t expected() const { return count_.has_value() ? count_->expected() : 0; }
  // The next bytes; `mismatch` past the tensor's size.
  absl::Status Append(absl::string_view piece);
  // The whole tensor; `mismatch` if bytes are missing or nothing started it.
  absl::StatusOr<HostTensor> Finish() &&;

 private:
  const std::string what_;
  const absl::StatusCode mismatch_;
  absl::StatusOr<HostTensor> tensor_ = absl::InternalError("no tensor started");
  std::optional<TensorByteCount> count_;  // once tensor_ is
};

// Reads a server stream of messages that carry a tensor (`dtype` and `shape` on the first,
// `data` on each, as TensorData and TensorChunk do) into a host tensor, calling `progress` with
// (bytes so far, bytes in all) after each; the call's own error if it failed. Cancels the call
// under `context` when it stops reading early.
template <typename Message>
absl::StatusOr<HostTensor> ReadTensorStream(
    grpc::ClientContext& context, grpc::ClientReaderInterface<Message>& reader,
    const std::string& what, const std::function<void(int64_t, int64_t)>& progress = nullptr);

template <typename Message>
absl::StatusOr<HostTensor> ReadTensorStream(grpc::ClientContext& context,
                                            grpc::ClientReaderInterface<Message>& reader,
                                            const std::string& what,
                                            const std::function<void(int64_t, int64_t)>& progress) {
  TensorAssembler tensor(what, absl::StatusCode::kDataLoss);
  Message message;
  absl::Status status;
  while (status.ok() && reader.Read(&message)) {
    if (!tensor.started()) {
      absl::StatusOr<DType> dtype = FromProto(message.dtype());
      absl::StatusOr<Shape> shape = FromProto(message.shape());
      status = !dtype.ok()   ? dtype.status()
               : !shape.ok() ? shape.status()
                             : tensor.Start(*dtype, *shape);
    }
    if (status.ok()) status = tensor.Append(message.data());
    if (status.ok() && progress) {
      progress(static_cast<int64_t>(tensor.received()), static_cast<int64_t>(tensor.expected()));
    }
  }
  if (!status.ok()) {
    context.TryCancel();  // nothing more is read
    return status;
  }
  RETURN_IF_ERROR(FromGrpcStatus(reader.Finish()));
  return std::move(tensor).Finish();
}

// `status` from a call to a worker, naming it: "worker 3 at host:port: <message>".
absl::Status WorkerError(int64_t worker_id, absl::string_view address, const grpc::Status& status);

}  // namespace tessera

#endif  // TESSERA_TRANSFER_TENSOR_STREAM_H_
