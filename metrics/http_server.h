#ifndef TESSERA_METRICS_HTTP_SERVER_H_
#define TESSERA_METRICS_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "metrics/registry.h"

struct mg_context;
struct mg_connection;

namespace tessera::metrics {

// Serves a registry's families on HTTP GET /metrics (Prometheus text format 0.0.4), on civetweb's
// threads; other paths answer 404. Stops when destroyed.
class HttpServer {
 public:
  // Listens on `host`:`port` (port 0 picks a free one); UNAVAILABLE naming the address when it
  // cannot. `registry` must outlive the server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& host, int port,
                                                           const Registry* registry);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Threads serving connections, and civetweb's deadline for a request's header in ms: a
  // connection that sends half a request holds one thread for at most about twice that.
  static constexpr char kThreads[] = "32";
  static constexpr char kRequestTimeoutMs[] = "3000";

  // The port it listens on.
  int port() const { return port_; }

  // Also serves GET /ready: 200 while `ready()` is true, 503 otherwise; an HTTP readiness probe
  // for a daemon whose gRPC port speaks TLS, which Kubernetes' gRPC probes cannot. Call once.
  void ServeReadiness(std::function<bool()> ready);

 private:
  HttpServer(const Registry* registry) : registry_(registry) {}
  static int HandleMetrics(::mg_connection* connection, void* server);
  static int HandleReady(::mg_connection* connection, void* server);

  const Registry* registry_;
  mg_context* context_ = nullptr;
  int port_ = 0;
  std::function<bool()> ready_;
};

}  // namespace tessera::metrics

#endif  // TESSERA_METRICS_HTTP_SERVER_H_
