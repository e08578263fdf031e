#include "metrics/http_server.h"

#include <civetweb.h>
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "metrics/civetweb_library.h"

// Debian's civetweb starts its threads with a fixed stack of about 100 KiB, and glibc refuses a
// stack smaller than the process's static TLS, which cuBLASLt and OpenBLAS alone make about
// 180 KiB in a CUDA build: no civetweb thread could start there. This definition, in the program,
// comes before libc's for every caller, and raises a stack asked for below 2 MiB to 2 MiB (glibc's
// default is 8 MiB), leaving larger requests as they are.
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using Real = int (*)(pthread_attr_t*, size_t);
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  constexpr size_t kMinStack = size_t{2} << 20;
  return real(attr, std::max(size, kMinStack));
}

namespace tessera::metrics {

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host, int port,
                                                              const Registry* registry) {
  InitCivetweb();
  const std::string address =
      host.find(':') != std::string::npos && host.front() != '['  // a bare IPv6 address
          ? absl::StrCat("[", host, "]:", port)
          : absl::StrCat(host, ":", port);
  // A connection holds a thread from its first byte until its request is read, at most about
  // twice request_timeout_ms (civetweb's deadline for the whole header, checked between reads):
  // a few clients that send half a request each must not keep /ready and /metrics from
  // answering, so the threads are many and the deadline short (it bounds a response's send too,
  // far above what /metrics takes).
  const char* options[] = {
      "listening_ports", address.c_str(),    "num_threads", kThreads, "request_timeout_ms",
      kRequestTimeoutMs, "max_request_size", "8192",        nullptr};
  std::unique_ptr<HttpServer> server(new HttpServer(registry));
  mg_callbacks callbacks = {};
  // civetweb prints its own errors (such as a port in use) to stderr without this.
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };
  char why[256] = "";
  unsigned code = 0;
  mg_init_data start = {&callbacks, nullptr, options};
  mg_error_data error = {&code, why, sizeof(why)};
  server->context_ = mg_start2(&start, &error);
  if (server->context_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address, ": ",
                                               why[0] != '\0' ? why : "civetweb gave no reason"));
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

void HttpServer::ServeReadiness(std::function<bool()> ready) {
  ready_ = std::move(ready);
  mg_set_request_handler(context_, "/ready$", &HttpServer::HandleReady, this);
}

int HttpServer::HandleReady(::mg_connection* connection, void* server) {
  const bool ready = static_cast<HttpServer*>(server)->ready_();
  const std::string body = ready ? "ready\n" : "not ready\n";
  const int code = ready ? 200 : 503;
  mg_printf(connection,
            "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: %zu\r\nConnection: close\r\n\r\n",
            code, ready ? "OK" : "Service Unavailable", body.size());
  mg_write(connection, body.data(), body.size());
  return code;
}

}  // namespace tessera::metrics
