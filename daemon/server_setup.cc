#include "daemon/server_setup.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"
#include "grpcpp/resource_quota.h"

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

void ConfigureServer(grpc::ServerBuilder& builder, int max_threads) {
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  grpc::ResourceQuota quota("tessera-server");
  quota.SetMaxThreads(max_threads);
  builder.SetResourceQuota(quota);
}

std::string CannotListenMessage(absl::string_view listen) {
  return absl::StrCat("cannot listen on ", listen,
                      ": the port is in use by another process, or the host is not an address of "
                      "this machine");
}

}  // namespace tessera::daemon
