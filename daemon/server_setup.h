#ifndef TESSERA_DAEMON_SERVER_SETUP_H_
#define TESSERA_DAEMON_SERVER_SETUP_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_builder.h"

namespace tessera::daemon {

// Default bound on the threads a daemon's gRPC server runs calls on (--max_rpc_threads).
inline constexpr int kDefaultMaxRpcThreads = 1024;

// The port of a "host:port" listen address: an integer in 0..65535 (0 picks a free one);
// INVALID_ARGUMENT naming the address otherwise.
absl::StatusOr<int> ListenPort(absl::string_view listen);

// The settings both daemons' servers share: a port another process listens on is an error rather
// than shared with it (gRPC sets SO_REUSEPORT by default), and at most `max_threads` threads serve
// calls (past them a call is refused with RESOURCE_EXHAUSTED rather than given a new thread).
void ConfigureServer(grpc::ServerBuilder& builder, int max_threads);

// What to say when a server could not listen on `listen`.
std::string CannotListenMessage(absl::string_view listen);

}  // namespace tessera::daemon

#endif  // TESSERA_DAEMON_SERVER_SETUP_H_
