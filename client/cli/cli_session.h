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
// lease (what it makes stays until removed), connected within 10 s; ops on the op stream, or with
// `op_stream` false one unary RunOp each (answered with the coordinator's own plan).
absl::StatusOr<std::shared_ptr<client::Session>> ConnectClient(const ClusterFlags& f,
                                                               bool op_stream = true);

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_CLI_CLI_SESSION_H_
