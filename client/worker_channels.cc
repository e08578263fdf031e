#include "client/worker_channels.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/channel_arguments.h"

namespace tessera::client {

absl::StatusOr<std::shared_ptr<grpc::Channel>> WorkerChannels::Connected(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    absl::Duration reach_timeout) {
  std::shared_ptr<grpc::Channel> channel;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = unreachable_since_.find(address); it != unreachable_since_.end()) {
      if (absl::Now() - it->second < kRetryAfter) {
        return absl::UnavailableError(
            absl::StrCat("worker at ", address, " was unreachable from this client"));
      }
      unreachable_since_.erase(it);
    }
    auto& slot = channels_[address];
    if (slot == nullptr) {
      grpc::ChannelArguments args;
      args.SetMaxSendMessageSize(64 << 20);
      args.SetMaxReceiveMessageSize(64 << 20);
      slot = grpc::CreateCustomChannel(address, credentials, args);
    }
    channel = slot;
  }
  if (channel->WaitForConnected(absl::ToChronoTime(absl::Now() + reach_timeout))) return channel;
  absl::MutexLock lock(&mu_);
  unreachable_since_[address] = absl::Now();
  return absl::UnavailableError(absl::StrCat("cannot reach worker at ", address, " within ",
                                             absl::FormatDuration(reach_timeout)));
}

void WorkerChannels::MarkUnreachable(const std::string& address) {
  absl::MutexLock lock(&mu_);
  unreachable_since_[address] = absl::Now();
}

}  // namespace tessera::client
