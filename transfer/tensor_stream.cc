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

TensorByteCount::TensorByteCount(std::string what, absl::StatusCode mismatch, DType dtype,
                                 Shape shape)
    : what_(std::move(what)),
      mismatch_(mismatch),
      dtype_(dtype),
      shape_(std::move(shape)),
      expected_(static_cast<size_t>(NumElements(shape_)) * DTypeSize(dtype_)) {}

absl::Status TensorByteCount::Add(size_t n) {
  if (n > expected_ - received_) {
    return absl::Status(mismatch_,
                        absl::StrCat(what_, " sent more than the ", expected_, " bytes of ",
                                     DTypeName(dtype_), ShapeToString(shape_)));
  }
  received_ += n;
  return absl::OkStatus();
}

absl::Status TensorByteCount::CheckComplete() const {
  if (received_ == expected_) return absl::OkStatus();
  return absl::Status(mismatch_,
                      absl::StrCat(what_, " ended after ", received_, " of the ", expected_,
                                   " bytes of ", DTypeName(dtype_), ShapeToString(shape_)));
}

absl::Status TensorAssembler::Start(DType dtype, const Shape& shape) {
  tensor_ = HostTensor::Uninitialized(dtype, shape);
  count_.reset();
  if (tensor_.ok()) count_.emplace(what_, mismatch_, dtype, shape);
  return tensor_.status();
}

absl::Status TensorAssembler::Append(absl::string_view piece) {
  if (!tensor_.ok()) return tensor_.status();
  const size_t at = count_->received();
  RETURN_IF_ERROR(count_->Add(piece.size()));
  if (!piece.empty()) std::memcpy(tensor_->data() + at, piece.data(), piece.size());
  return absl::OkStatus();
}

absl::StatusOr<HostTensor> TensorAssembler::Finish() && {
  if (!tensor_.ok()) return absl::Status(mismatch_, absl::StrCat(what_, " sent no tensor"));
  RETURN_IF_ERROR(count_->CheckComplete());
  return std::move(tensor_);
}

absl::Status WorkerError(int64_t worker_id, absl::string_view address, const grpc::Status& status) {
  return WithContext(absl::StrCat("worker ", worker_id, " at ", address), FromGrpcStatus(status));
}

}  // namespace tessera
