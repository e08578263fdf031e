#include "daemon_support/server_setup.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/support/server_interceptor.h"
#include "metrics/grpc_metrics.h"
#include "metrics/registry.h"
#include "proto/grpc_status.h"

namespace tessera::daemon {

absl::StatusOr<int> ListenPort(absl::string_view listen) {
  const size_t colon = listen.rfind(':');
  const absl::string_view port =
      colon == absl::string_view::npos ? absl::string_view() : listen.substr(colon + 1);
  int value = -1;
  if (port.empty() || port.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(port, &value) || value > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("listen address '", listen,
                                                   "' needs a port in 0..65535 after its last ':' ",
                                                   "(0 picks a free one), not '", port, "'"));
  }
  return value;
}

void ConfigureServer(grpc::ServerBuilder& builder, int max_threads, int64_t memory_bytes) {
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  grpc::ResourceQuota quota("tessera-server");
  quota.SetMaxThreads(max_threads);
  if (memory_bytes > 0) quota.Resize(static_cast<size_t>(memory_bytes));
  builder.SetResourceQuota(quota);
}

void AddStreamLimitFlags(CLI::App& app, StreamLimitFlags* flags) {
  app.add_option("--max_streams", flags->max_streams,
                 "most streams of callers served at once (uploads, downloads, op and collective "
                 "streams, module loads); one past them is refused with RESOURCE_EXHAUSTED")
      ->check(CLI::Range(1, 65536));
  app.add_option("--max_streams_per_peer", flags->max_per_peer,
                 "most streams one peer (a client named by its token, else a host) holds at once")
      ->check(CLI::Range(1, 65536));
}

absl::Status CheckStreamLimits(const StreamLimitFlags& flags, int max_rpc_threads) {
  if (flags.max_per_peer > flags.max_streams) {
    return absl::InvalidArgumentError(absl::StrCat("--max_streams_per_peer ", flags.max_per_peer,
                                                   " is more than --max_streams ",
                                                   flags.max_streams));
  }
  if (flags.max_streams > max_rpc_threads - kReservedRpcThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_streams ", flags.max_streams, " leaves fewer than ", kReservedRpcThreads,
        " of --max_rpc_threads ", max_rpc_threads,
        " for unary calls and the daemons' own traffic; lower it or raise --max_rpc_threads"));
  }
  return absl::OkStatus();
}

namespace {

// Bounds the status message a handler answers, so that a message echoing a huge name reaches its
// caller cut rather than failing the call at the transport.
class BoundedStatusInterceptor final : public grpc::experimental::Interceptor {
 public:
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      if (status.error_message().size() > kMaxStatusMessageBytes) {
        methods->ModifySendStatus(grpc::Status(status.error_code(),
                                               BoundedStatusMessage(status.error_message()),
                                               status.error_details()));
      }
    }
    methods->Proceed();
  }
};

class BoundedStatusFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo*) override {
    return new BoundedStatusInterceptor;
  }
};

}  // namespace

void InstallInterceptors(grpc::ServerBuilder& builder, bool metrics) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<BoundedStatusFactory>());
  if (metrics) {
    for (auto& c : metrics::RpcMetricsInterceptors(&metrics::DefaultRegistry())) {
      creators.push_back(std::move(c));
    }
  }
  builder.experimental().SetInterceptorCreators(std::move(creators));
}

std::string CannotListenMessage(absl::string_view listen) {
  return absl::StrCat("cannot listen on ", listen,
                      ": the port is in use by another process, or the host is not an address of "
                      "this machine");
}

}  // namespace tessera::daemon
