#include "tessera/session.h"

#include <algorithm>
#include <cstdint>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/channel_ready.h"
#include "client/session_impl.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/grpc_status.h"
#include "proto/tls_files.h"

namespace tessera::client {

absl::StatusOr<std::shared_ptr<Session>> Session::Connect(const std::string& address,
                                                          SessionOptions options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  // A restarted coordinator is reached again within a second or two, not after gRPC's default
  // backoff of up to two minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  const TlsFiles tls{options.tls_cert_file, options.tls_key_file, options.tls_ca_file};
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentialsFor(tls);
  if (!credentials.ok()) return credentials.status();
  std::vector<std::pair<std::string, std::string>> metadata;
  if (!options.token.empty()) metadata.emplace_back("authorization", "Bearer " + options.token);
  std::shared_ptr<grpc::Channel> channel =
      CreateChannelWithMetadata(address, *credentials, args, std::move(metadata));
  if (absl::Status s = internal::AwaitConnected(*channel, address, tls.enabled(),
                                                absl::Now() + options.timeout, options.timeout);
      !s.ok()) {
    return s;
  }
  absl::BitGen gen;
  if (options.client_id.empty()) {
    options.client_id = absl::StrFormat("c-%016x", absl::Uniform<uint64_t>(gen));
  }
  // Names of the tensors this session's ops make on the op stream: o<48 random bits>-<n>.
  std::string tensor_prefix = absl::StrFormat("o%012x-", absl::Uniform<uint64_t>(gen) >> 16);
  std::shared_ptr<Session> session(new Session(std::make_unique<internal::SessionImpl>(
      address, channel, std::move(options), std::move(tensor_prefix))));
  internal::SessionImpl& impl = *session->impl_;
  impl.credentials = *credentials;
  if (impl.options.keep_alive) {
    grpc::ClientContext context;
    impl.Prepare(&context);
    v1::KeepAliveReply reply;
    if (grpc::Status s = impl.dtensors->KeepAlive(&context, {}, &reply); !s.ok()) {
      return FromGrpcStatus(s);
    }
    const absl::Duration period =
        std::max(absl::Milliseconds(reply.grace_ms()) / 4, absl::Milliseconds(20));
    impl.keeper = std::thread([&impl, period] {
      while (!impl.stop.WaitForNotificationWithTimeout(period)) {
        grpc::ClientContext context;
        impl.Prepare(&context, period);
        v1::KeepAliveReply ignored;
        impl.dtensors->KeepAlive(&context, {},
                                 &ignored);  // a missed renewal is retried next period
      }
    });
  }
  return session;
}

Session::Session(std::unique_ptr<internal::SessionImpl> impl) : impl_(std::move(impl)) {}

Session::~Session() {
  impl_->stop.Notify();
  if (impl_->keeper.joinable()) impl_->keeper.join();
}

const std::string& Session::address() const { return impl_->address; }

const std::string& Session::client_id() const { return impl_->options.client_id; }

internal::SessionImpl& internal_impl(Session& session) { return *session.impl_; }

void internal::SessionImpl::Prepare(grpc::ClientContext* context, absl::Duration timeout) const {
  const absl::Duration deadline = timeout > absl::ZeroDuration() ? timeout : options.timeout;
  context->set_deadline(DeadlineAfter(deadline));
  context->AddMetadata("tessera-client", options.client_id);
  // A call made while the coordinator is unreachable (restarting) waits, within its deadline, for
  // the channel to reconnect instead of failing at once. Nothing is sent twice: a call already sent
  // when the coordinator died still fails with UNAVAILABLE. Long-lived streams (the op stream,
  // whose opening a handle's destructor may wait on) fail at once instead, as before.
  context->set_wait_for_ready(deadline <= options.timeout);
}

}  // namespace tessera::client
