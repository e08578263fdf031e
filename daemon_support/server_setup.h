#ifndef TESSERA_DAEMON_SUPPORT_SERVER_SETUP_H_
#define TESSERA_DAEMON_SUPPORT_SERVER_SETUP_H_

#include <string>

#include "CLI/CLI.hpp"
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
// With `memory_bytes` > 0, gRPC's memory for connections and messages being received is bounded
// by it: past it gRPC cancels calls (RESOURCE_EXHAUSTED) and closes idle connections rather than
// buffer more.
void ConfigureServer(grpc::ServerBuilder& builder, int max_threads, int64_t memory_bytes = 0);

// How many streams of callers (uploads, downloads, op and collective streams, module loads) a
// daemon serves at once, in all and per peer (StreamLimits): --max_streams and
// --max_streams_per_peer. The threads left (--max_rpc_threads less --max_streams, at least
// kReservedRpcThreads) serve unary calls and the daemons' own traffic, which no caller's streams
// can take.
struct StreamLimitFlags {
  int max_streams = 768;
  int max_per_peer = 128;
};
inline constexpr int kReservedRpcThreads = 64;
void AddStreamLimitFlags(CLI::App& app, StreamLimitFlags* flags);
// INVALID_ARGUMENT naming the flags unless max_per_peer <= max_streams <= max_rpc_threads -
// kReservedRpcThreads.
absl::Status CheckStreamLimits(const StreamLimitFlags& flags, int max_rpc_threads);

// Installs the daemons' server interceptors: every call's status message bounded
// (BoundedStatusMessage, whatever the handler answered) and, with `metrics`, every call counted
// and timed (metrics::RpcMetricsInterceptors) in the process's registry.
void InstallInterceptors(grpc::ServerBuilder& builder, bool metrics);

// What to say when a server could not listen on `listen`.
std::string CannotListenMessage(absl::string_view listen);

}  // namespace tessera::daemon

#endif  // TESSERA_DAEMON_SUPPORT_SERVER_SETUP_H_
