#include "transfer/tensor_stream.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_context.h"
#include "proto/grpc_status.h"

namespace tessera {

absl::Time TransferDeadline(const grpc::ServerContext& context) {
  return std::min(absl::FromChrono(context.deadline()), absl::Now() + kTransferTimeout);
}

bool ForEachChunk(size_t total, absl::FunctionRef<bool(size_t offset, size_t size)> chunk,
                  size_t max_bytes) {
  size_t offset = 0;
  do {
    const size_t n = std::min(max_bytes, total - offset);
    if (!chunk(offset, n)) return false;
    offset += n;
  } while (offset < total);
  return true;
}

bool WriteChunks(absl::string_view bytes, absl::FunctionRef<bool(absl::string_view)> write,
                 size_t max_bytes) {
  return ForEachChunk(
      bytes.size(), [&](size_t offset, size_t n) { return write(bytes.substr(offset, n)); },
      max_bytes);
}

bool ChunkWriter::Append(absl::string_view bytes) {
  while (open_ && !bytes.empty()) {
    if (buffer_.empty()) buffer_.reserve(kChunkBytes);
    const size_t take = std::min(bytes.size(), kChunkBytes - buffer_.size());
    buffer_.append(bytes.data(), take);
    bytes.remove_prefix(take);
    if (buffer_.size() == kChunkBytes) Send();
  }
  return open_;
}

bool ChunkWriter::Finish() {
  if (open_ && (!buffer_.empty() || !sent_)) Send();
  return open_;
}

void ChunkWriter::Send() {
  sent_ = true;
  open_ = write_(std::exchange(buffer_, std::string()));
}

absl::Status TensorAssembler::Start(DType dtype, const Shape& shape) {
  tensor_ = HostTensor::Uninitialized(dtype, shape);
  offset_ = 0;
  return tensor_.status();
}

absl::Status TensorAssembler::Append(absl::string_view piece) {
  if (!tensor_.ok()) return tensor_.status();
  if (offset_ + piece.size() > tensor_->nbytes()) {
    return absl::Status(mismatch_,
                        absl::StrCat(what_, " sent more than the ", tensor_->nbytes(), " bytes of ",
                                     DTypeName(tensor_->dtype()), ShapeToString(tensor_->shape())));
  }
  if (!piece.empty()) std::memcpy(tensor_->data() + offset_, piece.data(), piece.size());
  offset_ += piece.size();
  return absl::OkStatus();
}

absl::StatusOr<HostTensor> TensorAssembler::Finish() && {
  if (!tensor_.ok()) return absl::Status(mismatch_, absl::StrCat(what_, " sent no tensor"));
  if (offset_ != tensor_->nbytes()) {
    return absl::Status(
        mismatch_,
        absl::StrCat(what_, " ended after ", offset_, " of the ", tensor_->nbytes(), " bytes of ",
                     DTypeName(tensor_->dtype()), ShapeToString(tensor_->shape())));
  }
  return std::move(tensor_);
}

absl::Status WorkerError(int64_t worker_id, absl::string_view address, const grpc::Status& status) {
  return WithContext(absl::StrCat("worker ", worker_id, " at ", address), FromGrpcStatus(status));
}

}  // namespace tessera
