#include "proto/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace tessera {

std::string BoundedStatusMessage(std::string message) {
  if (message.size() <= kMaxStatusMessageBytes) return message;
  const std::string mark = absl::StrCat("... (cut: ", message.size(), " bytes in all)");
  size_t keep = kMaxStatusMessageBytes - mark.size();
  // Never in the middle of a UTF-8 sequence: back to the start of the character.
  while (keep > 0 && (static_cast<unsigned char>(message[keep]) & 0xC0) == 0x80) --keep;
  message.resize(keep);
  return message + mark;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      BoundedStatusMessage(std::string(status.message())));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace tessera
