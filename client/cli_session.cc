#include "client/cli_session.h"

namespace tessera::cli {

absl::StatusOr<std::shared_ptr<client::Session>> ConnectClient(const ClusterFlags& f) {
  client::SessionOptions options;
  options.client_id = f.client;
  options.keep_alive = false;
  options.timeout = absl::Seconds(10);
  return client::Session::Connect(f.coordinator, options);
}

}  // namespace tessera::cli
