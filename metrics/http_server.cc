#include "metrics/http_server.h"

#include <civetweb.h>

#include <mutex>

#include "absl/strings/str_cat.h"

namespace tessera::metrics {

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host, int port,
                                                              const Registry* registry) {
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });
  const std::string address =
      host.find(':') != std::string::npos && host.front() != '['  // a bare IPv6 address
          ? absl::StrCat("[", host, "]:", port)
          : absl::StrCat(host, ":", port);
  const char* options[] = {"listening_ports",    address.c_str(), "num_threads", "2",
                           "request_timeout_ms", "10000",         nullptr};
  std::unique_ptr<HttpServer> server(new HttpServer(registry));
  mg_callbacks callbacks = {};
  // civetweb prints its own errors (such as a port in use) to stderr without this.
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };
  server->context_ = mg_start(&callbacks, nullptr, options);
  if (server->context_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address));
  }
  mg_set_request_handler(server->context_, "/metrics$", &HttpServer::HandleMetrics, server.get());
  mg_server_port ports[4] = {};
  if (mg_get_server_ports(server->context_, 4, ports) < 1 || ports[0].port <= 0) {
    return absl::UnavailableError(absl::StrCat("metrics server on ", address, " has no port"));
  }
  server->port_ = ports[0].port;
  return server;
}

HttpServer::~HttpServer() {
  if (context_ != nullptr) mg_stop(context_);
}

int HttpServer::HandleMetrics(::mg_connection* connection, void* server) {
  const std::string body = static_cast<HttpServer*>(server)->registry_->Render();
  mg_printf(connection,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "Content-Length: %zu\r\nConnection: close\r\n\r\n",
            body.size());
  mg_write(connection, body.data(), body.size());
  return 200;
}

}  // namespace tessera::metrics
