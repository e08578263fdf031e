#ifndef TESSERA_CLIENT_CLI_CLI_SESSION_H_
#define TESSERA_CLIENT_CLI_CLI_SESSION_H_

#include <memory>

#include "absl/status/statusor.h"
#include "client/cli/cli_args.h"
#include "tessera/session.h"

namespace tessera::cli {

// Session options carrying `f`'s TLS files and token.
client::SessionOptions SecureSessionOptions(const ClusterFlags& f);

// The session of a command that makes or uses tensors and modules: client `f.client`, holding no
// lease (what it makes stays until removed), connected within 10 s.
absl::StatusOr<std::shared_ptr<client::Session>> ConnectClient(const ClusterFlags& f);

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_CLI_CLI_SESSION_H_
