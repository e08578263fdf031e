#ifndef TESSERA_DAEMON_SUPPORT_DAEMON_FLAGS_H_
#define TESSERA_DAEMON_SUPPORT_DAEMON_FLAGS_H_

#include <memory>
#include <optional>
#include <set>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "metrics/http_server.h"

namespace tessera::daemon {

// Adds a duration flag such as 500ms, 3s or 1m (absl::ParseDuration) filling `*value`, whose
// current value is its default; a value outside min..max (infinite ones included) is refused
// naming the bounds.
void AddDurationFlag(CLI::App& app, const std::string& name, absl::Duration* value,
                     const std::string& help, absl::Duration min = absl::ZeroDuration(),
                     absl::Duration max = absl::Hours(24 * 30));

// Ignores SIGPIPE in this process. Gloo writes to its sockets with writev, which raises SIGPIPE
// when the peer has closed the connection (a peer whose collective timed out while this process was
// stopped or slow), and SIGPIPE's default action ends the process without a word; ignored, the
// write fails with EPIPE and Gloo reports the broken connection as an error.
void IgnoreBrokenPipes();

// Parses a daemon's command line into the options the daemon bound on `app` (named after the
// daemon), adding --log_level: trace, debug, info, warn, error, critical or off (default info).
// Then makes spdlog's default logger write to stderr under the app's name at that level, and logs
// the effective value of every flag, given or default, with the values of `secret_flags` (long
// names without dashes) masked. Returns an exit code when the process should stop instead: 0 after
// --help (usage on stdout), 2 after a bad command line (the reason on stderr).
std::optional<int> ParseFlagsAndStartLogging(CLI::App& app, int argc, char** argv,
                                             const std::set<std::string>& secret_flags = {});

// Adds --metrics_port: absent or -1 serves no metrics, 0 serves them on a free port, N on port N.
void AddMetricsPortFlag(CLI::App& app, int* port);

// When `port` >= 0, serves this process's metrics (metrics::DefaultRegistry(), with
// process_resident_memory_bytes added) on http://HOST:PORT/metrics, HOST being the host of
// `listen_address` (host:port), and prints "<daemon> metrics on http://HOST:PORT/metrics" on
// stdout, the port the one bound. nullptr when `port` is -1; UNAVAILABLE when it cannot listen.
absl::StatusOr<std::unique_ptr<metrics::HttpServer>> ServeMetrics(const std::string& daemon,
                                                                  const std::string& listen_address,
                                                                  int port);

}  // namespace tessera::daemon

#endif  // TESSERA_DAEMON_SUPPORT_DAEMON_FLAGS_H_
