#include "client/cli/cli_session.h"

namespace tessera::cli {

client::SessionOptions SecureSessionOptions(const ClusterFlags& f) {
  client::SessionOptions options;
  options.tls_ca_file = f.tls_ca;
  options.tls_cert_file = f.tls_cert;
  options.tls_key_file = f.tls_key;
  options.token = f.token;
  return options;
}

absl::StatusOr<std::shared_ptr<client::Session>> ConnectClient(const ClusterFlags& f,
                                                               bool op_stream) {
  client::SessionOptions options = SecureSessionOptions(f);
  options.client_id = f.client;
  options.keep_alive = false;
  options.op_stream = op_stream;
  options.timeout = absl::Seconds(10);
  return client::Session::Connect(f.coordinator, options);
}

}  // namespace tessera::cli
